"""The README names every command and every option a user can give (issue 29: `advise --verify` and
`--plugin` were missing), what ``problem`` gives ``describe``, and that a bool ``Param`` works."""
from __future__ import annotations

from pathlib import Path

from memlab.cli import _parser

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _commands() -> dict[str, list[str]]:
    sub = next(a for a in _parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: [o for a in p._actions for o in a.option_strings if o not in ("-h", "--help")]
            for name, p in sub.choices.items()}


def test_every_command_and_option_is_in_the_readme_s_table():
    table = README.split("Every command and its options", 1)[1].split("\n\n", 2)[1]
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
    assert missing == [], f"README's command table lacks: {missing}"


def test_the_readme_says_what_problem_gives_describe_and_that_a_bool_param_works():
    for fragment in ("problem.model", "problem.inputs", "problem.grad_output", "problem.extra", "problem.leaves()",
                     "self.config", "`bool`", "--param flag=true"):
        assert fragment in README, fragment
