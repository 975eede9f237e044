"""Figures that depend on the CPU's kernels say which host they hold for (NOTE [ host-dependent bytes ]).

The kernel record (:func:`memlab.core.host.kernel_host`) from CPU flags and oneDNN's own cap; the committed
models record it; :func:`memlab.advisor.model.load_models` with ``host`` holds each family as it is on
that host (its variant, or marked as fitted on other kernels); ``memlab advise`` says so.  Whether the
committed models are exact on this host's kernels and under a capped oneDNN is
``tests/test_advisor_stale.py``'s.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memlab.advisor.advise import advise, format_advice
from memlab.advisor.model import MODELS_DIR, host_variant_dir, load_models, models_path
from memlab.core.host import describe, host_key, kernel_host, same_kernels

ZEN4 = frozenset("sse4_1 avx avx2 fma avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16".split())
ZEN3 = frozenset("sse4_1 avx avx2 fma".split())


def test_the_level_is_the_highest_whose_flags_and_every_lower_levels_are_present():
    assert kernel_host(ZEN4, {})["isa"] == "avx512_core_bf16"
    assert kernel_host(ZEN3, {})["isa"] == "avx2"
    assert kernel_host(ZEN3 - {"fma"}, {})["isa"] == "avx"  # AVX2 without FMA is not oneDNN's avx2
    assert kernel_host(frozenset({"avx2", "fma"}), {})["isa"] is None  # no SSE4.1: below every level


def test_onednn_s_own_cap_lowers_the_level_and_never_raises_it():
    assert kernel_host(ZEN4, {"ONEDNN_MAX_CPU_ISA": "AVX2"})["isa"] == "avx2"
    assert kernel_host(ZEN4, {"DNNL_MAX_CPU_ISA": "avx512_core"})["isa"] == "avx512_core"
    assert kernel_host(ZEN4, {"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"})["isa"] == "avx2"
    assert kernel_host(ZEN3, {"ONEDNN_MAX_CPU_ISA": "ALL"})["isa"] == "avx2"
    assert kernel_host(ZEN3, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"})["isa"] == "avx2"


def test_records_compare_on_machine_level_and_torch_and_never_match_when_unknown():
    a = {"machine": "x86_64", "isa": "avx2", "torch": "2.13.0+cpu"}
    assert same_kernels(a, dict(a)) and not same_kernels(a, {**a, "isa": "avx512_core"})
    assert not same_kernels(a, {**a, "torch": "2.14.1"}) and not same_kernels(a, None)
    assert not same_kernels({**a, "isa": None}, {**a, "isa": None})
    assert host_key(a) == "x86_64-avx2-torch2.13.0+cpu" and describe(a) == "avx2 (x86_64, torch 2.13.0+cpu)"


def test_every_committed_family_says_whether_its_bytes_depend_on_the_kernels_and_which_it_holds_for():
    for optimizer in ("sgd", "adam"):
        fams = load_models(optimizer)["families"]
        assert {n for n, f in fams.items() if f["host_dependent"]} == {"resnet"}, optimizer
        for name, fam in fams.items():
            assert set(fam["kernel_host"]) == {"machine", "isa", "torch"}, (optimizer, name)
        variants = host_variant_dir(None, {"machine": "x86_64", "isa": "avx2", "torch": fams["resnet"]["kernel_host"]["torch"]})
        other = load_models(optimizer, variants)["families"]
        assert sorted(other) == ["resnet"] and other["resnet"]["kernel_host"]["isa"] == "avx2", optimizer


def _models_fitted_on(tmp_path, isa: str, variant: bool):
    """A copy of the committed models whose resnet was fitted on ``isa`` (this host's other fields), with
    (``variant``) or without a variant for this host's kernels; returns the folder and this host."""
    here = kernel_host()
    out = tmp_path / "models"
    out.mkdir()
    for p in MODELS_DIR.glob("cpu-float32-*.json"):
        data = json.loads(p.read_text())
        base = data["families"]["resnet"]
        if variant:
            v = host_variant_dir(out, here)
            v.mkdir(parents=True, exist_ok=True)
            models_path(data["optimizer"], v).write_text(json.dumps({**data, "families": {
                "resnet": {**base, "kernel_host": here, "workload": base["workload"], "marker": "variant"}}}))
        base["kernel_host"] = {**here, "isa": isa}
        (out / p.name).write_text(json.dumps(data))
    return out, here


def test_a_family_fitted_on_other_kernels_is_replaced_by_this_host_s_variant(tmp_path):
    models, here = _models_fitted_on(tmp_path, "sse41", variant=True)
    fams = load_models("sgd", models, host=here)["families"]
    assert fams["resnet"]["marker"] == "variant" and "other_kernels" not in fams["resnet"]
    assert load_models("sgd", models)["families"]["resnet"]["kernel_host"]["isa"] == "sse41"  # as fitted
    assert all("other_kernels" not in f for f in fams.values())


def test_without_a_variant_it_is_marked_and_advise_says_so(tmp_path):
    models, here = _models_fitted_on(tmp_path, "sse41", variant=False)
    fams = load_models("sgd", models, host=here)["families"]
    assert fams["resnet"]["other_kernels"] == {"fitted": {**here, "isa": "sse41"}, "here": here}
    assert [n for n, f in fams.items() if "other_kernels" in f] == ["resnet"]  # the others hold anywhere
    a = advise("resnet", "8GiB", [], models_dir=models)
    text = format_advice(a)
    assert a["kernel_warning"] and f"fitted on sse41 (x86_64, torch {here['torch']}); this CPU runs {describe(here)}" \
        in next(x for x in text.splitlines() if x.startswith("warning: ")), text  # under plain fits (issue 43)
    assert advise("chunking", "8GiB", [], models_dir=models)["kernel_warning"] is None


def test_the_committed_models_need_no_warning_on_the_host_they_were_fitted_for():
    here = kernel_host()
    fitted = load_models("sgd")["families"]["resnet"]["kernel_host"]
    variant = models_path("sgd", host_variant_dir(None, here)).is_file()
    if not (same_kernels(fitted, here) or variant):
        pytest.skip(f"this host runs {describe(here)}: no committed resnet model for its kernels")
    assert advise("resnet", "8GiB", [])["kernel_warning"] is None


def test_the_kernel_record_is_read_without_importing_torch():
    """The kernel record is torch-free (flags and package metadata): reading it imports no torch."""
    code = "import sys; from memlab.core.host import kernel_host; h = kernel_host(); print('torch' in sys.modules, h['torch'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    imported, version = out.stdout.split()
    assert imported == "False" and version.startswith("2.13.0")


def test_every_measured_row_records_the_kernels_its_bytes_hold_for():
    import memlab

    m = memlab.measure("unchunked", n=200, d=16, hidden=32, iterations=1, repeats=1, time_budget=0)
    assert m.status == "ok", m.error
    assert m.environment["kernels"] == kernel_host()
