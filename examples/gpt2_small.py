"""GPT-2 small (12 layers, 768 wide, 12 heads, 124 M parameters), from examples/gpt2.py's config, as a memlab model file.

    memlab measure checkpoint_blocks --model examples/gpt2_small.py --param batch=2
    memlab advise --model examples/gpt2_small.py --vary batch --budget 24GiB --device cuda

The same model file as ``examples/gpt2.py`` (Hugging Face ``GPT2LMHeadModel`` built from a
``GPT2Config``, no download; dropout and the key/value cache off; its own LM loss) with ``CONFIG =
"small"``.  ``checkpoint_blocks`` finds ``transformer.h`` (12 ``GPT2Block``).  ``SEQ`` is 8 tokens
(gpt2.py's is 32) so that the advisor's checks at batch 32 and 80 run in minutes on 2 shared cores
(a step costs about 6 x 124 M FLOPs per token); ``--param seq=1024`` (or ``--vary batch,seq``) gives
GPT-2's full context.  Shapes: ``input_ids`` [B, T] (int64) -> logits [B, T, 50257].
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_memlab_example_gpt2", Path(__file__).with_name("gpt2.py"))
gpt2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt2)

#: tokens per sequence (``batch(size, seq=SEQ)``)
SEQ = 8


def build():
    return gpt2.GPT2LMHeadModel(gpt2.config("small"))


def batch(size, seq=SEQ):
    """``size`` sequences of ``seq`` token ids: {"input_ids", "labels"}, each [size, seq] int64."""
    return gpt2.batch(size, seq)
