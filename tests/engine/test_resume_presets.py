"""Every preset resumes bitwise: Ctrl-C inside round 2 of 5, ``--resume``, and the run equals an uninterrupted one in
every CSV column but ``wall_s`` and in ``model.pt`` (server state: FedAdam/FedAMS moments, FedDyn's h, SCAFFOLD's c,
Mime's momentum; client state: control variates, personal models, FedALA weights, FedRep heads ...)."""

import csv
import os
import signal
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl import engine
from fedcli.results import checkpoint
from fedcli.specs import METHODS

PRESETS = sorted({m.name for m in METHODS.values()})
ARGS = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "6",
    "--active-ratio",
    "0.5",
    "--rounds",
    "5",
    "--tau",
    "2",
    "--local-epochs",
    "0",
    "--batch-size",
    "8",
    "--lr",
    "0.05",
    "--momentum",
    "0.5",
    "--client-test-fraction",
    "0.25",
    "--eval-every",
    "1",
    "--checkpoint-every",
    "1",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--workers",
    "1",
    "--seed",
    "2",
    "--quiet",
]
CSVS = ("metrics.csv", "layers.csv", "intervals.csv", "skipped.csv", "timing.csv")


def test_the_presets_the_issue_named_are_covered():
    named = {
        "fedadam",
        "mime",
        "fedams",
        "mimelamb",
        "fedrep",
        "perfedavg",
        "fednova",
        "fedpaq",
        "fedcom",
        "fedprox",
        "fedprox-c",
        "fedavg-c",
        "fedlama",
        "fedlamb",
        "fedala",
        "scaffold",
        "feddyn",
        "ditto",
    }
    assert named <= set(PRESETS)


def cohort_args(algo: str) -> list[str]:
    """Half the clients per round, or all of them for the cross-silo presets (APPLE, FedFomo, ...), which refuse
    less."""
    try:
        TrainConfig(algo=algo, dataset="digits", clients=6, active_ratio=0.5).validate()
        return []
    except ConfigError:
        return ["--active-ratio", "1", "--clients", "3"]


def table(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", PRESETS)
def test_every_preset_resumes_bitwise(algo, tmp_path, monkeypatch, capsys):
    args = ["train", "--algo", algo, *ARGS, *cohort_args(algo)]
    ref, out = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0

    sync = engine.Simulation.synchronize
    sent = []

    def ctrl_c_in_round_1(self, cohort, layers, step, *a, **k):  # the second round (0-based 1), its first sync
        if cohort.round_idx == 1 and not sent:
            sent.append(step)
            os.kill(os.getpid(), signal.SIGINT)
        return sync(self, cohort, layers, step, *a, **k)

    monkeypatch.setattr(engine.Simulation, "synchronize", ctrl_c_in_round_1)
    with pytest.raises(SystemExit) as e:
        main(args + ["--out", str(out)])
    monkeypatch.setattr(engine.Simulation, "synchronize", sync)
    capsys.readouterr()
    assert e.value.code == 130
    assert [r for r, _ in checkpoint.list_checkpoints(out)][-1] == 2 and not (out / "model.pt").exists()
    assert len(table(out / "metrics.csv")) == 2

    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    for f in CSVS:
        assert table(ref / f) == table(out / f), f
    assert len(table(out / "metrics.csv")) == 5
    assert (ref / "model.pt").read_bytes() == (out / "model.pt").read_bytes()
