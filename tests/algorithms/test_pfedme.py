"""pFedMe (FedALA's baseline): its update formulas worked out by hand on tiny tensors, the identities that tie it
to simpler methods, ``--init ala --ala-layers 0``, and learning on digits (2 classes per client)."""

import functools
import math

import pytest
import torch
from torch.func import functional_call

from fedcli.config import TrainConfig
from fedcli.fl.algorithms.pfedme import THETA_L2, theta_step, w_step
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.personal import client_model
from fedcli.fl.trainers import VmapTrainer
from fedcli.fl.view import PartView
from simkit import PERSONAL_BASE, assert_learned, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal
PFEDME = dict(algo="pfedme", lr=0.1, pfedme_lr=0.1, pfedme_lambda=5.0, rounds=3)  # lambda * lr < 1 on this tiny task


learned = functools.partial(assert_learned, gain=0.05, floor=0.75)


def pooled_accuracy(sim, prefix):
    correct = total = 0
    with torch.no_grad():
        for c, idx in enumerate(sim.partition.test):
            idx = torch.as_tensor(idx)
            out = functional_call(sim.model, client_model(sim, c, prefix), (sim.train_x[idx],))
            correct += int((out.argmax(1) == sim.train_y[idx]).sum())
            total += idx.numel()
    return correct / total


# ------------------------------------------------------------------ pFedMe
def test_pfedme_formulas_by_hand():
    theta, w, g = torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.2])
    # 1 - 0.1 * (0.2 + 2 * 0.5 + 0.001 * 1) = 1 - 0.1201
    assert torch.allclose(theta_step(theta, g, w, personal_lr=0.1, lam=2.0), torch.tensor([0.8799]))
    # 0.5 - 2 * 0.1 * (0.5 - 1) = 0.6
    assert torch.allclose(w_step(w, theta, lr=0.1, lam=2.0), torch.tensor([0.6]))


def test_pfedme_local_step_by_hand():
    """A 2-in 2-class linear model at 0, one sample x = (1, 2), y = 0, K = 2 inner steps, lambda 15, personal lr 0.1.

    Step 1 at theta = w = 0: p = (1/2, 1/2), dL/dz = (-1/2, 1/2), so grad = -A (weight), -a (bias) with
    A = [[.5, 1], [-.5, -1]], a = (.5, -.5): theta1 = 0.1 (A, a). Step 2: logits 0.1 (A x + a) = (.3, -.3),
    q = 1 - sigmoid(.6), grad = -2q (A, a); theta2 = theta1 - 0.1 (grad + 15 theta1 + 0.001 theta1)
    = (A, a) * (0.1 * (1 - 0.1 * 15.001) + 0.2 q). Then w = 0 - 15 * 0.01 * (0 - theta2) = 0.15 theta2.
    Client 1 has no local step this time (``--local-epochs``): it does not move."""
    from fedcli.fl.algorithms.pfedme import PFedMeStep

    cfg = TrainConfig(pfedme_k=2, pfedme_lr=0.1, pfedme_lambda=15.0)
    view = PartView.fake(trainer=VmapTrainer(torch.nn.Linear(2, 2)))
    params = {"weight": torch.zeros(2, 2, 2), "bias": torch.zeros(2, 2)}
    cohort = Cohort([0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), params, {})
    cohort.steps = torch.tensor([1, 0])
    step = PFedMeStep(cfg)
    step.begin_round(view, cohort)
    x, y, mask = torch.tensor([[[1.0, 2.0]]]).repeat(2, 1, 1), torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1)
    grads, losses = step.gradients(view, cohort, x, y, mask)
    assert torch.allclose(losses, torch.full((2,), math.log(2.0)))  # theta's loss before the inner steps
    step.step(cohort, grads, lr=0.01, active=torch.tensor([True, False]))
    A, a = torch.tensor([[0.5, 1.0], [-0.5, -1.0]]), torch.tensor([0.5, -0.5])
    q = 1.0 - 1.0 / (1.0 + math.exp(-0.6))
    c = 0.1 * (1.0 - 0.1 * (15.0 + THETA_L2)) + 0.2 * q
    assert torch.allclose(step.theta["weight"][0], c * A) and torch.allclose(step.theta["bias"][0], c * a)
    assert torch.allclose(cohort.params["weight"][0], 0.15 * c * A) and torch.allclose(
        cohort.params["bias"][0], 0.15 * c * a
    )
    for t in (*step.theta.values(), *cohort.params.values()):
        assert torch.equal(t[1], torch.zeros_like(t[1]))


def test_pfedme_lambda_zero_theta_is_sgd_and_w_stays(data):
    """lambda = 0 unties theta and w: w never moves (the global model stays the initial one) and theta, with
    K = 1, is plain SGD at the personal lr with weight decay 0.001 -- FedAvg-C's first round at that lr."""
    sim, s = run(data, algo="pfedme", pfedme_lambda=0.0, pfedme_k=1, pfedme_lr=0.3, rounds=1)
    init = Simulation(config()).setup(*data).global_params
    assert all(torch.equal(sim.global_params[n], init[n]) for n in init)
    ref, rs = run(data, algo="fedavg-c", weight_decay=THETA_L2, rounds=1)
    for c in range(4):
        mine, theirs = client_model(sim, c, "pfedme")[0], client_model(ref, c)[0]
        for n in mine:
            torch.testing.assert_close(mine[n], theirs[n], rtol=1e-6, atol=1e-7)
    assert s.history[0]["train_loss"] == pytest.approx(rs.history[0]["train_loss"], rel=1e-6)
    assert s.history[0]["personal_acc"] == pytest.approx(rs.history[0]["personal_acc"])


def test_pfedme_beta_mixes_the_previous_global_model(data):
    """The uploads of round 1 do not depend on beta: global(beta) = (1 - beta) * initial + beta * average."""
    init = Simulation(config(**{**PFEDME, "rounds": 1})).setup(*data).global_params
    one, _ = run(data, **{**PFEDME, "rounds": 1})
    half, _ = run(data, **{**PFEDME, "rounds": 1, "pfedme_beta": 0.5})
    for n in init:
        torch.testing.assert_close(half.global_params[n], 0.5 * init[n] + 0.5 * one.global_params[n])


def test_pfedme_learns_and_is_evaluated_on_theta(data):
    sim, s = run(data, **PFEDME)
    learned(s)
    assert set(sim.store.tables[f"pfedme.p:{sim.layers[0].name}"]) == {0, 1, 2, 3}
    assert s.history[-1]["personal_acc"] == pytest.approx(pooled_accuracy(sim, "pfedme"), abs=1e-12)


def test_pfedme_ala_layers_0_is_pfedme(data):
    same(run(data, **PFEDME, init="ala", ala_layers=0), run(data, **PFEDME))
