"""FedCOM: with server learning rate 1 it is FedPAQ; the server learning rate worked out by hand (digits + a small
MLP, seconds)."""

import torch

from baselines_kit import assert_differs, data, run
from fedcli.config import TrainConfig
from fedcli.fl.parts_servers import ServerLR
from simkit import assert_same_run


def test_fedcom_server_lr1_equals_fedpaq(data):
    fedpaq = run(data, algo="fedpaq")
    assert_same_run(run(data, algo="fedcom", server_lr=1.0), fedpaq)
    assert_differs(run(data, algo="fedcom", server_lr=2.0), fedpaq)


def test_server_learning_rate():
    prev, avg = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 0.0])
    assert torch.equal(ServerLR(TrainConfig(server_lr=0.5)).update("w", prev, avg), torch.tensor([2.0, -1.0]))
    assert torch.equal(ServerLR(TrainConfig(server_lr=2.0)).update("w", prev, avg), torch.tensor([5.0, 2.0]))
    assert ServerLR(TrainConfig(server_lr=1.0)).update("w", prev, avg) is avg
