"""Your own model for ``fedcli train --model examples/models.py:TinyCNN`` (or ``--model examples.models:TinyCNN``).

fedcli calls ``TinyCNN(input_shape, num_classes)``: ``input_shape`` is one sample's shape, e.g. (1, 28, 28), and the
model maps a batch [B, *input_shape] to logits [B, num_classes]. Its four parameter tensors (conv weight and bias,
linear weight and bias) are the layers FedLAMA schedules and counts.
"""

import math

import torch
from torch import nn


class TinyCNN(nn.Module):
    """conv 5x5 (8 channels, stride 2) - ReLU - linear."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Conv2d(c, 8, 5, stride=2, padding=2)
        self.fc = nn.Linear(8 * math.ceil(h / 2) * math.ceil(w / 2), num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))
