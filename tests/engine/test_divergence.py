"""Divergence guard: a non-finite loss or update never reaches the global model (--on-diverge stop | skip-client)."""

import csv
import json

import pytest
import torch

from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.errors import DivergenceError
from fedcli.fl import trainers
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation, sample_cohort
from runkit import error_lines, rows

BASE = dict(
    dataset="digits",
    model="mlp",
    mlp_hidden="32",
    clients=8,
    active_ratio=0.5,
    iterations=32,
    tau=2,
    phi=2,
    batch_size=16,
    lr=0.05,
    eval_every=4,
    device="cpu",
    threads=1,
    checkpoint_every=0,
)
ARGS = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "32",
    "--clients",
    "8",
    "--active-ratio",
    "0.5",
    "--iterations",
    "32",
    "--tau",
    "2",
    "--phi",
    "2",
    "--batch-size",
    "16",
    "--lr",
    "0.05",
    "--eval-every",
    "4",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]
ROUND = 3
VICTIM = sample_cohort(0, ROUND, 8, 4)[1]  # the second client of round 3's cohort (seed 0)


def poison(monkeypatch, what="grad", round_idx=ROUND, client=VICTIM, step=2):
    """Make one client's gradient (or loss) non-finite at one local step of one round."""
    calls = {}
    for cls in (trainers.VmapTrainer, trainers.LoopTrainer):
        orig = cls.grads

        def grads(self, cohort, x, y, w, _orig=orig):
            g, losses = _orig(self, cohort, x, y, w)
            calls[cohort.round_idx] = calls.get(cohort.round_idx, 0) + 1
            if cohort.round_idx == round_idx and calls[round_idx] == step and client in cohort.clients:
                k = cohort.clients.index(client)
                if what == "grad":
                    g = {n: t.clone() for n, t in g.items()}
                    next(iter(g.values()))[k] = float("nan")
                else:
                    losses = losses.clone()
                    losses[k] = float("inf")
            return g, losses

        monkeypatch.setattr(cls, "grads", grads)


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def run_main(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    return e.value.code, capsys.readouterr().err


def test_stop_exits_4_naming_round_and_client(tmp_path, monkeypatch, capsys):
    poison(monkeypatch)
    out = tmp_path / "run"
    code, err = run_main(ARGS + ["--out", str(out)], capsys)
    lines = error_lines(err)
    assert code == 4 and len(lines) == 1 and "Traceback" not in err
    assert (
        f"round {ROUND + 1}" in lines[0] and f"client {VICTIM}" in lines[0]
    )  # round index 3 is the 4th round and "non-finite update" in lines[0]
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "DivergenceError" in man["error"]
    assert not (out / "model.pt").exists()


def test_stop_keeps_the_global_model_finite(tmp_path, monkeypatch):
    poison(monkeypatch, what="loss")
    sim = Simulation(TrainConfig(**BASE, out=str(tmp_path / "r")).validate()).setup()
    with pytest.raises(DivergenceError, match=f"round {ROUND + 1}.*client {VICTIM} has a non-finite loss"):
        sim.run()
    assert all(bool(torch.isfinite(t).all()) for t in sim.global_params.values())


@pytest.mark.parametrize("algo", ["fedlama", "scaffold"])
def test_skip_client_drops_the_update_and_records_it(tmp_path, monkeypatch, capsys, algo):
    poison(monkeypatch)
    out = tmp_path / "run"
    assert main(ARGS + ["--out", str(out), "--algo", algo, "--on-diverge", "skip-client"]) == 0
    skipped = read(out / "skipped.csv")
    assert [(int(r["round"]), int(r["client"]), int(r["step"])) for r in skipped] == [(ROUND + 1, VICTIM, 2)]  # from 1
    period = 4 if algo == "fedlama" else 2  # phi * tau' or tau local iterations per round
    at = ROUND * period + 2
    assert skipped[0]["reason"].startswith("update of ") and int(skipped[0]["iteration"]) == at
    metrics = read(out / "metrics.csv")
    assert [int(r["skipped_clients"]) for r in metrics] == [int(int(r["iteration"]) >= at) for r in metrics]
    assert any(r["skipped_clients"] == "1" for r in metrics)
    assert all(r["train_loss"] not in ("nan", "inf") for r in metrics)
    model = torch.load(out / "model.pt", weights_only=True)
    assert all(bool(torch.isfinite(t).all()) for t in model.values())
    assert json.loads((out / "manifest.json").read_text())["status"] == "completed"


def test_skip_client_renormalizes_the_others(tmp_path):
    """Hand-computed: client 1 of 3 is dropped, the others are averaged with weights p_i / (p_0 + p_2)."""
    cfg = TrainConfig(
        **{**BASE, "weighting": "samples", "on_diverge": "skip-client"}, out=str(tmp_path / "r")
    ).validate()
    sim = Simulation(cfg).setup()
    sim.sizes[:] = 0
    sim.sizes[[0, 1, 2]] = [10, 30, 30]
    ids = [0, 1, 2]
    g = {n: torch.zeros_like(p) for n, p in sim.global_params.items()}
    cohort = Cohort.from_global(ids, sim.cohort_weights(ids, ids), g, sim.global_buffers)
    cohort.cohort_ids = ids
    name = sim.layers[0].name
    for k, v in enumerate([4.0, float("nan"), 8.0]):
        cohort.params[name][k].fill_(v)
    sim.synchronize(cohort, [0], 1, [0] * len(sim.layers), round_end=False, losses=torch.zeros(3, dtype=torch.float64))
    # (10 * 4 + 30 * 8) / 40 = 7
    assert torch.all(sim.global_params[name] == 7.0) and torch.all(cohort.params[name] == 7.0)
    assert cohort.skipped == {1} and cohort.weights.tolist() == [0.25, 0.0, 0.75]
    assert cohort.skips[0]["client"] == 1 and cohort.skips[0]["reason"] == f"update of {name}"
    # the next sync of the round leaves client 1 out without being told again
    cohort.params[name][1].fill_(float("nan"))
    cohort.params[name][0].fill_(3.0)
    sim.synchronize(cohort, [0], 2, [1] * len(sim.layers), round_end=False)
    assert torch.all(sim.global_params[name] == 0.25 * 3.0 + 0.75 * 7.0) and len(cohort.skips) == 1
    # every client non-finite: nothing can be averaged
    cohort.params[name].fill_(float("inf"))
    with pytest.raises(DivergenceError, match="every client"):
        sim.synchronize(cohort, [0], 3, [2] * len(sim.layers), round_end=False)


def test_stop_policy_leaves_global_untouched_in_synchronize(tmp_path):
    sim = Simulation(TrainConfig(**BASE, out=str(tmp_path / "r")).validate()).setup()
    ids = [0, 1]
    cohort = Cohort.from_global(ids, sim.cohort_weights(ids, ids), sim.global_params, sim.global_buffers)
    cohort.cohort_ids, cohort.round_idx = ids, 5
    before = {n: t.clone() for n, t in sim.global_params.items()}
    last = sim.layers[-1].name
    cohort.params[last][1].fill_(float("-inf"))
    with pytest.raises(
        DivergenceError, match=f"round 6, local step 2: client 1 has a non-finite update of {last}"
    ):  # index 5: the 6th
        sim.synchronize(cohort, list(range(len(sim.layers))), 2, [0] * len(sim.layers), round_end=True)
    assert all(torch.equal(before[n], sim.global_params[n]) for n in before)


def test_a_diverged_run_resumes_into_divergence_again(tmp_path, capsys):
    """Issue 56: the round that diverged (--diverge-factor) was checkpointed before the check, so ``--resume`` went on
    from the blown-up model and ended 'completed' at chance. No checkpoint holds that round now: a resume replays it
    and diverges again (exit 4), and the manifest stays diverged."""
    out = tmp_path / "blown"
    args = [
        "train",
        "--algo",
        "fedavg",
        "--lr",
        "5",
        "--iterations",
        "200",
        "--eval-every",
        "50",
        "--out",
        str(out),
        "--quiet",
    ]
    code, err = run_main(args, capsys)
    assert code == 4 and "training diverged in round 10 (iteration 50)" in err, err
    first = rows(out / "metrics.csv")
    assert [p.name for p in (out / "checkpoints").glob("round-*.pt")] == []  # round 10 diverged: not kept
    code, err = run_main(["train", "--resume", str(out), "--quiet"], capsys)
    assert code == 4 and "training diverged in round 10 (iteration 50)" in err, err
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and man["reason"] == "diverged" and len(man["resumes"]) == 1
    assert rows(out / "metrics.csv") == first  # the same rows again, the blow-up's row included
