"""ResNet-18 with the CIFAR stem (``--model resnet18-cifar``): its parameter count worked out by hand, its stem."""

import torch
from torch import nn

from fedcli.models import build_model


def conv(cin, cout, k):
    return cin * cout * k * k  # no bias: every convolution of ResNet-18 is followed by BatchNorm


def bn(c):
    return 2 * c  # weight and bias


def basic_block(cin, cout, down):
    """Two 3x3 convolutions with BatchNorm; a 1x1 convolution + BatchNorm shortcut when the shape changes."""
    return (
        conv(cin, cout, 3)
        + bn(cout)
        + conv(cout, cout, 3)
        + bn(cout)
        + ((conv(cin, cout, 1) + bn(cout)) if down else 0)
    )


def stage(cin, cout, down):
    return basic_block(cin, cout, down) + basic_block(cout, cout, False)


def test_parameter_count_by_hand():
    stem = conv(3, 64, 3) + bn(64)  # 3x3 stride 1: 1,728 + 128
    body = stage(64, 64, False) + stage(64, 128, True) + stage(128, 256, True) + stage(256, 512, True)
    head = 512 * 10 + 10
    by_hand = stem + body + head
    assert (
        by_hand == 11_173_962
    )  # the figure quoted for the CIFAR ResNet-18 (and 11,689,512 - 9,408 + 1,728 - 513,000 + 5,130)
    model = build_model("resnet18-cifar", (3, 32, 32), 10)
    assert sum(p.numel() for p in model.parameters()) == by_hand
    imagenet = build_model("resnet18", (3, 32, 32), 10)  # the ImageNet stem: 7x7 stride 2 + max-pool
    assert sum(p.numel() for p in imagenet.parameters()) == by_hand - conv(3, 64, 3) + conv(3, 64, 7)


def test_cifar_stem_keeps_the_resolution():
    model = build_model("resnet18-cifar", (3, 32, 32), 10)
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1) and model.conv1.padding == (1, 1)
    assert isinstance(model.maxpool, nn.Identity)
    seen = {}
    model.layer4.register_forward_hook(lambda m, i, o: seen.update(layer4=o.shape))  # returns None: output unchanged
    model.eval()
    with torch.no_grad():
        out = model(torch.zeros(2, 3, 32, 32))
    assert out.shape == (2, 10) and seen["layer4"][-2:] == (4, 4)  # 32 -> 32, 16, 8, 4 (ImageNet stem: 1x1)
    grey = build_model("resnet18-cifar", (1, 28, 28), 10)
    assert grey.conv1.in_channels == 1 and sum(p.numel() for p in grey.parameters()) == 11_173_962 - conv(2, 64, 3)
