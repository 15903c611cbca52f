"""FedProx, FedPAQ, FedCOM, FedNova, SCAFFOLD and FedLAMA's accelerate variant: the identities that
tie them to FedAvg, hand-computed pieces, and what the ledger counts (digits + a small MLP, seconds)."""

import math
from types import SimpleNamespace

import pytest
import torch

from fedcli.data.setup import load_data_and_partition
from fedcli.errors import ConfigError
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.parts_servers import ServerLR, momentum_a_norm
from fedcli.fl.schedules import LamaAccelerate, lama_accelerate_intervals
from simkit import assert_same_run, configurer

BASE = dict(dataset="digits", model="mlp", mlp_hidden="32", clients=8, active_ratio=0.5, partition="dirichlet",
            alpha=0.5, iterations=16, batch_size=16, lr=0.05, eval_every=8, device="cpu", tau=4, threads=1)


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


# ------------------------------------------------------------------ identities
def test_fedprox_mu0_equals_fedavg(data, fedavg):
    assert_same_run(run(data, algo="fedprox", mu=0.0), fedavg)
    assert_differs(run(data, algo="fedprox", mu=0.5), fedavg)


def test_fedpaq_without_quantization_equals_fedavg(data, fedavg):
    assert_same_run(run(data, algo="fedpaq", quant_levels=0), fedavg)
    assert_differs(run(data, algo="fedpaq", quant_levels=16), fedavg)


def test_fednova_equal_steps_equals_fedavg(data, fedavg, iid_data):
    assert_same_run(run(data, algo="fednova"), fedavg)
    # --local-epochs: with an IID split every client has 179 or 180 samples -> ceil(0.5 n / 16) = 6 steps each
    sim, _ = nova = run(iid_data, algo="fednova", partition="iid", local_epochs=0.5, rounds=2, eval_every=1)
    assert set(sim.client_steps(list(range(8)), 0)) == {6}
    assert_same_run(nova, run(iid_data, algo="fedavg", partition="iid", local_epochs=0.5, rounds=2, eval_every=1))


def test_fednova_unequal_steps_differs_from_fedavg(data):
    sim, _ = nova = run(data, algo="fednova", local_epochs=0.5, rounds=2, eval_every=1)
    assert len(set(sim.client_steps(list(range(8)), 0))) > 1
    assert_differs(nova, run(data, algo="fedavg", local_epochs=0.5, rounds=2, eval_every=1))


def test_fedprox_lama_phi1_equals_fedprox(data):
    assert_same_run(run(data, algo="fedprox", mu=0.1, schedule="lama", phi=1), run(data, algo="fedprox", mu=0.1))


def test_fedcom_server_lr1_equals_fedpaq(data):
    fedpaq = run(data, algo="fedpaq")
    assert_same_run(run(data, algo="fedcom", server_lr=1.0), fedpaq)
    assert_differs(run(data, algo="fedcom", server_lr=2.0), fedpaq)


def test_lama_accelerate_phi1_equals_fedavg(data, fedavg):
    assert_same_run(run(data, algo="fedavg", schedule="lama-accelerate", phi=1), fedavg)


# ------------------------------------------------------------------ hand-computed pieces
def test_fedprox_direction(data):
    sim = sim_of(data, algo="fedprox", mu=0.5)
    name = sim.layers[1].name  # the first bias, 32 elements
    g = {n: torch.zeros_like(p).unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in sim.global_params.items()}
    cohort = Cohort.from_global([0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), sim.global_params, sim.global_buffers)
    sim.local_step.begin_round(sim, cohort)
    cohort.params[name][0] += 2.0
    g[name][1] += 1.0
    d = sim.local_step.direction(cohort, g)
    assert torch.allclose(d[name][0], torch.full((32,), 1.0))  # 0 + 0.5 * (x + 2 - x)
    assert torch.allclose(d[name][1], torch.full((32,), 1.0))  # 1 + 0.5 * 0
    # the anchor is the live global model: a synchronized layer is anchored at its new value
    sim.global_params[name] += 2.0
    assert torch.allclose(sim.local_step.direction(cohort, g)[name][0], torch.zeros(32))


def test_server_learning_rate():
    prev, avg = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 0.0])
    assert torch.equal(ServerLR(SimpleNamespace(server_lr=0.5)).update("w", prev, avg), torch.tensor([2.0, -1.0]))
    assert torch.equal(ServerLR(SimpleNamespace(server_lr=2.0)).update("w", prev, avg), torch.tensor([5.0, 2.0]))
    assert ServerLR(SimpleNamespace(server_lr=1.0)).update("w", prev, avg) is avg


def test_fednova_a_norm():
    assert momentum_a_norm(5, 0.0) == 5.0
    # rho = 0.5, tau = 3: coefficients (1 - rho^(3 - j)) / (1 - rho) = 1.75, 1.5, 1 -> 4.25
    assert momentum_a_norm(3, 0.5) == pytest.approx(4.25)


def test_fednova_normalized_average_hand_computed(data):
    sim = sim_of(data, algo="fednova", local_epochs=1.0, batch_size=16)
    sim.sizes[:] = 16
    sim.sizes[[1, 3]] = [16, 48]  # 1 and 3 local steps
    name = sim.layers[0].name
    for p in sim.global_params.values():
        p.zero_()
    cohort = Cohort.from_global([1, 3], sim.cohort_weights([1, 3], [1, 3]), sim.global_params, sim.global_buffers)
    cohort.cohort_ids = [1, 3]
    sim.server.begin_round(sim, cohort)
    # p = 1/2 each, tau_eff = 2: client 1 uploads 2 * (x - u), client 3 uploads (2/3) * (x - u)
    assert sim.server.upload_scale(cohort).tolist() == [2.0, 2.0 / 3.0]
    cohort.params[name][0].fill_(4.0)
    cohort.params[name][1].fill_(6.0)
    sim.synchronize(cohort, [0], 1, [0] * len(sim.layers), round_end=False)
    # u = 0 + 1/2 * 2 * 4 + 1/2 * (2/3) * 6 = 6 (FedAvg: 5)
    assert torch.allclose(sim.global_params[name], torch.full_like(sim.global_params[name], 6.0))
    assert sim.ledger.syncs[0] == 1


def test_scaffold_option2_hand_computed(data):
    """Constant gradient 1: the control variates become 1 (option II: c_i+ = c_i - c + (x - y_i) / (K lr)),
    with momentum and a changing lr too (the normalization by the lr actually used and by momentum)."""
    for momentum in (0.0, 0.9):
        sim = sim_of(data, algo="scaffold", momentum=momentum)
        mine = [0, 2, 5, 7]
        cohort = Cohort.from_global(mine, sim.cohort_weights(mine, mine), sim.global_params, sim.global_buffers)
        cohort.cohort_ids = mine
        step = sim.local_step
        step.begin_round(sim, cohort)
        ones = {n: torch.ones_like(p) for n, p in cohort.params.items()}
        start = {n: p.clone() for n, p in cohort.params.items()}
        for lr in (0.1, 0.2, 0.3):
            step.step(cohort, ones, lr)
        if momentum == 0.0:  # x - y_i = (0.1 + 0.2 + 0.3) * 1
            for n in start:
                assert torch.allclose(start[n] - cohort.params[n], torch.full_like(start[n], 0.6))
        step.end_round(sim, cohort)
        for n, p in sim.global_params.items():
            for c in mine:
                assert torch.allclose(sim.store.tables[f"scaffold.c_i:{n}"][c], torch.ones_like(p))
            # c = (|S| / N) * mean_i (c_i+ - c_i) = (4 / 8) * 1
            assert torch.allclose(step.c[n], torch.full_like(p, 0.5))
        # next round: a client's direction is g - c_i + c: 1 - 1 + 0.5 for one seen before, 1 + 0.5 for a new one
        nxt = [2, 3]
        cohort2 = Cohort.from_global(nxt, sim.cohort_weights(nxt, nxt), sim.global_params, sim.global_buffers)
        step.begin_round(sim, cohort2)
        d = step.direction(cohort2, {n: torch.ones_like(p) for n, p in cohort2.params.items()})
        for n in d:
            assert torch.allclose(d[n][0], torch.full_like(d[n][0], 0.5))
            assert torch.allclose(d[n][1], torch.full_like(d[n][1], 1.5))


def test_scaffold_run_matches_option2_and_ledger(data):
    """In a real run (plain SGD, constant lr, periodic): c_i+ = c_i - c + (x - y_i) / (K lr) with y_i the
    local model just before the round's synchronization; the ledger adds c down and c_i up."""
    sim = sim_of(data, algo="scaffold", iterations=8)
    seen = []
    sync = sim.synchronize

    def spy(cohort, layers, step, last_sync, round_end, **kw):
        st = sim.local_step
        seen.append({"clients": list(cohort.clients), "x": {n: p.clone() for n, p in sim.global_params.items()},
                     "y": {n: p.clone() for n, p in cohort.params.items()}, "c": {n: t.clone() for n, t in st.c.items()},
                     "c_i": {n: t.clone() for n, t in st.c_i.items()}})
        return sync(cohort, layers, step, last_sync, round_end=round_end, **kw)

    checked = []

    def hook(sim_, state):
        r = seen[-1]
        for n in r["x"]:
            want = r["c_i"][n] - r["c"][n] + (r["x"][n] - r["y"][n]) / (4 * 0.05)
            for k, c in enumerate(r["clients"]):
                torch.testing.assert_close(sim.store.tables[f"scaffold.c_i:{n}"][c], want[k], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(sim.local_step.c[n], r["c"][n] + (want - r["c_i"][n]).sum(0) / 8, rtol=1e-4, atol=1e-6)
        checked.append(state.round_idx)

    sim.synchronize = spy
    sim.round_hooks.append(hook)
    s = sim.run()
    assert checked == [1, 2] and len(seen) == 2
    assert any(float(t.abs().max()) > 0 for t in seen[1]["c"].values())  # round 2 used a nonzero c
    total = sum(li.numel for li in sim.layers)
    assert s.comm_params == 2 * total  # Eq. 8 over the model layers only
    model_bytes = 2 * 4 * total * (32 + 32) / 8
    assert s.comm_bytes == model_bytes + 2 * (2 * 4 * total * 4)  # 2 rounds x (c down + c_i up) x 4 clients
    assert sum(r["comm_bytes"] for r in sim.layer_rows()) == s.comm_bytes


def test_fedpaq_lama_ledger_counts_quantized_bits(data):
    sim, s = run(data, algo="fedpaq", schedule="lama", tau=2, phi=2, quant_levels=16)
    m = sim.active
    want = sum(sim.ledger.syncs[li.index] * m * li.numel * ((5 + 1 + 32 / li.numel) + 32) / 8 for li in sim.layers)
    assert s.comm_bytes == pytest.approx(want, rel=1e-12)
    assert s.comm_params == sum(sim.ledger.syncs[li.index] * li.numel for li in sim.layers)
    assert sum(r["comm_bytes"] for r in sim.layer_rows()) == pytest.approx(s.comm_bytes, rel=1e-12)


# ------------------------------------------------------------------ FedLAMA's accelerate variant
T, PHI = 10, 4


def test_accelerate_intervals_hand_computed():
    d, n = [0.04, 0.001, 0.5, 0.002], [100, 1000, 10, 500]
    # d*n = [4, 1, 5, 1], total 11; sizes 1610; decreasing order [2, 0, 3, 1]:
    # layer 2: delta 5/11 = .455, lambda 10/1610 = .006 < 1 - .455 -> short (10 // 4 = 2)
    # layer 0: delta 9/11 = .818, lambda 110/1610 = .068 < .182 -> short
    # layer 3: delta 10/11 = .909, lambda 610/1610 = .379 < .091 fails -> tau'
    assert lama_accelerate_intervals(d, n, T, PHI, rule="paper") == [2, T, 2, T]
    assert lama_accelerate_intervals(d, n, T, PHI, rule="reference") == [2, T, 2, 2]
    assert lama_accelerate_intervals(d, n, T, PHI) == [2, T, 2, 2]  # the author code's loop is the default
    assert lama_accelerate_intervals(d, n, T, 1, rule="paper") == [T] * 4
    assert lama_accelerate_intervals(d, n, T, 3, rule="paper") == [3, T, 3, T]  # tau' // phi
    assert lama_accelerate_intervals(d, n, 2, 4, rule="paper") == [1, 2, 1, 2]  # never below 1


def test_accelerate_intervals_edge_cases():
    # ties keep layer order: [0, 1, 2]; layer 0: lambda 1/3 < 1 - 1/3 -> short; layer 1: 2/3 < 1/3 fails
    assert lama_accelerate_intervals([0.1, 0.1, 0.1], [10, 10, 10], T, PHI, rule="paper") == [2, T, T]
    # an exact tie goes on in the author code's loop: [1, 1] with dims [1, 1]: layer 0 lambda 1/2, 1 - delta 1/2
    assert lama_accelerate_intervals([1.0, 1.0], [1, 1], T, PHI, rule="reference") == [2, 2]
    assert lama_accelerate_intervals([1.0, 1.0], [1, 1], T, PHI, rule="paper") == [T, T]
    # nothing measured: no layer is critical
    assert lama_accelerate_intervals([0.0, 0.0], [5, 5], T, PHI) == [T, T]
    # kernels only: fc.b (d 1e-2) is the most critical tensor but not eligible; order conv.w, fc.w.
    # d*n = [.4, .01, .1, .1], delta over all .61: conv.w delta .656, lambda 400/1400 = .286 < .344 -> short
    d, n = [1e-3, 1e-3, 1e-4, 1e-2], [400, 10, 1000, 10]
    assert lama_accelerate_intervals(d, n, T, PHI, eligible=[True, False, True, False], rule="paper") == [2, T, T, T]


def test_accelerate_schedule_and_run(data):
    layers = [SimpleNamespace(index=i, numel=k, kind="kernel", name=f"l{i}") for i, k in enumerate([100, 1000, 10, 500])]
    cfg = SimpleNamespace(tau=T, phi=PHI, lama_rule="paper", lama_eligible="all", lama_first_adjust=0)
    s = LamaAccelerate(cfg, layers)
    assert s.period == T and s.intervals == [T] * 4 and s.needs_discrepancy
    for layer, dv in enumerate([0.04, 0.001, 0.5, 0.002]):
        s.observe(layer, dv * T * layers[layer].numel, T)
    adj = s.end_round(0, T)
    assert adj.intervals == s.intervals == [2, T, 2, T]
    assert [s.due(j, T) for j in (1, 2, 3, 10)] == [[], [0, 2], [], [0, 1, 2, 3]]
    # a run: intervals in {tau' // phi, tau'}, more communication than FedAvg(tau') for faster sync
    sim, run_sum = run(data, algo="fedavg", schedule="lama-accelerate", tau=4, phi=2, lama_first_adjust=0)
    assert set(sim.schedule.intervals) <= {2, 4}
    assert run_sum.comm_params > run_sum.fedavg_comm_params


def test_new_options_are_validated():
    with pytest.raises(ConfigError, match="--quant-levels"):
        config(algo="fedpaq", quant_levels=-1)
    with pytest.raises(ConfigError, match="--mu"):
        config(algo="fedprox", mu=-0.1)
    with pytest.raises(ConfigError, match="--server-lr"):
        config(algo="fedcom", server_lr=0.0)
    assert config(algo="fedprox", schedule="lama-accelerate").schedule == "lama-accelerate"
    assert math.isclose(config(algo="fedprox").mu, 0.01)
