"""A model whose rounds last a known wall time on any machine, for the tests that signal or kill a sweep's training
in the middle of a round (tests/sweep/test_reliability.py): a one-hidden-layer MLP (``--model pacedmodel.py:Paced``,
fedcli's own-model interface, docs/data.md) whose every training forward first sleeps ``FEDCLI_TEST_PACE_S`` seconds
(read from the environment at construction, 0 when unset). The training process started by the test gets the
variable; the in-process resume that follows does not, and runs at full speed. A round of sleep costs no CPU, unlike
a round made long by a large model, and does not shrink on a fast machine or stretch under load."""

import math
import os
import time

import torch


class Paced(torch.nn.Module):
    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(math.prod(input_shape), 16),
            torch.nn.ReLU(),
            torch.nn.Linear(16, num_classes),
        )
        self.pace = float(os.environ.get("FEDCLI_TEST_PACE_S", "0"))

    def forward(self, x):
        if self.pace and self.training:
            time.sleep(self.pace)
        return self.net(x)
