"""Techniques that apply to any model: the family of each user's model file.

Each model file (:mod:`memlab.own_model.workload`) gets its own copy of every technique here,
registered as ``<stem>__<kind>`` in family ``model:<stem>`` (:func:`techniques_for`); the kinds:

* ``plain``: plain autograd, the baseline: every activation of every block saved for backward.
* ``checkpoint_blocks``: ``torch.utils.checkpoint`` (``use_reentrant=False``) around each repeated
  block (:func:`memlab.functional.blocks.find_blocks`, or ``blocks=`` / ``--blocks``): a block keeps
  its inputs, the rest is recomputed in backward one block at a time; one extra forward of the blocks.
* ``checkpoint_sqrt``: ``checkpoint_sequential`` over each container's blocks in ``round(sqrt(n))``
  segments (Chen et al. 2016): segment boundaries kept, one segment rebuilt at a time (the last runs
  plainly); for blocks chained tensor -> tensor.
* ``selective_checkpoint``: ``checkpoint_each`` with ``create_selective_checkpoint_contexts``, the
  policy saving matmul outputs (``mm``, ``bmm``, ``addmm``, ``baddbmm``) and recomputing the rest.
* ``autocast_bf16``: the forward and loss under ``torch.autocast(dtype=torch.bfloat16)``: matmuls and
  convolutions compute, and save for backward, in bfloat16.  Autocast leaves float64 alone, so the
  float64 reference check runs this technique unautocast (its bfloat16 error shows as the measured
  dtype's drift).
* ``offload_activations``: ``torch.autograd.graph.save_on_cpu(pin_memory=True)``: every tensor saved
  for backward goes to host memory; CUDA only.
* ``lora``: rank-``rank`` adapters beside every ``nn.Linear``, every base parameter frozen (Hu et al.
  2021; :mod:`memlab.own_model.lora`): gradients and optimizer state for the adapters only.  It
  changes the maths, so its reference is the adapted model computed plainly.

A technique that needs blocks refuses (:class:`~memlab.TechniqueUnavailable`) a model where none are
found, saying how to name them.  Every measurement records what was found in ``extra``
(``blocks``, ``block_count``, ``block_type``, ``blocks_found_by``, ``segments``...).  The measured
activation peak (``extra["activation_peak_bytes"]``) is the figure to compare: non-reentrant
checkpointing keeps a block's inputs as temporaries rather than saved activations (as in the
resnet family, NOTE [ memory categories ]).
"""
from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import torch

from ..core.errors import TechniqueUnavailable
from ..core.params import Param
from ..functional.blocks import MATMUL_OPS, checkpoint_each, checkpoint_sqrt, matmul_saving_context, sqrt_segments
from ..technique import Technique
from .lora import adapter_parameters, adapter_targets, add_adapters
from .workload import ModelWorkload

__all__ = ["AnyModelTechnique", "techniques_for", "KINDS", "BASELINE_KIND", "dropout_off", "randomness_facts"]


class AnyModelTechnique(Technique):
    """Base of the techniques of a model file; ``kind`` names the technique within the family.

    ``reorders_randomness``: the technique draws its random numbers in another order than plain
    autograd (so the same seed gives other dropout masks); its steps and its reference's then run
    with every dropout off (NOTE [ dropout stays on ]), and the row says so.  None of the kinds here
    does: checkpointing restores the RNG state when it recomputes."""

    workload = ModelWorkload
    kind: ClassVar[str] = ""
    needs_blocks: ClassVar[bool] = False
    #: False: left out of the techniques ``advise --model`` models by default (a model file's
    #: ``AdvisorModel`` may still name it in ``entries``)
    advised: ClassVar[bool] = True
    reorders_randomness: ClassVar[bool] = False
    reports_activation_peak = True
    path: ClassVar[str] = ""

    def build(self, device, dtype, seed=0):
        """The workload's problem; every dropout off when the technique reorders randomness."""
        problem = super().build(device, dtype, seed)
        if self.reorders_randomness:
            problem.extra["dropout_fixed"] = dropout_off(problem.model)
        return problem

    def check_available(self, device: torch.device) -> None:
        super().check_available(device)
        if self.needs_blocks and self.problem_spec.meta_blocks() is None:
            raise TechniqueUnavailable(
                f"technique {self.name!r} does not apply to {self.family()}: the model has no nn.ModuleList or "
                f"nn.Sequential of two or more same-type blocks; name the list of blocks with --blocks path.to.list "
                f"(--param blocks=path.to.list)")

    def forward(self, problem):
        with self.applied(problem):
            return self.problem_spec.run(problem)

    def applied(self, problem):
        """The context the step's forward and loss run in."""
        return contextlib.nullcontext()

    def describe(self, problem, mode="train") -> dict[str, Any]:
        blocks = self.problem_spec.blocks(problem)
        facts = {"model_file": self.problem_spec.model_file.path, "model_technique": self.kind, "path": self.path,
                 **randomness_facts(problem)}
        return {**facts, **(blocks.facts() if blocks is not None else {"block_count": 0})}

    @classmethod
    def source_file(cls) -> str | None:
        """The model file: the measuring child imports it (as a plug-in) to find this technique."""
        return cls.workload.model_file.path if cls.workload is not ModelWorkload else super().source_file()


class Plain(AnyModelTechnique):
    """Plain autograd: the baseline; every block's activations saved for backward."""

    kind = "plain"
    baseline = True
    path = "plain autograd"


class CheckpointBlocks(AnyModelTechnique):
    """``torch.utils.checkpoint`` (non-reentrant) around each repeated block; keeps block inputs."""

    kind = "checkpoint_blocks"
    needs_blocks = True
    path = "torch.utils.checkpoint per block, use_reentrant=False"

    def applied(self, problem):
        return checkpoint_each(self.problem_spec.blocks(problem))


class CheckpointSqrt(AnyModelTechnique):
    """``checkpoint_sequential`` over each container of blocks in round(sqrt(n)) segments."""

    kind = "checkpoint_sqrt"
    needs_blocks = True
    path = "torch.utils.checkpoint.checkpoint_sequential, segments=round(sqrt(blocks)) per container, " \
           "use_reentrant=False"

    def applied(self, problem):
        return checkpoint_sqrt(problem.model, self.problem_spec.blocks(problem))

    def describe(self, problem, mode="train"):
        facts = super().describe(problem, mode)
        blocks = self.problem_spec.blocks(problem)
        return {**facts, "segments": [sqrt_segments(len(m)) for m in blocks.modules]} if blocks else facts


class SelectiveCheckpoint(AnyModelTechnique):
    """Selective activation checkpointing per block: matmul outputs saved, everything else recomputed."""

    kind = "selective_checkpoint"
    needs_blocks = True
    path = "torch.utils.checkpoint per block, use_reentrant=False, context_fn=create_selective_checkpoint_contexts"

    def applied(self, problem):
        return checkpoint_each(self.problem_spec.blocks(problem), context_fn=matmul_saving_context)

    def describe(self, problem, mode="train"):
        return {**super().describe(problem, mode), "policy_saves": sorted(str(op) for op in MATMUL_OPS)}


class AutocastBf16(AnyModelTechnique):
    """Forward and loss under ``torch.autocast(dtype=bfloat16)``: matmuls save bfloat16 activations."""

    kind = "autocast_bf16"
    changes_dtype = True
    path = "torch.autocast(device_type, dtype=torch.bfloat16) around forward and loss"

    def applied(self, problem):
        device = problem.grad_output.device.type
        return torch.autocast(device, dtype=torch.bfloat16)

    def describe(self, problem, mode="train"):
        dtype = problem.grad_output.dtype
        return {**super().describe(problem, mode), "autocast_active": dtype == torch.float32 or dtype == torch.float16}


class OffloadActivations(AnyModelTechnique):
    """``torch.autograd.graph.save_on_cpu(pin_memory=True)``: tensors saved for backward live on the host."""

    kind = "offload_activations"
    devices = ("cuda",)
    path = "torch.autograd.graph.save_on_cpu(pin_memory=True) around forward and loss"

    def applied(self, problem):
        return torch.autograd.graph.save_on_cpu(pin_memory=True)


class LoRA(AnyModelTechnique):
    """Rank-r adapters on every nn.Linear, the base frozen (LoRA): gradients and optimizer state for the adapters only.

    LoRA changes the maths: its reference is the same adapted model computed plainly (the workload's
    step on the problem this technique builds), whose adapters start with ``B = 0`` so its outputs are
    the base model's (NOTE [ LoRA adapters ] in :mod:`memlab.own_model.lora`).  Relative time is
    against ``plain``, which trains every parameter.  A model without an ``nn.Linear`` is refused."""

    kind = "lora"
    # NOTE [ LoRA is not advised by default ]
    # LoRA trains other parameters than plain (the adapters, not the model): it answers "what does
    # fine-tuning this model with adapters need", not "how do I train this model in less memory", so
    # ``advise --model`` does not rank it beside the techniques that compute plain's step, unless a
    # model file's AdvisorModel names it.
    # Evidence: tests/test_lora.py (its gradients and optimizer state are the adapters' only)
    advised = False
    params = {"rank": Param(8, low=1, high=65536, doc="the adapters' rank r: A [r, in] and B [out, r] per nn.Linear")}
    path = "rank-r adapters x A^T B^T beside each frozen nn.Linear (Hu et al. 2021), every other parameter frozen"

    def check_available(self, device: torch.device) -> None:
        super().check_available(device)
        try:
            with torch.device("meta"):  # no memory; the CPU where the file's build() cannot run on meta
                model = self.problem_spec.model_file.build()
        except Exception:  # noqa: BLE001 - a user's file may raise anything; its real error shows in build()
            model = self.problem_spec.model_file.build()
        if not adapter_targets(model):
            raise self._no_linear()

    def _no_linear(self) -> TechniqueUnavailable:
        return TechniqueUnavailable(
            f"technique {self.name!r} does not apply to {self.family()}: the model has no nn.Linear layer "
            f"(nor a transformers Conv1D) outside nn.MultiheadAttention to put an adapter beside")

    def build(self, device, dtype, seed=0):
        problem = super().build(device, dtype, seed)
        layers = add_adapters(problem.model, self.config["rank"], seed)
        if not layers:
            raise self._no_linear()
        problem.extra["lora_layers"] = layers
        return problem

    def describe(self, problem, mode="train"):
        adapters = adapter_parameters(problem.model)
        return {**super().describe(problem, mode), "lora_layers": len(problem.extra.get("lora_layers", ())),
                "adapter_params": sum(p.numel() for p in adapters),
                "adapter_bytes": sum(p.numel() * p.element_size() for p in adapters)}


def _dropouts(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str]]:
    """``(module, attribute)`` of every dropout with a nonzero probability: ``nn.Dropout`` and its
    kin (``p``), ``nn.MultiheadAttention`` (``dropout``)."""
    kinds = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
             torch.nn.FeatureAlphaDropout)
    found = []
    for m in model.modules():
        attr = "p" if isinstance(m, kinds) else "dropout" if isinstance(m, torch.nn.MultiheadAttention) else None
        if attr is not None and getattr(m, attr) > 0:
            found.append((m, attr))
    return found


def dropout_off(model: torch.nn.Module) -> int:
    """Set every dropout probability of ``model`` to 0 (the identity); how many there were."""
    found = _dropouts(model)
    for m, attr in found:
        setattr(m, attr, 0.0)
    return len(found)


def randomness_facts(problem) -> dict[str, Any]:
    """What a row says about the model's dropout and how its steps were checked (NOTE [ dropout stays
    on ]): nothing for a model without dropout."""
    fixed = problem.extra.get("dropout_fixed", 0)
    count = fixed or len(_dropouts(problem.model))
    if not count:
        return {}
    if fixed:
        how = "dropout off (p=0) in this technique's steps and its reference's: it draws random numbers in " \
              "another order than plain autograd"
    else:  # the model stays in training mode in an inference step too
        how = "dropout on; technique and reference seeded alike before each step's forward (same masks)"
    return {"dropout_modules": count, "check_randomness": how}


#: the technique templates by kind, in the order ``memlab list`` shows them
KINDS: dict[str, type[AnyModelTechnique]] = {c.kind: c for c in (
    Plain, CheckpointBlocks, CheckpointSqrt, SelectiveCheckpoint, AutocastBf16, OffloadActivations, LoRA)}
BASELINE_KIND = "plain"


def techniques_for(workload: type[ModelWorkload]) -> dict[str, type[AnyModelTechnique]]:
    """Register every kind for ``workload`` (a model file's): ``{kind: class}``, named ``<stem>__<kind>``,
    each non-baseline's twin the file's ``plain``."""
    stem = workload.model_file.stem
    baseline = f"{stem}__{BASELINE_KIND}"
    out = {}
    for kind, template in KINDS.items():
        if set(template.params) & set(workload.params):
            continue  # a batch() size named like the kind's own parameter (``rank``): the kind is left out
        namespace = {"workload": workload, "__module__": workload.__module__,
                     "__qualname__": f"{template.__name__}_{stem}", "__doc__": template.__doc__,
                     "twin": None if template.baseline else baseline}
        out[kind] = type(f"{template.__name__}_{stem}", (template,), namespace, name=f"{stem}__{kind}")
    return out
