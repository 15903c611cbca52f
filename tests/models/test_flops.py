"""forward_flops: the dense and convolutional layers' multiply-adds, worked out by hand, without torch._dynamo."""

import subprocess
import sys

import torch
from torch import nn

from fedcli.models.flops import forward_flops


def test_dense_and_convolutional_layers_by_hand():
    # Linear 3 -> 4 on 5 samples: 2 * 5 * 4 * 3 = 120; Conv2d 2 -> 6, 3x3, groups 2, on 1 x 2 x 5 x 5 without padding:
    # output 1 x 6 x 3 x 3 = 54 elements, each 2 * (2 / 2) * 9 = 18 -> 972
    assert forward_flops(nn.Linear(3, 4), torch.zeros(5, 3)) == 120.0
    assert forward_flops(nn.Conv2d(2, 6, 3, groups=2), torch.zeros(1, 2, 5, 5)) == 972.0
    model = nn.Sequential(nn.Conv2d(2, 6, 3, groups=2), nn.ReLU(), nn.Flatten(), nn.Linear(54, 4))
    assert forward_flops(model, torch.zeros(1, 2, 5, 5)) == 972.0 + 2 * 4 * 54


def test_a_model_without_such_layers_counts_twice_its_parameters():
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(4, 3))

        def forward(self, x):
            return torch.nn.functional.linear(x, self.w)

    assert forward_flops(Functional(), torch.zeros(2, 3)) == 24.0


def test_counting_imports_no_compiler():
    code = (
        "import sys, torch; from fedcli.models.flops import forward_flops; "
        "forward_flops(torch.nn.Linear(3, 4), torch.zeros(1, 3)); print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
