"""CIFAR through the engine: the loaders normalize per channel, so the augmentation's padding is one value per
channel (-mean / std: a black pixel once normalized). Until this test, every CIFAR run crashed at its first local
step (``float()`` of the engine's per-channel list)."""

import math

import pytest
import torch

from fedcli.config import TrainConfig
from fedcli.data.augment import cifar_augment
from fedcli.data.setup import load_data_and_partition
from fedcli.fl.engine import Simulation
from paperdata import write_cifar10, write_cifar100


@pytest.mark.parametrize(
    "dataset,algo",
    [
        ("cifar10", "fedavg"),  # the engine's local steps (engine.local_phase)
        ("cifar100", "ditto"),
    ],
)  # and personal.local_sgd (Ditto's personal steps)
def test_cifar_trains_with_black_padding_per_channel(tmp_path, dataset, algo):
    (write_cifar10 if dataset == "cifar10" else write_cifar100)(tmp_path, n_train=40, n_test=10)
    cfg = TrainConfig(
        algo=algo,
        dataset=dataset,
        data_dir=str(tmp_path),
        model="cnn4",
        clients=2,
        active_ratio=1.0,
        partition="iid",
        client_test_fraction=0.25,
        rounds=1,
        local_epochs=1.0 if algo == "ditto" else 0.0,
        tau=2,
        batch_size=8,
        lr=0.01,
        eval_every=1,
        device="cpu",
        threads=1,
    ).validate()
    data, partition = load_data_and_partition(cfg)
    sim = Simulation(cfg).setup(data, partition)
    summary = sim.run()
    assert len(summary.history) == 1 and math.isfinite(summary.history[0]["train_loss"])
    assert math.isfinite(summary.history[0]["test_loss"])

    norm = data.source["normalization"]
    mean = torch.tensor(norm["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(norm["std"]).view(1, 3, 1, 1)
    assert len(norm["mean"]) == 3 and len(set(norm["mean"])) == 3  # per channel, as the CIFAR loader builds it
    x = sim.train_x[:2]
    corner = cifar_augment(x, torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, dtype=torch.bool), fill=sim.pad_fill)
    pixels = corner * std + mean  # back to [0, 1] pixel values
    assert torch.allclose(pixels[:, :, :4, :], torch.zeros(2, 3, 4, 32), atol=1e-6)  # padded rows: black
    assert torch.allclose(pixels[:, :, :, :4], torch.zeros(2, 3, 32, 4), atol=1e-6)  # padded columns: black
    assert torch.equal(corner[:, :, 4:, 4:], x[:, :, :28, :28])


def test_fill_as_a_list_and_a_wrong_length():
    x = torch.zeros(1, 3, 4, 4)
    out = cifar_augment(x, torch.tensor([[0, 4]]), torch.tensor([False]), fill=[1.0, 2.0, 3.0])
    assert torch.equal(out[0, :, :4, :], torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1).expand(3, 4, 4))
    with pytest.raises(ValueError, match="2 values for 3 channels"):
        cifar_augment(x, torch.tensor([[0, 4]]), torch.tensor([False]), fill=[1.0, 2.0])
