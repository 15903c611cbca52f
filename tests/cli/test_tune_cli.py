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


def python_c(code: str, tmp_path) -> subprocess.CompletedProcess:
    """``python -c CODE`` in a fresh interpreter (the repository importable, a cache of its own), its output read."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDCLI_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )


def probe(args, tmp_path):
    return python_c(PROBE.format(args=args), tmp_path)


def probe_each(cases: list[list[str]], tmp_path):
    """:data:`PROBE_EACH` of ``cases`` (argument lists) in one fresh interpreter."""
    return python_c(PROBE_EACH.format(cases=cases), tmp_path)


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


#: (split, space, extra arguments, what the one line says) of each recipe error
RECIPE_ERRORS = [
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
]

#: the cases in one interpreter, in turn: a line "CASE i" on stderr before each, then its LOADED line on stdout
PROBE_EACH = (
    "import sys\nfrom fedcli.cli.main import main\n"
    "for i, args in enumerate({cases!r}):\n"
    "    print('CASE', i, file=sys.stderr, flush=True)\n"
    "    try:\n        main(args)\n    except SystemExit as e:\n        code = e.code\n    else:\n        code = 0\n"
    "    sys.stderr.flush()\n"
    "    print('LOADED', 'torch' in sys.modules, 'optuna' in sys.modules, 'CODE', code, flush=True)"
)


def test_recipe_errors_one_line_exit_2_nothing_written(tmp_path):
    """Each case of :data:`RECIPE_ERRORS` in turn in one fresh interpreter (one start-up's imports for all): after each,
    neither torch nor optuna is loaded, the exit code is 2, its stderr is one line saying why, and nothing is
    written. A case that loaded either would be seen right after it."""
    cases = []
    for i, (split, space, args, _) in enumerate(RECIPE_ERRORS):
        (tmp_path / f"c{i}").mkdir()
        cases.append(
            ["tune", recipe(tmp_path / f"c{i}", split, space), "--out", str(tmp_path / f"c{i}" / "study"), *args]
        )
    p = probe_each(cases, tmp_path)
    loaded = [l for l in p.stdout.splitlines() if l.startswith("LOADED")]
    errs = p.stderr.split("CASE ")[1:]
    assert len(loaded) == len(errs) == len(RECIPE_ERRORS), p.stdout[-400:] + p.stderr[-2000:]
    for i, (_, _, args, said) in enumerate(RECIPE_ERRORS):
        assert loaded[i] == "LOADED False False CODE 2", (args, loaded[i], errs[i])
        lines = [l for l in errs[i].splitlines()[1:] if l.strip()]
        assert errs[i].startswith(f"{i}\n") and len(lines) == 1 and said in lines[0], (args, errs[i])
        assert not (tmp_path / f"c{i}" / "study").exists()


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
