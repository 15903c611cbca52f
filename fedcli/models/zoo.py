"""The model zoo: the architectures used by the FedLAMA, FedALA and Fed-LAMB experiments.

Every model maps a batch ``[B, *input_shape]`` to logits ``[B, num_classes]`` (no softmax).
All of them run under ``torch.func.functional_call`` and ``torch.func.vmap(torch.func.grad(...))``
with stacked parameters *and* stacked buffers (BatchNorm in train mode updates the batched
running statistics in place): no in-place ops on parameters, no in-place activations,
no ``.item()`` or data-dependent Python control flow in ``forward``, and no dropout call at all
when the dropout probability is 0 (so ``vmap`` needs no ``randomness`` argument for those models).

Builders take ``(input_shape, num_classes, **options)``, use the options that apply to them and
ignore the rest, and raise :class:`ConfigError` for an input shape or option they cannot take.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedcli.errors import ConfigError

# ----------------------------------------------------------------------------- option helpers


def _image_shape(model: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ConfigError(f"model {model!r} needs image inputs of shape [C, H, W], got input shape {list(input_shape)}")
    c, h, w = input_shape
    return c, h, w


def _int_option(model: str, options: dict[str, Any], key: str, default: int, minimum: int = 1) -> int:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"model {model!r}: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def _dropout_option(model: str, options: dict[str, Any], default: float) -> float:
    value = options.get("dropout")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"model {model!r}: dropout must be a number in [0, 1), got {value!r}")
    return float(value)


def _conv_pool_size(size: int, kernel: int, padding: int, pool: int) -> int:
    """Spatial size after a stride-1 conv and a floor max-pool; 0 when the input is too small."""
    after_conv = size + 2 * padding - kernel + 1
    if after_conv < 1:
        return 0
    return after_conv // pool


def _too_small(model: str, input_shape: tuple[int, ...], need: str) -> ConfigError:
    return ConfigError(f"model {model!r} cannot take input shape {list(input_shape)}: {need}")


# ----------------------------------------------------------------------------- ResNet-20 (CIFAR)


class _BasicBlock(nn.Module):
    """Post-activation basic block of He et al. 2016: conv-BN-ReLU-conv-BN, add shortcut, ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            # Option B: 1x1 projection + BN when the shape changes.
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """CIFAR ResNet of He et al. 2016 (Sec. 4.2): depth 6n+2, three stages of n basic blocks with
    16/32/64 channels (stride 2 at the start of stages 2 and 3), 3x3 convs without bias, BatchNorm,
    global average pooling and one linear layer.

    Shortcuts use **option B**: identity where the shape is kept, a 1x1 conv + BN projection where
    it changes (the paper's CIFAR nets use option A, zero-padding identity; option B adds
    2 x (conv 1x1 + BN) = 2,752 parameters to ResNet-20: 272,474 instead of 269,722 for 10 classes).
    """

    def __init__(self, in_channels: int, num_classes: int, blocks_per_stage: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for b in range(blocks_per_stage):
                blocks.append(_BasicBlock(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean(dim=(-2, -1)))


def resnet20(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """ResNet-20 for CIFAR (He et al. 2016), option-B (1x1 conv + BN) projection shortcuts.

    272,474 parameters for 3x32x32 inputs and 10 classes. Any [C, H, W] input works (global pooling).
    """
    c, _, _ = _image_shape("resnet20", input_shape)
    return CifarResNet(c, num_classes, blocks_per_stage=3)


# ----------------------------------------------------------------------------- Wide-ResNet


class _WideBlock(nn.Module):
    """Pre-activation block of Zagoruyko & Komodakis 2016: BN-ReLU-conv3x3-BN-ReLU-dropout-conv3x3.

    Where the shape changes, the shortcut is a 1x1 conv applied to the pre-activated input.
    """

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut = (
            nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False) if stride != 1 or in_planes != planes else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = F.relu(self.bn1(x))
        y = self.conv1(o)
        y = self.conv2(self.dropout(F.relu(self.bn2(y))))
        return y + (x if self.shortcut is None else self.shortcut(o))


class WideResNet(nn.Module):
    """WRN-d-k of Zagoruyko & Komodakis 2016: conv3x3 16, three stages of n = (d-4)/6 pre-activation
    blocks with 16k/32k/64k channels (stride 2 at stages 2 and 3), BN-ReLU, global average pool, linear.
    """

    def __init__(self, in_channels: int, num_classes: int, depth: int, width: int, dropout: float) -> None:
        super().__init__()
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        stages = []
        in_planes = 16
        for planes, stride in ((16 * width, 1), (32 * width, 2), (64 * width, 2)):
            blocks = []
            for b in range(n):
                blocks.append(_WideBlock(in_planes, planes, stride if b == 0 else 1, dropout))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.block1, self.block2, self.block3 = stages
        self.bn = nn.BatchNorm2d(in_planes)
        self.fc = nn.Linear(in_planes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.block3(self.block2(self.block1(x)))
        x = F.relu(self.bn(x))
        return self.fc(x.mean(dim=(-2, -1)))


def wrn(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """Wide-ResNet; options ``wrn_depth`` (28, must be 6n+4), ``wrn_width`` (10), ``dropout`` (0).

    WRN-28-10 for 3x32x32 inputs has 36,479,194 parameters with 10 classes, 36,536,884 with 100.
    """
    c, _, _ = _image_shape("wrn", input_shape)
    depth = _int_option("wrn", options, "wrn_depth", 28)
    if depth < 10 or (depth - 4) % 6 != 0:
        raise ConfigError(f"model 'wrn': wrn_depth must be 6n+4 with n >= 1 (10, 16, 22, 28, 40, ...), got {depth}")
    width = _int_option("wrn", options, "wrn_width", 10)
    return WideResNet(c, num_classes, depth, width, _dropout_option("wrn", options, 0.0))


# ----------------------------------------------------------------------------- LEAF FEMNIST CNN


class FemnistCNN(nn.Module):
    """LEAF CNN of Caldas et al. 2018 for 28x28 FEMNIST: conv5x5 32 (same) - ReLU - maxpool 2,
    conv5x5 64 (same) - ReLU - maxpool 2, fc 2048 - ReLU, fc num_classes. 6,603,710 parameters for 62 classes.
    """

    def __init__(self, in_channels: int, num_classes: int, height: int, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * (height // 4) * (width // 4), 2048)
        self.fc2 = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def femnist_cnn(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """LEAF FEMNIST CNN; defined for 28x28 images only (any channel count)."""
    c, h, w = _image_shape("femnist_cnn", input_shape)
    if (h, w) != (28, 28):
        raise _too_small("femnist_cnn", input_shape, "the LEAF FEMNIST CNN is defined for 28x28 images")
    return FemnistCNN(c, num_classes, h, w)


# ----------------------------------------------------------------------------- McMahan CNN (FedALA)


class FedAvgCNN(nn.Module):
    """The 2-conv 2-fc CNN of McMahan et al. 2017 as in PFLlib's ``FedAvgCNN`` (used by FedALA):
    conv5x5 32 (valid) - ReLU - maxpool 2, conv5x5 64 (valid) - ReLU - maxpool 2, flatten,
    fc 512 - ReLU, fc num_classes. The flatten size follows the input (1024 for 1x28x28, 1600 for 3x32x32).
    """

    def __init__(self, in_channels: int, num_classes: int, flat: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(flat, 512)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc(x)


def cnn4(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """McMahan et al. CNN as used by FedALA; 582,026 parameters for 1x28x28 and 10 classes."""
    c, h, w = _image_shape("cnn4", input_shape)
    h2 = _conv_pool_size(_conv_pool_size(h, 5, 0, 2), 5, 0, 2)
    w2 = _conv_pool_size(_conv_pool_size(w, 5, 0, 2), 5, 0, 2)
    if h2 < 1 or w2 < 1:
        raise _too_small("cnn4", input_shape, "two 5x5 valid convs with 2x2 pooling need images of at least 16x16")
    return FedAvgCNN(c, num_classes, 64 * h2 * w2)


# ----------------------------------------------------------------------------- MLP (McMahan 2NN)


class MLP(nn.Module):
    """Flatten, then Linear-ReLU(-dropout) per hidden width, then a linear output layer."""

    def __init__(self, in_features: int, num_classes: int, hidden: Sequence[int], dropout: float) -> None:
        super().__init__()
        widths = [in_features, *hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.out = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.hidden:
            x = self.dropout(F.relu(layer(x)))
        return self.out(x)


def mlp(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """MLP; ``mlp_hidden`` (default (200, 200): McMahan's 2NN; () gives multinomial logistic
    regression) and ``dropout`` (0). Takes images [C, H, W] and vectors [D] alike.
    """
    hidden = options.get("mlp_hidden")
    if hidden is None:
        hidden = (200, 200)
    elif isinstance(hidden, int) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if not isinstance(hidden, (tuple, list)) or any(
        isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in hidden
    ):
        raise ConfigError(f"model 'mlp': mlp_hidden must be a list of positive integers, got {hidden!r}")
    return MLP(math.prod(input_shape), num_classes, tuple(hidden), _dropout_option("mlp", options, 0.0))


# ----------------------------------------------------------------------------- ResNet-18 (torchvision)


def resnet18(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """torchvision ResNet-18 (ImageNet stem), random init; conv1 replaced when C != 3; ReLUs made
    out-of-place so that the model runs under ``torch.func`` transforms.
    """
    c, _, _ = _image_shape("resnet18", input_shape)
    import torchvision  # lazy: only this model needs it

    model = torchvision.models.resnet18(weights=None, num_classes=num_classes)
    if c != 3:
        model.conv1 = nn.Conv2d(c, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    for m in model.modules():
        if isinstance(m, nn.ReLU):
            m.inplace = False
    return model


def resnet18_cifar(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """ResNet-18 with the CIFAR stem that 32x32 work uses (He et al. 2016 Sec. 4.2 applied to ResNet-18, as in the
    common CIFAR ResNet-18 code): the torchvision ResNet-18 with its first convolution a 3x3 stride-1 padding-1
    convolution (64 channels, no bias) and no max-pool, so the 4 stages see 32, 16, 8 and 4 pixels instead of
    8, 4, 2 and 1. 11,173,962 parameters for 10 classes (the ImageNet stem's 7x7 convolution has 9,408, this one
    1,728). Random init; ReLUs out-of-place (``torch.func``)."""
    c, _, _ = _image_shape("resnet18-cifar", input_shape)
    model = resnet18(input_shape, num_classes, **options)
    model.conv1 = nn.Conv2d(c, 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")  # torchvision's init of conv1
    model.maxpool = nn.Identity()
    return model


# ----------------------------------------------------------------------------- Fed-LAMB MNIST CNN


class LambCNN(nn.Module):
    """The classic PyTorch MNIST example CNN used by Fed-LAMB: conv5x5 10 - maxpool 2 - ReLU,
    conv5x5 20 - Dropout2d - maxpool 2 - ReLU, flatten (320 for 28x28), fc 50 - ReLU - dropout,
    fc num_classes. Returns logits (the example's log_softmax is left to the loss).
    """

    def __init__(self, in_channels: int, num_classes: int, flat: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        self.conv2_drop = nn.Dropout2d(dropout) if dropout > 0 else nn.Identity()
        self.fc1 = nn.Linear(flat, 50)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def lamb_cnn(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """Fed-LAMB MNIST CNN (21,840 parameters for 1x28x28 and 10 classes); ``dropout`` (0.5) sets
    both the Dropout2d after conv2 and the dropout after fc1.
    """
    c, h, w = _image_shape("lamb_cnn", input_shape)
    h2 = _conv_pool_size(_conv_pool_size(h, 5, 0, 2), 5, 0, 2)
    w2 = _conv_pool_size(_conv_pool_size(w, 5, 0, 2), 5, 0, 2)
    if h2 < 1 or w2 < 1:
        raise _too_small("lamb_cnn", input_shape, "two 5x5 valid convs with 2x2 pooling need images of at least 16x16")
    return LambCNN(c, num_classes, 20 * h2 * w2, _dropout_option("lamb_cnn", options, 0.5))


# ----------------------------------------------------------------------------- fastText (FedALA's AG News model)

FASTTEXT_VOCAB = 50_002  # fedcli.data.datasets.AGNEWS_VOCAB words + <pad> + <unk>
FASTTEXT_HIDDEN = 32  # FedALA's hidden_dim for AG News


class FastText(nn.Module):
    """fastText (Joulin et al. 2017) as in PFLlib's ``fastText`` (used by FedALA): Embedding(vocab, hidden,
    padding_idx=0), mean over the L token positions, Linear(hidden, hidden), Linear(hidden, num_classes).

    As in the reference the mean divides by L (the padded length): <pad> positions contribute zero vectors
    (masked here too, so the result does not depend on row 0 of the embedding staying zero). Returns logits
    (the reference's log_softmax is left to the loss).
    """

    def __init__(self, vocab_size: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.long()
        e = self.embedding(x) * (x != 0).unsqueeze(-1).to(self.fc1.weight.dtype)
        return self.fc(self.fc1(e.mean(1)))


def fasttext(input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """fastText for token-id inputs [L] (int64, 0 = <pad>); ``vocab_size`` (50,002: agnews' default vocabulary)
    and ``fasttext_hidden`` (32, as FedALA). Token ids must be below ``vocab_size``.
    """
    if len(input_shape) != 1:
        raise ConfigError(f"model 'fasttext' needs token-id inputs of shape [L], got input shape {list(input_shape)}")
    vocab = _int_option("fasttext", options, "vocab_size", FASTTEXT_VOCAB, minimum=2)
    hidden = _int_option("fasttext", options, "fasttext_hidden", FASTTEXT_HIDDEN)
    return FastText(vocab, hidden, num_classes)


#: the built-in models by the name ``--model`` takes (``fedcli.models.registry.MODELS`` starts from it)
BUILTIN = {
    "resnet20": resnet20,
    "wrn": wrn,
    "femnist_cnn": femnist_cnn,
    "cnn4": cnn4,
    "mlp": mlp,
    "resnet18": resnet18,
    "resnet18-cifar": resnet18_cifar,
    "lamb_cnn": lamb_cnn,
    "fasttext": fasttext,
}
