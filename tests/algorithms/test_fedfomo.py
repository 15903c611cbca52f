"""FedFomo (FedALA's personalized-aggregation baseline): update formulas by hand, learning on digits (2 classes
per client, local test splits), identities, ALA on top, communication, MPI."""

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.func import functional_call

from fedcli.cli.main import main
from fedcli.fl.algorithms.fedfomo import fomo_scale, fomo_weights
from fedcli.fl.engine import Simulation
from fedcli.fl.trainers import masked_loss
from runkit import MPIEXEC, PERSONAL_RUN, mpirun, rows, train_args
from simkit import assert_learned, personal_config, personal_run, same_personal

config, run, same = personal_config, personal_run, same_personal


learned = assert_learned


# ------------------------------------------------------------------ FedFomo
def test_fedfomo_weights_by_hand():
    """L(old) = 1; model 1: L = 0.5 at distance 2, model 2: L = 0.8 at distance 1 (row 0); row 1 gets worse models."""
    loss_old = torch.tensor([1.0, 1.0], dtype=torch.float64)
    loss_recv = torch.tensor([[0.5, 0.8], [1.5, 1.1]], dtype=torch.float64)
    dist = torch.tensor([[2.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    w = fomo_weights(loss_old, loss_recv, dist)
    # 0.5 / (2 + 1e-5) = 0.24999875, 0.2 / (1 + 1e-5) = 0.19999800; -0.5 / 1.00001, -0.1 / 1e-5 = -10000
    torch.testing.assert_close(
        w, torch.tensor([[0.24999875, 0.19999800], [-0.49999500, -10000.0]], dtype=torch.float64)
    )
    # normalized: 0.24999875 / 0.44999675 = 0.5555568, 0.4444432; no positive weight: all zero (keep the own model)
    torch.testing.assert_close(fomo_scale(w), torch.tensor([[0.5555568, 0.4444432], [0.0, 0.0]], dtype=torch.float64))


def test_fedfomo_round_by_hand(data):
    """Round 1 of client 0 with M = 2 received models (itself and client 1), recomputed with plain autograd-free
    code."""
    sim = Simulation(config(algo="fedfomo", fomo_m=2, rounds=2)).setup(*data)
    init = sim.init
    seen = {}
    orig = init.received

    def received(s, cohort):
        if cohort.round_idx == 1 and "inputs" not in seen:
            from fedcli.fl.personal import client_model

            seen["inputs"] = (
                [client_model(s, c) for c in range(4)],
                {n: s.store.tables[f"fomo.old:{n}"][0].clone() for n in s.global_params},
            )
        return orig(s, cohort)

    init.received = received
    sim.run()
    models, old = seen["inputs"]
    val = init.val[0]
    b = sim.cfg.batch_size

    def val_loss(params, buffers):
        sim.model.eval()
        losses = []
        for s in range(0, val.numel(), b):
            ix = val[s : s + b]
            out = functional_call(sim.model, (params, buffers), (sim.train_x[ix],))
            losses.append(float(masked_loss(out, sim.train_y[ix], torch.ones(ix.numel()))))
        return sum(losses) / len(losses)

    l_old = val_loss(old, models[0][1])
    expect = []
    for j in (0, 1):  # P row 0 is (1, 0, 0, 0): top-2 = itself, then the lowest id among the ties
        norm = math.sqrt(sum(float((models[j][0][n] - old[n]).pow(2).sum()) for n in old))
        expect.append((l_old - val_loss(*models[j])) / (norm + 1e-5))
    # the P row after the round: e_0 + raw weights at the received ids (row 0 stored in the client store)
    p_row = sim.store.tables["fomo.P"][0]
    torch.testing.assert_close(
        p_row[:2], torch.tensor([1.0 + expect[0], expect[1]], dtype=torch.float64), rtol=1e-5, atol=1e-6
    )
    assert p_row[2:].abs().sum() == 0
    # theta_old for round 2 is the aggregate client 0 started round 1 from
    pos = [max(e, 0.0) for e in expect]
    start = {
        n: (sum(pk * models[j][0][n] for pk, j in zip(pos, (0, 1))) / sum(pos)) if sum(pos) > 0 else models[0][0][n]
        for n in old
    }
    for n in old:
        torch.testing.assert_close(sim.store.tables[f"fomo.old:{n}"][0], start[n])


def test_fedfomo_learns_and_splits_off_validation(data):
    sim, s = run(data, algo="fedfomo", rounds=3)
    learned(s)
    for c, ix in enumerate(sim.partition.train):
        train, val = sim.client_indices[c], sim.init.val[c]
        assert int(sim.sizes[c]) == train.numel() and val.numel() == int(0.2 * len(ix))
        assert sorted(train.tolist() + val.tolist()) == sorted(ix.tolist())


def test_fedfomo_bytes_per_client_and_round(data):
    """(1 + M) * Sigma * 4 bytes per client and round (FedALA Table 3); round 0 downloads only the initial model."""
    for m in (0, 2):  # 0: all 4 clients
        sim, s = run(data, algo="fedfomo", fomo_m=m, rounds=3)
        sigma = sum(li.numel for li in sim.layers)
        big_m = m or 4
        per_round = [
            b - a for a, b in zip([0.0] + [r["comm_bytes"] for r in s.history], [r["comm_bytes"] for r in s.history])
        ]
        assert per_round == [4 * 2 * sigma * 4, 4 * (1 + big_m) * sigma * 4, 4 * (1 + big_m) * sigma * 4]
        assert sum(sim.ledger.bytes_) == s.comm_bytes  # recorded per layer (layers.csv sums to metrics.csv)
        assert s.comm_params == 3 * sigma  # Eq. 8's syncs are FedAvg's


# ------------------------------------------------------------------ identities, ALA
def test_fedfomo_with_one_model_is_fedamp_without_proximal_term(data):
    """M = 1 (a client receives only its own model) and no hold-out: each client keeps training its own model, as
    FedAMP with lambda = 0 (the reference's inert proximal term): the same run, bit for bit."""
    same(
        run(data, algo="fedfomo", fomo_m=1, fomo_val_ratio=0.0, rounds=3),
        run(data, algo="fedamp", amp_lambda=0.0, rounds=3),
    )


@pytest.mark.parametrize("algo", ["fedfomo"])
def test_ala_layers_0_is_the_method(data, algo):
    same(run(data, algo=algo, init="ala", ala_layers=0, rounds=3), run(data, algo=algo, rounds=3))


def test_ala_mixes_the_old_model_with_what_the_method_sends(data):
    # FedAMP with a wide attention (alpha 1, sigma 10: xi_ij = 0.1 exp(-d / 10)) sends u_i != w_i from round 1 on
    sim, s = run(data, algo="fedamp", amp_alpha=1.0, amp_sigma=10.0, init="ala", ala_num_pre_loss=3, rounds=2)
    assert sorted(sim.init.initial_passes) == [0, 1, 2, 3] and 0.5 < s.best_personal_acc <= 1.0
    # FedFomo: ALA runs where the aggregate differs from the client's own model, and never crashes
    sim, s = run(data, algo="fedfomo", init="ala", ala_num_pre_loss=3, rounds=2)
    assert 0.5 < s.best_personal_acc <= 1.0


# ------------------------------------------------------------------ MPI: every client's model is gathered across ranks
@pytest.mark.mpi
@pytest.mark.long(
    reason="FedFomo under mpiexec -n 2 alone (6 s of CPU): make test runs FedFomo with full participation and "
    "M = 3 on the same data in test_personalized.py's test_personal_acc_identical_for_1_and_2_processes, in the "
    "mpiexec of its other cases"
)
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_identical_for_1_and_2_processes(tmp_path):
    base = train_args(PERSONAL_RUN)
    # full participation: each rank stores its own clients' models, the ranks allgather them (FedAMP's path too;
    # with partial participation the store is already shared by fedcli.fl.personal.share)
    for name, extra in (("fomo", ["--algo", "fedfomo", "--active-ratio", "1", "--fomo-m", "3"]),):
        assert main([*base, *extra, "--out", str(tmp_path / f"{name}-1")]) == 0
        p = mpirun(2, [*base, *extra, "--out", str(tmp_path / f"{name}-2")])
        assert p.returncode == 0, p.stderr
        one, two = rows(tmp_path / f"{name}-1/metrics.csv"), rows(tmp_path / f"{name}-2/metrics.csv")
        assert len(one) == len(two) == 2
        for a, b in zip(one, two):
            assert a["comm_bytes"] == b["comm_bytes"]
            for col in ("test_acc", "personal_acc"):
                assert abs(float(a[col]) - float(b[col])) <= 1e-5, (name, col, a[col], b[col])
