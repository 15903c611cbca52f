"""--init-seed: runs of several --seed values that start from one initial model (Fed-LAMB: "three runs from the same
initialization")."""

import torch

from fedcli.config import TrainConfig
from fedcli.fl.engine import Simulation

BASE = dict(
    algo="fedavg",
    dataset="digits",
    model="mlp",
    mlp_hidden="32",
    clients=4,
    active_ratio=0.5,
    iterations=4,
    tau=2,
    batch_size=16,
    lr=0.1,
    device="cpu",
    threads=1,
)


def start(**kw) -> Simulation:
    return Simulation(TrainConfig(**{**BASE, **kw}).validate()).setup()


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_one_init_seed_one_initial_model_then_the_seeds_differ():
    a, b = start(seed=1, init_seed=7), start(seed=2, init_seed=7)
    assert same(a.global_params, b.global_params)  # the same initial model, bit for bit
    assert not same(start(seed=1).global_params, start(seed=2).global_params)  # without it, each seed has its own
    a.run(), b.run()
    assert not same(a.global_params, b.global_params)  # cohorts and mini-batches follow --seed


def test_default_is_the_seed():
    assert same(start(seed=3).global_params, start(seed=3, init_seed=3).global_params)
    assert not same(start(seed=3).global_params, start(seed=3, init_seed=4).global_params)
    assert TrainConfig(**BASE).init_seed == -1 and TrainConfig(**BASE, seed=5).model_seed() == 5
