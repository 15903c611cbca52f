"""Stopping a run on request (``RUN/stop.json``, fedcli/results/stopfile.py): the run stops at a round boundary after
that round's rows, with a checkpoint, ``interrupted``/``pruned`` in its manifest and exit 5; ``--resume`` refuses it,
``--resume --promote`` finishes it bitwise equal to an uninterrupted run; one process or two under real MPI."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedcli
import runkit
from fedcli.cli.main import main
from fedcli.results import checkpoint
from fedcli.results.runstate import run_state
from fedcli.results.stopfile import request_stop
from runkit import error_lines, rows, run_main

# 16 rounds of phi*tau = 4 iterations, a metrics row every round, a checkpoint every 3 rounds
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


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def assert_same_run(a: Path, b: Path) -> None:
    ra, rb = rows(a / "metrics.csv"), rows(b / "metrics.csv")
    assert len(ra) == len(rb) == 16 and ra == rb  # every column but wall_s, as text: bitwise-equal floats
    assert (a / "intervals.csv").read_bytes() == (b / "intervals.csv").read_bytes()
    assert (a / "model.pt").read_bytes() == (b / "model.pt").read_bytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(ARGS + ["--out", str(out)]) == 0
    return out


def test_pruned_at_the_requested_boundary_refused_by_resume_then_promoted_bitwise(reference, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    request_stop(out, why="below the median at iteration 20", iteration=20)  # before the run starts: its folder
    code, _, err = run_main(ARGS + ["--out", str(out)], capsys)  # holds only the request
    assert code == 5, err
    man = manifest(out)
    assert man["status"] == "interrupted" and man["reason"] == "pruned"
    assert man["pruned"]["iteration"] == 20 and man["pruned"]["round"] == 5  # iteration 20 ends round 5 (4 per round)
    assert man["pruned"]["why"] == "below the median at iteration 20" and man["pruned"]["requested_iteration"] == 20
    assert man["checkpoint"].endswith("round-000005.pt")
    assert [r for r, _ in checkpoint.list_checkpoints(out)] == [3, 5]  # the periodic one, and the pruning boundary's
    assert rows(out / "metrics.csv") == rows(reference / "metrics.csv")[:5]  # the rows stop at the pruning round
    assert not (out / "model.pt").exists()
    lines = error_lines(err)
    assert len(lines) == 1 and "pruned after round 5 (iteration 20)" in lines[0] and "--promote" in lines[0], err
    st = run_state(out, man["config"])
    assert st.state == "pruned" and not st.resumable and "at iteration 20 (round 5)" in st.reason
    assert list(fedcli.load(out).runs["status"]) == ["pruned"]  # where runs' status is shown (status_label)

    code, _, err = run_main(["train", "--resume", str(out), "--quiet"], capsys)
    assert code == 2
    assert error_lines(err) == [
        f"fedcli: error: --resume {out}: the run was pruned at iteration 20 (below the median at "
        f"iteration 20) and is kept as it stands; --promote finishes it: fedcli train --resume "
        f"{out} --promote"
    ]
    assert manifest(out) == man and len(rows(out / "metrics.csv")) == 5  # nothing changed

    code, _, err = run_main(["train", "--promote", "--quiet"], capsys)
    assert code == 2 and "--promote finishes a pruned run: give it with --resume RUN_DIR" in err

    assert main(["train", "--resume", str(out), "--promote", "--quiet"]) == 0
    assert_same_run(reference, out)
    man = manifest(out)
    assert man["status"] == "completed" and "reason" not in man and "pruned" not in man
    assert man["resumes"][-1]["promoted"]["iteration"] == 20 and man["resumes"][-1]["round"] == 5
    assert not (out / "stop.json").exists()
    assert run_state(out, man["config"]).state == "done"


def test_request_without_iteration_stops_after_round_one_and_overwrite_drops_it(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "stop.json").write_text("")  # by hand, empty: its presence is the request
    code, _, err = run_main(ARGS + ["--out", str(out)], capsys)
    assert code == 5, err
    man = manifest(out)
    assert (man["pruned"]["round"], man["pruned"]["iteration"]) == (1, 4) and "is not JSON" in man["pruned"]["why"]
    assert len(rows(out / "metrics.csv")) == 1
    # --overwrite starts another run: the previous run's request goes with its files
    assert main(ARGS + ["--out", str(out), "--overwrite"]) == 0
    assert manifest(out)["status"] == "completed" and not (out / "stop.json").exists()


def test_request_at_the_last_boundary_lets_the_run_complete(reference, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    request_stop(out, why="too late", iteration=64)
    assert main(ARGS + ["--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert manifest(out)["status"] == "completed" and "reason" not in manifest(out)
    assert rows(out / "metrics.csv") == rows(reference / "metrics.csv")
    assert "stop request" in err and "last round boundary: the run completed" in err


# writes stop.json into RUN once metrics.csv has a row, then prints the row counts seen just before and just after
WATCHER = """
import os, sys, time
from fedcli.results.stopfile import request_stop
run = sys.argv[1]
def n():
    try:
        with open(os.path.join(run, "metrics.csv")) as f:
            return max(0, sum(1 for line in f if line.endswith("\\n")) - 1)
    except FileNotFoundError:
        return 0
deadline = time.time() + 200
while n() < 1 and time.time() < deadline:
    time.sleep(0.002)
before = n()
request_stop(run, why="from another process")
print(before, n())
"""


def test_request_from_another_process_mid_run_stops_within_one_round(reference, tmp_path):
    out = tmp_path / "run"
    env = {**__import__("os").environ, "PYTHONPATH": str(runkit.ROOT)}
    train = runkit.start_forked(runkit.FEDCLI, [*ARGS, "--out", str(out)], env=env)  # a process of its own, forked
    for _ in range(600):  # the run folder exists once the run has its lock
        if out.is_dir():
            break
        time.sleep(0.05)
    watcher = runkit.run_forked(WATCHER, [str(out)], env=env, timeout=240)  # a process of its own, forked from this one
    _, err = train.communicate(timeout=240)
    before, after = map(int, watcher.stdout.split())
    assert train.returncode == 5, err
    r = manifest(out)["pruned"]["round"]
    assert before <= r <= after + 1 < 16, (before, r, after)  # the boundary of the round in progress at the latest
    assert rows(out / "metrics.csv") == rows(reference / "metrics.csv")[:r]
    assert main(["train", "--resume", str(out), "--promote", "--quiet"]) == 0
    assert_same_run(reference, out)


@pytest.mark.long(
    reason="the stop under mpiexec -n 2 (7 s of CPU); make test keeps its --workers twin, "
    "test_worker_processes_stop_together_then_promote_bitwise (the same round-end all-reduce), and "
    "test_mpi_families.py"
)
@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.skipif(runkit.MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_two_mpi_processes_stop_at_the_same_boundary_then_promote_bitwise(tmp_path):
    """The promotion and then the uninterrupted run it must equal go in one ``mpiexec`` (runkit.mpirun_each: the
    processes import torch once for both)."""
    ref, out = tmp_path / "ref", tmp_path / "run"
    out.mkdir()
    request_stop(out, why="two ranks", iteration=20)
    p = runkit.mpirun(2, [*ARGS, "--out", str(out)], timeout=200)
    assert p.returncode == 5, p.stderr
    man = manifest(out)
    assert man["status"] == "interrupted" and man["reason"] == "pruned" and man["world_size"] == 2
    assert (man["pruned"]["round"], man["pruned"]["iteration"]) == (5, 20)
    ckpt = checkpoint.load(out / "checkpoints" / "round-000005.pt")
    assert ckpt["round"] == 5 and len(ckpt["ranks"]) == 2  # both processes wrote their part at the same boundary
    lines = [l for l in p.stderr.splitlines() if l.startswith("fedcli: error:")]  # rank 0's, for both (mpi4py then
    assert (
        len(lines) == 1 and "Traceback" not in p.stderr and "mpiexec -n 2" in lines[0]
    )  # aborts on exit != 0) and lines[0].endswith("--promote"), p.stderr
    p = runkit.mpirun(2, ["train", "--resume", str(out), "--quiet"], timeout=200)
    assert p.returncode == 2 and "mpiexec -n 2" in p.stderr and "--promote" in p.stderr
    p = runkit.mpirun_each(2, [["train", "--resume", str(out), "--promote", "--quiet"], [*ARGS, "--out", str(ref)]])
    assert p.returncode == 0, p.stderr
    assert rows(ref / "metrics.csv") == rows(out / "metrics.csv") and len(rows(out / "metrics.csv")) == 16
    assert (ref / "model.pt").read_bytes() == (out / "model.pt").read_bytes()


def test_worker_processes_stop_together_then_promote_bitwise(reference, tmp_path, capsys):
    """--workers 2: rank 0's answer reaches the worker in the round's all-reduce; both stop at the same boundary."""
    out = tmp_path / "run"
    out.mkdir()
    request_stop(out, why="workers", iteration=28)
    code, _, err = run_main(ARGS + ["--workers", "2", "--out", str(out)], capsys)
    assert code == 5, err
    man = manifest(out)
    assert (man["pruned"]["round"], man["pruned"]["iteration"], man["world_size"]) == (7, 28, 2)
    assert len(checkpoint.load(out / "checkpoints" / "round-000007.pt")["ranks"]) == 2
    assert main(["train", "--resume", str(out), "--promote", "--workers", "0", "--quiet"]) == 0
    assert_same_run(reference, out)  # results do not depend on the number of workers
