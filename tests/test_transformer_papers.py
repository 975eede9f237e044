"""The transformer family's three paper pages (memlab/reproductions): Korthikanti et al. 2022's per-layer
activation bytes to the byte, FlashAttention's kernel buffer, Cut Your Losses' loss memory model.

Small sizes, exact CPU allocation bytes, in-process.
"""
import pytest

import memlab
from memlab.families.transformer.reproductions import dao_flash_attention as dao
from memlab.families.transformer.reproductions import korthikanti_activation_recomputation as kor
from memlab.reproductions import list_reproductions
from memlab.families.transformer.reproductions import wijmans_cut_your_losses as cce
from memlab.families.transformer.bytes import rng_state_bytes

#: as/h = 8; bfloat16 and dropout on, as the paper's accounting
SMALL = {"seq": 32, "batch": 2, "hidden": 16, "heads": 4, "vocab": 40, "dropout": 0.1}



pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.usefixtures("frozen_heap")]  # conftest: exact bytes at one intra-op thread; in-process measurements (conftest.frozen_heap)

def test_the_three_pages_are_registered():
    seeds = list_reproductions()
    for mod in (kor, dao, cce):
        assert seeds[mod.SEED] is mod


def test_paper_formula_is_sbh_34_plus_5as_over_h():
    s, b, h, a = 2048, 1, 12288, 96
    assert sum(kor.paper_terms(kor.PAPER_SIZE).values()) == s * b * h * (34 + 5 * a * s // h)


def test_korthikanti_per_layer_equals_measured_saved_activations_to_the_byte():
    """The paper's sbh(34 + 5as/h) plus the stated PyTorch differences is memlab's measured
    saved_activations per layer (two layers minus one, the category at the step's peak)."""
    want = kor.predicted_per_layer(SMALL)
    cats = {}
    for layers in (1, 2):  # the two-layer row checked as the page's rows are (NOTE [ bfloat16 rows checked ])
        m = memlab.measure("eager_attention", isolate=False, iterations=2, repeats=1, time_budget=0,
                           check=layers == 2, dtype="bfloat16", layers=layers, **SMALL)
        cats[layers] = m.peak_by_category_bytes
    assert m.status == "ok" and m.extra["measured_steps_checked"] >= 2, m.error  # step 2 is where it failed
    assert kor.checked_line([m]).startswith("Checked: all 1 rows ok"), kor.checked_line([m])
    saved = cats[2]["saved_activations"] - cats[1]["saved_activations"]
    assert saved == kor.saved_category_per_layer(SMALL) == want - 8
    # the 8-byte scale: saved by autograd without the saved-tensor hooks, so a temporary in memlab's categories
    assert cats[2]["temporaries"] - cats[1]["temporaries"] == 8
    walked = kor.saved_tensors(SMALL)
    assert sum(t["bytes"] for t in walked) == want
    assert "other" not in {kor.paper_term(t, SMALL) for t in walked}
    # the differences are the PyTorch tensors named: bfloat16 dropout noise, the bool causal mask, the scale
    by_dtype = {(t["dtype"], tuple(t["shape"])) for t in walked}
    s, b, a = SMALL["seq"], SMALL["batch"], SMALL["heads"]
    assert ("bool", (s, s)) in by_dtype and ("float64", ()) in by_dtype
    scores = [t for t in walked if t["dtype"] == "bfloat16" and t["bytes"] == 2 * a * s * s * b]
    assert sorted(kor.paper_term(t, SMALL).split(" (")[0] for t in scores) == [
        "attention dropout noise", "dropped probabilities", "softmax output"]  # 3 x 2as²b where the paper has 5as²b


def test_korthikanti_recomputation_rows():
    sbh = SMALL["seq"] * SMALL["batch"] * SMALL["hidden"]
    rng = rng_state_bytes() + 8
    assert kor.kept_per_layer("checkpoint_layer", SMALL) == 2 * sbh + rng  # the paper's 2sbh + the RNG state
    assert kor.kept_per_layer("selective_checkpoint", SMALL) == 20 * sbh + rng  # GEMM outputs + input
    assert kor.kept_per_layer("eager_attention", SMALL) == kor.predicted_per_layer(SMALL)


def test_flash_block_buffer_is_the_kernels_split_sizes():
    assert dao.flash_buffer_bytes(1024) == dao.flash_buffer_bytes(4096) == 2 * 256 * 512 * 4
    assert dao.flash_buffer_bytes(512) == 2 * 64 * 512 * 4 and dao.flash_buffer_bytes(100) == 2 * 32 * 100 * 4
    assert dao.flash_buffer_bytes(1024, threads=2) == 2 * dao.flash_buffer_bytes(1024)


@pytest.mark.parametrize("n, v, chunk", [(64, 1000, 16), (100, 3000, 128)])
def test_cut_your_losses_loss_memory_is_the_exact_model(n, v, chunk):
    assert cce.loss_head_peak("plain", n, v, 16, chunk) == cce.plain_bytes(n, v)
    assert cce.loss_head_peak("chunked", n, v, 16, chunk) == cce.chunked_bytes(n, v, 16, chunk)


def test_cut_your_losses_at_the_papers_size():
    big = cce.paper_scale(1)
    assert big["plain"] == 3 * 8192 * 256_000 * 4 + 8192 * 4  # 25.2 GB: the paper's "24 GB"
    assert big["chunked"] == 256_000 * 4 + 2304 * 4 + 2 * 8192 * 4  # 1.1 MB: the paper's "1 MB"


class _Row:
    """A stand-in for a Measurement with only what the page's report reads."""

    def __init__(self, technique, seq, peak):
        self.technique, self.params, self.status = technique, {"seq": seq}, "ok"
        self.extra = {"activation_peak_bytes": peak}

    def to_dict(self):
        return {"technique": self.technique, "params": self.params}


def test_flash_page_fits_the_peak_less_the_block_buffer():
    """A peak a·T + S with S the kernel's buffer: the raw fit bends below 1, the net fit is exactly 1."""
    _, seqs = dao.configs(False)
    rows = []
    for s in seqs:
        rows += [_Row("eager_attention", s, 50 * s * s), _Row("chunked_attention", s, 3000 * s),
                 _Row("sdpa_flash", s, 1000 * s + dao.flash_buffer_bytes(s))]
    page = dao.report(rows)
    by = {b["name"]: b for b in page["badges"]}
    assert by["eager_attention"]["label"] == "O(n^2)" and by["chunked_attention"]["exponent"] == 1.0
    assert by["sdpa_flash"]["exponent"] < 0.9 and by["sdpa_flash (less the block buffer)"]["exponent"] == 1.0
    assert page["verdict"] == "reproduced with caveat" and page["badge_axis"] == "sequence length"
    assert "S = 1,048,576 bytes" in page["summary"]


def test_flash_page_exactly_linear_peak_needs_no_correction():
    _, seqs = dao.configs(False)
    rows = [_Row(n, s, f(s)) for s in seqs for n, f in (("eager_attention", lambda t: 50 * t * t),
                                                          ("chunked_attention", lambda t: 3000 * t),
                                                          ("sdpa_flash", lambda t: 5684 * t))]
    page = dao.report(rows)
    assert [b["name"] for b in page["badges"]] == ["eager_attention", "sdpa_flash", "chunked_attention"]
    assert page["verdict"] == "reproduced" and "S = 0 bytes: exactly linear" in page["summary"]
