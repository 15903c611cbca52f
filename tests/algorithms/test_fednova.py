"""FedNova: with equal local steps it is FedAvg, with unequal ones it differs; the momentum a-norm and the
normalized average worked out by hand (digits + a small MLP, seconds)."""

import pytest
import torch

from baselines_kit import assert_differs, data, fedavg, iid_data, run, sim_of
from fedcli.fl.algorithms.fednova import momentum_a_norm
from fedcli.fl.cohort import Cohort
from simkit import assert_same_run


def test_fednova_equal_steps_equals_fedavg(data, fedavg, iid_data):
    assert_same_run(run(data, algo="fednova"), fedavg)
    # --local-epochs: with an IID split every client has 179 or 180 samples -> ceil(0.5 n / 16) = 6 steps each
    sim, _ = nova = run(iid_data, algo="fednova", partition="iid", local_epochs=0.5, rounds=2, eval_every=1)
    assert set(sim.view.client_steps(list(range(8)), 0)) == {6}
    assert_same_run(nova, run(iid_data, algo="fedavg", partition="iid", local_epochs=0.5, rounds=2, eval_every=1))


def test_fednova_unequal_steps_differs_from_fedavg(data):
    sim, _ = nova = run(data, algo="fednova", local_epochs=0.5, rounds=2, eval_every=1)
    assert len(set(sim.view.client_steps(list(range(8)), 0))) > 1
    assert_differs(nova, run(data, algo="fedavg", local_epochs=0.5, rounds=2, eval_every=1))


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
    sim.server.begin_round(sim.view, cohort)
    # p = 1/2 each, tau_eff = 2: client 1 uploads 2 * (x - u), client 3 uploads (2/3) * (x - u)
    assert sim.server.upload_scale(cohort).tolist() == [2.0, 2.0 / 3.0]
    cohort.params[name][0].fill_(4.0)
    cohort.params[name][1].fill_(6.0)
    sim.synchronize(cohort, [0], 1, [0] * len(sim.layers), round_end=False)
    # u = 0 + 1/2 * 2 * 4 + 1/2 * (2/3) * 6 = 6 (FedAvg: 5)
    assert torch.allclose(sim.global_params[name], torch.full_like(sim.global_params[name], 6.0))
    assert sim.ledger.syncs[0] == 1
