"""Per-FedAvg's one-step adaptation on a BatchNorm model (ResNet20 on CIFAR-10 pickles): torch.func refused the
BatchNorm buffers' in-place update when they were captured by the loss instead of passed to it (found by
make paper-check on FedALA Table 2's Per-FedAvg ResNet18 Tiny-ImageNet entry)."""

import math

from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.fl.engine import Simulation
from paperdata import write_cifar10


def test_perfedavg_adapts_a_batchnorm_model(tmp_path):
    write_cifar10(tmp_path, n_train=40, n_test=10)
    cfg = TrainConfig(
        algo="perfedavg",
        dataset="cifar10",
        data_dir=str(tmp_path),
        model="resnet20",
        clients=2,
        active_ratio=1.0,
        partition="iid",
        client_test_fraction=0.25,
        rounds=1,
        local_epochs=0.2,
        batch_size=8,
        eval_every=1,
        device="cpu",
        threads=1,
    ).validate()
    summary = Simulation(cfg).setup(*load_data_and_partition(cfg)).run()
    assert math.isfinite(summary.history[0]["personal_acc"]) and math.isfinite(summary.history[0]["test_loss"])
