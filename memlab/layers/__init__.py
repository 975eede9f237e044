"""Drop-in ``nn.Module`` layers built on :mod:`memlab.functional` (no registry, no measurement)."""
from .tt_linear import TensorTrainLinear, TTPath

__all__ = ["TensorTrainLinear", "TTPath"]
