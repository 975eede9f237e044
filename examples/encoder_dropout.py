"""A small transformer encoder trained as people train it: dropout on, two inputs, a dict output.

    memlab measure --model examples/encoder_dropout.py --param batch=4
    memlab measure checkpoint_blocks --model examples/encoder_dropout.py --param batch=4
    memlab check --model examples/encoder_dropout.py

``batch(size)`` returns ``{"tokens": [B, T] int64, "mask": [B, T] bool, "labels": [B] int64}``; memlab
calls ``model(**batch)``, so ``forward`` takes ``tokens``, ``mask`` and ``labels`` and returns a dict
whose ``"loss"`` is the step's loss (as a Hugging Face model does).  Dropout (``DROPOUT``, 0.1 as in
Hugging Face's configs) stays on: memlab measures the bytes it saves (a mask per dropout) and checks
every step with the technique and the reference drawing the same random stream.  The repeated blocks
are ``layers`` (an ``nn.ModuleList`` of ``Layer``): ``checkpoint_blocks`` finds them without ``--blocks``.
"""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQ, CLASSES, DROPOUT = 128, 32, 4, 3, 16, 4, 0.1


class Layer(nn.Module):
    """Post-norm encoder layer, padding masked: [B, T, C], [B, T] -> [B, T, C]."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(4 * width, width))
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        attended, _ = self.attn(x, x, x, key_padding_mask=~mask, need_weights=False)
        x = self.norm1(x + self.drop(attended))
        return self.norm2(x + self.drop(self.mlp(x)))


class Encoder(nn.Module):
    def __init__(self, vocab=VOCAB, width=WIDTH, heads=HEADS, layers=LAYERS, seq=SEQ, classes=CLASSES,
                 dropout=DROPOUT):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq, width)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(Layer(width, heads, dropout) for _ in range(layers))
        self.head = nn.Linear(width, classes)

    def forward(self, tokens, mask, labels=None):     # two inputs (and the labels) -> {"logits", "loss"}
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.tokens(tokens) + self.positions(positions))
        for layer in self.layers:
            x = layer(x, mask)
        weights = mask.unsqueeze(-1).to(x.dtype)
        logits = self.head((x * weights).sum(1) / weights.sum(1))           # mean over the real tokens
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def build():
    return Encoder()


def batch(size, seq=SEQ):
    """``size`` sequences of ``seq`` tokens, each with its last few padded, and a class each."""
    lengths = torch.randint(seq // 2, seq + 1, (size,))
    mask = torch.arange(seq) < lengths.unsqueeze(1)
    return {"tokens": torch.randint(0, VOCAB, (size, seq)), "mask": mask,
            "labels": torch.randint(0, CLASSES, (size,))}
