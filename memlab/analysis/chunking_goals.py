"""Check the chunking issue's benchmark goals with subprocess-isolated measurements.

Run ``python -m memlab.analysis.chunking_goals [--n 10000 --d 256 --hidden 1024] [--out FILE.jsonl]``.

Goals (CPU, float32, train mode, default size n=10000 d=256 hidden=1024):

* memory: ``slice_accumulate`` peak allocated <= 1.15x the analytic floor (NOTE [ chained-matmul
  analytic floor ]) for every chunk size n/4 .. n/100, and flat: the peak at n/100 at most 3% above
  the peak at n/4;
* time: ``slice_accumulate`` step time <= 1.3x ``unchunked``'s at chunk >= n/10, as a ratio within
  one run.  On a shared machine the per-measurement medians drift by 2-5x between subprocesses, so
  the ratio comes from :func:`interleaved_time_ratios`: one process builds both problems and
  alternates their steps round by round; the ratio is the median over rounds of
  ``t(slice_accumulate) / t(unchunked)`` from the same round.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["check_goals", "interleaved_time_ratios", "main", "DIVISORS", "MEMORY_BOUND", "FLAT_BOUND", "TIME_BOUND"]

DIVISORS = (4, 10, 20, 40, 100)
MEMORY_BOUND = 1.15
FLAT_BOUND = 1.03
TIME_BOUND = 1.3


def interleaved_time_ratios(configs: dict[str, dict[str, Any]], reference: str, rounds: int = 9,
                            threads: int | None = None, **size: Any) -> dict[str, dict[str, Any]]:
    """Step-time ratios to ``reference``, with steps of all configurations interleaved in this process.

    Args:
        configs: label -> ``{"technique": name, **params}``; must contain ``reference``.
        reference: the label every other is divided by.
        threads: ``torch.set_num_threads`` for the timed steps (None: torch's default).  On a loaded
            machine, multi-threaded steps pay a scheduling delay per parallel region, which
            penalises many small chunks far more than one big matmul; one thread avoids that.
        rounds: timed rounds after one warm-up step each; each round times one step of every
            configuration back to back (order rotated per round).
        **size: workload parameters shared by all (``n``, ``d``, ``hidden``).

    Returns:
        label -> ``{"median_ratio", "ratios", "median_step_time_s"}`` (seconds).
    """
    import statistics
    import time

    import torch

    from ..measurement.step import make_step
    from ..registry import get_technique

    if threads is not None:
        torch.set_num_threads(threads)
    steps = {}
    for label, cfg in configs.items():
        cfg = dict(cfg)
        t = get_technique(cfg.pop("technique"))(**size, **cfg)
        problem = t.build(torch.device("cpu"), torch.float32, 0)
        step, _ = make_step(t, problem, "train")
        step()
        steps[label] = step
    labels = list(steps)
    times: dict[str, list[float]] = {k: [] for k in labels}
    for r in range(rounds):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for label in order:
            t0 = time.perf_counter()
            steps[label]()
            times[label].append(time.perf_counter() - t0)
    out = {}
    for label in labels:
        ratios = [a / b for a, b in zip(times[label], times[reference])]
        out[label] = {"median_ratio": statistics.median(ratios), "ratios": ratios,
                      "median_step_time_s": statistics.median(times[label])}
    return out


def check_goals(n: int = 10000, d: int = 256, hidden: int = 1024, backward: str = "manual",
                repeats: int = 7, rows: list | None = None, threads: int | None = None) -> dict[str, Any]:
    """Measure and evaluate the goals; returns a JSON-serialisable dict with every number."""
    import memlab

    size = dict(n=n, d=d, hidden=hidden)
    rows = rows if rows is not None else []

    def run(name: str, **kw: Any):
        m = memlab.measure(name, repeats=repeats, iterations=2, **size, **kw)
        rows.append(m.to_dict())
        if m.status != "ok":
            raise RuntimeError(f"{name} {kw}: {m.status} {m.error}")
        print(m.summary(), file=sys.stderr, flush=True)
        return m

    ref_first = run("unchunked")
    points = []
    for k in DIVISORS:
        c = max(1, n // k)
        m = run("slice_accumulate", chunk_size=c, backward=backward)
        floor = m.extra["analytic_floor_bytes"]
        points.append({"divisor": k, "chunk_size": c, "peak_bytes": m.peak_allocated_bytes, "floor_bytes": floor,
                       "ratio": m.peak_allocated_bytes / floor, "step_time_s": m.step_time_s,
                       "matches_reference": m.matches_reference})
    ref_last = run("unchunked")
    t_ref = (ref_first.step_time_s + ref_last.step_time_s) / 2
    for p in points:
        p["subprocess_time_ratio_vs_unchunked"] = p["step_time_s"] / t_ref
    configs = {"unchunked": {"technique": "unchunked"}}
    configs.update({f"chunk_{p['chunk_size']}": {"technique": "slice_accumulate", "chunk_size": p["chunk_size"],
                                                 "backward": backward} for p in points})
    timing = interleaved_time_ratios(configs, "unchunked", rounds=repeats, threads=threads, **size)
    for p in points:
        t = timing[f"chunk_{p['chunk_size']}"]
        p["time_ratio_vs_unchunked"] = t["median_ratio"]
        p["interleaved_ratios"] = t["ratios"]
    growth = points[-1]["peak_bytes"] / points[0]["peak_bytes"]
    mem_ok = all(p["ratio"] <= MEMORY_BOUND for p in points)
    time_points = [p for p in points if p["chunk_size"] >= n // 10]
    time_ok = all(p["time_ratio_vs_unchunked"] <= TIME_BOUND for p in time_points)
    return {
        "size": size, "backward": backward, "points": points, "timing_threads": threads,
        "unchunked_step_time_s": [ref_first.step_time_s, ref_last.step_time_s],
        "unchunked_peak_bytes": ref_first.peak_allocated_bytes,
        "memory_goal_met": mem_ok, "max_ratio": max(p["ratio"] for p in points),
        "flat_growth": growth, "flat_goal_met": growth <= FLAT_BOUND,
        "time_goal_met": time_ok, "time_ratios": {p["chunk_size"]: p["time_ratio_vs_unchunked"] for p in time_points},
        "all_correct": all(p["matches_reference"] for p in points),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--backward", choices=("manual", "autograd"), default="manual")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for the interleaved timing")
    ap.add_argument("--skip-memory", action="store_true", help="only the interleaved timing")
    ap.add_argument("--out", help="append the raw measurements (JSON Lines) here")
    args = ap.parse_args(argv)
    rows: list = []
    if args.skip_memory:
        size = dict(n=args.n, d=args.d, hidden=args.hidden)
        configs = {"unchunked": {"technique": "unchunked"}}
        configs.update({f"chunk_{args.n // k}": {"technique": "slice_accumulate", "chunk_size": args.n // k,
                                                  "backward": args.backward} for k in (4, 10)})
        timing = interleaved_time_ratios(configs, "unchunked", args.repeats, args.threads, **size)
        print(json.dumps({"threads": args.threads, "timing": timing}, indent=1, sort_keys=True))
        return 0 if all(v["median_ratio"] <= TIME_BOUND for v in timing.values()) else 1
    result = check_goals(args.n, args.d, args.hidden, args.backward, args.repeats, rows, args.threads)
    if args.out:
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0 if (result["memory_goal_met"] and result["flat_goal_met"] and result["time_goal_met"]) else 1


if __name__ == "__main__":
    sys.exit(main())
