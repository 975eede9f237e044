"""A tiny GPT in plain torch, as a memlab model file.

    memlab measure --model examples/tiny_gpt.py --param batch=4
    memlab measure checkpoint_blocks --model examples/tiny_gpt.py --param batch=4

The repeated blocks are ``blocks`` (an ``nn.ModuleList`` of ``LAYERS`` x ``Block``): memlab's
``checkpoint_blocks`` finds them without ``--blocks``.  Shapes: tokens [B, T] (int64) -> logits
[B, T, VOCAB]; the loss is next-token cross-entropy.
"""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQ = 256, 64, 4, 4, 32


class Attention(nn.Module):
    """Causal multi-head self-attention: [B, T, C] -> [B, T, C]."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5      # [B, H, T, T]
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=VOCAB, width=WIDTH, heads=HEADS, layers=LAYERS, seq=SEQ):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):                                   # [B, T] -> [B, T, vocab]
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def build():
    return TinyGPT()


def batch(size, seq=SEQ):
    """``size`` sequences of ``seq`` tokens and their next tokens: (tokens, targets), each [size, seq]."""
    data = torch.randint(0, VOCAB, (size, seq + 1))
    return data[:, :-1], data[:, 1:]


def loss(output, batch):
    """Next-token cross-entropy: output [B, T, VOCAB], targets batch[1] [B, T]."""
    return F.cross_entropy(output.flatten(0, 1), batch[1].flatten())
