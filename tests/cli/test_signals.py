"""Signals from the first instant (issue 29, family 5, and issue 23's SIGHUP/SIGUSR1), with real signals sent to real
``fedcli`` processes:

- SIGINT 0.1, 0.5, 1 and 2 s after launch (imports, data loading, setup): no traceback, exit 130 with one line, and
  never a run folder holding only its lock;
- a signal while the run folder exists but before its manifest does (the setup): the folder is removed;
- a signal after the manifest is written but before the rounds run: the run is ``interrupted`` and resumes;
- SIGHUP in the middle of training is SIGTERM's stop (checkpoint, ``interrupted``, exit 129, the resume command) and
  SIGUSR1 (Slurm's ``--signal=USR1@N``) checkpoints at the round boundary and exits 138; both resume bitwise.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import error_lines
from signalkit import ENV, TINY, paused_child


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def finish(p, go: Path, sig) -> tuple[int, str]:
    p.send_signal(sig)
    time.sleep(0.3)
    go.touch()
    _, err = p.communicate(timeout=240)
    return p.returncode, err


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(TINY + ["--out", str(out)]) == 0
    return out


@pytest.mark.timeout(600)
def test_sigint_at_any_moment_after_launch_leaves_no_traceback_and_no_bare_lock(tmp_path):
    for delay in (0.1, 0.5, 1.0, 2.0):
        out = tmp_path / f"run-{delay}"
        p = subprocess.Popen(
            [sys.executable, "-m", "fedcli", *TINY, "--out", str(out)],
            env=ENV,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=240)
        if delay < 0.5 and err.startswith("Fatal Python error: init_import_site"):
            # on a loaded machine 0.1 s can still be inside the interpreter's own start-up (site's imports, before any
            # fedcli code runs): CPython itself reports that Ctrl-C, and no folder can exist yet
            assert not out.exists(), (delay, err)
            continue
        assert "Traceback" not in err and "Error" not in err.replace("fedcli: error:", ""), (delay, err)
        assert p.returncode in (130, 0), (delay, p.returncode, err)
        lines = error_lines(err)
        assert 1 <= len(lines) <= 2 or p.returncode == 0, (delay, err)
        if out.exists():  # never a folder holding only a lock: a manifest that says what happened
            assert (out / "manifest.json").exists(), (delay, sorted(os.listdir(out)))
            assert manifest(out)["status"] in ("interrupted", "completed"), delay
        else:
            assert "before training started" in err, (delay, err)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_setup_leaves_no_folder(tmp_path, sig):
    out = tmp_path / "run"
    p, go = paused_child(tmp_path, "setup", out)
    assert sorted(os.listdir(out)) == [".fedcli.lock"]  # the state a signal used to leave behind
    code, err = finish(p, go, sig)
    assert code == 128 + sig, err
    assert (
        err.strip()
        == f"fedcli: interrupted by {signal.Signals(sig).name} before training started; nothing was written "
        f"({out} removed)"
    ), err
    assert not out.exists()


@pytest.mark.timeout(300)
def test_an_error_during_the_setup_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "run"
    try:
        code = main(
            ["train", "--dataset", "mnist", "--data-dir", str(tmp_path / "nothing-here"), "--out", str(out), "--quiet"]
        )
    except SystemExit as e:
        code = e.code
    assert code == 3, capsys.readouterr().err
    assert not out.exists()


@pytest.mark.timeout(300)
def test_a_signal_before_the_first_round_marks_the_run_interrupted_and_it_resumes(reference, tmp_path):
    out = tmp_path / "run"
    p, go = paused_child(tmp_path, "armed", out)
    assert manifest(out)["status"] == "running"
    code, err = finish(p, go, signal.SIGHUP)
    assert code == 129, err
    lines = error_lines(err)
    assert len(lines) == 1 and "interrupted by SIGHUP before training started" in lines[0], err
    assert f"continue with: fedcli train --resume {out}" in lines[0]
    assert manifest(out)["status"] == "interrupted"
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert rows(out / "metrics.csv") == rows(reference / "metrics.csv")
    assert (out / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1])
def test_sighup_and_sigusr1_in_training_checkpoint_and_resume_bitwise(reference, tmp_path, sig):
    out = tmp_path / "run"
    p, go = paused_child(tmp_path, "round", out)
    code, err = finish(p, go, sig)
    name = signal.Signals(sig).name
    assert code == 128 + sig, err  # 129, 138
    assert "Traceback" not in err
    assert f"interrupted by {name} after round 3 " in err and "round-000003.pt holds rounds 1-3" in err, err
    assert f"continue with: fedcli train --resume {out}" in err
    man = manifest(out)
    assert man["status"] == "interrupted" and man["checkpoint"].endswith("round-000003.pt")
    assert len(rows(out / "metrics.csv")) == 3
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert rows(out / "metrics.csv") == rows(reference / "metrics.csv") and len(rows(out / "metrics.csv")) == 10
    assert (out / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()
    assert manifest(out)["status"] == "completed"


SWEEP = """\
title = "signals"
seeds = 1

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "32"
clients = 8
active_ratio = 0.5
iterations = 600
eval_every = 4
checkpoint_every = 0
lr = 0.05
threads = 1
trainer = "loop"

[[runs]]
name = "FedAvg"
algo = "fedavg"
tau = 2
"""


@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory) -> Path:
    """SWEEP's run uninterrupted (once for both signals)."""
    recipe = tmp_path_factory.mktemp("ref") / "signals.toml"
    recipe.write_text(SWEEP)
    assert main(["sweep", str(recipe), "--out", str(recipe.parent / "sweep"), "--quiet", "--in-process"]) == 0
    return recipe.parent / "sweep" / "fedavg" / "seed0"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(
            signal.SIGHUP,
            marks=pytest.mark.long(
                reason="a second interrupted sweep and its resume (11 s of CPU, a minute under load); make test "
                "keeps the sweep's "
                "SIGUSR1 (Slurm's warning, which the sweep ignores between runs) and SIGHUP in training, "
                "test_sighup_and_sigusr1_in_training_checkpoint_and_resume_bitwise"
            ),
        ),
        signal.SIGUSR1,
    ],
)
def test_a_local_sweep_takes_sighup_and_sigusr1_as_an_interruption_and_resumes(tmp_path, sig, sweep_reference):
    recipe = tmp_path / "signals.toml"
    recipe.write_text(SWEEP)
    root = tmp_path / "sweep"
    p = subprocess.Popen(
        [sys.executable, "-m", "fedcli", "sweep", str(recipe), "--out", str(root), "--quiet"],
        env=ENV,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = root / "fedavg" / "seed0" / "metrics.csv"
    end = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end
        time.sleep(0.1)
    p.send_signal(sig)
    _, err = p.communicate(timeout=300)
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig, err
    assert "Traceback" not in err and f"interrupted by {name}" in err and "1 stopped with a checkpoint" in err, err
    run = root / "fedavg" / "seed0"
    assert manifest(run)["status"] == "interrupted" and (run / "checkpoints").is_dir()
    done_rows = len(rows(metrics))
    assert 0 < done_rows < 150
    # the same command again resumes it; the result is the uninterrupted run's
    assert main(["sweep", str(recipe), "--out", str(root), "--quiet", "--in-process"]) == 0
    assert manifest(run)["resumes"][-1]["round"] >= done_rows
    assert rows(metrics) == rows(sweep_reference / "metrics.csv") and len(rows(metrics)) == 150
    assert (run / "model.pt").read_bytes() == (sweep_reference / "model.pt").read_bytes()


@pytest.mark.timeout(300)
def test_a_refused_second_writer_leaves_the_holders_lock_alone(tmp_path, capsys):
    """The cleanup of an unstarted run never removes a lock another process holds (its run has no manifest yet)."""
    out = tmp_path / "run"
    p, go = paused_child(tmp_path, "setup", out)
    holder = json.loads((out / ".fedcli.lock").read_text())
    assert holder["pid"] == p.pid
    try:
        code = main(TINY + ["--out", str(out), "--overwrite"])
    except SystemExit as e:
        code = e.code
    assert code == 2 and "in use by a running fedcli" in capsys.readouterr().err
    assert json.loads((out / ".fedcli.lock").read_text()) == holder  # still there, still naming the holder
    go.touch()
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    assert manifest(out)["status"] == "completed"


@pytest.mark.timeout(300)
def test_the_state_of_a_run_in_progress_is_running_and_asking_changes_nothing(tmp_path):
    from fedcli.results.runstate import run_state

    out = tmp_path / "run"
    p, go = paused_child(tmp_path, "armed", out)  # manifest 'running', lock held by the child
    lock = (out / ".fedcli.lock").read_bytes()
    st = run_state(out)
    assert st.state == "running" and f"in progress (pid {p.pid} " in st.reason and not st.resumable, st
    assert (out / ".fedcli.lock").read_bytes() == lock  # the probe wrote nothing
    go.touch()
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    assert run_state(out).state == "done"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ["closing-stop", "closing"])
def test_a_signal_while_the_manifest_is_written_waits_for_it(reference, tmp_path, where):
    """Slurm signals every process of a job, so a time limit can deliver SIGTERM twice: the second one landing after
    the rounds stopped (or ended) but before the manifest said so used to end the process with the manifest still
    'running', which the watchdog then marked failed. Here it arrives inside that last write."""
    out = tmp_path / "run"
    p, go = paused_child(tmp_path, where, out)
    code, err = finish(p, go, signal.SIGTERM)
    assert "before training started" not in err and "Traceback" not in err, err
    time.sleep(1.5)  # what the watchdog would have done by now
    man = manifest(out)
    if where == "closing-stop":
        assert code == 143, err
        assert man["status"] == "interrupted" and man["checkpoint"].endswith("round-000003.pt"), man
        assert "interrupted by SIGTERM after round 3 " in err, err
        assert main(["train", "--resume", str(out), "--quiet"]) == 0
        assert rows(out / "metrics.csv") == rows(reference / "metrics.csv")
    else:
        assert code == 0, err
        assert man["status"] == "completed", man
        assert "SIGTERM arrived during the last round: the run finished it and completed" in err, err
    assert (out / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()


def test_a_signal_during_the_notice_of_the_last_waits_for_it(tmp_path):
    """A signal handler runs between any two bytecodes, also inside the handler itself while it prints its notice
    (which may import a module lazily: rich's emoji table, cut mid-import, failed the run with an ImportError under
    Slurm's double SIGTERM). The second signal waits until the first's notice is whole, then stops the round now."""
    from fedcli.results.signals import Checkpointer, Interrupted

    said, sent = [], []

    def notify(msg):
        if not sent:
            sent.append(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while this notice is being printed
            for _ in range(1000):  # bytecodes for the handler to run in
                pass
        said.append(msg)

    cp = Checkpointer(tmp_path, every=0, keep=1, notify=notify)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped, cp.signals():
        cp.armed = True
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10**6):  # the handler runs before this loop ends
            pass
    assert stopped.value.now and stopped.value.signum == signal.SIGTERM
    assert len(said) == 2, said
    assert said[0].startswith("SIGTERM: stopping after round 1 (the one in progress), with a checkpoint"), said
    assert said[1] == "SIGTERM again: stopping now; round 1 is lost", said
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is given back
