"""CUDA memory without a GPU: PyTorch's caching allocator replayed on a step's exact CPU trace.

* :mod:`memlab.cuda_replay.model`: PyTorch's CUDA caching allocator as a pure function of a request
  sequence and ``PYTORCH_CUDA_ALLOC_CONF`` (allocated, reserved, segments); no torch.
* :mod:`memlab.cuda_replay.calibration`: tables of CUDA-only operator memory (cuDNN workspaces)
  measured on a GPU, keyed by a convolution's signature.
* :mod:`memlab.cuda_replay.device_view`: the requests a step's tagged CPU trace would make on a GPU
  (NOTE [ device view ]).
* :mod:`memlab.cuda_replay.prediction`: those requests replayed through the model (NOTE [ predicted
  CUDA memory ]).

Pure functions of a trace, below the measurement, which calls them; the parts that measure (the
seed variants and the GPU check, :mod:`memlab.cuda`) sit above it.  This package imports no torch
at import time and no memlab package but :mod:`memlab.core` (and, inside one function, the registry).
"""
