"""The README is a quick start (issue 41): at most 250 lines, the venv activated before the first
``memlab`` command, one block per task, links that resolve.  What it held beyond that moved to ``docs/``:
``docs/cli.md`` names every command and every option a user can give (issue 29: `advise --verify` and
`--plugin` were missing), ``docs/plugins.md`` says what ``problem`` gives ``describe`` and that a bool
``Param`` works.  No dates or load averages in the README: ``tests/test_no_run_logs.py``."""
from __future__ import annotations

import re
from pathlib import Path

from memlab.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def _commands() -> dict[str, list[str]]:
    sub = next(a for a in _parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: [o for a in p._actions for o in a.option_strings if o not in ("-h", "--help")]
            for name, p in sub.choices.items()}


def test_the_readme_is_a_quick_start():
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    for heading in ("## What you get", "## Two commands", "## Activate the venv", "## Measure one technique",
                    "## Sweep a grid", "## Ask what fits a budget", "## Your own model",
                    "## Add a technique", "## Benchmarks across commits (asv)"):
        assert any(line.startswith(heading) for line in lines), heading
    assert "make demo" in README and "make test" in README and "<!-- demo-time -->" in README
    blocks = [m.start(1) + c.start() for m in re.finditer(r"```sh\n(.*?)```", README, re.DOTALL)
              for c in re.finditer(r"^memlab ", m.group(1), re.MULTILINE)]
    assert blocks and README.index(". .venv/bin/activate") < min(blocks)


def test_every_link_in_the_readme_and_docs_resolves():
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md")),
             *sorted(DOCS.glob("evidence/readme-*.md"))]
    broken = []
    for path in files:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if not re.match(r"[a-z]+:", target) and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_every_command_and_option_is_in_the_cli_doc_s_table():
    text = (DOCS / "cli.md").read_text()
    table = text.split("Every command and its options", 1)[1].split("\n\n", 2)[1]
    missing = []
    for name, options in _commands().items():
        row = next((line for line in table.splitlines() if line.startswith(f"| `memlab {name}")), None)
        if row is None:
            missing.append(name)
            continue
        shared = {"--device", "--dtype", "--optimizer", "--loss", "--iterations", "--repeats", "--time-budget",
                  "--threads", "--timeout", "--in-process", "--spawn", "--mode", "--plugin"}
        says_shared = "`measure`'s options" in row
        missing += [f"{name} {o}" for o in options if f"`{o}" not in row and not (says_shared and o in shared)]
    assert missing == [], f"docs/cli.md's command table lacks: {missing}"


def test_the_plugin_doc_says_what_problem_gives_describe_and_that_a_bool_param_works():
    text = (DOCS / "plugins.md").read_text()
    for fragment in ("problem.model", "problem.inputs", "problem.grad_output", "problem.extra", "problem.leaves()",
                     "self.config", "`bool`", "--param flag=true"):
        assert fragment in text, fragment


def test_the_methodology_and_threat_model_are_in_docs():
    methodology = (DOCS / "methodology.md").read_text()
    for fragment in ("peak_allocated_bytes", "peak_reserved_bytes", "predicted_cuda", "relative_step_time",
                     "CPU time of the measuring thread", "blind", "`mismatch`", "`leak`"):
        assert fragment in methodology, fragment
    threats = (DOCS / "threat-model.md").read_text()
    for fragment in ("Plug-ins are trusted code", "## In scope", "## Out of scope", "hostile"):
        assert fragment in threats, fragment
