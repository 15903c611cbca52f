"""``fedcli tune --executor slurm`` against a real Slurm (issue 59, "the default coordinator mode on Slurm"): one
coordinator asks, submits every trial as an ordinary sweep job, watches its metrics.csv over the file system, prunes
through the stop file and tells from the run directory; killed with SIGKILL and run again, it adopts the trials whose
jobs still run. No mock: jobs go through sbatch (submitit) to the local one-node Slurm (``scripts/slurm-local.sh up``);
without one these tests skip, unless FEDCLI_REQUIRE_SLURM is set (CI), where that is a failure."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcli.sweep.slurm import ACTIVE, job_states
from sweepkit import manifest, require_slurm, trials_csv, tune_recipe

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(600), pytest.mark.slurm]


@pytest.fixture(scope="module")
def slurm():
    require_slurm()


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def command(path: Path, root: Path, *more) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fedcli",
        "tune",
        str(path),
        "--out",
        str(root),
        "--executor",
        "slurm",
        *map(str, more),
    ]


def tune(cmd, timeout=400) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def job(run: Path) -> dict:
    return json.loads(run.with_name(run.name + ".job.json").read_text())


def gone(job_id: str) -> bool:
    st = job_states([job_id]).get(job_id)
    return st is None or st["state"] not in ACTIVE


def ends(job_id: str, within: float = 60) -> bool:
    """Whether the job leaves Slurm's active states within ``within`` seconds: its job file holds the training's exit
    code as soon as the training ends, and Slurm may still list the job (COMPLETING) for a moment after."""
    deadline = time.monotonic() + within
    while not gone(job_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def wait_training(coord: subprocess.Popen, run: Path) -> None:
    """Until ``run`` (trained in a Slurm job of the coordinator ``coord``) has logged two evaluations."""
    deadline = time.monotonic() + 240
    while not ((run / "metrics.csv").exists() and len((run / "metrics.csv").read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and coord.poll() is None, f"{run.name}'s job did not train within 4 minutes"
        time.sleep(0.2)


def test_a_study_of_slurm_jobs(slurm, tmp_path):
    """3 trials, 2 in flight: 3 jobs (one per trial, recorded in the job file beside its log, exit 0), 3 completed run
    directories with the manifest's tune entry, and trials.csv COMPLETE with the objective read from each run."""
    from fedcli.tune.objectives import value
    from fedcli.tune.space import parse_objective

    path = tune_recipe(tmp_path / "r.toml", trials=3)
    root = tmp_path / "study"
    p = tune(command(path, root, "--jobs", 2))
    rows = trials_csv(root)
    assert [(r["number"], r["state"]) for r in rows] == [("0", "COMPLETE"), ("1", "COMPLETE"), ("2", "COMPLETE")]
    assert sorted(x.name for x in (root / "fedavg").iterdir() if x.is_dir()) == [
        "trial-0000",
        "trial-0001",
        "trial-0002",
    ]
    objective = parse_objective({"metric": "val_acc", "reduce": "last3"}, "")
    ids = set()
    for r in rows:
        run = root / r["run"]
        m = manifest(run)
        assert m["status"] == "completed" and m["tune"]["number"] == int(r["number"])
        assert m["config"]["lr"] == float(r["params_lr"])
        assert float(r["value"]) == value(run, objective)
        j = job(run)
        assert j["exit_code"] == 0 and j["job_id"] and ends(j["job_id"])
        ids.add(j["job_id"])
    assert len(ids) == 3 and p.stderr.count("submit ") == 3


@pytest.mark.long(
    reason="a Slurm job trained until the coordinator's poll sees a quarter of 4,000 iterations (about 10 s)"
)
def test_a_hopeless_trial_is_pruned_in_its_job(slurm, tmp_path):
    """lr 1e-6 learns nothing: the coordinator (here, the login node) writes the stop file once the run has trained a
    quarter of its budget; the job's training closes pruned within one round (exit 5 in the job file), and the trial is
    PRUNED there."""
    from fedcli.results.stopfile import read_stop

    path = tune_recipe(
        tmp_path / "r.toml", trials=1, iterations=4000, eval_every=40, sampler="grid", space="lr = { choices = [1e-6] }"
    )
    root = tmp_path / "study"
    tune(command(path, root))
    [r] = trials_csv(root)
    run = root / r["run"]
    m, stop = manifest(run), read_stop(run)
    assert r["state"] == "PRUNED" and m["status"] == "interrupted" and m["reason"] == "pruned"
    assert stop["why"].startswith("hopeless: best validation accuracy 0.0") and stop["iteration"] == 1000
    assert m["pruned"]["requested_iteration"] == 1000
    # within one round (tau = 2 local iterations) of the iteration the run had reached when it read the request
    assert 1000 <= m["pruned"]["iteration"] < 4000 and int(r["pruned_iteration"]) == m["pruned"]["iteration"]
    assert job(run)["exit_code"] == 5 and ends(job(run)["job_id"])


@pytest.mark.long(reason="a coordinator SIGKILLed while its trial's job trains, then run again (about 50 s)")
def test_sigkill_of_the_coordinator_adopts_the_running_job(slurm, tmp_path):
    """SIGKILL of the coordinator while trial 0's job trains: the job trains on; the same command again adopts it (its
    job file keeps the one job id, its run never resumed), then runs trial 1: exactly 2 trials, 2 jobs."""
    path = tune_recipe(tmp_path / "r.toml", trials=2, iterations=12000, eval_every=400)
    root = tmp_path / "study"
    cmd = command(path, root, "--jobs", 1)
    coord = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run0 = root / "fedavg" / "trial-0000"
    try:
        wait_training(coord, run0)
        os.kill(coord.pid, signal.SIGKILL)
        coord.wait()
    finally:
        if coord.poll() is None:
            coord.kill()
    first = job(run0)["job_id"]
    assert not gone(first), "trial 0's job ended before the coordinator was run again"
    p = tune(cmd)
    assert "adopt    fedavg trial 0" in p.stderr, p.stderr[-2000:]
    rows = trials_csv(root)
    assert [(r["number"], r["state"]) for r in rows] == [("0", "COMPLETE"), ("1", "COMPLETE")]
    assert sorted(x.name for x in (root / "fedavg").iterdir() if x.is_dir()) == ["trial-0000", "trial-0001"]
    j0 = job(run0)
    assert j0["job_id"] == first and j0["exit_code"] == 0  # the one job of trial 0: never submitted twice
    assert not manifest(run0).get("resumes") and manifest(run0)["status"] == "completed"
    assert p.stderr.count("submit ") == 1 and job(root / "fedavg" / "trial-0001")["job_id"] != first


@pytest.mark.long(reason="a trial's job scancelled mid-run and resumed in a new job (about 50 s)")
def test_a_trial_whose_job_is_cancelled_is_resumed_in_a_new_job(slurm, tmp_path):
    """scancel of a trial's job (as a lost node or a preemption): its training checkpoints and stops; the coordinator
    sees the job gone before the training ended and resumes the run in a new job under the same trial number."""
    path = tune_recipe(tmp_path / "r.toml", trials=1, iterations=12000, eval_every=400)
    root = tmp_path / "study"
    coord = subprocess.Popen(
        command(path, root), env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    run0 = root / "fedavg" / "trial-0000"
    try:
        wait_training(coord, run0)
        first = job(run0)["job_id"]
        subprocess.run(["scancel", first], check=True)
        assert coord.wait(timeout=400) == 0, coord.stderr.read()[-2000:]
        err = coord.stderr.read()
    finally:
        if coord.poll() is None:
            coord.kill()
    assert "requeue  fedavg trial 0" in err and "resumed in a new job" in err, err[-2000:]
    [r] = trials_csv(root)
    assert r["state"] == "COMPLETE" and r["number"] == "0"
    j = job(run0)
    assert j["job_id"] != first and j["resume"] and j["exit_code"] == 0
    m = manifest(run0)
    assert m["status"] == "completed" and len(m["resumes"]) == 1 and m["tune"]["number"] == 0


@pytest.mark.long(reason="two trials packed in one Slurm job (about 15 s)")
def test_runs_per_job_packs_the_trials_asked_together(slurm, tmp_path):
    """--jobs 2 --runs-per-job 2: the two trials asked in one pass go in one job (one job id in both job files, the job
    asking for 2 CPUs), each its own completed run directory."""
    path = tune_recipe(tmp_path / "r.toml", trials=2)
    root = tmp_path / "study"
    p = tune(command(path, root, "--jobs", 2, "--runs-per-job", 2))
    assert "2 CPU(s), 2 runs per job" in p.stderr
    rows = trials_csv(root)
    assert [(r["number"], r["state"]) for r in rows] == [("0", "COMPLETE"), ("1", "COMPLETE")]
    j0, j1 = (job(root / r["run"]) for r in rows)
    assert j0["job_id"] == j1["job_id"] and j0["exit_code"] == j1["exit_code"] == 0
    assert all(manifest(root / r["run"])["status"] == "completed" for r in rows)
