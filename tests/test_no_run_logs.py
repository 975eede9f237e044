"""No run logs in memlab's code or the README: a NOTE states an invariant or a decision and names its
evidence file (``docs/evidence/``); the runs behind it (when, on which host, at what load) are written
there, never beside the code.  So no date, "UTC", time-of-day range or load average in ``memlab/**/*.py``
or the root ``README.md``.  The patterns are narrow on purpose: ``load_models(``, ``json.load(`` and
"load" followed by a word are code and prose, not a run."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?")
_HOUR = r"(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?"

#: (what it is, pattern) of a run log's marks
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("date", re.compile(rf"\b\d{{1,2}}\s+{_MONTH}\s+20\d\d\b")),              # 5 Dec 2026
    ("date", re.compile(rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+20\d\d\b")),  # December 5, 2026
    ("date", re.compile(rf"\b{_MONTH}\s+20\d\d\b")),                          # December 2026
    ("ISO date", re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")),                   # 2026-12-05
    ("UTC", re.compile(r"\bUTC\b")),
    ("time of day", re.compile(rf"(?<![\w:]){_HOUR}\s*(?:-|–|to)\s*{_HOUR}(?![\w:])")),  # 22:54-22:57
    # load 1.0-1.2, at load 20-29, load ~3, load average 0.6, loads of 2-4
    ("load average", re.compile(r"\bloads?(?:\s+averages?)?(?:\s+(?:of|was|were|at|read|between|from))?"
                                r"\s+[~≈]?\s?\d")),
]


def run_log_marks(text: str) -> list[tuple[int, tuple[str, ...], str]]:
    """``(line number, what it has, the line)`` of every line of ``text`` with a run-log mark.  A mark
    that a line break splits (``load`` at the end of a comment line, ``13-14`` at the start of the
    next) counts on the line where it starts."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        nxt = re.sub(r"^\s*(?:#:?|\*|>)?\s*", "", lines[i + 1]) if i + 1 < len(lines) else ""
        end = len(line.rstrip())
        joined = line.rstrip() + " " + nxt
        kinds = tuple(dict.fromkeys(what for what, pattern in PATTERNS
                                    if any(m.start() < end for m in pattern.finditer(joined))))
        if kinds:
            found.append((i + 1, kinds, line.strip()))
    return found


def _report(paths: list[Path]) -> list[str]:
    hits = []
    for path in paths:
        for n, kinds, line in run_log_marks(path.read_text(encoding="utf-8")):
            hits.append(f"{path.relative_to(ROOT)}:{n}: {', '.join(kinds)}: {line}")
    return hits


def _fail_with(hits: list[str], where: str) -> None:
    if hits:
        print("\n".join(hits))
    assert not hits, (f"{len(hits)} run-log marks in {where} (move the run to docs/evidence/ and let the "
                      "NOTE name it: 'Evidence: docs/evidence/<file>.md#<anchor>'):\n" + "\n".join(hits))


def test_no_run_logs_in_memlab():
    paths = sorted(p for p in (ROOT / "memlab").rglob("*.py") if "__pycache__" not in p.parts)
    assert paths
    _fail_with(_report(paths), "memlab/")


def test_no_run_logs_in_the_readme():
    _fail_with(_report([ROOT / "README.md"]), "README.md")


def test_the_scanner_catches_a_run_log_and_spares_code():
    caught = [
        "# measured 5 Dec 2026, 22:54-22:57 UTC, load 1.0-1.2, kernel build v1272",
        "# (3 December 2026, 2 idle cores)",
        "# read 1.383 (two runs each, 2026-12-05)",
        "# an earlier trial at load 20-29 saw",
        "# under load ~3 the ratio held",
        "# the load average 0.6 before",
        "# Measured (issue 32; one thread, interleaved, load\n# 13-14 on 2 cores)",
        "x = 1  # on December 5, 2026",
    ]
    for text in caught:
        assert run_log_marks(text), text
    assert run_log_marks(caught[0])[0][1] == ("date", "UTC", "time of day", "load average")
    assert run_log_marks(caught[6])[0][0] == 1
    spared = [
        "models = load_runs(folder)",
        "models = load_models(MODELS_DIR)",
        "data = json.load(f)  # load 'models' from the file",
        "obj = torch.load(path, weights_only=True)",
        "# a load that slows both cancels; under load the ratio holds",
        "# the load average before and after the timed steps (os.getloadavg())",
        "# measured under load (1-minute load average above 1.25 x the cores)",
        "y = x[10:20]; z = x[1:2-1]",
        'CUBLAS_WORKSPACE_CONFIG=":4096:2:16:8"',
        "# ICLR 2025, arXiv:2411.09009",
        "# the may 2 flag",
        "re.compile(r'USDT:\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d')",
    ]
    for text in spared:
        assert not run_log_marks(text), (text, run_log_marks(text))
