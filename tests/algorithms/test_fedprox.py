"""FedProx: mu = 0 is FedAvg, with FedLAMA phi = 1 it is FedProx, its direction worked out by hand; the options
of the FedAvg-family baselines (--mu, --quant-levels, --server-lr) are validated (digits + a small MLP, seconds)."""

import math

import pytest
import torch

from baselines_kit import assert_differs, config, data, fedavg, run, sim_of
from fedcli.errors import ConfigError
from fedcli.fl.cohort import Cohort
from simkit import assert_same_run


# ------------------------------------------------------------------ identities
def test_fedprox_mu0_equals_fedavg(data, fedavg):
    assert_same_run(run(data, algo="fedprox", mu=0.0), fedavg)
    assert_differs(run(data, algo="fedprox", mu=0.5), fedavg)


def test_fedprox_lama_phi1_equals_fedprox(data):
    assert_same_run(run(data, algo="fedprox", mu=0.1, schedule="lama", phi=1), run(data, algo="fedprox", mu=0.1))


# ------------------------------------------------------------------ hand-computed pieces
def test_fedprox_direction(data):
    sim = sim_of(data, algo="fedprox", mu=0.5)
    name = sim.layers[1].name  # the first bias, 32 elements
    g = {n: torch.zeros_like(p).unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in sim.global_params.items()}
    cohort = Cohort.from_global(
        [0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), sim.global_params, sim.global_buffers
    )
    sim.local_step.begin_round(sim.view, cohort)
    cohort.params[name][0] += 2.0
    g[name][1] += 1.0
    d = sim.local_step.direction(cohort, g)
    assert torch.allclose(d[name][0], torch.full((32,), 1.0))  # 0 + 0.5 * (x + 2 - x)
    assert torch.allclose(d[name][1], torch.full((32,), 1.0))  # 1 + 0.5 * 0
    # the anchor is the live global model: a synchronized layer is anchored at its new value
    sim.global_params[name] += 2.0
    assert torch.allclose(sim.local_step.direction(cohort, g)[name][0], torch.zeros(32))


def test_new_options_are_validated():
    with pytest.raises(ConfigError, match="--quant-levels"):
        config(algo="fedpaq", quant_levels=-1)
    with pytest.raises(ConfigError, match="--mu"):
        config(algo="fedprox", mu=-0.1)
    with pytest.raises(ConfigError, match="--server-lr"):
        config(algo="fedcom", server_lr=0.0)
    assert config(algo="fedprox", schedule="lama-accelerate").schedule == "lama-accelerate"
    assert math.isclose(config(algo="fedprox").mu, 0.01)
