"""GPT-2 from Hugging Face ``transformers``, built from a config (no download), as a memlab model file.

    memlab measure checkpoint_blocks --model examples/gpt2.py --param batch=2
    memlab advise --model examples/gpt2.py --vary batch --budget 24GiB --device cuda

``CONFIG`` picks the model: ``"small"`` (GPT-2 small: 12 layers, 768 wide, 12 heads, 124 M
parameters) or ``"tiny"`` (2 layers, 64 wide, 4 heads, the full 50257-token vocabulary: the
configuration the tests and the README's numbers use, cheap on 2 cores).  Edit the constant, or
copy the file, to change it.  Dropout is off (``*_pdrop=0``) so a step is deterministic and the
float64 reference check compares like with like.  The loss is the model's own LM loss
(``GPT2LMHeadModel(input_ids, labels=input_ids).loss``, shifted next-token cross-entropy).

The repeated blocks are ``transformer.h`` (an ``nn.ModuleList`` of ``GPT2Block``): memlab's
``checkpoint_blocks`` finds them without ``--blocks``.  Shapes: ``input_ids`` [B, T] (int64) ->
logits [B, T, 50257].
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

#: "small" (GPT-2 small, 124 M parameters) or "tiny" (2 layers, 64 wide)
CONFIG = "tiny"
#: tokens per sequence (``batch(size, seq=SEQ)``; a sweepable size)
SEQ = 32
CONFIGS = {
    "small": dict(n_layer=12, n_embd=768, n_head=12),
    "tiny": dict(n_layer=2, n_embd=64, n_head=4),
}
_NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
#: no key/value cache: a training step needs none, and a block recomputed in backward
#: (checkpointing) would append to it a second time
_TRAINING = dict(use_cache=False, loss_type="ForCausalLM")


def config(name=None):
    """The ``GPT2Config`` of ``name`` (default ``CONFIG``): 50257 tokens, 1024 positions, no dropout."""
    name = name or CONFIG
    if name not in CONFIGS:
        raise ValueError(f"GPT-2 config {name!r} is not one of {sorted(CONFIGS)}")
    return GPT2Config(**CONFIGS[name], **_NO_DROPOUT, **_TRAINING, attn_implementation="eager")


def build():
    return GPT2LMHeadModel(config())


def batch(size, seq=SEQ):
    """``size`` sequences of ``seq`` token ids: {"input_ids", "labels"}, each [size, seq] int64."""
    ids = torch.randint(0, 50257, (size, seq))
    return {"input_ids": ids, "labels": ids}
