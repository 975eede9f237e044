"""CUDA memory measured against its prediction: the parts that measure, above the measurement.

* :mod:`memlab.cuda.variants`: each seed reproduction's configurations predicted under several
  allocator settings (``make cuda-variants``); a reproduction adds its own answer through its
  ``cuda_variants`` hook.
* :mod:`memlab.cuda.gpu_check`: the same configurations measured on a GPU beside their prediction
  (``make gpu-check``).

The prediction itself (the allocator model, calibration, device view and replay: pure functions of a
trace, below the measurement) is :mod:`memlab.cuda_replay`.  This package imports nothing at import
time: the site reads :mod:`memlab.cuda.gpu_check`'s keys without torch.
"""
