"""``fedcli tune``'s answers that run no trial (issue 58): --help and every recipe error without optuna or torch, one
line and exit 2 (no validation split, also under --dry-run; a bad space; a second coordinator on the folder), nothing
written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweepkit import tune_recipe

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys\nfrom fedcli.cli.main import main\n"
    "try:\n    main({args!r})\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
    "print('LOADED', 'torch' in sys.modules, 'optuna' in sys.modules, 'CODE', code)"
)


def probe(args, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDCLI_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "120"}
    p = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    return p


def recipe(tmp_path, split="val_fraction = 0.2", space="lr = { log = [0.01, 1.0] }") -> str:
    return str(tune_recipe(tmp_path / "r.toml", trials=2, split=split, space=space))


def test_help_without_optuna_or_torch(tmp_path):
    p = probe(["tune", "--help"], tmp_path)
    assert "LOADED False False CODE 0" in p.stdout, p.stdout[-400:] + p.stderr[-400:]
    for flag in (
        "--trials",
        "--storage",
        "--sampler",
        "--pruner",
        "--select-on",
        "--promote",
        "--fresh",
        "--jobs",
        "--mpi",
        "--executor",
        "--partition",
        "--time",
        "--runs-per-job",
        "--sbatch",
    ):
        assert flag in p.stdout


@pytest.mark.parametrize(
    "split, space, args, said",
    [
        (
            "",
            "lr = { log = [0.01, 1.0] }",
            [],
            "objective val_acc reads the validation split, but the row has val_fraction = 0",
        ),
        ("", "lr = { log = [0.01, 1.0] }", ["--dry-run"], "objective val_acc reads the validation split"),
        ("val_fraction = 0.2", "lr = { log = [0.0, 1.0] }", [], "line 29: 'lr' log range [0.0, 1.0] runs through 0"),
        (
            "val_fraction = 0.2",
            "iterations = { choices = [4, 8] }",
            ["--dry-run"],
            "line 29: 'iterations' fixes a trial's budget",
        ),
        (
            "val_fraction = 0.2",
            "lr = { log = [0.01, 1.0] }",
            ["--sampler", "annealing"],
            "--sampler must be one of tpe, gp, random, grid",
        ),
        (
            "val_fraction = 0.2",
            "lr = { log = [0.01, 1.0] }",
            ["--partition", "gpu"],
            "--partition sets a Slurm job's resources: it applies to --executor slurm only",
        ),
    ],
)
def test_recipe_errors_one_line_exit_2_nothing_written(tmp_path, split, space, args, said):
    path = recipe(tmp_path, split, space)
    p = probe(["tune", path, "--out", str(tmp_path / "study"), *args], tmp_path)
    assert "LOADED False False CODE 2" in p.stdout, p.stdout[-400:] + p.stderr[-400:]
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and said in lines[0], p.stderr
    assert not (tmp_path / "study").exists()


def test_select_on_test_allows_a_recipe_without_split(tmp_path, capsys):
    from fedcli.cli.main import invoke

    invoke(["tune", recipe(tmp_path, split=""), "--out", str(tmp_path / "s"), "--select-on", "test", "--dry-run"])
    out = capsys.readouterr().out
    assert "selected on test (optimistic: the test set)" in out
    assert "lr log [0.01, 1]" in out and "trial 0: the recipe's own configuration {'lr': 0.3}" in out


def test_second_coordinator_refused(tmp_path):
    from fedcli.tune.coordinator import TuneLock

    path = recipe(tmp_path)
    (tmp_path / "study").mkdir()
    with TuneLock(tmp_path / "study"):  # a coordinator holds the folder
        p = probe(["tune", path, "--out", str(tmp_path / "study"), "-q"], tmp_path)
    assert "CODE 2" in p.stdout, p.stdout + p.stderr
    assert "another fedcli tune" in p.stderr and "is running in" in p.stderr
    assert sorted(x.name for x in (tmp_path / "study").iterdir()) == [".tune.workers.lock", "tune.lock"]
