"""``fedcli tune``'s coordinator on real trials (issue 58, "Must hold"): SIGKILL of the coordinator and the same command
again (trials 0..N-1 exactly once, finished ones unchanged, interrupted ones resumed bitwise), a crash between the ask
and the run's first write, determinism with --jobs 1 and a seed, honest selection, a changed recipe refused."""

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcli.cli.main import main
from sweepkit import tune_recipe

ROOT = Path(__file__).resolve().parents[2]


def write_recipe(tmp_path, name="r.toml", **kw) -> Path:
    return tune_recipe(tmp_path / name, **kw)


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def tune(args, check=True) -> subprocess.CompletedProcess:
    """``fedcli tune ARGS`` in this process (exit code, stdout and stderr as a process's): its trials are forked from
    this process's warm server (fedcli/runtime/warm.py), started once for every study of the module, where a
    coordinator of its own would start its own (a new interpreter importing torch, about 2 s of CPU each). The
    coordinator's own process is what test_sigkill_of_the_coordinator_then_the_same_command (make test-long) and
    tests/sweep/test_tune_workers.py hold."""
    argv = ["tune", *map(str, args), "-q"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv) or 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    p = subprocess.CompletedProcess(["fedcli", *argv], code, out.getvalue(), err.getvalue())
    if check:
        assert p.returncode == 0, p.stderr[-2000:]
    return p


def trials_csv(root: Path) -> list[dict]:
    with open(root / "trials.csv") as f:
        return list(csv.DictReader(f))


def metrics(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def trial_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "fedavg").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def three_trials(tmp_path_factory):
    """A finished study of 3 trials of the default recipe (TPE, --jobs 1, the recipe's seed): (its recipe, its folder).
    The tests read it, or change a copy of it (:func:`copy_of`); each trial is a fresh ``fedcli train`` process, so one
    study shared saves the tests 3 trials each."""
    base = tmp_path_factory.mktemp("three")
    path = write_recipe(base, trials=3, sampler="tpe")
    root = base / "study"
    tune([path, "--out", root, "--jobs", "1"])
    return path, root


def copy_of(study, tmp_path) -> tuple[Path, Path]:
    """The shared study's recipe and folder copied into ``tmp_path`` (the recipe's name kept: the Optuna study's name
    comes from it), for a test that changes them."""
    path, root = study
    shutil.copy(path, tmp_path / path.name)
    shutil.copytree(root, tmp_path / "study")
    return tmp_path / path.name, tmp_path / "study"


def test_a_study_of_ordinary_runs_and_its_record(three_trials, tmp_path):
    """Trial 0 is the recipe's own configuration; every trial a run directory with its replayable recipe and the
    manifest's tune entry; trials.csv's values are the objective read from the run directories; a second call has
    nothing to run; a changed recipe is refused (exit 2, naming both) unless --fresh."""
    from fedcli.tune.objectives import value
    from fedcli.tune.space import parse_objective

    path, root = three_trials
    rows = trials_csv(root)
    assert [(r["number"], r["state"], r["baseline"]) for r in rows] == [
        ("0", "COMPLETE", "1"),
        ("1", "COMPLETE", "0"),
        ("2", "COMPLETE", "0"),
    ]
    assert float(rows[0]["params_lr"]) == 0.3
    rec = json.loads((root / "tune.json").read_text())
    assert rec["kind"] == "fedcli-tune" and rec["select_on"] == "validation" and rec["storage"] == "journal"
    assert rec["studies"][0]["space"] == {"lr": {"log": [0.2, 0.8]}} and rec["studies"][0]["budget_iterations"] == 40
    objective = parse_objective({"metric": "val_acc", "reduce": "last3"}, "")
    for r in rows:
        run = root / r["run"]
        m = manifest(run)
        assert m["status"] == "completed"
        assert m["tune"] == {
            "study": "fedavg",
            "number": int(r["number"]),
            "params": {"lr": float(r["params_lr"])},
            "baseline": r["number"] == "0",
        }
        assert m["config"]["lr"] == float(r["params_lr"])
        assert float(r["value"]) == value(run, objective)
        assert "lr = " in (run / "recipe.toml").read_text()
    path, root = copy_of(three_trials, tmp_path)
    before = (root / "trials.csv").read_text()
    tune([path, "--out", root])  # all done: nothing runs, nothing changes
    assert (root / "trials.csv").read_text() == before
    path.write_text(path.read_text().replace("[0.2, 0.8]", "[0.2, 0.9]"))
    p = tune([path, "--out", root], check=False)
    assert p.returncode == 2 and "holds another study" in p.stderr and "pass --fresh" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    tune([path, "--out", root, "--fresh", "--trials", "1"])
    assert [r["number"] for r in trials_csv(root)] == ["0"] and trial_dirs(root) == ["trial-0000"]


def test_crash_between_ask_and_first_write(three_trials, tmp_path):
    """A coordinator killed after asking (the parameters in the storage, no run directory yet): the same command runs
    the stored parameters under the same number, and a trial killed before its parameters were all stored gets them
    under its number; the total stays what was asked."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    path, root = copy_of(three_trials, tmp_path)  # 3 trials done
    storage = JournalStorage(JournalFileBackend(str(root / "optuna.journal")))
    study = optuna.load_study(study_name="r/fedavg", storage=storage)
    asked = study.ask()
    lr = asked.suggest_float("lr", 0.2, 0.8, log=True)  # what a coordinator stores before writing the trial's recipe
    bare = study.ask()  # killed before its parameters were stored
    assert (asked.number, bare.number) == (3, 4) and not (root / "fedavg" / "trial-0003").exists()
    tune([path, "--out", root, "--trials", "5"])
    rows = trials_csv(root)
    assert [(r["number"], r["state"]) for r in rows] == [(str(n), "COMPLETE") for n in range(5)]
    assert float(rows[3]["params_lr"]) == lr
    assert manifest(root / "fedavg" / "trial-0003")["config"]["lr"] == lr
    assert manifest(root / "fedavg" / "trial-0004")["tune"]["number"] == 4
    assert trial_dirs(root) == [f"trial-{n:04d}" for n in range(5)]
    assert len(optuna.load_study(study_name="r/fedavg", storage=storage).trials) == 5


def test_determinism_with_one_job_and_a_seed(three_trials, tmp_path):
    """Two fresh studies with --jobs 1 and the same seed propose the same sequence (TPE): the shared study and one
    more of its recipe."""
    path, root = three_trials
    tune([path, "--out", tmp_path / "b", "--jobs", "1"])
    seqs = [[r["params_lr"] for r in trials_csv(d)] for d in (root, tmp_path / "b")]
    assert seqs[0] == seqs[1] and len(set(seqs[0])) == 3


def test_selection_ignores_a_poisoned_test_set(three_trials, tmp_path):
    """The chosen configuration (the best value in trials.csv) is the best by the validation objective read from the
    run directories; poisoning every trial's test_acc (the worst made perfect) changes neither."""
    from fedcli.tune.objectives import value
    from fedcli.tune.space import parse_objective

    _, root = copy_of(three_trials, tmp_path)
    objective = parse_objective({"metric": "val_acc", "reduce": "last3"}, "")
    rows = trials_csv(root)
    chosen = max(rows, key=lambda r: float(r["value"]))["number"]
    worst = min(rows, key=lambda r: float(r["value"]))
    for r in rows:
        run = root / r["run"]
        text = (run / "metrics.csv").read_text().splitlines()
        cols = text[0].split(",")
        i = cols.index("test_acc")
        poisoned = [text[0]] + [
            ",".join(c if j != i else ("1.0" if r is worst else "0.0") for j, c in enumerate(line.split(",")))
            for line in text[1:]
        ]
        (run / "metrics.csv").write_text("\n".join(poisoned) + "\n")
    again = {r["number"]: value(root / r["run"], objective) for r in rows}
    assert max(again, key=again.get) == chosen
    assert value(root / worst["run"], parse_objective({"metric": "val_acc"}, ""), select_on="test") == 1.0


def progress(root: Path) -> int:
    """Evaluations logged by the study's trials so far (the rows of their metrics.csv files)."""
    return sum(len(f.read_text().splitlines()) for f in root.glob("fedavg/trial-*/metrics.csv"))


@pytest.mark.long(reason="8 trials of 3,000 iterations, the coordinator SIGKILLed mid-study, then run again (2 min)")
@pytest.mark.timeout(900)
def test_sigkill_of_the_coordinator_then_the_same_command(tmp_path):
    """8 trials, --jobs 2: SIGKILL the coordinator with trials complete and trials running; the same command again ends
    with trials 0..7 exactly once, the finished ones' parameters unchanged, the interrupted ones resumed from their
    checkpoints with metrics equal to an uninterrupted run's. The wait for that moment fails only when the study stops
    moving (no evaluation logged for 120 s), saying where it stood and what the coordinator wrote on stderr."""
    # 3,000 iterations (seconds a trial): the trials caught running are still training when the coordinator dies (at
    # 300 a trial ended in about a second, before its orphaned worker stopped them, and none was left to resume)
    path = write_recipe(tmp_path, trials=8, iterations=3000, eval_every=100)
    root = tmp_path / "study"
    cmd = [sys.executable, "-m", "fedcli", "tune", str(path), "--out", str(root), "--jobs", "2", "-q"]
    log = tmp_path / "coordinator.stderr"
    with open(log, "w") as err:
        coord = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=err)

    def some_done_some_running():
        # the running trials are read from their run directories (manifest "running", 2 evaluations logged), not from
        # trials.csv's RUNNING rows: with --jobs 2 the trials go in pairs that end together, and trials.csv, written
        # at each tell, showed a trial RUNNING with 2 evaluations only between the two tells of a pair (a whole study
        # of 8 went by unseen, 2026-11-29)
        if not (root / "trials.csv").exists():
            return None
        done = [r for r in trials_csv(root) if r["state"] == "COMPLETE"]
        ready = []
        for run in sorted(root.glob("fedavg/trial-*")):
            try:
                running = manifest(run).get("status") == "running" and len(metrics(run)) >= 2
            except (OSError, ValueError):  # not written yet
                continue
            number = str(int(run.name.split("-")[1]))
            if running and number not in {r["number"] for r in done}:
                ready.append({"number": number})
        return (done, ready) if len(done) >= 2 and ready else None

    def where() -> str:
        rows = trials_csv(root) if (root / "trials.csv").exists() else []
        return (
            f"the coordinator {'running' if coord.poll() is None else f'ended with {coord.returncode}'}; trials.csv "
            f"{[(r['number'], r['state']) for r in rows]}; {progress(root)} evaluations; its stderr: "
            f"{log.read_text()[-2000:]}"
        )

    try:
        seen, last = progress(root), time.monotonic()
        while not (found := some_done_some_running()):
            assert coord.poll() is None, where()
            if (now := progress(root)) != seen:
                seen, last = now, time.monotonic()
            assert time.monotonic() - last < 120, "no evaluation logged for 120 s: " + where()
            time.sleep(0.2)
        done, running = found
        os.kill(coord.pid, signal.SIGKILL)
        coord.wait()
    finally:
        if coord.poll() is None:
            coord.kill()
    finished = {r["number"]: r["params_lr"] for r in trials_csv(root) if r["state"] == "COMPLETE"}
    cut = [r["number"] for r in running]
    tune(cmd[4:-1])
    rows = trials_csv(root)
    assert [r["number"] for r in rows] == [str(n) for n in range(8)]
    assert all(r["state"] == "COMPLETE" for r in rows)
    assert trial_dirs(root) == [f"trial-{n:04d}" for n in range(8)]
    for n, lr in finished.items():
        assert rows[int(n)]["params_lr"] == lr
    resumed = [n for n in cut if manifest(root / "fedavg" / f"trial-{int(n):04d}").get("resumes")]
    assert resumed, "no interrupted trial was resumed"
    for n in resumed:  # bitwise: the uninterrupted run of the same recipe gives the same metrics
        run = root / "fedavg" / f"trial-{int(n):04d}"
        ref = tmp_path / f"ref{n}"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "fedcli",
                "train",
                "--recipe",
                str(run.parent / f"{run.name}.toml"),
                "--out",
                str(ref),
                "--quiet",
            ],
            env=env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr[-1000:]
        assert metrics(run) == metrics(ref)


def test_hopeless_trials_are_stopped_and_one_promoted(tmp_path):
    """A grid where one learning rate learns nothing (1e-6: validation accuracy 0.04 on digits, under chance 0.1 +
    0.05) and the recipe's own (0.3, trial 0) learns: the coordinator asks the hopeless one to stop once it has trained
    a quarter of the budget, saying why, and leaves the other be; with the engine's side (the stop file), it ends
    pruned where it stopped with its checkpoint, and --promote finishes it. It is the grid's last trial (--jobs 1, the
    baseline first), so it is also told PRUNED as Optuna's grid sampler stops the study (the case of
    test_the_last_trial_of_a_grid_told_pruned)."""
    from fedcli.results.stopfile import read_stop

    # 600 iterations (about 3 ms of CPU each): the 450 left after the quarter-budget evaluation (over a second) are
    # long enough that the coordinator's poll (every 0.5 s) sees it while the run still trains; a run that had finished
    # would be told COMPLETE instead
    path = write_recipe(tmp_path, trials=2, iterations=600, eval_every=30, sampler="grid")
    path.write_text(path.read_text().replace("lr = { log = [0.2, 0.8] }", "lr = { choices = [1e-6, 0.3] }"))
    root = tmp_path / "study"
    tune([path, "--out", root])
    rows = trials_csv(root)
    assert [float(r["params_lr"]) for r in rows] == [0.3, 1e-6]
    slow = [r for r in rows if float(r["params_lr"]) < 1e-3]
    for r in rows:
        if r not in slow:
            assert read_stop(root / r["run"]) is None and r["state"] == "COMPLETE"
    for r in slow:  # the request (kept in the run directory) was acted upon: the manifest says where and why
        run = root / r["run"]
        m = manifest(run)
        stop = read_stop(run)
        assert stop["reason"] == "pruned" and stop["why"].startswith("hopeless: best validation accuracy 0.0")
        assert stop["iteration"] == 150
        assert r["state"] == "PRUNED" and m["status"] == "interrupted" and m["reason"] == "pruned"
        assert m["pruned"]["why"].startswith("hopeless: best validation accuracy 0.0")
        assert m["pruned"]["requested_iteration"] == 150  # the first evaluation at a quarter of 600
        assert int(r["pruned_iteration"]) == m["pruned"]["iteration"] < 600
        # its metrics stop there: the last evaluation on the grid (every 30) at or before the iteration it stopped at
        assert m["pruned"]["iteration"] - 30 < int(metrics(run)[-1]["iteration"]) <= m["pruned"]["iteration"]
        assert any((run / "checkpoints").iterdir())
    n = slow[0]["number"]
    tune([root, "--promote", n])
    run = root / slow[0]["run"]
    assert manifest(run)["status"] == "completed" and int(metrics(run)[-1]["iteration"]) == 600
    assert next(r for r in trials_csv(root) if r["number"] == n)["state"] == "COMPLETE"


def test_a_diverged_trial_is_told_the_worst_value(tmp_path):
    """lr 1000 diverges in round 1 (exit 4): the trial is COMPLETE with the worst value, 0 for an accuracy maximized,
    so that the sampler learns the region; its run directory says diverged."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    path = write_recipe(tmp_path, trials=2, sampler="grid", space="lr = { choices = [0.3, 1000.0] }")
    root = tmp_path / "study"
    tune([path, "--out", root])
    rows = {float(r["params_lr"]): r for r in trials_csv(root)}
    assert len(rows) == 2  # the grid: the recipe's lr once, not again after trial 0
    assert rows[1000.0]["state"] == "COMPLETE" and float(rows[1000.0]["value"]) == 0.0
    assert float(rows[0.3]["value"]) > 0.3
    m = manifest(root / rows[1000.0]["run"])
    assert m["status"] == "failed" and m["reason"] == "diverged"
    study = optuna.load_study(
        study_name="r/fedavg", storage=JournalStorage(JournalFileBackend(str(root / "optuna.journal")))
    )
    assert [t.user_attrs.get("diverged", False) for t in study.trials if t.params["lr"] == 1000.0] == [True]


@pytest.mark.long(
    reason="a 4,000-iteration trial pruned at a quarter (a fresh fedcli train); make test holds it in "
    "tests/sweep/test_tune_study.py::test_hopeless_trials_are_stopped_and_one_promoted (its grid's last trial is told "
    "PRUNED)"
)
def test_the_last_trial_of_a_grid_told_pruned(tmp_path):
    """A grid whose last (here only) trial is pruned: Optuna's grid sampler stops the study as that trial is told
    PRUNED (RuntimeError "Study.stop" outside an optimize loop); the coordinator ends normally, the trial PRUNED."""
    path = write_recipe(
        tmp_path, trials=1, iterations=4000, eval_every=40, sampler="grid", space="lr = { choices = [1e-6] }"
    )
    root = tmp_path / "study"
    tune([path, "--out", root])
    [r] = trials_csv(root)
    assert r["state"] == "PRUNED" and manifest(root / r["run"])["reason"] == "pruned"
