"""PartialFed (FedALA's baseline): learning on digits (2 classes per client, local test splits), the update
formulas on tiny tensors worked out by hand, invariants, ``--init ala``."""

import math

import pytest
import torch

from fedcli.errors import ConfigError
from fedcli.fl.algorithms.partialfed import strategy_grad
from fedcli.fl.cohort import Cohort, StepContext
from fedcli.fl.engine import Simulation
from simkit import assert_learned
from simkit import personal_config as config
from simkit import personal_run as run
from simkit import same_personal as same


# ------------------------------------------------------------------ PartialFed
def test_partialfed_learns_with_fedavg_communication(data):
    sim, s = run(data, algo="partialfed", rounds=3)
    assert_learned(s)  # 0.58 -> 0.92 (the version that reset theta every batch: 0.44 -> 0.46)
    f = run(data, algo="fedavg-c", rounds=3)[1]
    assert [r["comm_params"] for r in s.history] == [r["comm_params"] for r in f.history]
    assert s.comm_bytes == f.comm_bytes
    alpha = sim.store.tables["partialfed.alpha"]
    assert set(alpha) == {0, 1, 2, 3} and all(float(a.abs().sum()) > 0 for a in alpha.values())  # strategies learned


def _planted(data, **kw):
    """A PartialFed step with cohort clients 0 and 1 after begin_round; local models = global + 1 (+ 2 for client 1)."""
    sim = Simulation(config(algo="partialfed", **kw)).setup(*data)
    cohort = Cohort.from_global(
        [0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), sim.global_params, sim.global_buffers
    )
    cohort.round_idx, cohort.steps = 0, torch.tensor([4, 4])
    step = sim.local_step
    step.begin_round(sim.view, cohort)
    with torch.no_grad():
        for n, p in cohort.params.items():
            p += torch.tensor([1.0, 3.0]).view(-1, *([1] * (p.dim() - 1)))
    local = {n: p.clone() for n, p in cohort.params.items()}
    step.noise.zero_()
    step.tau = 1.0
    b = sim.cfg.batch_size
    ix = torch.stack([sim.client_indices[c][:b] for c in (0, 1)])
    batch = (sim.train_x[ix], sim.train_y[ix], torch.ones(2, b))
    return sim, cohort, step, local, batch


def test_partialfed_layer_selection_by_hand(data):
    sim, cohort, step, local, batch = _planted(data)
    names = list(sim.global_params)
    # fixed strategy: client 0 takes tensor 0 from the global model, the rest local; client 1 the reverse
    pick = torch.full((2, len(names), 2), 0.0)
    pick[0, :, 1], pick[0, 0] = 50.0, torch.tensor([50.0, -50.0])
    pick[1, :, 0], pick[1, 0] = 50.0, torch.tensor([-50.0, 50.0])
    step.alpha = pick
    step.gradients(sim.view, cohort, *batch)
    g = sim.global_params
    for i, n in enumerate(names):
        from_global = (i == 0, i != 0)  # per client
        for k in (0, 1):
            want = g[n] if from_global[k] else local[n][k]
            torch.testing.assert_close(cohort.params[n][k], want)
    # soft choice: logits (ln 3, 0) at tau 1 -> y0 = 0.75: 0.75 * global + 0.25 * local
    sim, cohort, step, local, batch = _planted(data)
    step.alpha = torch.zeros(2, len(names), 2)
    step.alpha[..., 0] = math.log(3.0)
    step.gradients(sim.view, cohort, *batch)
    for n in names:
        torch.testing.assert_close(cohort.params[n], 0.75 * g[n].unsqueeze(0) + 0.25 * local[n])


def test_partialfed_reaggregation_keeps_the_training(data):
    """Batch 2 re-mixes only the initialization: theta = theta_0 + y0_2 (theta_g - theta_0) + (what batch 1's model
    step added), worked out for y0 = 0.5 then 0.75, a plain SGD step of lr 0.1 on unit gradients."""
    sim, cohort, step, local, batch = _planted(data)
    assert sim.cfg.momentum == 0.0 and sim.cfg.weight_decay == 0.0
    names = list(sim.global_params)
    g = {n: t.unsqueeze(0) for n, t in sim.global_params.items()}
    step.alpha = torch.zeros(2, len(names), 2)  # y0 = 0.5
    step.gradients(sim.view, cohort, *batch)
    step.step(cohort, {n: torch.ones_like(p) for n, p in cohort.params.items()}, lr=0.1)  # a model batch
    step.alpha[..., 0] = math.log(3.0)  # y0 = 0.75
    cohort.ctx = StepContext(step=2)  # the round's second local step
    step.gradients(sim.view, cohort, *batch)
    for n in names:
        torch.testing.assert_close(cohort.params[n], local[n] + 0.75 * (g[n] - local[n]) - 0.1)


def test_partialfed_strategy_gradient_by_hand():
    g, delta = torch.tensor([[0.5, -1.0]]), torch.tensor([[1.0, 2.0]])  # <g, theta_g - theta> = -1.5
    # y0 y1 / tau <g, delta> = 0.75 * 0.25 / 2 * -1.5
    torch.testing.assert_close(strategy_grad(g, delta, torch.tensor([0.75]), 2.0), torch.tensor([-0.140625]))
    # the same through autograd: L = <g, y0 theta_g + y1 theta> with y = softmax((alpha + G) / tau)
    alpha = torch.tensor([0.3, -0.2], requires_grad=True)
    noise, tau = torch.tensor([0.1, 0.4]), 2.0
    theta, theta_g = torch.tensor([0.2, -0.3]), torch.tensor([1.2, 1.7])
    y = torch.softmax((alpha + noise) / tau, 0)
    (g[0] * (y[0] * theta_g + y[1] * theta)).sum().backward()
    want = strategy_grad(g, (theta_g - theta).unsqueeze(0), y[0].detach().view(1), tau)
    torch.testing.assert_close(alpha.grad, torch.cat([want, -want]))


def test_partialfed_strategy_step_by_hand(data):
    """f_m = 0, f_s = 1: every batch is a strategy batch: alpha_l0 -= lr * y0 y1 / tau <g_l, theta_g - theta>, the
    model weights are not stepped (only re-mixed)."""
    sim, cohort, step, local, batch = _planted(data, partialfed_fm=0, partialfed_fs=1)
    names = list(sim.global_params)
    step.alpha = torch.zeros(2, len(names), 2)  # y0 = 0.5
    step.gradients(sim.view, cohort, *batch)
    mixed = {n: p.clone() for n, p in cohort.params.items()}
    grads = {n: torch.ones_like(p) for n, p in cohort.params.items()}
    step.step(cohort, grads, lr=0.1)
    for i, n in enumerate(names):
        d = (sim.global_params[n].unsqueeze(0) - local[n]).flatten(1).sum(1)  # <1, theta_g - theta>
        torch.testing.assert_close(step.alpha[:, i, 0], -0.1 * 0.25 * d)
        torch.testing.assert_close(step.alpha[:, i, 1], 0.1 * 0.25 * d)
        assert torch.equal(cohort.params[n], mixed[n])


def test_partialfed_temperature_and_cycles(data):
    sim = Simulation(config(algo="partialfed")).setup(*data)
    step = sim.local_step
    assert step.temperature(0) == 5.0 and step.temperature(3) == pytest.approx(5.0 * 0.965**3)
    assert [step.is_model_step(j) for j in range(1, 12)] == [True] * 8 + [False] * 2 + [True]
    with pytest.raises(ConfigError, match="partialfed-fm"):
        Simulation(config(algo="partialfed", partialfed_fm=0, partialfed_fs=0)).setup(*data)


def test_partialfed_without_strategy_batches_keeps_alpha(data):
    sim, _ = run(data, algo="partialfed", partialfed_fs=0)
    assert all(torch.equal(a, torch.zeros_like(a)) for a in sim.store.tables["partialfed.alpha"].values())


def test_partialfed_ala(data):
    same(run(data, algo="partialfed", init="ala", ala_layers=0), run(data, algo="partialfed"))
    sim, s = run(data, algo="partialfed", init="ala", ala_layers=2, ala_num_pre_loss=3)
    assert len(sim.init.initial_passes) == 4 and all(0.0 < r["personal_acc"] <= 1.0 for r in s.history)
    assert [r["comm_params"] for r in s.history] == [r["comm_params"] for r in run(data, algo="partialfed")[1].history]
