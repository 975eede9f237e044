"""The resnet family: CIFAR ResNets and RevNets, checkpointed or reversible."""
