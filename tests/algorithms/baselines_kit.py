"""The setting of the FedAvg-family baseline tests (test_fedprox, test_fedpaq, test_fedcom, test_fednova,
test_scaffold, test_lama_accelerate): digits + a small MLP, 8 clients, half of them a round, and FedAvg's run in it."""

import pytest
import torch

from fedcli.data.setup import load_data_and_partition
from fedcli.fl.engine import Simulation
from simkit import configurer

BASE = dict(
    dataset="digits",
    model="mlp",
    mlp_hidden="32",
    clients=8,
    active_ratio=0.5,
    partition="dirichlet",
    alpha=0.5,
    iterations=16,
    batch_size=16,
    lr=0.05,
    eval_every=8,
    device="cpu",
    tau=4,
    threads=1,
)


config = configurer(BASE)


@pytest.fixture(scope="module")
def data():
    return load_data_and_partition(config())


@pytest.fixture(scope="module")
def fedavg(data):
    return run(data, algo="fedavg")


@pytest.fixture(scope="module")
def iid_data():
    return load_data_and_partition(config(partition="iid"))


def sim_of(data, **kw) -> Simulation:
    return Simulation(config(**kw)).setup(*data)


def run(data, **kw):
    sim = sim_of(data, **kw)
    return sim, sim.run()


def assert_differs(a, b):
    (sa, _), (sb, _) = a, b
    assert any(not torch.equal(sa.global_params[n], sb.global_params[n]) for n in sa.global_params)
