"""Commit subjects say what changed in at most 72 characters; the detail goes in the body (CONTRIBUTING.md).

The rule holds from the commit that wrote it down onwards (:data:`SINCE`, the last commit with long
subjects); a clone without that commit in its history checks the commits it has.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the last commit before the rule (its own subject is 100+ characters)
SINCE = "c3ce7c469b4b253b45c46439955655d1dc94146e"
LIMIT = 72


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def long_subjects(subjects: list[str], limit: int = LIMIT) -> list[str]:
    """``'<length>: <subject>'`` for each subject over ``limit`` characters."""
    return [f"{len(s)}: {s}" for s in subjects if len(s) > limit]


def test_a_long_subject_is_named_with_its_length():
    assert long_subjects(["short", "x" * 73]) == [f"73: {'x' * 73}"]
    assert long_subjects(["x" * 72]) == []


def test_every_commit_since_the_rule_has_a_subject_of_at_most_72_characters():
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.fail("the tests run from a git checkout (make test in a clone)")
    has_since = _git("cat-file", "-e", f"{SINCE}^{{commit}}").returncode == 0
    log = _git("log", "--format=%s", f"{SINCE}..HEAD" if has_since else "HEAD")
    assert log.returncode == 0, log.stderr
    subjects = [s for s in log.stdout.splitlines() if not s.startswith("Merge ")]
    assert long_subjects(subjects) == []
