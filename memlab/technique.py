"""``memlab.Technique``: the common interface of every memory-saving technique.

Subclassing registers a technique under a name; nothing else lists it::

    class SliceLoop(Technique, name="slice_loop"):
        workload = ChainedMatmul
        params = {"chunk_size": Param(2500, low=1, doc="rows per chunk")}

        def forward(self, problem):          # the technique's path
            ...

A technique states its workload (the maths), its own tunable parameters (the workload's are shared),
and how it computes the workload's output from a :class:`~memlab.workload.Problem`.  Optionally it
overrides :meth:`build` (e.g. a dense layer instead of TT cores) and :meth:`describe` (analytic
expectations and which code path ran, stored in ``Measurement.extra``) and :meth:`make_optimizer`
(an optimizer of its own).
"""
from __future__ import annotations

import inspect
from typing import Any, ClassVar, Mapping

import torch

from .core.errors import TechniqueUnavailable
from .core.params import Param, resolve_params
from .registry import register_technique
from .workload import Problem, Workload

__all__ = ["Technique", "TechniqueUnavailable", "described"]


class Technique:
    """Base class.  Subclass with ``name="..."`` to register.

    Class attributes:
        workload: the :class:`Workload` subclass whose maths this technique computes.
        params: the technique's own parameters (``chunk_size``...); the workload's are added.
        baseline: True for the workload's no-savings reference technique.
        twin: name of the no-savings technique that runs the same code path, if any.
        peer: True for third-party comparators (MemCNN, RevLib, tensorly-torch).
        devices: device types the technique supports.
    """

    name: ClassVar[str] = ""
    workload: ClassVar[type[Workload]]
    params: ClassVar[Mapping[str, Param]] = {}
    baseline: ClassVar[bool] = False
    twin: ClassVar[str | None] = None
    peer: ClassVar[bool] = False
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    #: parameters added to the workload's ``check_params`` for the automatic reference check
    #: (e.g. a chunk size that does not divide the check's row count)
    check_params: ClassVar[Mapping[str, Any]] = {}
    #: ``{dtype: (rtol, atol)}`` overriding the workload's tolerances for this technique only: for a
    #: variant that computes in lower precision on purpose (see :meth:`tolerance`)
    tolerances: ClassVar[Mapping[str, tuple[float, float]]] = {}
    #: True: the measurement stores ``extra["activation_peak_bytes"]`` and ``["activation_peak_phase"]``
    #: from its memory categories (saved activations + temporaries during forward and backward,
    #: NOTE [ memory categories ]), for families whose step peak is dominated by gradients
    reports_activation_peak: ClassVar[bool] = False
    #: True for a technique whose low-precision result drifts from the reference step by step beyond
    #: what its first step shows (a reversible stack rebuilds its inputs from its outputs, and the
    #: rounding flips ReLU masks in whichever tensors it reaches): its later steps are checked for
    #: structure only in float32/bfloat16 (NOTE [ every step checked ]); float64 checks them fully
    drifts_in_low_precision: ClassVar[bool] = False
    #: why this technique's peak exceeds its family baseline's when gradients accumulate over
    #: micro-batches or are kept between steps (``accumulate`` > 1, ``grads="zero"``: ``.grad`` exists
    #: before backward), where it does; None where it keeps its saving.  A row measured with either
    #: option carries it as ``extra["accumulation_note"]`` (NOTE [ micro-batches of a problem ])
    accumulation_note: ClassVar[str | None] = None
    #: True for a technique whose step computes in another dtype than the workload's (autocast to
    #: bfloat16): its time measured on one device says nothing of another's, so a GPU answer does not
    #: rank it by a CPU-measured time (NOTE [ plain fits first ] in memlab.advisor.decision)
    changes_dtype: ClassVar[bool] = False

    def __init_subclass__(cls, name: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if name is None:
            return
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"technique name {name!r} must be an identifier like 'slice_loop'")
        if not (isinstance(getattr(cls, "workload", None), type) and issubclass(cls.workload, Workload)):
            raise TypeError(f"technique {name!r} must set `workload` to a memlab.Workload subclass")
        clash = set(cls.params) & set(cls.workload.params)
        if clash:
            raise ValueError(f"technique {name!r} redefines workload parameter(s) {sorted(clash)}")
        register_technique(name, cls)  # refuses a name another class holds
        cls.name = name

    def __init__(self, **params: Any):
        self.config = self.resolve(params)
        workload_cfg = {k: v for k, v in self.config.items() if k in self.workload.params}
        self.problem_spec = self.workload(workload_cfg)
        self.validate()

    # -- description ---------------------------------------------------------------------------
    @classmethod
    def family(cls) -> str:
        return cls.workload.family

    @classmethod
    def all_params(cls) -> dict[str, Param]:
        """Workload parameters plus the technique's own, by name."""
        return {**cls.workload.params, **cls.params}

    @classmethod
    def resolve(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        return resolve_params(cls.all_params(), given, owner=f"technique {cls.name!r}")

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""

    @classmethod
    def source_file(cls) -> str | None:
        try:
            return inspect.getfile(cls)
        except (TypeError, OSError):
            return None

    # -- hooks ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Cross-parameter checks beyond ranges (e.g. divisibility); raise ValueError."""

    def check_available(self, device: torch.device) -> None:
        """Raise :class:`TechniqueUnavailable` when this technique cannot run on ``device``."""
        if device.type not in self.devices:
            raise TechniqueUnavailable(
                f"technique {self.name!r} does not support device {device.type!r}; "
                f"supported: {', '.join(self.devices)}"
            )

    @classmethod
    def tolerance(cls, dtype: str) -> tuple[float, float]:
        """``(rtol, atol)`` the reference check holds this technique to in ``dtype`` (``'float64'``...).

        The technique's own ``tolerances`` entry if it declares one, else the workload's, else
        ``(1e-3, 1e-3)``.  A technique that computes in bfloat16 internally, say, declares
        ``tolerances = {"float64": (1e-2, 1e-2)}`` and states why in its docstring.
        """
        found = cls.tolerances.get(dtype) or cls.workload.tolerances.get(dtype)
        return tuple(found) if found else (1e-3, 1e-3)

    def build(self, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Problem:
        """Seeded problem for one step; default: the workload's."""
        return self.problem_spec.build(device, dtype, seed)

    def forward(self, problem: Problem) -> torch.Tensor:
        """The technique's computation of the workload output (autograd-enabled in training)."""
        raise NotImplementedError

    def reference(self, problem: Problem) -> torch.Tensor:
        """The workload reference on this technique's problem (plain autograd)."""
        return self.problem_spec.reference(problem)

    def describe(self, problem: Problem, mode: str = "train") -> dict[str, Any]:
        """JSON-serialisable facts stored in ``Measurement.extra`` (analytic floors, path taken).

        Called after the measured steps with the step's ``mode`` (``"train"`` or ``"infer"``), so a
        floor can be stated for the mode measured.  Analytic only: a measured figure (the
        activation peak) comes from the measurement itself (:attr:`reports_activation_peak`), never
        from tracing inside ``describe``.  Override as ``def describe(self, problem, mode="train")``;
        an override without ``mode`` (written before it was passed) is still called, without it
        (:func:`described`).
        """
        return {}

    def make_optimizer(self, params: list[torch.nn.Parameter], choice: str) -> torch.optim.Optimizer | None:
        """The optimizer a training step uses over ``params``; None (default) for memlab's ``choice``.

        ``choice`` is the requested name, one of :data:`memlab.core.setting.OPTIMIZERS` (``sgd``,
        ``sgd_momentum``, ``adam``, ``adamw``, ``adafactor``, or one of them ``_in_backward``).  A plug-in
        with its own optimizer (8-bit states, factored second moments...) returns an instance; its
        state shows as the ``optimizer_state`` category and ``Measurement.optimizer_class`` names it.
        With an ``_in_backward`` choice the step asks once per parameter (``params`` one long), with the
        full name, and steps what it returns in that parameter's post-accumulate-grad hook
        (NOTE [ optimizer in backward ] in :mod:`memlab.core.setting`).
        """
        return None

    def samples_per_step(self) -> int:
        return self.problem_spec.samples_per_step()

    @classmethod
    def swept_overrides(cls) -> dict[str, Any]:
        """The workload parameters this technique's own ``check_params`` move away from the workload's
        defaults, at those defaults: what a sweep measures and the check configuration does not
        (memcnn: ``{"x_requires_grad": True}``); ``{}`` for most techniques."""
        specs, small = cls.workload.params, cls.workload.check_params
        return {k: small.get(k, specs[k].default) for k, v in cls.check_params.items()
                if k in specs and k not in small and specs[k].default != v}

    @classmethod
    def for_check(cls, as_swept: bool = False) -> "Technique":
        """An instance on the small configuration used by the automatic reference check; ``as_swept``:
        with :meth:`swept_overrides` applied, the workload parameters a sweep publishes."""
        return cls(**{**cls.workload.check_params, **cls.check_params, **(cls.swept_overrides() if as_swept else {})})

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"


def described(technique: Technique, problem: Problem, mode: str) -> dict[str, Any]:
    """``technique.describe(problem, mode)``; ``describe(problem)`` for an override that takes no
    ``mode`` (a plug-in written before the mode was passed)."""
    try:
        inspect.signature(technique.describe).bind(problem, mode)
    except TypeError:
        return technique.describe(problem)
    return technique.describe(problem, mode)
