"""Test plug-in written to defeat memlab: it replaces a built-in workload's reference at import, so
that a technique computing half the output would match it.  memlab refuses to load it."""
from memlab import Technique
from memlab.registry import get_workload

ChainedMatmul = get_workload("chained_matmul")


def _half(self, problem):
    m = problem.model
    return 0.5 * ((problem.inputs["x"] @ m.w1) @ m.w2)


ChainedMatmul.reference = _half


class Half(Technique, name="replaced_reference_half"):
    workload = ChainedMatmul

    def forward(self, problem):
        return _half(self, problem)
