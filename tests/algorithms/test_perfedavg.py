"""Per-FedAvg (FedALA's baseline): its meta step worked out by hand, and learning with one-step adaptation from the
global model for the evaluation (digits, 2 classes per client, local test splits)."""

import pytest
import torch
from torch.func import functional_call

from fedcli.fl.cohort import Cohort, StepContext
from fedcli.fl.engine import Simulation
from fedcli.fl.trainers import masked_loss
from simkit import PERSONAL_BASE, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal


# ------------------------------------------------------------------ Per-FedAvg
def test_perfedavg_meta_step_by_hand(data):
    """Two local steps = one first-order MAML step: theta' = theta - a g1, then theta <- theta - b g2."""
    sim = Simulation(config(algo="perfedavg", perfedavg_beta=0.25)).setup(*data)
    cohort = Cohort.from_global(
        [0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), sim.global_params, sim.global_buffers
    )
    cohort.steps = torch.tensor([2, 1])  # client 1 has one step only: its unpaired step is dropped
    step = sim.local_step
    step.begin_round(sim.view, cohort)
    theta = {n: p.clone() for n, p in cohort.params.items()}
    g1 = {n: torch.ones_like(p) for n, p in cohort.params.items()}
    step.step(cohort, g1, lr=0.1)
    for n, p in cohort.params.items():
        assert torch.allclose(p[0], theta[n][0] - 0.1) and torch.equal(p[1], theta[n][1])
    g2 = {n: torch.full_like(p, 2.0) for n, p in cohort.params.items()}
    cohort.ctx = StepContext(step=2)  # the round's second local step
    step.step(cohort, g2, lr=0.1, active=torch.tensor([True, False]))
    for n, p in cohort.params.items():
        assert torch.allclose(p[0], theta[n][0] - 0.5) and torch.equal(p[1], theta[n][1])  # theta - 0.25 * 2


def test_perfedavg_learns_and_evaluates_one_step_from_the_global_model(data):
    sim, s = run(data, algo="perfedavg", rounds=3)
    assert [r["comm_params"] for r in s.history] == [
        r["comm_params"] for r in run(data, algo="fedavg", rounds=3)[1].history
    ]
    accs = [r["personal_acc"] for r in s.history]
    assert accs[-1] > accs[0] + 0.05, accs
    # the evaluated model of client 1: one SGD step at --lr on a batch of its training split, from the global model
    params, _ = sim.local_step.personalize(sim.view, 1)
    x_ix = sim.client_indices[1]
    from fedcli.fl.rng import torch_gen

    pick = torch.randperm(x_ix.numel(), generator=torch_gen(0, "perfedavg.eval", 2, 1))[:16]
    x, y = sim.train_x[x_ix[pick]], sim.train_y[x_ix[pick]]
    g = {n: p.detach().clone().requires_grad_(True) for n, p in sim.global_params.items()}
    loss = masked_loss(functional_call(sim.model, (g, sim.global_buffers), (x,)), y, torch.ones(16))
    grads = torch.autograd.grad(loss, list(g.values()))
    for (n, p), gr in zip(sim.global_params.items(), grads):
        torch.testing.assert_close(params[n], p - 0.3 * gr)
