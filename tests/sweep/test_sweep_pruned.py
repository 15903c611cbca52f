"""A sweep meets a pruned run (stopped on request through RUN/stop.json, exit 5): it keeps it as it stands, never
resumes or restarts it by accident, shows it as pruned (not a failure), and ``train --resume --promote`` finishes it."""

import json

import pytest

import runkit
import sweepkit
from fedcli.cli.main import main
from fedcli.results.stopfile import request_stop
from runkit import rows

# the sweep tests' tiny recipe (digits, MLP 32) with one run: at the smoke scale 4 rounds of 2 iterations, a row each
RECIPE = sweepkit.RECIPE.split("[[runs]]")[0] + '[[runs]]\nname = "avg"\nalgo = "fedavg"\ntau = 2\n'


@pytest.mark.timeout(300)
def test_sweep_keeps_a_pruned_run_and_says_so_promote_finishes_it(tmp_path, capsys):
    recipe, root = tmp_path / "p.toml", tmp_path / "sw"
    recipe.write_text(RECIPE)
    run0 = root / "avg" / "seed0"
    run0.mkdir(parents=True)
    request_stop(run0, why="hopeless", iteration=6)  # before the sweep starts it: the run's folder holds only this
    assert main(["sweep", str(recipe), "--scale", "smoke", "--out", str(root)]) == 0
    err = capsys.readouterr().err
    assert "1 runs complete" in err and "1 pruned, kept as they stand" in err, err
    man = json.loads((run0 / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["reason"] == "pruned" and man["pruned"]["round"] == 3
    entries = {e["seed"]: e for e in json.loads((root / "sweep.json").read_text())["runs"]}
    assert entries[0]["status"] == "pruned" and entries[0]["exit_code"] == 5 and entries[1]["status"] == "completed"
    before = {p.name: p.read_bytes() for p in run0.iterdir() if p.is_file()}

    assert main(["sweep", str(recipe), "--scale", "smoke", "--out", str(root), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "pruned (kept)" in out and "hopeless" in out and "(skip)" in out, out
    assert "1 already completed, 1 pruned (kept), 0 to run" in err, err
    assert (
        main(["sweep", str(recipe), "--scale", "smoke", "--out", str(root)]) == 0
    )  # nothing run: the pruned run stays as it is
    err = capsys.readouterr().err
    assert "nothing to run" in err and "1 pruned" in err, err
    assert {p.name: p.read_bytes() for p in run0.iterdir() if p.is_file()} == before

    assert main(["train", "--resume", str(run0), "--promote", "--quiet"]) == 0
    assert len(rows(run0 / "metrics.csv")) == 4
    capsys.readouterr()
    assert main(["sweep", str(recipe), "--scale", "smoke", "--out", str(root)]) == 0
    err = capsys.readouterr().err
    assert "nothing to run: all 2 runs" in err and "pruned, kept" not in err, err


def _pruned_run(tmp_path):
    """A sweep (smoke scale) whose run seed0 was pruned at iteration 6, its planned runs as a coordinator sees them.
    The sweep runs it ``--in-process`` (no worker process to start): what is tested is the executor given it next; a
    sweep's own worker pool meeting a pruned run is test_sweep_keeps_a_pruned_run_and_says_so_promote_finishes_it."""
    from fedcli.sweep.run import prepare_sweep

    recipe_path, root = tmp_path / "p.toml", tmp_path / "sw"
    recipe_path.write_text(RECIPE)
    run0 = root / "avg" / "seed0"
    run0.mkdir(parents=True)
    request_stop(run0, why="hopeless", iteration=6)
    assert (
        main(
            [
                "sweep",
                str(recipe_path),
                "--scale",
                "smoke",
                "--out",
                str(root),
                "--seeds",
                "1",
                "--quiet",
                "--in-process",
            ]
        )
        == 0
    )
    recipe, _, _, runs, _ = prepare_sweep(recipe_path, "smoke", 1, root)
    (p,) = runs
    assert p.status == "pruned" and not p.resume
    return recipe, p, {f.name: f.read_bytes() for f in run0.iterdir() if f.is_file()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("in_process", [False, True])
def test_a_resume_asked_of_a_pruned_run_never_starts_it_again(tmp_path, in_process):
    """A coordinator that lost track of a pruned trial asks the executor to resume it: the resume is refused (exit 2)
    and the run is kept as it stands; before, the executor took the refusal for another config and trained it anew."""
    from fedcli.sweep.executors import Executor

    recipe, p, before = _pruned_run(tmp_path)
    p.resume = True
    Executor(jobs=1, in_process=in_process).run_all([p], recipe, lambda p: None)
    assert p.exit_code == 2 and p.status == "pruned" and "--promote" in p.error, (p.exit_code, p.status, p.error)
    assert {f.name: f.read_bytes() for f in p.dir.iterdir() if f.is_file()} == before


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(runkit.MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_a_resume_asked_of_a_pruned_run_never_starts_it_again_under_mpi(tmp_path):
    from fedcli.sweep.executors import Executor

    recipe, p, before = _pruned_run(tmp_path)
    p.resume = True
    Executor(jobs=1, mpi=1).run_all([p], recipe, lambda p: None)
    assert p.exit_code == 2 and p.status == "pruned", (p.exit_code, p.status, p.error)
    assert {f.name: f.read_bytes() for f in p.dir.iterdir() if f.is_file()} == before
