"""The scheduler templates in examples/cluster run memlab commands that memlab accepts: every
``memlab sweep`` line parses with memlab's own parser, shards 1..N of one N, and its ``--out`` files
are the ones the file's merge line reads."""
import re
import shlex
from pathlib import Path

import pytest

from memlab.cli import _parser

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "cluster"


def _sweep_args(text: str, index_expr: str, index: int) -> list[str]:
    """The arguments of the file's ``memlab sweep`` command with the scheduler's index filled in."""
    joined = re.sub(r"\\\n\s*", " ", text)
    joined = re.sub(r"\n\s+--", " --", joined)  # YAML folded continuation lines
    line = next(l for l in joined.splitlines() if "memlab sweep" in l)
    line = line.replace(index_expr, str(index)).replace('"', "")
    words = shlex.split(line[line.index("memlab sweep") + len("memlab "):])
    return words


@pytest.mark.parametrize("name,index_expr", [("slurm-sweep.sbatch", "${SLURM_ARRAY_TASK_ID}"),
                                             ("kubernetes-sweep-job.yaml", "$((JOB_COMPLETION_INDEX + 1))")])
def test_scheduler_template_runs_a_valid_sharded_sweep(name, index_expr):
    text = (EXAMPLES / name).read_text()
    outs = []
    for i in (1, 2, 3, 4):
        args = _parser().parse_args(_sweep_args(text, index_expr, i))
        assert args.shard == f"{i}/4" and args.resume and args.device == "cuda"
        outs.append(args.out)
    assert len(set(outs)) == 4  # one file per shard: no two tasks write one file
    merge = next(l for l in text.splitlines() if "memlab merge" in l)
    pattern = next(w for w in merge.split() if "*" in w).strip("`.")
    assert all(Path(o).match(pattern) for o in outs), (pattern, outs)


def test_kubernetes_template_is_an_indexed_job():
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the Kubernetes template")
    job = yaml.safe_load((EXAMPLES / "kubernetes-sweep-job.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed" and spec["completions"] == 4
