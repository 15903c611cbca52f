"""FedPHP (FedALA's baseline): its update formulas worked out by hand on tiny tensors, the identities that tie it
to simpler methods, ``--init ala --ala-layers 0``, and learning on digits (2 classes per client)."""

import functools
import math

import pytest
import torch

from fedcli.errors import ConfigError
from fedcli.fl.algorithms.fedphp import mmd, total_rounds
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.trainers import masked_loss
from simkit import PERSONAL_BASE, assert_learned, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal


learned = functools.partial(assert_learned, gain=0.05, floor=0.75)


# ------------------------------------------------------------------ FedPHP
def test_mmd_by_hand():
    """x = (0, 1), y = (0, 0) in 1-D: k(0) = 4, k(1) = sum_a exp(-1 / 2a) =: K1; MMD = (8 + 2 K1) / 4 + 4
    - 2 (8 + 2 K1) / 4 = 2 - K1 / 2. With weights (1, 0) only the equal first pair counts: 0."""
    x, y = torch.tensor([[0.0], [1.0]]), torch.tensor([[0.0], [0.0]])
    k1 = sum(math.exp(-1.0 / (2 * a)) for a in (10, 15, 20, 50))
    assert float(mmd(x, y)) == pytest.approx(2.0 - k1 / 2.0, rel=1e-6)
    assert float(mmd(x, torch.tensor([[0.0], [5.0]]), torch.tensor([1.0, 0.0]))) == pytest.approx(0.0, abs=1e-6)
    f = torch.randn(5, 3)
    assert float(mmd(f, f)) == pytest.approx(0.0, abs=1e-5)


def test_fedphp_init_mix_by_hand(data):
    """Round t of T starts from (1 - mu t / T) global + (mu t / T) local: with mu 0.9, t = 2, T = 4 and a local
    model of global + 1, client 1 starts at global + 0.45; client 0 has no local model yet: the global one."""
    sim = Simulation(config(algo="fedphp", php_mu=0.9, rounds=4)).setup(*data)
    g = sim.global_params
    for n, p in g.items():
        sim.store.scatter(f"local.p:{n}", [1], (p + 1.0).unsqueeze(0))
    for t, shift in ((0, 0.0), (2, 0.45)):
        cohort = Cohort.from_global([0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), g, sim.global_buffers)
        cohort.round_idx = t
        for n in cohort.params:
            cohort.params[n].zero_()
        sim.init.initialize(sim.view, cohort)
        for n, p in cohort.params.items():
            torch.testing.assert_close(p[0], g[n])
            torch.testing.assert_close(p[1], g[n] + shift)
            assert t > 0 or (torch.equal(p[0], g[n]) and torch.equal(p[1], g[n]))  # mu_0 = 0: the plain overwrite


def test_fedphp_rounds_from_an_iteration_budget(data):
    sim = Simulation(config(algo="fedphp", rounds=0, iterations=20, local_epochs=0.0, tau=6)).setup(*data)
    assert total_rounds(sim) == sim.init.rounds == 4  # ceil(20 / 6)
    sim = Simulation(config(algo="fedphp", rounds=0, iterations=20)).setup(*data)  # --local-epochs 1, all clients
    assert sim.init.rounds == math.ceil(20 / max(sim.view.client_steps([0, 1, 2, 3], 0)))
    with pytest.raises(ConfigError, match="--rounds"):
        Simulation(config(algo="fedphp", rounds=0, iterations=20, active_ratio=0.5)).setup(*data)


@pytest.mark.parametrize("trainer", ["vmap", "loop"])
def test_fedphp_loss_gradient_by_hand(data, trainer):
    """The local gradient is that of (1 - lambda) CE + lambda MMD(h_local, h_global), h the input of the last
    Linear layer (for the MLP: relu(x W1^T + b1)), the global model's features held fixed."""
    lam = 0.3
    sim = Simulation(config(algo="fedphp", php_lambda=lam, trainer=trainer)).setup(*data)
    g = sim.global_params
    cohort = Cohort.from_global([0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), g, sim.global_buffers)
    with torch.no_grad():
        for p in cohort.params.values():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    sim.local_step.begin_round(sim.view, cohort)
    x, y = sim.train_x[:10].view(2, 5, -1), sim.train_y[:10].view(2, 5)
    mask = torch.tensor([[1.0] * 5, [1.0, 1.0, 1.0, 0.0, 0.0]])
    grads, losses = sim.local_step.gradients(sim.view, cohort, x, y, mask)

    def h(params, xs):
        return torch.relu(xs @ params["hidden.0.weight"].t() + params["hidden.0.bias"])

    for k in range(2):
        params = {n: p[k].detach().clone().requires_grad_(True) for n, p in cohort.params.items()}
        feat = h(params, x[k])
        out = feat @ params["out.weight"].t() + params["out.bias"]
        loss = (1 - lam) * masked_loss(out, y[k], mask[k]) + lam * mmd(feat, h(g, x[k]), mask[k])
        hand = torch.autograd.grad(loss, list(params.values()))
        assert float(losses[k]) == pytest.approx(float(loss.detach()), rel=1e-5)
        for n, gr in zip(params, hand):
            torch.testing.assert_close(grads[n][k], gr, rtol=1e-4, atol=1e-6)


def test_fedphp_without_mu_and_lambda_is_fedavg_c(data):
    same(run(data, algo="fedphp", php_mu=0.0, php_lambda=0.0), run(data, algo="fedavg-c"))


def test_fedphp_learns(data):
    learned(run(data, algo="fedphp", rounds=3)[1], gain=0.1, floor=0.8)


def test_fedphp_ala_layers_0_is_fedphp(data):
    same(run(data, algo="fedphp", init="ala", ala_layers=0, rounds=3), run(data, algo="fedphp", rounds=3))
