"""Third-party LM losses and a real GPT-2 on the transformer workload (optional peers).

Install with ``pip install 'memlab[peers]'`` (or ``pip install --no-deps torchtune==0.6.1
cut-cross-entropy==25.1.1 transformers==5.25.0`` to keep the installed torch).  A missing or different
version raises :class:`memlab.TechniqueUnavailable` with the install hint; memlab never measures
something else.  All refuse ``dropout > 0`` (their dropout masks are not the reference's).

* ``torchtune_chunked_loss``: torchtune's ``CEWithChunkedOutputLoss`` on memlab's model (eager
  attention, plain blocks): the LM head applied to ``chunks`` slices of the tokens
  (``[head(h) for h in h.chunk(chunks, dim=1)]``, as its docstring shows), the cross-entropy summed
  chunk by chunk and divided by the token count.  Its saving is the float32 upcast of one chunk at a
  time (bf16 training); every chunk's logits are still made in forward and kept for backward, so in
  float32 it holds the full [B*T, V] logits as the plain loss does.  It returns the mean loss (a
  scalar), so its problem's upstream gradient is 1 and its reference the mean of the eager per-token
  loss; the model, inputs and weights are the workload's.
  Only the loss module's file is loaded (``torchtune/modules/loss/ce_chunked_output_loss.py``, which
  imports torch alone): ``import torchtune`` imports its datasets, models and generation packages,
  which need packages memlab does not install (NOTE [ torchtune's loss file ]).
* ``cut_cross_entropy``: Apple's ``linear_cross_entropy`` (``impl="cce"``, per-token
  ``reduction="none"``) as the loss of memlab's model.  Its kernel is Triton, CUDA only; the
  package imports Triton when imported, so on a CPU-only torch it is ``unavailable`` with that reason
  (its other path, ``impl="torch_compile"``, materialises the full logits: not the algorithm).
* ``gpt2_hf``, ``gpt2_hf_checkpointing``: Hugging Face ``GPT2LMHeadModel`` built from a
  ``GPT2Config`` (no download) of the workload's sizes (``n_layer=layers, n_embd=hidden,
  n_head=heads, vocab_size=vocab, n_positions=seq``; eager attention, untied head, no dropout, no
  cache), with and without its own activation checkpointing (``gradient_checkpointing_enable`` with
  ``use_reentrant=False``, what memlab's ``checkpoint_layer`` uses).  The output is the per-token
  cross-entropy of its logits against the workload's targets; the reference is the same model
  without checkpointing.  GPT-2 differs from memlab's block in its own ways (``Conv1D`` layers,
  tanh GELU, biases everywhere), so compare the pair's ratio, not bytes across models.

# NOTE [ torchtune's loss file ]
torchtune 0.6.1's ``__init__`` refuses to import without ``torchao``, then imports
``torchtune.datasets`` (``datasets``...), ``models`` and ``modules`` (whose ``common_utils`` imports
``torchao`` again): packages memlab does not install.  The chunked loss is
one self-contained file (``import torch``, ``torch.nn.functional``); loading that file by path gives
the class as torchtune ships it, without importing anything else of torchtune.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path as FilePath

import torch
import torch.nn.functional as F

from memlab.technique import Technique, TechniqueUnavailable
from memlab.core.params import Param
from memlab.workload import Problem
from .workload import EAGER, Path, Transformer
from memlab.families.peer_versions import require_version

__all__ = ["TorchtuneChunkedLoss", "CutCrossEntropy", "GPT2HF", "GPT2HFCheckpointing"]

TORCHTUNE = ("torchtune", "0.6.1")
CUT_CROSS_ENTROPY = ("cut-cross-entropy", "25.1.1")
TRANSFORMERS = ("transformers", "5.25.0")


def torchtune_loss_class() -> type:
    """torchtune's ``CEWithChunkedOutputLoss``, from its own file (NOTE [ torchtune's loss file ])."""
    require_version(*TORCHTUNE)
    spec = importlib.util.find_spec("torchtune")
    where = FilePath(next(iter(spec.submodule_search_locations))) / "modules" / "loss" / "ce_chunked_output_loss.py"
    if not where.is_file():
        raise TechniqueUnavailable(f"torchtune {TORCHTUNE[1]} has no {where} (its chunked loss moved)")
    file_spec = importlib.util.spec_from_file_location("_memlab_torchtune_ce_chunked_output_loss", where)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module.CEWithChunkedOutputLoss


def cut_cross_entropy_function():
    """``cut_cross_entropy.linear_cross_entropy``; TechniqueUnavailable naming why it cannot load."""
    require_version(*CUT_CROSS_ENTROPY)
    try:
        from cut_cross_entropy import linear_cross_entropy  # deferred: optional dependency
    except ImportError as exc:
        raise TechniqueUnavailable(
            f"cut-cross-entropy {CUT_CROSS_ENTROPY[1]} does not import here ({exc}): its CCE kernel is Triton "
            "(CUDA only) and the package imports Triton when imported; torch's CPU build ships no Triton") from None
    return linear_cross_entropy


class _TransformerPeer(Technique):
    workload = Transformer
    peer = True
    reports_activation_peak = True
    _dist: tuple[str, str] = ("", "")

    def check_available(self, device):
        super().check_available(device)
        if self.config["dropout"] > 0:
            raise TechniqueUnavailable(
                f"technique {self.name!r} at dropout={self.config['dropout']}: its dropout masks are not the "
                "reference's, so its output cannot be checked; measure it at dropout=0")
        require_version(*self._dist)

    def describe(self, problem, mode="train"):
        return {"path": self.summary(), "peer_version": f"{self._dist[0]}=={self._dist[1]}"}


class TorchtuneChunkedLoss(_TransformerPeer, name="torchtune_chunked_loss"):
    """torchtune's ``CEWithChunkedOutputLoss`` (``num_output_chunks=chunks``) on memlab's model: the mean loss."""

    accumulation_note = (
        "its saving is the full logits it does not keep, and it keeps each chunk's float32 logits and their "
        "gradient as temporaries instead; once .grad exists the plain step's peak moves to where those "
        "temporaries are live, and at a small vocabulary they outweigh the saving "
        "(docs/evidence/accumulation.md)")

    params = {"chunks": Param(8, low=1, high=1 << 20, doc="torchtune's num_output_chunks (token slices per sequence)")}
    check_params = {"chunks": 5}  # does not divide the check's seq 12
    #: torchtune computes each chunk's cross-entropy in float32 (``logits.float()``) whatever the model's
    #: dtype, so in the float64 check it agrees to float32's precision (measured: 6.5e-8 relative)
    tolerances = {"float64": (1e-6, 1e-6)}
    _dist = TORCHTUNE

    def check_available(self, device):
        super().check_available(device)
        torchtune_loss_class()

    def build(self, device, dtype, seed=0):
        problem = super().build(device, dtype, seed)
        problem.extra["loss_fn"] = torchtune_loss_class()(num_output_chunks=self.config["chunks"])
        # torchtune returns the mean loss: a scalar output, so a scalar upstream gradient
        return Problem(model=problem.model, inputs=problem.inputs, extra=problem.extra,
                       grad_output=torch.ones((), device=device, dtype=dtype))

    def forward(self, problem):
        model, tokens = problem.model, problem.inputs["tokens"]
        h = model.features(tokens)  # [B, T, D]
        logits = [model.head(hc) for hc in h.chunk(self.config["chunks"], dim=1)]  # chunks x [B, T/c, V]
        return problem.extra["loss_fn"](logits, problem.inputs["targets"])

    def reference(self, problem):
        return problem.model(problem.inputs["tokens"], problem.inputs["targets"], EAGER).mean()

    def describe(self, problem, mode="train"):
        c = self.config
        return {**super().describe(problem, mode), "chunks": c["chunks"],
                "logits_bytes": c["batch"] * c["seq"] * c["vocab"] * problem.model.head.weight.element_size(),
                "output": "mean loss (scalar), upstream gradient 1"}


class CutCrossEntropy(_TransformerPeer, name="cut_cross_entropy"):
    """Apple's cut cross-entropy (``linear_cross_entropy``, ``impl="cce"``) as memlab's model's loss."""

    _dist = CUT_CROSS_ENTROPY
    #: device types it is known to refuse, with why: a sweep's summary counts such a skip as expected
    #: (NOTE [ expected non-ok rows ] in memlab.sweep.summary)
    known_unavailable = {"cpu": "cut-cross-entropy's CCE kernel is Triton, CUDA only (and its CPU path "
                                "materialises the full logits, which is not the algorithm)"}

    def check_available(self, device):
        super().check_available(device)
        cut_cross_entropy_function()
        if device.type != "cuda":
            raise TechniqueUnavailable(
                "cut-cross-entropy's CCE kernel is Triton, CUDA only; its CPU path (impl='torch_compile') "
                "materialises the full [B*T, V] logits, which is not the algorithm: measure it on cuda")

    def forward(self, problem):
        lce = cut_cross_entropy_function()

        def loss(h, weight, targets):
            return lce(h, weight, targets, reduction="none", impl="cce")

        return problem.model(problem.inputs["tokens"], problem.inputs["targets"], Path(loss=loss))


class GPT2HF(_TransformerPeer, name="gpt2_hf"):
    """Hugging Face ``GPT2LMHeadModel`` from a config of the workload's sizes (eager attention, untied head)."""

    accumulation_note = (
        "a peer, above memlab's eager block with or without micro-batches: Hugging Face's GPT-2 block saves "
        "more for backward than memlab's eager attention block of the same sizes (docs/evidence/accumulation.md)")

    _dist = TRANSFORMERS
    #: whether :meth:`build` turns on Hugging Face's own activation checkpointing
    hf_checkpointing = False

    def build(self, device, dtype, seed=0):
        from transformers import GPT2Config, GPT2LMHeadModel  # deferred: optional dependency

        c = self.config
        gen = torch.Generator().manual_seed(seed)
        inputs, grad_out = self.problem_spec.inputs(device, dtype, gen)
        cfg = GPT2Config(n_layer=c["layers"], n_embd=c["hidden"], n_head=c["heads"], vocab_size=c["vocab"],
                         n_positions=c["seq"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                         tie_word_embeddings=False, attn_implementation="eager")
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=device.type):
            torch.manual_seed(seed)  # GPT-2's own initialisation, seeded
            model = GPT2LMHeadModel(cfg).to(device=device, dtype=dtype)
        model.train()
        if self.hf_checkpointing:
            _checkpointing(model, True)
        return Problem(model=model, inputs=inputs, grad_output=grad_out)

    def forward(self, problem):
        tokens, targets = problem.inputs["tokens"], problem.inputs["targets"]
        logits = problem.model(input_ids=tokens).logits  # [B, T, V]
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(tokens.shape)

    def reference(self, problem):
        _checkpointing(problem.model, False)
        try:
            return GPT2HF.forward(self, problem)
        finally:
            _checkpointing(problem.model, self.hf_checkpointing)

    def describe(self, problem, mode="train"):
        m = problem.model
        return {**super().describe(problem, mode), "hf_checkpointing": self.hf_checkpointing,
                "attn_implementation": m.config._attn_implementation,
                "parameters": sum(p.numel() for p in m.parameters())}


class GPT2HFCheckpointing(GPT2HF, name="gpt2_hf_checkpointing"):
    """``gpt2_hf`` with Hugging Face's ``gradient_checkpointing_enable`` (``use_reentrant=False``)."""

    twin = "gpt2_hf"
    hf_checkpointing = True


def _checkpointing(model, on: bool) -> None:
    """Turn Hugging Face's activation checkpointing on (``use_reentrant=False``) or off; transformers 5
    calls it ``activation_checkpointing_*`` and keeps ``gradient_checkpointing_*`` beside it."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5 (the old names warn)
        if on:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.activation_checkpointing_disable()
    elif on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()

