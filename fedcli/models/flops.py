"""Forward FLOPs of a model on one batch, counted from its dense and convolutional layers.

A multiply-add counts 2: ``nn.Linear`` 2 x in_features per output element, ``nn.ConvNd`` 2 x (in_channels / groups)
x kernel size per output element -- what ``torch.utils.flop_counter.FlopCounterMode`` counts for the same matrix
products and convolutions. Counted with forward hooks instead: entering ``FlopCounterMode`` imports
``torch._dynamo`` (the compiler stack, about 1-2 s of a 2-core machine's start-up), and ``--workers 0`` needs only
a rough estimate (``fedcli.runner.estimate_work``). Layers called as functions (``F.linear`` in a custom
model) are not seen; a model with no such module counts 2 x its parameters.
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: FLOPs of a training step per forward FLOP: forward + backward, the backward costing twice the forward (Kaplan et
#: al. 2020, "Scaling Laws for Neural Language Models", Sec. 2.1); the system model's step time and --workers auto's
#: estimate both count a step so
TRAIN_FLOPS_PER_FORWARD = 3.0


def forward_flops(model: nn.Module, x: torch.Tensor) -> float:
    """FLOPs of ``model(x)`` (no gradient) in its dense and convolutional layers."""
    total = [0.0]

    def linear(mod, _inp, out):
        total[0] += 2.0 * out.numel() * mod.in_features

    def conv(mod, _inp, out):
        total[0] += 2.0 * out.numel() * (mod.in_channels // mod.groups) * math.prod(mod.kernel_size)

    hooks = []
    for m in model.modules():
        if isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(linear))
        elif isinstance(m, nn.modules.conv._ConvNd):
            hooks.append(m.register_forward_hook(conv))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return total[0] if total[0] > 0 else 2.0 * sum(p.numel() for p in model.parameters())
