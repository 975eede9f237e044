"""A small residual CNN in plain torch, as a memlab model file.

    memlab measure --model examples/small_cnn.py --param batch=8
    memlab measure checkpoint_sqrt --model examples/small_cnn.py --param batch=8

Three stages (``stage1`` .. ``stage3``, each an ``nn.Sequential`` of ``DEPTH`` x ``ResBlock``) with a
strided convolution between them: memlab's ``checkpoint_blocks`` finds all three stages without
``--blocks``.  GroupNorm, not BatchNorm: its output depends on no running statistics, so a
checkpointed block recomputes exactly what it computed.  Images [B, 3, SIZE, SIZE] -> logits
[B, CLASSES]; the loss is cross-entropy.
"""
import torch
import torch.nn.functional as F
from torch import nn

CLASSES, SIZE, WIDTH, DEPTH = 10, 32, 16, 3


class ResBlock(nn.Module):
    """x + conv(relu(norm(conv(relu(norm(x)))))): [B, C, S, S] -> [B, C, S, S]."""

    def __init__(self, channels):
        super().__init__()
        self.body = nn.Sequential(nn.GroupNorm(4, channels), nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1),
                                  nn.GroupNorm(4, channels), nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.body(x)


def _stage(channels):
    return nn.Sequential(*(ResBlock(channels) for _ in range(DEPTH)))


class SmallCNN(nn.Module):
    def __init__(self, width=WIDTH, classes=CLASSES):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.stage1, self.down1 = _stage(width), nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.stage2, self.down2 = _stage(2 * width), nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1)
        self.stage3 = _stage(4 * width)
        self.head = nn.Linear(4 * width, classes)

    def forward(self, images):                                  # [B, 3, S, S] -> [B, classes]
        x = self.stage1(self.stem(images))
        x = self.stage3(self.down2(self.stage2(self.down1(x))))
        return self.head(x.mean(dim=(2, 3)))


def build():
    return SmallCNN()


def batch(size):
    """``size`` images and their labels: (images [size, 3, SIZE, SIZE], labels [size])."""
    return torch.randn(size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (size,))


def loss(output, batch):
    return F.cross_entropy(output, batch[1])
