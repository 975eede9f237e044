"""Small, hand-made result files for the results and site tests (written under tmp_path).

The measurement records follow ``Measurement.to_dict()`` (keys as a real CPU run writes them); the
asv tree follows asv 0.6.6's columnar results format.  No torch, no memlab measurement runs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
EVIL = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"

ENV = {"cpu": "Test CPU", "git_commit": "0123456789abcdef", "gpu": None, "malloc_mmap_threshold": "131072",
       "memlab": "0.1.0", "opt_einsum": True, "platform": "Linux", "python": "3.11.7", "threads": 2,
       "torch": "2.13.0+cpu"}


def measurement(technique: str, family: str, params: dict, peak: int | None, *, workload: str = "wl",
                reserved: int | None = 0, samples_per_s: float | None = 1000.0, floor: int | None = None,
                status: str = "ok", peer: bool = False, baseline: Any = None, device: str = "cpu",
                mode: str = "train") -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if floor is not None:
        extra.update(analytic_floor_bytes=floor, analytic_floor_mode=mode)
    if baseline is not None:
        extra["baseline"] = baseline
    return {
        "allocated_after_step_bytes": [0, 0, 0], "allocated_baseline_bytes": 6 * MiB, "device": device,
        "device_used_bytes": None, "dtype": "float32", "environment": dict(ENV),
        "error": None if status == "ok" else "RuntimeError: boom", "errors_by_tensor": {}, "extra": extra,
        "family": family, "flops": 1000, "grad_bytes": MiB, "matches_reference": True if status == "ok" else None,
        "max_abs_error": 0.0, "memory_method": {"allocated": "exact replay", "reserved": "resident HWM"},
        "mode": mode, "param_bytes": MiB, "param_count": 1024, "params": dict(params),
        "peak_allocated_bytes": peak if status == "ok" else None,
        "peak_allocated_per_iteration_bytes": [peak, peak, peak] if status == "ok" else [],
        "peak_reserved_bytes": reserved if status == "ok" else None, "peer": peer,
        "reserved_baseline_bytes": 300 * MiB, "samples_per_s": samples_per_s if status == "ok" else None,
        "samples_per_step": 2000, "schema": 1, "status": status,
        "step_time_s": 2000 / samples_per_s if status == "ok" and samples_per_s else None,
        "step_times_s": [], "technique": technique, "tolerance": [1e-4, 1e-4], "workload": workload,
    }


def chunking_records() -> list[dict[str, Any]]:
    """unchunked (baseline, 20 MiB) and slice_loop at three chunk sizes; a peer; one OOM row."""
    base = {"n": 2000, "d": 256}
    return [
        measurement("unchunked", "chunking", base, 20 * MiB, reserved=16 * MiB, samples_per_s=4000.0,
                    floor=14 * MiB, baseline=True),
        *[measurement("slice_loop", "chunking", {**base, "chunk_size": c}, (12 + c // 250) * MiB,
                      samples_per_s=3000.0 - c, floor=(6 + c // 250) * MiB, baseline=False)
          for c in (250, 500, 1000)],
        measurement("vmap_chunks", "chunking", {**base, "chunk_size": 500}, 10 * MiB, samples_per_s=1000.0,
                    peer=True),
        measurement("slice_loop", "chunking", {**base, "chunk_size": 1}, None, status="oom"),
    ]


def write_jsonl(path: Path, records: list[dict], truncate_last: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, sort_keys=True) for r in records]
    text = "\n".join(lines) + "\n"
    if truncate_last:
        text = text[: len(text) - len(lines[-1]) // 2 - 1]
    path.write_text(text)
    return path


def timeline(technique: str, params: dict) -> dict[str, Any]:
    events, live = [], 0
    for op, stack, phase, delta in [
        ("aten::mm", ["aten::matmul", "aten::mm"], "forward", 4 * MiB),
        ("aten::mm", ["aten::matmul", "aten::mm"], "forward", 2 * MiB),
        ("aten::empty", ["SliceBackward0", "aten::slice_backward", "aten::zeros", "aten::empty"], "backward", 8 * MiB),
        ("?", [], "backward", -8 * MiB),
        ("aten::mm", ["MmBackward0", "aten::mm"], "backward", 1 * MiB),
        ("?", [], "optimizer", -7 * MiB),
    ]:
        live += delta
        events.append({"op": op, "stack": stack, "phase": phase, "delta_bytes": delta, "live_bytes": live})
    return {"technique": technique, "params": params, "device": "cpu", "dtype": "float32", "mode": "train",
            "events": events, "baseline_bytes": 6 * MiB, "method": "exact replay"}


def reproduction(seed: str, verdict: str = "reproduced") -> dict[str, Any]:
    recs = chunking_records()[:2]
    return {"seed": seed, "title": f"Report {seed}", "claim": "slicing in a loop spikes memory in backward",
            "verdict": verdict, "summary": "slice_loop peaks at 13.0 MiB against 20.0 MiB.", "quick": True,
            "measurements": recs, "timelines": [timeline("slice_loop", {"chunk_size": 250})],
            "figure": {"type": "bar", "title": "peak", "x_label": "technique", "y_label": "MiB",
                       "x": ["unchunked", "slice_loop"], "series": {"peak allocated": [20.0, 13.0]},
                       "log_x": False, "log_y": False},
            "environment": dict(ENV)}


ASV_COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
               "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
BENCH = "bench_chunking.ChainedMatmul.track_peak_allocated"


def write_asv_tree(root: Path, machine: str = "box") -> Path:
    """benchmarks.json, machine.json and two commits' results for one parameterised benchmark."""
    params = [["'unchunked'", "'slice_loop'"], ["'cpu'", "'cuda'"], ["100", "1000"]]
    (root / machine).mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps({
        BENCH: {"name": BENCH, "param_names": ["technique", "device", "chunk_size"], "params": params,
                "type": "track", "unit": "bytes", "version": "v1"},
        "version": 2}))
    (root / machine / "machine.json").write_text(json.dumps({"machine": machine, "cpu": "Test CPU", "num_cpu": "2",
                                                             "os": "Linux", "ram": "8GB", "version": 1}))
    for i, (commit, scale) in enumerate((("a" * 40, 1), ("b" * 40, 2))):
        result = [100 * scale, 1000 * scale, float("nan"), float("nan"), 200, 2000, None, None]
        data = {"commit_hash": commit, "env_name": "existing-py", "date": 1_700_000_000_000 + i * 86_400_000,
                "params": {"machine": machine, "python": "3.11"}, "python": "3.11", "requirements": {},
                "env_vars": {}, "result_columns": ASV_COLUMNS,
                "results": {BENCH: [result, params, "v1", 1_700_000_000_000, 1.5]},
                "durations": {}, "version": 2}
        (root / machine / f"{commit[:8]}-existing-py.json").write_text(json.dumps(data))
    return root


def make_inputs(tmp: Path, evil: bool = False) -> tuple[Path, Path]:
    """``(results_dir, data_dir)`` with an asv tree, a chunking sweep, two timelines, a reproduction.

    With ``evil``, a technique and a family named :data:`EVIL` are added (escaping tests).
    """
    results, data = tmp / "results", tmp / "data"
    write_asv_tree(results)
    records = chunking_records()
    if evil:
        records.append(measurement(EVIL, "chunking", {"n": 2000, "d": 256, "chunk_size": 250}, 15 * MiB))
        records.append(measurement("plain", EVIL, {"n": 1}, 3 * MiB))
    write_jsonl(data / "sweeps" / "chunking.jsonl", records)
    (data / "timelines").mkdir(parents=True)
    for i, tech in enumerate(("unchunked", "slice_loop") + ((EVIL,) if evil else ())):
        (data / "timelines" / f"t{i}.json").write_text(json.dumps(timeline(tech, {"chunk_size": 250})))
    (data / "reproductions").mkdir(parents=True)
    (data / "reproductions" / "chunked-slicing.json").write_text(json.dumps(reproduction("chunked-slicing")))
    return results, data


def with_verdict(rec: dict[str, Any], status: str, error: str | None = None, **fields: Any) -> dict[str, Any]:
    """``rec`` (an ok :func:`measurement`) with another status and reason, its figures kept (a
    mismatch or leak row still has a peak), and any other fields set (schema 2 verdict fields)."""
    return {**rec, "status": status, "error": error, **fields}


def schema2(rec: dict[str, Any], *, matches: bool = True, max_abs: float = 3.1e-13, drift: float = 2.4e-6,
            tolerance: tuple[float, float] = (1e-6, 1e-8)) -> dict[str, Any]:
    """``rec`` as memlab writes it since schema 2: checked in float64, float32 drift beside it."""
    return {**rec, "schema": 2, "check_dtype": "float64", "matches_reference": matches, "max_abs_error": max_abs,
            "max_rel_error": max_abs * 10, "drift_max_abs_error": drift, "drift_max_rel_error": drift * 10,
            "tolerance": list(tolerance), "leak_bytes_per_step": None}


def timed(rec: dict[str, Any], samples: list[float], *, relative: float | None = None,
          reference: float | None = None, load: tuple[float, float] = (0.5, 0.6), cores: int = 2) -> dict[str, Any]:
    """``rec`` with step times as memlab records them since issue 12: every sample, median, IQR,
    the relative step time against the workload's reference step, load averages and cores."""
    import statistics

    median = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) >= 2 else (None, None, None)
    samples_per_step = rec.get("samples_per_step") or 1
    return {**rec, "step_times_s": list(samples), "step_time_s": median,
            "step_time_iqr_s": None if q1 is None else q3 - q1, "samples_per_s": samples_per_step / median,
            "relative_step_time": relative, "reference_step_time_s": reference,
            "load_avg_before": load[0], "load_avg_after": load[1],
            "environment": {**rec["environment"], "cores": cores}}


def chunking_variants() -> list[dict[str, Any]]:
    """unchunked, slice_loop over three chunk sizes, a peer, and einsum_chunk with opt_einsum on and
    off over chunk sizes 100 to 10000 (peaks 8 to 21 MiB: text order is not number order)."""
    base = {"n": 2000, "d": 256}
    recs = chunking_records()[:5]
    for opt in (False, True):
        for c in (100, 1000, 10000):
            rec = measurement("einsum_chunk", "chunking", {**base, "chunk_size": c, "opt_einsum": opt},
                              (8 + c // 1000 + (3 if opt else 0)) * MiB)
            rec["extra"].update(opt_einsum_used=opt, contraction_order="x @ (w1 @ w2)" if opt else "(x @ w1) @ w2")
            recs.append(rec)
    return recs


def reversible_records() -> list[dict[str, Any]]:
    """Two configurations with different verdicts: at batch 128 the weight gradients are nearly the
    whole peak (nothing wins); at batch 1024 reversible saves; memcnn is listed (its defect)."""
    def rev(technique, batch, peak, grads, act, step, peer=False):
        rec = measurement(technique, "reversible", {"batch": batch, "depth": 16}, peak * MiB, workload="stack",
                          samples_per_s=batch / step, peer=peer, baseline=technique == "residual")
        rec.update(grad_bytes=grads * MiB)
        rec["extra"].update(activation_peak_bytes=act * MiB)
        return rec

    return [rev("residual", 128, 130, 128, 25, 0.3), rev("reversible", 128, 131, 128, 3, 0.4),
            rev("checkpoint_block", 128, 130, 128, 10, 0.35),
            rev("residual", 1024, 204, 132, 202, 1.6), rev("reversible", 1024, 140, 132, 12, 2.4),
            rev("checkpoint_block", 1024, 150, 132, 80, 2.0),
            {**rev("memcnn", 1024, 150, 132, 12, 2.0, peer=True), "matches_reference": False}]


def with_categories(rec: dict[str, Any], saved: int, temporaries: int) -> dict[str, Any]:
    """``rec`` as memlab writes it since memory categories: the total peak split by category."""
    cats = {"parameters": 2 * MiB, "gradients": rec.get("grad_bytes") or MiB, "optimizer_state": 0, "inputs": MiB,
            "saved_activations": saved, "temporaries": temporaries}
    return {**rec, "schema": 2, "peak_by_category_bytes": cats, "total_peak_bytes": sum(cats.values())}


def rich_inputs(tmp: Path) -> tuple[Path, Path]:
    """:func:`make_inputs` (with the hostile names) plus what the site draws since issues 12 and 17:
    step samples with relative times (one point under load), technique variants, a second run of one
    configuration, an infer row, memory categories, and a reversible family with two configurations."""
    results, data = make_inputs(tmp, evil=True)
    chunking = []
    for i, rec in enumerate(chunking_variants()):
        if rec["status"] != "ok":
            chunking.append(rec)
            continue
        relative = 1.0 if rec["technique"] == "unchunked" else 1.2 + 0.1 * i
        load = (3.4, 3.1) if i == 2 else (0.3, 0.4)
        samples = [0.010 * relative * f for f in (0.97, 1.0, 1.02, 1.1)]
        chunking.append(with_categories(timed(rec, samples, relative=relative, reference=0.010, load=load),
                                        saved=(i % 4 + 1) * MiB, temporaries=2 * MiB))
    chunking.append(measurement(EVIL, "chunking", {"n": 2000, "d": 256, "chunk_size": 250}, 15 * MiB))
    chunking.append(measurement("plain", EVIL, {"n": 1}, 3 * MiB))
    write_jsonl(data / "sweeps" / "chunking.jsonl", chunking)
    again = measurement("slice_loop", "chunking", {"n": 2000, "d": 256, "chunk_size": 500}, 14 * MiB, samples_per_s=2100.0)
    write_jsonl(data / "sweeps" / "chunking-again.jsonl", [again])
    write_jsonl(data / "sweeps" / "reversible.jsonl", reversible_records())
    return results, data
