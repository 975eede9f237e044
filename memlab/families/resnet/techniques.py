"""Deep-network family: a CIFAR ResNet trained plainly, checkpointed, and as a reversible RevNet.

The ResNet techniques compute :class:`~memlab.families.resnet.workload.ResNet` with the same weights, so
outputs and gradients agree with ``resnet`` (plain autograd) to rounding; they differ in what
autograd keeps between forward and backward (``B = 3n`` blocks):

* ``resnet``: plain autograd; every block's saved tensors: O(B).
* ``resnet_checkpoint_block``: ``torch.utils.checkpoint`` (non-reentrant) per block; each block's
  input, one block's graph at a time in backward: O(B), smaller.
* ``resnet_checkpoint_sqrt``: ``torch.utils.checkpoint.checkpoint_sequential`` with
  ``round(sqrt(B))`` segments (Chen et al. 2016): the segment boundaries plus one segment's graph
  (and the last segment, which checkpoint_sequential runs plainly): O(sqrt(B)), one extra forward.

The RevNet techniques compute a different network, the RevNet of the same depth, block and width
(:func:`~memlab.families.resnet.workload.build_revnet`: coupling units inside each stage, a non-reversible
residual block at each stage transition).  **Their reference is that RevNet run with plain
autograd** (``revnet_autograd``), not the ResNet: the maths differ, so no ResNet output could match.
Their ``relative_step_time`` is therefore relative to the plain-autograd RevNet step too.

* ``revnet``: each stage's coupling units as one :func:`~memlab.functional.reversible.
  reversible_stack` (inputs rebuilt in backward): activations O(1) in depth within a stage; the
  three transition blocks keep theirs.
* ``revnet_nosave``: its no-savings twin, the same Function snapshotting every unit's input.
* ``revnet_autograd``: the RevNet with plain autograd (the RevNet reference as a technique).

The measured activation peak (``extra["activation_peak_bytes"]``, saved activations plus
temporaries during forward and backward, NOTE [ memory categories ]) is what the complexity fits
and the reproduction pages read: non-reentrant checkpointing hides its saved inputs from the
``saved_activations`` category (they show as temporaries), so only the sum is comparable.
"""
from __future__ import annotations

from typing import Any

from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from memlab.functional.blocks import sqrt_segments
from memlab.technique import Technique
from .workload import ResNet

__all__ = ["PlainResNet", "CheckpointBlockResNet", "CheckpointSqrtResNet", "RevNet", "RevNetNoSave",
           "RevNetAutograd", "sqrt_segments"]


class _Net(Technique):
    workload = ResNet
    reports_activation_peak = True
    architecture = "resnet"
    path = ""

    def facts(self) -> dict[str, Any]:
        n = self.problem_spec.n()
        return {"path": self.path, "architecture": self.architecture, "blocks_per_stage": n, "blocks": 3 * n,
                "layout": f"{'6' if self.config['block'] == 'basic' else '9'}n+2, n={n}"}

    def describe(self, problem, mode="train"):
        return self.facts()


class PlainResNet(_Net, name="resnet"):
    """The reference: the ResNet with plain autograd; saves every block's activations (O(blocks))."""

    baseline = True
    path = "plain autograd"

    def forward(self, problem):
        return problem.model(problem.inputs["x"])


class CheckpointBlockResNet(_Net, name="resnet_checkpoint_block"):
    """``torch.utils.checkpoint`` (non-reentrant) around every residual block; keeps block inputs."""

    twin = "resnet"
    path = "torch.utils.checkpoint per block, use_reentrant=False"

    def forward(self, problem):
        m = problem.model
        h = m.stem(problem.inputs["x"])
        for b in m.blocks:
            h = checkpoint(b, h, use_reentrant=False)
        return m.head(h)


class CheckpointSqrtResNet(_Net, name="resnet_checkpoint_sqrt"):
    """``checkpoint_sequential`` over the blocks in round(sqrt(blocks)) segments (Chen et al. 2016)."""

    twin = "resnet"
    path = "torch.utils.checkpoint.checkpoint_sequential, segments=round(sqrt(blocks)), use_reentrant=False"

    def forward(self, problem):
        m = problem.model
        h = m.stem(problem.inputs["x"])
        h = checkpoint_sequential(list(m.blocks), sqrt_segments(len(m.blocks)), h, use_reentrant=False)
        return m.head(h)

    def facts(self):
        return {**super().facts(), "segments": sqrt_segments(3 * self.problem_spec.n())}


class _RevNetBase(_Net):
    """RevNet techniques: own weights (:meth:`build`) and own reference (plain-autograd RevNet)."""

    architecture = "revnet"

    def validate(self) -> None:
        n = self.problem_spec.n()
        if n % 2:
            per = 6 if self.config["block"] == "basic" else 9
            raise ValueError(f"technique {self.name!r}: RevNet needs an even n (n/2 coupling units per stage); "
                             f"depth={self.config['depth']} gives n={n}: use depth={self.config['depth'] + per}")

    def build(self, device, dtype, seed=0):
        return self.problem_spec.build_revnet(device, dtype, seed)

    def reference(self, problem):
        """The RevNet with plain autograd: RevNet's maths differ from the ResNet's (module doc)."""
        return problem.model(problem.inputs["x"], reversible=False)

    def facts(self):
        model_units = self.problem_spec.n() // 2
        return {**super().facts(), "units_per_stage": model_units,
                "reference": "the same RevNet with plain autograd (revnet_autograd)"}


class RevNet(_RevNetBase, name="revnet"):
    """RevNet: each stage's coupling units as one reversible Function; inputs rebuilt in backward."""

    drifts_in_low_precision = True  # rebuilt inputs: NOTE [ every step checked ]

    twin = "revnet_nosave"
    path = "memlab.functional.reversible_stack(save_memory=True) per stage; transitions plain"

    def forward(self, problem):
        return problem.model(problem.inputs["x"], reversible=True, save_memory=True)


class RevNetNoSave(_RevNetBase, name="revnet_nosave"):
    """``revnet`` with savings off: the same Function snapshots every unit's input (O(depth))."""

    path = "memlab.functional.reversible_stack(save_memory=False) per stage; transitions plain"

    def forward(self, problem):
        return problem.model(problem.inputs["x"], reversible=True, save_memory=False)


class RevNetAutograd(_RevNetBase, name="revnet_autograd"):
    """The RevNet with plain autograd: the RevNet techniques' reference, measured as a technique."""

    accumulation_note = (
        "not a memory-saving technique: the RevNet of the same depth run with plain autograd, the reference "
        "revnet and revnet_nosave are checked and timed against; it keeps every coupling unit's activations, "
        "so it is compared with those two, not with the ResNet baseline (docs/evidence/accumulation.md)")
    path = "memlab.functional.residual_stack per stage (plain autograd)"

    def forward(self, problem):
        return problem.model(problem.inputs["x"], reversible=False)
