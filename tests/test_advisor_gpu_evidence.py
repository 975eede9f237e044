"""memlab advise --device cuda says what a real GPU measured against the exact CPU figures its CUDA
need is built on (memlab.advisor.gpu_evidence)."""
import json

from memlab.advisor.advise import advise, format_advice
from memlab.advisor.gpu_evidence import format_gpu_evidence, gpu_evidence

MiB = 2**20


def _row(technique, gpu, cpu, status="ok", **params):
    return {"technique": technique, "params": params, "mode": "train", "optimizer": "sgd", "status": status,
            "measured_allocated_bytes": gpu, "cpu_peak_allocated_bytes": cpu}


def _table(folder, name, rows, gpu="Test GPU"):
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps({"gpu": gpu, "torch": "2.x+cu", "rows": rows}))


def test_summary_counts_the_family_rows_and_the_excess_of_the_gpu_over_the_cpu_figure(tmp_path):
    _table(tmp_path, "a.json", [
        _row("residual", 100 * MiB, 100 * MiB, depth=4),
        _row("reversible", 103 * MiB, 100 * MiB, depth=4, block="mlp"),
        _row("reversible", 150 * MiB, 100 * MiB, depth=4, block="conv"),  # not the modelled MLP stack
        _row("slice_loop", 999 * MiB, 1 * MiB),  # another family
        _row("checkpoint_block", None, None, status="error"),
    ])
    [e] = gpu_evidence(["residual", "checkpoint_block", "reversible", "reversible_nosave"], {"block": "mlp"}, tmp_path)
    assert (e["gpu"], e["configurations"], e["exact"], e["not_ok"]) == ("Test GPU", 2, 1, 1)
    assert e["min_excess"] == 0.0 and abs(e["max_excess"] - 0.03) < 1e-12
    [line] = format_gpu_evidence([e], 0.10)
    assert "Test GPU" in line and "0.0% to +3.0%" in line and "at 2 configuration(s)" in line
    assert "within the 10% margin" in line and "1 did not measure" in line
    [line] = format_gpu_evidence([{**e, "max_excess": 0.25}], 0.10)
    assert "BEYOND the 10% margin" in line


def test_an_unreadable_table_is_named_and_the_others_still_count(tmp_path):
    (tmp_path / "bad.json").write_text("{torn")
    _table(tmp_path, "good.json", [_row("unchunked", 10 * MiB, 10 * MiB)])
    bad, good = gpu_evidence(["unchunked", "slice_loop"], {"x_requires_grad": True}, tmp_path)
    assert bad["file"].endswith("bad.json") and "JSONDecodeError" in bad["problem"]
    assert good["configurations"] == 1 and good["exact"] == 1
    lines = format_gpu_evidence([bad, good], 0.10)
    assert lines[0].startswith("GPU check bad.json left out: JSONDecodeError")


def test_cuda_advice_carries_the_evidence_and_says_when_there_is_none(tmp_path):
    args = dict(params=["n=2048", "d=64", "hidden=256"], device="cuda")
    _table(tmp_path / "gpu", "t.json", [_row("slice_loop", 11 * MiB, 10 * MiB, chunk_size=4)])
    a = advise("chunking", "8GiB", gpu_check_dir=tmp_path / "gpu", **args)
    assert a["gpu_evidence"][0]["configurations"] == 1
    assert "+10.0% off the exact CPU figure" in format_advice(a)
    none = advise("chunking", "8GiB", gpu_check_dir=tmp_path / "nothing", **args)
    assert "not yet checked on a GPU for this family" in format_advice(none)
    assert advise("chunking", "8GiB", params=args["params"])["gpu_evidence"] is None  # CPU advice: not asked
