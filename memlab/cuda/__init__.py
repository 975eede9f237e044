"""CUDA memory without a GPU, and the check against one.

* :mod:`memlab.cuda.model`: PyTorch's CUDA caching allocator as a pure function of a request
  sequence and ``PYTORCH_CUDA_ALLOC_CONF`` (allocated, reserved, segments); no torch.
* :mod:`memlab.cuda.calibration`: tables of CUDA-only operator memory (cuDNN workspaces) measured on
  a GPU, keyed by a convolution's signature.
* :mod:`memlab.cuda.device_view`: the requests a step's tagged CPU trace would make on a GPU
  (NOTE [ device view ]).
* :mod:`memlab.cuda.prediction`: those requests replayed through the model (NOTE [ predicted CUDA
  memory ]).
* :mod:`memlab.cuda.variants`: each seed reproduction's configurations predicted under several
  allocator settings (``make cuda-variants``); a reproduction adds its own answer through its
  ``cuda_variants`` hook.
* :mod:`memlab.cuda.gpu_check`: the same configurations measured on a GPU beside their prediction
  (``make gpu-check``).

The model, calibration, device view and prediction are pure functions of a trace, below the
measurement (which calls them); the variants and the GPU check measure, above it.  This package
imports nothing at import time: the site reads :mod:`memlab.cuda.gpu_check`'s keys without torch.
"""
