"""Test plug-in: a technique that counts, in a module-level global, how often its forward ran.

In a process that measured before, the count carries over; in a child forked from the warm server
it must start from zero every time (the server never runs a technique)."""
import torch

from memlab import Technique
from memlab.families.chunking.workload import ChainedMatmul

CALLS = {"forward": 0}


class CountsCalls(Technique, name="stateful_counts_calls"):
    """The plain chained matmul; ``describe`` reports the forward calls this process has made."""

    workload = ChainedMatmul

    def forward(self, problem):
        CALLS["forward"] += 1
        m = problem.model
        return (problem.inputs["x"] @ m.w1) @ m.w2

    def describe(self, problem, *args):
        return {"forward_calls_in_process": CALLS["forward"]}
