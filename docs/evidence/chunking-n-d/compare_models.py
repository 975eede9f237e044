"""Compare two sets of chunking time models against every committed measurement they were not fitted on.

    git show 8f3cba8:data/models/cpu-float32-sgd.json > /tmp/before/cpu-float32-sgd.json   # and -adam
    python docs/evidence/chunking-n-d/compare_models.py /tmp/before data/models

Prints, per optimizer, each measured sweep row in the chunking model's domain (x_requires_grad, one
micro-batch, gradients set to None) and each held-out / unseen time-check row, with the relative error
(predicted - measured) / measured of each model set.  Reads files only; measures nothing.
"""
import json
import math
import sys
from pathlib import Path

from memlab.advisor import load_models
from memlab.advisor.model import predict_time
from memlab.results import list_input_files, sweep_records

ROOT = Path(__file__).resolve().parents[3]


def label_of(r):
    lab = r["technique"]
    if lab == "einsum_chunk":
        if r["params"].get("opt_einsum") is not False:
            return None
        return lab + "[opt_einsum=false]"
    if lab == "slice_accumulate":
        return f"{lab}[backward={r['params'].get('backward')}]"
    return lab


def sweep_rows(optimizer):
    for path in list_input_files(ROOT / "data" / "sweeps", ".jsonl"):
        for _, r in sweep_records(path, lambda _: None):
            if (r["family"] == "chunking" and r["device"] == "cpu" and r.get("optimizer") == optimizer
                    and r.get("accumulate", 1) == 1 and r.get("grads", "none") == "none"
                    and r["params"].get("x_requires_grad") is True and r.get("relative_step_time") is not None
                    and r["technique"] != "unchunked" and label_of(r)):
                yield "sweep " + path.name, label_of(r), r["params"], r["relative_step_time"]


def check_rows(optimizer):
    for path in sorted((ROOT / "data" / "models").glob(f"time-check-*{optimizer}.json")):
        for r in json.loads(path.read_text())["rows"]:
            if r["family"] == "chunking" and r.get("measured") is not None:
                yield path.name, r["label"], r["params"], r["measured"]


def main(before: Path, after: Path) -> None:
    for optimizer in ("sgd", "adam"):
        fams = [load_models(optimizer, d)["families"]["chunking"] for d in (before, after)]
        print(f"## {optimizer}\n\n| source | entry | n, d, hidden | chunks | measured | before | after |\n|---|---|---|---|---|---|---|")
        for source, label, p, measured in [*sweep_rows(optimizer), *check_rows(optimizer)]:
            q = {k: p[k] for k in ("n", "d", "hidden", "chunk_size")}
            k = math.ceil(q["n"] / min(q["chunk_size"], q["n"]))
            entries = [next((e for e in fam["entries"] if e["label"] == label), None) for fam in fams]
            if None in entries:  # a technique the model does not cover (checkpoint_split_chunk)
                continue
            errs = [(predict_time(fam, entry, q) - measured) / measured for fam, entry in zip(fams, entries)]
            print(f"| {source} | {label} | {q['n']}, {q['d']}, {q['hidden']} | {k} | {measured:.3f} | "
                  f"{100 * errs[0]:+.1f}% | {100 * errs[1]:+.1f}% |")
        print()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
