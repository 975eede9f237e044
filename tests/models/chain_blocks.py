"""Test model file: a chain of N residual tanh blocks, small enough to measure in a second.

Each block computes ``h + tanh(h @ W.T + b)`` on h [B, D].  What plain autograd keeps per block,
beyond its input: the tanh output (saved by tanh) and the block output (saved by the next linear):
two [B, D] tensors.  Checkpointed, a block keeps its input only (the previous block's output).
"""
import torch
from torch import nn

D, N = 32, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(D, D)

    def forward(self, h):
        return h + torch.tanh(self.linear(h))


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(N))

    def forward(self, x):                      # [B, D] -> [B, D]
        for block in self.blocks:
            x = block(x)
        return x


def build():
    return Chain()


def batch(size):
    return torch.randn(size, D)
