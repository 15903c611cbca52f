"""clients.csv: each client's sample counts, loss and accuracy of its personal model and of the global model at every
evaluation of a personalized method; written for every personalized preset, cut back on resume, the same under MPI."""

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.func import functional_call

from fedcli.cli.main import main
from fedcli.cli.train import run_train
from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.results.rundir import CLIENTS_COLUMNS
from fedcli.specs import METHODS
from runkit import MPIEXEC, PERSONAL_RUN, ROOT, assert_same_clients, mpirun, run_forked, train_args
from simkit import PERSONAL_BASE

PERSONALIZED = sorted(name for name, m in METHODS.items() if m.personalized)


def read(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_every_personalized_preset_is_listed():
    # the presets of FedALA's comparison (docs/fidelity-fedala.md, "Evaluation"), found by their Method flag, not by a
    # list here
    assert {
        "fedala",
        "fedavg-c",
        "fedprox-c",
        "perfedavg",
        "fedrep",
        "pfedme",
        "ditto",
        "fedamp",
        "fedphp",
        "fedfomo",
        "apple",
        "partialfed",
    } <= set(PERSONALIZED)


@pytest.mark.parametrize("algo", PERSONALIZED)
def test_clients_csv_for_every_personalized_preset(algo, tmp_path):
    """One row per client per evaluation; the test-sample-weighted mean of the clients' personal accuracies is
    metrics.csv's personal_acc (sum_i n_i acc_i / sum_i n_i, worked out here from the rows)."""
    cfg = TrainConfig(
        **{**PERSONAL_BASE, "algo": algo, "lr": 0.05, "out": str(tmp_path / algo), "ala_num_pre_loss": 3}
    ).validate()
    run_train(cfg, quiet=True)
    rows, metrics = read(tmp_path / algo / "clients.csv"), read(tmp_path / algo / "metrics.csv")
    assert (tmp_path / algo / "clients.csv").read_text().splitlines()[0].split(",") == CLIENTS_COLUMNS
    assert len(metrics) == 2 and len(rows) == 2 * 4
    for m in metrics:
        mine = [r for r in rows if r["round"] == m["round"]]
        assert [int(r["client"]) for r in mine] == [0, 1, 2, 3] and {r["iteration"] for r in mine} == {m["iteration"]}
        n = [int(r["test_samples"]) for r in mine]
        correct = [round(float(r["personal_acc"]) * k) for r, k in zip(mine, n)]  # whole predictions
        assert sum(correct) / sum(n) == pytest.approx(float(m["personal_acc"]), abs=1e-12)
        for r in mine:
            assert float(r["personal_loss"]) >= 0 and int(r["train_samples"]) > 0
            # the global model is evaluated where the method has one whole model (FedRep keeps its head local)
            assert (r["global_acc"] == "") == (algo == "fedrep"), r


def test_clients_csv_by_hand(tmp_path):
    """FedAvg-C, 4 clients, 2 rounds: each number of the last evaluation worked out from the partition and the final
    models: the global model is model.pt, and a client's FedAvg-C model is its own training of the last round, which
    FedAvg's average of the 4 trained models gives back (x = sum_i p_i x_i)."""
    cfg = TrainConfig(**{**PERSONAL_BASE, "algo": "fedavg-c", "out": str(tmp_path / "run")}).validate()
    from fedcli.fl.engine import Simulation

    sim = Simulation(cfg).setup()
    run_train(cfg, quiet=True)
    _, partition = load_data_and_partition(cfg)
    rows = [r for r in read(tmp_path / "run" / "clients.csv") if r["round"] == "2"]
    state = torch.load(tmp_path / "run" / "model.pt")
    sim.model.load_state_dict(state)
    sim.model.eval()
    x, y = sim.train_x, sim.train_y
    for c, r in enumerate(rows):
        idx = torch.as_tensor(partition.test[c], dtype=torch.long)
        assert int(r["test_samples"]) == len(partition.test[c]) and int(r["train_samples"]) == len(partition.train[c])
        with torch.no_grad():
            out = sim.model(x[idx])
        assert float(r["global_acc"]) == pytest.approx(float((out.argmax(1) == y[idx]).double().mean()), abs=1e-12)
        assert float(r["global_loss"]) == pytest.approx(float(torch.nn.functional.cross_entropy(out, y[idx])), rel=1e-5)
    # the sample-weighted mean of the personal accuracies, by hand from the rows
    n = [int(r["test_samples"]) for r in rows]
    pooled = sum(float(r["personal_acc"]) * k for r, k in zip(rows, n)) / sum(n)
    assert pooled == pytest.approx(float(read(tmp_path / "run" / "metrics.csv")[-1]["personal_acc"]), abs=1e-12)


def test_ala_on_any_method_writes_clients_csv(tmp_path):
    """--init ala makes FedAvg personalized (evaluated on the clients' models): it gets clients.csv too, also when only
    the round's cohort is pooled (--personal-clients cohort: the rows are that cohort's clients)."""
    cfg = TrainConfig(
        **{
            **PERSONAL_BASE,
            "algo": "fedavg",
            "init": "ala",
            "ala_num_pre_loss": 3,
            "active_ratio": 0.5,
            "personal_clients": "cohort",
            "out": str(tmp_path / "a"),
        }
    ).validate()
    run_train(cfg, quiet=True)
    rows, metrics = read(tmp_path / "a" / "clients.csv"), read(tmp_path / "a" / "metrics.csv")
    from fedcli.fl.cohort import sample_cohort

    for m in metrics:
        mine = [r for r in rows if r["round"] == m["round"]]
        assert [int(r["client"]) for r in mine] == sorted(sample_cohort(0, int(m["round"]) - 1, 4, 2))
        n = [int(r["test_samples"]) for r in mine]
        correct = [round(float(r["personal_acc"]) * k) for r, k in zip(mine, n)]
        assert sum(correct) / sum(n) == pytest.approx(float(m["personal_acc"]), abs=1e-12)


def test_not_personalized_writes_no_clients_csv(tmp_path):
    run_train(TrainConfig(**{**PERSONAL_BASE, "algo": "fedavg", "out": str(tmp_path / "a")}).validate(), quiet=True)
    assert not (tmp_path / "a" / "clients.csv").exists()


KILLER = """
import os, signal, sys
from fedcli.fl import engine
orig = engine.Simulation.run_round
def run_round(self, state):
    if state.round_idx == 3:  # SIGKILL in round 4: rounds 1-3 written, the checkpoint after round 2
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(self, state)
engine.Simulation.run_round = run_round
from fedcli.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

# FedALA, 5 rounds on 4 clients (a smaller MLP), a checkpoint every 2 rounds
RESUME_ARGS = train_args(
    PERSONAL_RUN, algo="fedala", mlp_hidden=16, clients=4, rounds=5, ala_num_pre_loss=3, checkpoint_every=2
)


@pytest.mark.timeout(300)
def test_sigkill_then_resume_cuts_clients_csv_back(tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(RESUME_ARGS + ["--out", str(ref)]) == 0
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = run_forked(KILLER, [*RESUME_ARGS, "--out", str(run)], env=env, timeout=240)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert {r["round"] for r in read(run / "clients.csv")} == {"1", "2", "3"}  # round 3 is past the checkpoint
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert (ref / "clients.csv").read_bytes() == (run / "clients.csv").read_bytes()


@pytest.mark.mpi
@pytest.mark.long(
    reason="clients.csv under mpiexec -n 2 (5 s of CPU a case): make test compares FedALA's (0.6, the same run) in "
    "test_personalized.py's test_personal_acc_identical_for_1_and_2_processes, and Ditto's --workers twin, "
    "test_workers.py's test_every_personalized_preset_gives_the_same_results_for_any_number_of_workers[ditto]"
)
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
@pytest.mark.parametrize("algo,ratio", [("fedala", "0.6"), ("ditto", "1")])
def test_clients_csv_same_for_1_and_2_processes(algo, ratio, tmp_path):
    args = train_args(PERSONAL_RUN, device=None, algo=algo, active_ratio=ratio, ala_num_pre_loss=3)
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    p = mpirun(2, [*args, "--out", str(tmp_path / "two")])
    assert p.returncode == 0, p.stderr
    assert_same_clients(tmp_path / "one", tmp_path / "two", 2 * 5)
