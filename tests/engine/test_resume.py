"""Crash safety: checkpoints, SIGKILL + --resume is bitwise identical to an uninterrupted run, SIGTERM/SIGINT."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import fedcli.models
import runkit
from fedcli.cli.main import main
from fedcli.results import checkpoint
from runkit import error_lines, rows, run_main

ROOT = Path(__file__).resolve().parents[2]

# 16 rounds of phi*tau = 4 iterations, a metrics row every round, a checkpoint every 3 rounds.
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
    "--algo",
    "fedlama",
    "--tau",
    "2",
    "--phi",
    "2",
    "--iterations",
    "64",
    "--batch-size",
    "16",
    "--lr",
    "0.05",
    "--weight-decay",
    "1e-4",
    "--eval-every",
    "4",
    "--checkpoint-every",
    "3",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


def run_killed(sig: int, round_idx: int, out: Path) -> subprocess.CompletedProcess:
    return runkit.run_killed(sig, round_idx, ARGS + ["--out", str(out)])


def assert_same_run(a: Path, b: Path) -> None:
    ra, rb = rows(a / "metrics.csv"), rows(b / "metrics.csv")
    assert len(ra) == len(rb) == 16
    assert ra == rb  # every column but wall time, as text: bitwise-equal floats
    assert (a / "intervals.csv").read_bytes() == (b / "intervals.csv").read_bytes()
    assert (a / "layers.csv").read_bytes() == (b / "layers.csv").read_bytes()
    assert (a / "model.pt").read_bytes() == (b / "model.pt").read_bytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(ARGS + ["--out", str(out), "--keep-checkpoints", "20"]) == 0
    return out


def test_sigkill_then_resume_is_bitwise_identical(reference, tmp_path, capsys):
    out = tmp_path / "run"
    p = run_killed(signal.SIGKILL, 10, out)
    assert p.returncode == -signal.SIGKILL, p.stderr
    # the run could not mark itself; its watchdog (fedcli/results/sentinel.py) marks it failed within seconds
    for _ in range(300):  # it polls every 0.25 s (and waits 1 s while another of the run's processes lives): 30 s
        if json.loads((out / "manifest.json").read_text())["status"] != "running":
            break
        time.sleep(0.1)
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "ended without closing the run" in man["error"], man
    # killed in round 10: checkpoints after 6 and 9 rounds (keep 2), rows for 10 rounds already on disk
    assert [r for r, _ in checkpoint.list_checkpoints(out)] == [6, 9]
    assert len(rows(out / "metrics.csv")) == 10
    assert not (out / "model.pt").exists()

    # control: the weights changed between the two checkpoints, and each equals the uninterrupted run's
    c6, c9 = (checkpoint.load(out / "checkpoints" / f"round-{r:06d}.pt") for r in (6, 9))
    assert any(not torch.equal(c6["global"]["params"][n], c9["global"]["params"][n]) for n in c9["global"]["params"])
    r9 = checkpoint.load(reference / "checkpoints" / "round-000009.pt")
    for part in ("params", "buffers"):
        for n, t in c9["global"][part].items():
            assert torch.equal(t, r9["global"][part][n]), n
    assert c9["schedule"] == r9["schedule"] and c9["ledger"] == r9["ledger"]
    assert c9["round"] == 9 and c9["csv"]["metrics.csv"]["rows"] == 9

    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert_same_run(reference, out)
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "completed" and man["resumes"][-1]["round"] == 9
    assert man["resumes"][-1]["checkpoint"] == "round-000009.pt"


def test_the_watchdog_waits_only_while_another_of_the_runs_processes_lives(tmp_path, monkeypatch):
    """fedcli/results/sentinel.py: a run whose processes are all gone while its manifest says running is marked failed
    at once (a process that is gone has written all it will); while another of them lives (an MPI rank, the pool's
    parent) the watchdog first gives it GRACE_S to close the run, and leaves a run it closed as it is."""
    from fedcli.results import sentinel

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    slept = []

    def run(pids, closes=None):
        (tmp_path / "manifest.json").write_text(json.dumps({"status": "running", "pids": pids}))
        slept.clear()

        def sleep(s):
            slept.append(s)
            if closes:
                (tmp_path / "manifest.json").write_text(json.dumps({"status": closes, "pids": pids}))

        monkeypatch.setattr(sentinel.time, "sleep", sleep)
        sentinel.watch(tmp_path, pids)
        monkeypatch.undo()
        return json.loads((tmp_path / "manifest.json").read_text())

    man = run([dead.pid])
    assert slept == [] and man["status"] == "failed" and f"process {dead.pid} ended" in man["error"]
    man = run([os.getpid(), dead.pid])
    assert slept == [sentinel.GRACE_S] and man["status"] == "failed"
    assert run([os.getpid(), dead.pid], closes="completed")["status"] == "completed" and slept == [sentinel.GRACE_S]


def interrupted(monkeypatch, capsys, out: Path, round_idx: int, sig=signal.SIGINT, args=ARGS):
    """Run this module's run in this process and send it ``sig`` inside round ``round_idx``; (exit code, stderr)."""
    return runkit.interrupted(monkeypatch, capsys, out, round_idx, sig, args)


def test_sigterm_writes_checkpoint_and_exits_143(reference, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    code, err = interrupted(monkeypatch, capsys, out, 4, signal.SIGTERM)
    assert code == 143, err
    lines = error_lines(err)
    # said at once when the signal arrives (inside round 5), then the closing line: the round and the checkpoint agree
    assert (
        len(lines) == 2
        and lines[0].startswith("fedcli: SIGTERM: stopping after round 5")
        and "again to stop now" in lines[0]
    )
    assert "interrupted by SIGTERM after round 5 " in lines[1] and "round-000005.pt holds rounds 1-5" in lines[1]
    assert lines[1].endswith(f"continue with: fedcli train --resume {out}")
    assert "Traceback" not in err
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["checkpoint"].endswith("round-000005.pt")
    assert [r for r, _ in checkpoint.list_checkpoints(out)] == [3, 5]  # the periodic one and the one at the signal
    # a changed experiment is refused, an allowed change is not
    code, _, err = run_main(["train", "--resume", str(out), "--lr", "0.5"], capsys)
    assert code == 2 and "--lr 0.5 would change the experiment" in err
    assert main(["train", "--resume", str(out), "--quiet", "--keep-checkpoints", "3", "--lr", "0.05"]) == 0
    assert_same_run(reference, out)
    assert [r for r, _ in checkpoint.list_checkpoints(out)] == [9, 12, 15]
    # a completed run is not resumed again
    code, _, err = run_main(["train", "--resume", str(out)], capsys)
    assert code == 2 and "already completed" in err


def test_dropout_rng_state_resumes_bitwise(tmp_path, monkeypatch, capsys):
    """Dropout under vmap draws from the global torch generator: the checkpoint carries its state."""
    orig = fedcli.models.build_model
    monkeypatch.setattr(fedcli.models, "build_model", lambda *a, **k: orig(*a, **{**k, "dropout": 0.3}))
    i = ARGS.index("--iterations")
    args = ARGS[: i + 1] + ["24"] + ARGS[i + 2 :]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0
    code, err = interrupted(monkeypatch, capsys, run, 2, signal.SIGINT, args)  # Ctrl-C
    assert code == 130 and "interrupted by SIGINT" in err
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    ra, rb = rows(ref / "metrics.csv"), rows(run / "metrics.csv")
    assert ra == rb and len(ra) == 6
    assert (ref / "model.pt").read_bytes() == (run / "model.pt").read_bytes()


def test_resume_refusals_and_corrupt_checkpoints(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(["train", "--resume", str(tmp_path / "nope")], capsys)
    assert code == 2 and "no such folder" in err
    out = tmp_path / "run"
    assert interrupted(monkeypatch, capsys, out, 7)[0] == 130
    for args, needle in (
        [["--recipe", "x.toml"], "--recipe"],
        [["--tau", "3"], "--tau"],
        [["--out", str(tmp_path / "x")], "--out"],
        [["--overwrite"], "--overwrite"],
        [["--algo", "fedavg"], "--algo"],
    ):
        code, _, err = run_main(["train", "--resume", str(out), *args], capsys)
        assert code == 2 and needle in err and "Traceback" not in err, err
    ckpts = checkpoint.list_checkpoints(out)
    assert [r for r, _ in ckpts] == [6, 8]
    # the newest checkpoint is corrupt: resume falls back to the one before, with a warning
    ckpts[-1][1].write_bytes(ckpts[-1][1].read_bytes()[:100])
    assert main(["train", "--resume", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipping a damaged checkpoint" in err and "round-000008.pt" in err
    assert json.loads((out / "manifest.json").read_text())["resumes"][-1]["round"] == 6


def test_resume_refuses_edited_csv_and_unreadable_checkpoints(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert interrupted(monkeypatch, capsys, out, 4)[0] == 130
    good = (out / "metrics.csv").read_text()
    (out / "metrics.csv").write_text(good.splitlines()[0] + "\n")
    code, _, err = run_main(["train", "--resume", str(out)], capsys)
    assert code == 3 and "metrics.csv" in err and "checkpoint recorded" in err
    (out / "metrics.csv").write_text(good)
    for _, path in checkpoint.list_checkpoints(out):
        path.write_bytes(b"not a zip")
    code, _, err = run_main(["train", "--resume", str(out)], capsys)
    assert code == 3 and "round-000003.pt" in err and "expected a fedcli checkpoint" in err


def test_resume_without_checkpoint_starts_over(reference, tmp_path, monkeypatch, capsys):
    """Killed before its first checkpoint: --resume runs it from the start (same result)."""
    out = tmp_path / "run"
    assert interrupted(monkeypatch, capsys, out, 1)[0] == 130  # Ctrl-C in round 1: checkpoint after 2 rounds
    for _, path in checkpoint.list_checkpoints(out):
        path.unlink()
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert_same_run(reference, out)


@pytest.mark.parametrize("algo", ["scaffold", "fedlamb", "ditto", "pfedme", "fedphp", "partialfed", "fedfomo"])
def test_resume_carries_method_state(algo, tmp_path, monkeypatch, capsys):
    """Per-client store (control variates, moments, personal models, ALA weights) and server state survive."""
    args = [
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "16",
        "--clients",
        "6",
        "--active-ratio",
        "0.5",
        "--algo",
        algo,
        "--iterations",
        "16",
        "--tau",
        "2",
        "--batch-size",
        "8",
        "--lr",
        "0.05",
        "--momentum",
        "0.5",
        "--client-test-fraction",
        "0.25",
        "--eval-every",
        "2",
        "--checkpoint-every",
        "2",
        "--device",
        "cpu",
        "--local-epochs",
        "0",
        "--threads",
        "1",
        "--quiet",
    ]  # rounds of tau steps (personalized presets default to epochs)
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0
    assert interrupted(monkeypatch, capsys, run, 4, signal.SIGINT, args)[0] == 130
    ck = checkpoint.load(checkpoint.list_checkpoints(run)[-1][1])
    assert ck["round"] == 5 and (
        ck["ranks"][0]["store"] or any(ck["ranks"][0]["parts"].values())
    )  # there is state to carry
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert rows(ref / "metrics.csv") == rows(run / "metrics.csv")
    assert (ref / "model.pt").read_bytes() == (run / "model.pt").read_bytes()
