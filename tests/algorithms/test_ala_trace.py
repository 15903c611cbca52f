"""``--ala-trace``: the data of FedALA's Figures 3 (ALA's loss per weight-learning pass) and 5 (the training loss of
the initialized and the trained local models per round), and the report's drawings of them."""

import csv

import numpy as np
import pytest
import torch
from torch.func import functional_call

from fedcli.config import TrainConfig
from fedcli.fl.engine import Simulation
from fedcli.fl.personal import client_model
from fedcli.reports.ala_figures import objective
from fedcli.results.rundir import RunDir
from fedcli.results.runlog import RunLog

BASE = dict(
    algo="fedala",
    dataset="digits",
    model="mlp",
    mlp_hidden="16",
    clients=4,
    active_ratio=1.0,
    partition="pathological",
    classes_per_client=2,
    client_test_fraction=0.25,
    rounds=4,
    local_epochs=1.0,
    batch_size=16,
    lr=0.1,
    eval_every=1,
    device="cpu",
    threads=1,
    ala_trace=True,
)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def loss_on_training_split(sim, params, buffers, client):
    idx = sim.client_indices[client]
    logits = functional_call(sim.model, (params, buffers), (sim.train_x[idx],))
    return float(torch.nn.functional.cross_entropy(logits, sim.train_y[idx]))


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    sim = Simulation(TrainConfig(**BASE).validate()).setup()
    rd = RunDir(out)
    sim.attach(rd, RunLog(rd))
    init = ({n: p.clone() for n, p in sim.global_params.items()}, {n: b.clone() for n, b in sim.global_buffers.items()})
    sim.run()
    sim.run_dir.close()
    return sim, init, out


def test_ala_passes(traced):
    sim, _, out = traced
    ala = rows(out / "ala.csv")
    assert list(ala[0]) == ["round", "client", "pass", "stage", "loss"]
    assert {int(r["round"]) for r in ala} == {2, 3, 4}  # round 1: local = global, ALA skipped
    for c in range(4):
        first = [float(r["loss"]) for r in ala if int(r["client"]) == c and r["round"] == "2"]
        assert all(r["stage"] == "initial" for r in ala if r["round"] == "2")
        # the reference's stop rule, by hand: more than 10 losses and the population std of the last 10 below 0.1
        done = [len(first[:k]) > 10 and np.std(first[k - 10 : k]) < 0.1 for k in range(1, len(first) + 1)]
        assert done[-1] and not any(done[:-1]), first
        assert len(first) == sim.init.initial_passes[c]
        for r in (3, 4):  # later rounds: one pass
            later = [x for x in ala if int(x["client"]) == c and int(x["round"]) == r]
            assert len(later) == 1 and later[0]["stage"] == "later" and later[0]["pass"] == "1"


def test_local_losses(traced):
    sim, (p0, b0), out = traced
    loss = rows(out / "local_loss.csv")
    assert list(loss[0]) == ["round", "client", "samples", "initialized", "trained"]
    assert len(loss) == 4 * 4
    for c in range(4):
        r1 = next(r for r in loss if r["round"] == "1" and int(r["client"]) == c)
        assert int(r1["samples"]) == len(sim.client_indices[c])
        # round 1 starts every client from the initial global model
        assert float(r1["initialized"]) == pytest.approx(loss_on_training_split(sim, p0, b0, c), rel=1e-5)
        # the last round's trained model is the one each client keeps
        r4 = next(r for r in loss if r["round"] == "4" and int(r["client"]) == c)
        params, buffers = client_model(sim, c)
        assert float(r4["trained"]) == pytest.approx(loss_on_training_split(sim, params, buffers, c), rel=1e-5)
        assert float(r4["trained"]) < float(r1["initialized"])


def test_objective_is_the_sample_weighted_mean():
    table = [
        {"round": 1, "client": 0, "samples": 1, "initialized": 1.0, "trained": 0.5},
        {"round": 1, "client": 1, "samples": 3, "initialized": 2.0, "trained": 1.0},
        {"round": 2, "client": 0, "samples": 1, "initialized": 0.2, "trained": 0.1},
        {"round": 2, "client": 1, "samples": 3, "initialized": 0.6, "trained": 0.3},
    ]
    got = objective(table)
    assert [g[0] for g in got] == [1, 2]
    assert got[0][1:] == pytest.approx((1.75, 0.875)) and got[1][1:] == pytest.approx((0.5, 0.25))


def test_report_draws_them(traced):
    from fedcli.reports.single import load_run, write_figures

    _, _, out = traced
    import json

    man = {
        "config": TrainConfig(**BASE).validate().to_dict(),
        "method": {"name": "fedala", "label": "FedALA"},
        "status": "running",
    }
    (out / "manifest.json").write_text(json.dumps(man))
    files = write_figures([load_run(out)], out / "figures")
    names = {f.name for f in files}
    assert {"ala-loss.png", "local-loss.png", "ala-loss.txt"} <= names
    assert (out / "figures" / "ala-loss.png").stat().st_size > 10000


def test_off_by_default(tmp_path):
    sim = Simulation(TrainConfig(**{**BASE, "ala_trace": False, "rounds": 2}).validate()).setup()
    rd = RunDir(tmp_path)
    sim.attach(rd, RunLog(rd))
    sim.run()
    assert not (tmp_path / "ala.csv").exists() and not (tmp_path / "local_loss.csv").exists()


def test_a_resumed_traced_run_has_the_same_rows(tmp_path, monkeypatch, capsys):
    """A run stopped by SIGTERM inside round 3 and resumed writes the rows of the run that was never stopped: the
    checkpoint records the CSVs' lengths and the resume cuts them back (no round twice, none missing)."""
    import signal

    import runkit

    args = [
        "train",
        "--algo",
        "fedala",
        "--mlp-hidden",
        "16",
        "--clients",
        "4",
        "--partition",
        "pathological",
        "--rounds",
        "5",
        "--local-epochs",
        "0",
        "--tau",
        "2",
        "--batch-size",
        "16",
        "--ala-trace",
        "--checkpoint-every",
        "2",
        "--device",
        "cpu",
        "--quiet",
    ]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert runkit.main(args + ["--out", str(ref)]) == 0
    code, err = runkit.interrupted(monkeypatch, capsys, run, 2, signal.SIGTERM, args)
    assert code == 143, err
    assert runkit.main(["train", "--resume", str(run), "--quiet"]) == 0
    for name in ("ala.csv", "local_loss.csv"):
        assert rows(ref / name) == rows(run / name) and rows(ref / name), name
