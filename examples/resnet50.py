"""ResNet-50 in plain torch (He et al. 2016, torchvision's layout), as a memlab model file.

    memlab measure checkpoint_blocks --model examples/resnet50.py --param batch=2
    memlab advise --model examples/resnet50.py --vary batch --budget 24GiB --device cuda

Written out here rather than imported from torchvision or timm: torchvision's compiled ops do not
register with memlab's pinned CPU torch, and timm needs torchvision.  The layers and parameter count
(25.6 M with 1000 classes) are torchvision's ``resnet50()``: a 7x7 stem, four stages of
``Bottleneck`` blocks ([3, 4, 6, 3]; 1x1 -> 3x3 -> 1x1 convolutions, expansion 4, stride on the
3x3), global average pooling and a linear classifier.  The stages are ``layer1`` .. ``layer4``
(``nn.Sequential`` of ``Bottleneck``): memlab's ``checkpoint_blocks`` finds them without
``--blocks``.

Shapes: images [B, 3, IMAGE, IMAGE] -> logits [B, 1000]; the loss is cross-entropy against random
class labels.  ``IMAGE`` is 64 (not 224) so a step runs in seconds on 2 cores; ``batch(size,
image=224)`` gives the ImageNet size (an integer keyword: sweepable, but advise varies ``batch``).
"""
import torch
import torch.nn.functional as F
from torch import nn

#: image side in pixels (ImageNet: 224)
IMAGE = 64
CLASSES = 1000
STAGES = (3, 4, 6, 3)


class Bottleneck(nn.Module):
    """1x1 (width) -> 3x3 (width, stride) -> 1x1 (4 x width), each with batch norm, plus the shortcut."""

    expansion = 4

    def __init__(self, inplanes, width, stride=1):
        super().__init__()
        out = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):                      # [B, inplanes, H, W] -> [B, 4 * width, H / stride, W / stride]
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    def __init__(self, classes=CLASSES, stages=STAGES):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes, layers = 64, []
        for i, (count, width) in enumerate(zip(stages, (64, 128, 256, 512))):
            blocks = [Bottleneck(inplanes, width, stride=1 if i == 0 else 2)]
            inplanes = width * Bottleneck.expansion
            blocks += [Bottleneck(inplanes, width) for _ in range(count - 1)]
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):                      # [B, 3, H, W] -> [B, classes]
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build():
    return ResNet50()


def batch(size, image=IMAGE):
    """``size`` random images [size, 3, image, image] and class labels [size] (int64)."""
    return torch.randn(size, 3, image, image), torch.randint(0, CLASSES, (size,))


def loss(output, batch):
    return F.cross_entropy(output, batch[1])
