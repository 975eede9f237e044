"""examples/gpt2.py with Hugging Face's own activation checkpointing turned on, as a memlab model file.

    memlab measure --model examples/gpt2_hf_checkpointing.py --param batch=4

``build()`` calls ``activation_checkpointing_enable`` (the new name of
``gradient_checkpointing_enable`` in transformers 5) with ``use_reentrant=False``, the setting
memlab's ``checkpoint_blocks`` uses; its ``plain`` technique is then HF's checkpointing of every
``GPT2Block``, to compare with ``memlab measure checkpoint_blocks --model examples/gpt2.py``.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_memlab_example_gpt2", Path(__file__).with_name("gpt2.py"))
gpt2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt2)

SEQ = gpt2.SEQ


def build():
    model = gpt2.build()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def batch(size, seq=SEQ):
    return gpt2.batch(size, seq)
