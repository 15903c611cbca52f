"""Personalized evaluation (personal_acc) and FedALA's simplest baselines, fedavg-c and fedprox-c: a learning test on
digits (2 classes per client, local test splits), an identity check, and the evaluation convention checked by hand
(digits + a small MLP, seconds)."""

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch.func import functional_call

from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.errors import ConfigError
from fedcli.fl.engine import Simulation, sample_cohort
from fedcli.fl.personal import client_model
from fedcli.runner import run_train
from runkit import MPIEXEC
from simkit import COLS, PERSONAL_BASE, accuracy_by_hand, assert_learned, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal


learned = assert_learned


# ------------------------------------------------------------------ the evaluation and the CSV
def test_metrics_csv_has_personal_acc(tmp_path):
    for algo in ("fedavg", "fedavg-c"):
        run_train(TrainConfig(**{**BASE, "algo": algo, "out": str(tmp_path / algo)}).validate(), quiet=True)
    with open(tmp_path / "fedavg/metrics.csv") as f:
        plain = list(csv.DictReader(f))
    with open(tmp_path / "fedavg-c/metrics.csv") as f:
        pers = list(csv.DictReader(f))
    header = (tmp_path / "fedavg-c/metrics.csv").read_text().splitlines()[0].split(",")
    assert header[-1] == "personal_acc" and header[:5] == ["round", "iteration", "train_loss", "test_loss", "test_acc"]
    assert len(plain) == len(pers) == 2 and all(r["personal_acc"] == "" for r in plain)
    assert all(0.0 < float(r["personal_acc"]) <= 1.0 for r in pers)
    for a, b in zip(plain, pers):  # fedavg-c is fedavg plus the client-side evaluation
        assert a["test_acc"] == b["test_acc"] and a["comm_params"] == b["comm_params"]
    summary = json.loads((tmp_path / "fedavg-c/manifest.json").read_text())["summary"]
    best = max(float(r["personal_acc"]) for r in pers)
    assert summary["best_personal_acc"] == pytest.approx(best)
    assert float(pers[summary["best_personal_round"] - 1]["personal_acc"]) == pytest.approx(best)


def test_personal_acc_is_pooled_over_all_local_test_samples(data):
    sim, s = run(data, algo="fedavg-c")
    pooled, mean = accuracy_by_hand(sim, lambda c: client_model(sim, c))
    assert s.history[-1]["personal_acc"] == pytest.approx(pooled, abs=1e-12)
    assert set(sim.store.tables[f"local.p:{sim.layers[0].name}"]) == {0, 1, 2, 3}  # every client holds its model
    # and the local models are the trained ones, not the global model
    assert any(
        not torch.equal(client_model(sim, c)[0][n], sim.global_params[n]) for c in range(4) for n in sim.global_params
    )


def test_partial_participation_clients_never_sampled_hold_the_global_model(data):
    sim, s = run(data, algo="fedavg-c", active_ratio=0.5, rounds=1)
    trained = set(sample_cohort(0, 0, 4, 2))
    stored = set(sim.store.tables[f"local.p:{sim.layers[0].name}"])
    assert stored == trained and len(trained) == 2
    glob = (dict(sim.global_params), dict(sim.global_buffers))
    pooled, _ = accuracy_by_hand(sim, lambda c: client_model(sim, c) if c in trained else glob)
    assert s.history[-1]["personal_acc"] == pytest.approx(pooled, abs=1e-12)


def test_personal_clients_cohort_pools_only_the_rounds_joining_clients(data):
    """FedALA Table 7, rho = 0.5*: the accuracy over the local test samples of the clients that trained in the round."""
    sim, s = run(data, algo="fedavg-c", active_ratio=0.5, rounds=2, personal_clients="cohort")
    last = set(sample_cohort(0, 1, 4, 2))  # the clients of round 1, the round the last evaluation follows
    assert len(last) == 2
    correct = total = 0
    with torch.no_grad():
        for c in sorted(last):
            idx = torch.as_tensor(sim.partition.test[c])
            params, buffers = client_model(sim, c)
            out = functional_call(sim.model, (params, buffers), (sim.train_x[idx],))
            correct += int((out.argmax(1) == sim.train_y[idx]).sum())
            total += idx.numel()
    assert s.history[-1]["personal_acc"] == pytest.approx(correct / total, abs=1e-12)
    # the default pools every client's model: a different number here (two clients never trained in round 1)
    _, every = run(data, algo="fedavg-c", active_ratio=0.5, rounds=2)
    assert every.history[-1]["personal_acc"] != s.history[-1]["personal_acc"]
    assert [r["test_acc"] for r in every.history] == [r["test_acc"] for r in s.history]  # evaluation only


def test_personalized_methods_need_local_test_splits(data, tmp_path):
    nodata = load_data_and_partition(config(client_test_fraction=0.0))
    for algo in ("fedavg-c", "fedala", "ditto"):
        with pytest.raises(ConfigError, match="client-test-fraction"):
            Simulation(config(algo=algo, client_test_fraction=0.0)).setup(*nodata)
    # ALA on a traditional method without local test splits still runs (its local models are kept), no personal_acc
    sim = Simulation(config(algo="fedavg", init="ala", client_test_fraction=0.0, rounds=2)).setup(*nodata)
    s = sim.run()
    assert all(r["personal_acc"] == "" for r in s.history) and len(sim.init.initial_passes) == 4


def test_fedprox_c_learns_and_is_fedprox(data):
    sim, s = run(data, algo="fedprox-c", mu=0.001, rounds=3)
    learned(s)
    same((sim, s), run(data, algo="fedprox", mu=0.001, rounds=3), cols=COLS)


# ------------------------------------------------------------------ learning: the rest of the baselines
def test_fedavg_c_and_fedrep_learn(data):
    learned(run(data, algo="fedavg-c", rounds=3)[1])
    learned(run(data, algo="fedrep", head_epochs=1.0, rounds=3)[1])


# ------------------------------------------------------------------ MPI: results do not depend on the process count
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_personal_acc_identical_for_1_and_2_processes(tmp_path):
    from fedcli.cli.main import main
    from runkit import PERSONAL_RUN, assert_same_clients, mpirun_each, rows, train_args

    # partial participation shares client state; full does not: FedFomo's ranks each store their own clients' models
    # and allgather them (FedAMP's path too; test_fedfomo.py's MPI case, in make test-long, runs it alone)
    cases = (("fedala", "0.6"), ("fedrep", "1"), ("fedfomo", "1"))
    extra = {"fedfomo": {"fomo_m": 3}}
    both = {
        c: train_args(
            PERSONAL_RUN, device=None, ala_num_pre_loss=3, algo=c[0], active_ratio=c[1], **extra.get(c[0], {})
        )
        for c in cases
    }
    for (algo, ratio), args in both.items():
        assert main([*args, "--out", str(tmp_path / f"{algo}{ratio}-1")]) == 0
    # the two-process runs in one mpiexec (its ranks import torch once)
    p = mpirun_each(
        2, [[*args, "--out", str(tmp_path / f"{algo}{ratio}-2")] for (algo, ratio), args in both.items()], timeout=400
    )
    assert p.returncode == 0, p.stderr
    for algo, ratio in cases:
        one, two = (rows(tmp_path / f"{algo}{ratio}-{n}/metrics.csv") for n in (1, 2))
        assert len(one) == len(two) == 2
        for a, b in zip(one, two):
            assert a["comm_params"] == b["comm_params"] and a["comm_bytes"] == b["comm_bytes"]
            for col in ("test_acc", "personal_acc"):
                assert abs(float(a[col]) - float(b[col])) <= 1e-5, (algo, ratio, col, a[col], b[col])
        # each client's row, wherever its process was (test_clients_csv.py's MPI case in make test-long)
        assert_same_clients(tmp_path / f"{algo}{ratio}-1", tmp_path / f"{algo}{ratio}-2", 2 * 5)
