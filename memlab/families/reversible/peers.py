"""Third-party reversible stacks on the same workload: MemCNN 1.5.2 and RevLib 1.7.2 (optional).

Install with ``pip install 'memlab[peers]'`` (or ``pip install --no-deps memcnn==1.5.2 revlib==1.7.2``
to keep the installed torch; both import with torch alone).  A missing or different version raises
:class:`memlab.TechniqueUnavailable` with the install hint; memlab never measures something else.

Both wrap the workload's own F and G modules (same parameters), additive coupling only:

* ``memcnn``: one ``memcnn.InvertibleModuleWrapper(memcnn.AdditiveCoupling(F_i, G_i))`` per block,
  default ``keep_input=False``.  A per-block Function: each block's output (and the gradient MemCNN
  stores on it) stays alive until the graph is released, so its backward peak grows with depth.
  Known defects this comparator shows rather than hides (see NOTE [ MemCNN 1.5.2 input gradient ]):
  it doubles the gradient of a leaf input, it frees the storage of the caller's input tensor during
  forward (restoring it, reconstructed, in backward; under ``no_grad`` never, so ``mode="infer"``
  raises :class:`~memlab.TechniqueUnavailable`), and it refuses ``torch.autograd.grad``.
* ``revlib``: ``revlib.ReversibleSequential(F_1, G_1, ..., F_d, G_d, split_dim=1)`` in its default
  memory mode (``autograd_function``; its checkpoint modes crash on torch 2.13).  It accumulates
  parameter gradients inside backward with ``torch.autograd.backward``, so ``torch.autograd.grad``
  does not return them.

# NOTE [ MemCNN 1.5.2 input gradient ]
``InvertibleCheckpointFunction.backward`` both sets ``input.grad = g`` by hand and returns ``g`` as
the input's gradient; for a leaf input autograd then accumulates ``g`` into that same ``.grad``,
giving ``2 g``.  memlab's reference check compares the ``.grad`` a training step's ``backward``
leaves, so ``grad:x`` of ``memcnn`` fails the check (factor 2); parameter gradients are right.
"""
from __future__ import annotations

import warnings
from importlib import import_module

import torch

from memlab.technique import Technique, TechniqueUnavailable
from .workload import ResidualStack
from memlab.families.peer_versions import require_version
from .techniques import stack_facts

__all__ = ["MemCNN", "RevLib"]


def _require(module: str, dist: str, version: str):
    require_version(dist, version)

    with warnings.catch_warnings():  # MemCNN 1.5.2 uses the deprecated torch.cuda.amp decorators
        warnings.simplefilter("ignore", FutureWarning)
        return import_module(module)


class _Peer(Technique):
    workload = ResidualStack
    peer = True
    reports_activation_peak = True
    devices = ("cpu", "cuda")
    _dist: tuple[str, str, str] = ("", "", "")

    def check_available(self, device):
        super().check_available(device)
        if self.config["coupling"] != "additive":
            raise TechniqueUnavailable(
                f"technique {self.name!r} compares additive coupling only (coupling="
                f"{self.config['coupling']!r}); use coupling='additive'"
            )
        _require(*self._dist)

    def _model(self, problem):
        key = f"{self.name}_model"
        if key not in problem.extra:
            lib = _require(*self._dist)
            problem.extra[key] = self._wrap(lib, list(problem.model.f), list(problem.model.g))
        return problem.extra[key]

    def describe(self, problem, mode="train"):
        return {**stack_facts(self, problem, self._path), "peer_version": f"{self._dist[1]}=={self._dist[2]}"}


class MemCNN(_Peer, name="memcnn"):
    """MemCNN 1.5.2: InvertibleModuleWrapper(AdditiveCoupling(F, G)) per block (peer; doubles x.grad)."""

    drifts_in_low_precision = True  # rebuilt inputs: NOTE [ every step checked ]

    _dist = ("memcnn", "memcnn", "1.5.2")
    # The automatic reference test (tests/test_reference_all.py) checks parameter gradients only:
    # MemCNN's input gradient is known to be 2x (NOTE [ MemCNN 1.5.2 input gradient ]).  Measurements
    # use the workload default x_requires_grad=True and so report matches_reference=False.
    check_params = {"x_requires_grad": False}
    #: the tensors whose reference check is known to fail, with why: a mismatch on these alone is
    #: expected, and a sweep's summary says so (NOTE [ expected non-ok rows ] in memlab.sweep.summary)
    known_mismatch = {"grad:x": "MemCNN 1.5.2 doubles the gradient of a leaf input (its backward sets input.grad "
                                "and also returns it, so autograd adds it twice; parameter gradients are right): "
                                "NOTE [ MemCNN 1.5.2 input gradient ] in memlab/families/reversible/peers.py"}
    _path = "memcnn.InvertibleModuleWrapper(memcnn.AdditiveCoupling(F_i, G_i)) per block, keep_input=False"
    accumulation_note = ("MemCNN 1.5.2 frees the storage of its input tensor in forward (keep_input=False) and "
                         "restores it in backward at the input's own size; a micro-batch is a view of the whole "
                         "batch's tensor, so its first micro-batch frees the whole batch and gives back only its "
                         "slice, and the next cannot be read (setStorage: ... out of bounds): an error row under "
                         "accumulate > 1, no figure")

    @staticmethod
    def _wrap(memcnn, f, g):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return [memcnn.InvertibleModuleWrapper(memcnn.AdditiveCoupling(Fm=fi, Gm=gi), keep_input=False,
                                                   keep_input_inverse=False) for fi, gi in zip(f, g)]

    def forward(self, problem):
        if not torch.is_grad_enabled():
            raise TechniqueUnavailable(
                "memcnn 1.5.2 with keep_input=False frees the storage of the caller's input in forward "
                "and only restores it in backward, so under no_grad (mode='infer') it destroys x; "
                "memlab measures memcnn in mode='train' only"
            )

        x = problem.inputs["x"]
        with warnings.catch_warnings():  # MemCNN 1.5.2 calls the deprecated Tensor.storage()
            warnings.simplefilter("ignore", UserWarning)
            for block in self._model(problem):
                x = block(x)
        return x


class RevLib(_Peer, name="revlib"):
    """RevLib 1.7.2: ReversibleSequential(F_1, G_1, ...) in its default autograd_function mode (peer)."""

    drifts_in_low_precision = True  # rebuilt inputs: NOTE [ every step checked ]

    _dist = ("revlib", "revlib", "1.7.2")
    _path = "revlib.ReversibleSequential(F_1, G_1, ..., split_dim=1), memory_mode=autograd_function"

    @staticmethod
    def _wrap(revlib, f, g):
        return revlib.ReversibleSequential(*[m for pair in zip(f, g) for m in pair], split_dim=1)

    def forward(self, problem):
        return self._model(problem)(problem.inputs["x"])
