"""Answers without torch: `--help`, `train --help`, `partition --help` and argument errors (issue 30), `train`'s config
errors and `--resume`'s refusals that read the run folder (in one process and under MPI), method names as people type
them, and `--seeds` as a count, a list or a range."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcli.errors import ConfigError
from fedcli.method_names import resolve_method
from fedcli.sweep.run import parse_seeds

ROOT = Path(__file__).resolve().parents[2]
from runkit import MPIEXEC, imported_torch, mpirun  # noqa: E402

PROBE = (
    "import sys, time; t = time.perf_counter(); from fedcli.cli.main import main\n"
    "code = None\ntry:\n    main({args!r})\nexcept SystemExit as e:\n    code = e.code\n"
    "print('TORCH', 'torch' in sys.modules, time.perf_counter() - t, 'CODE', code)"
)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A fresh cache folder: the answers below need nothing cached (the specs are read directly)."""
    cache = tmp_path_factory.mktemp("cache")
    yield {**os.environ, "PYTHONPATH": str(ROOT), "FEDCLI_CACHE_DIR": str(cache), "COLUMNS": "100"}
    assert list(cache.iterdir()) == []  # and they wrote nothing there


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["train", "--help"],
        ["partition", "--help"],
        ["train", "--algo", "fedlamma"],
        ["train", "--tau", "x"],
        ["sweep", "--help"],
        ["report", "--help"],
        ["train", "--dataset", "femnst"],
    ],
)
def test_help_and_argument_errors_do_not_import_torch(env, args):
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=args)], env=env, capture_output=True, text=True, timeout=60
    )
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    assert "TORCH False" in p.stdout, (args, p.stdout[-300:], p.stderr[-300:])
    assert wall < 5, (
        wall
    )  # under 1 s on an idle 2-core machine (fedcli bench --workloads startup); this bounds a loaded one


def test_partition_refuses_a_bad_argument_before_torch_and_the_data(env, tmp_path):
    """Issue 47: `fedcli partition --clients 0` took about 10 s to be refused (torch and the data loaded first)."""
    out = tmp_path / "p.json"
    p = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=["partition", "--clients", "0", "--out", str(out)])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "TORCH False" in p.stdout, (p.stdout[-300:], p.stderr[-300:])
    assert p.stderr.strip().splitlines() == ["fedcli: error: --clients must be >= 1, got 0"]
    assert not out.exists()


#: config values ``fedcli train`` refuses, and the one line it says (exit 2)
BAD_VALUES = [
    (["--tau", "0"], "fedcli: error: --tau must be >= 1, got 0"),
    (["--active-ratio", "0"], "fedcli: error: --active-ratio must be > 0.0, got 0.0"),
    (
        ["--clients", "4", "--active-ratio", "0.5", "--workers", "3"],
        "fedcli: error: --active-ratio 0.5 of 4 clients gives 2 client(s) per round, fewer than the 3 worker "
        "processes (--workers): each process trains at least one client of every round; use at most 2 processes, or "
        "more clients per round",
    ),
]


@pytest.mark.parametrize("args, line", BAD_VALUES)
def test_a_bad_config_value_is_answered_before_torch(env, args, line):
    """The config's checks import no torch (fedcli/cli/train.py, ``_start``): a bad value is its one line and exit 2
    with torch never imported (it took about 2 s of CPU before), and no "loading torch ..." line before it (a job log
    gets that line once the config holds). More worker processes than clients per round too (``_processes_fit``; it
    started the workers first, 3.4 s)."""
    p = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=["train", *args])], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.stdout.split()[:2] == ["TORCH", "False"] and p.stdout.split()[-2:] == ["CODE", "2"], (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == [line]


def pruned_run(folder: Path, world_size: int) -> Path:
    """A run folder as a pruned run leaves it, as far as ``--resume`` reads it: the manifest (``status:
    interrupted``, ``reason: pruned``, where it stopped; fedcli/results/validate.py, ``pruned``)."""
    folder.mkdir()
    manifest = {
        "status": "interrupted",
        "reason": "pruned",
        "pruned": {"iteration": 20, "round": 5, "why": "below the median"},
        "world_size": world_size,
        "workers": 1,
        "config": {"algo": "fedavg", "dataset": "digits", "out": str(folder)},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_resume_of_a_pruned_run_is_refused_before_torch(env, tmp_path):
    """``--resume`` of a pruned run without ``--promote`` (fedcli/results/runstate.py, ``refuse_pruned``): its one
    line and exit 2 from the run folder's manifest alone, torch never imported."""
    run = pruned_run(tmp_path / "run", 1)
    p = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=["train", "--resume", str(run)])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.stdout.split()[:2] == ["TORCH", "False"] and p.stdout.split()[-2:] == ["CODE", "2"], (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == [
        f"fedcli: error: --resume {run}: the run was pruned at iteration 20 (below the median) and is kept as it "
        f"stands; --promote finishes it: fedcli train --resume {run} --promote"
    ]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_under_mpi_a_bad_value_and_a_pruned_resume_are_answered_before_torch(tmp_path, monkeypatch):
    """Under ``mpiexec -n 2``: rank 0 checks the config, the error is said once, every rank exits 2, and neither
    process imports torch (each paid about 2 s of CPU for it before the answer)."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # both ranks report their imports (mpiexec passes it on)
    run = pruned_run(tmp_path / "run", 2)
    for args, line in [
        (["--tau", "0", "--out", str(tmp_path / "bad")], BAD_VALUES[0][1]),
        (["--resume", str(run)], "the run was pruned at iteration 20 (below the median) and is kept as it stands"),
    ]:
        p = mpirun(2, ["train", *args], timeout=90)
        assert p.returncode == 2, p.stderr[-2000:]
        assert p.stderr.count("import time: self [us]") == 2, p.stderr[-2000:]  # the two ranks' reports
        assert not imported_torch(p.stderr), [l for l in p.stderr.splitlines() if "torch" in l][:5]
        assert p.stderr.count("fedcli: error:") == 1 and line in p.stderr and "Traceback" not in p.stderr
    assert "mpiexec -n 2" in p.stderr and not (tmp_path / "bad").exists()


def test_typo_in_algo_gets_did_you_mean(env):
    p = subprocess.run(
        [sys.executable, "-m", "fedcli", "train", "--algo", "fedlamma"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "did you mean fedlama or fedlamb?" in lines[0], p.stderr


def test_typo_in_dataset_gets_did_you_mean(env):
    p = subprocess.run(
        [sys.executable, "-m", "fedcli", "train", "--dataset", "femnst"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown dataset 'femnst'; did you mean femnist or fmnist or emnist?" in lines[0], (
        p.stderr
    )


def test_list_algos_never_cuts_a_flag_at_80_columns(env):
    import re

    from fedcli.cli.catalog import load

    p = subprocess.run(
        [sys.executable, "-m", "fedcli", "train", "--list-algos"],
        env={**env, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert max(len(line) for line in p.stdout.splitlines()) <= 80
    known = {f"--{f['name'].replace('_', '-')}" for f in load()["fields"]} | {
        "--no-" + f["name"].replace("_", "-") for f in load()["fields"]
    }
    flags = {m.rstrip(",;).") for m in re.findall(r"--[a-z0-9-]+[,;).]?", p.stdout)} - {"--ala-", "--help"}  # "--ala-*"
    assert flags <= known, sorted(flags - known)  # before: "--client-test-frac" / "tion 0.25" at 80 columns


def test_help_lists_core_options_first_and_preset_defaults(env):
    p = subprocess.run(
        [sys.executable, "-m", "fedcli", "train", "--help"],
        env={**env, "COLUMNS": "2000"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = p.stdout
    order = [out.index(f"│ {flag} ") for flag in ("--algo", "--iterations", "--seed", "--out")]
    own = [out.index(f"│ {flag} ") for flag in ("--mu", "--ditto-lambda")]
    assert order == sorted(order) and order[-1] < min(own), (order, own)  # core options before the methods' own
    for flag, panel in (
        ("--mu", "method options: fedprox (fedprox, fedprox-c)"),
        ("--ditto-lambda", "method options: ditto"),
    ):
        assert out[: out.index(f"│ {flag} ")].rsplit("╭─", 1)[-1].lstrip("─ ").startswith(panel), flag  # by method
    mu = next(l for l in out.splitlines() if "│ --mu " in l)
    assert "[default: 0.01; presets: fedprox 0.001, fedprox-c 0.001]" in mu, mu


def test_method_names_as_papers_spell_them():
    labels = {"fedlama": "FedLAMA", "fedlamb": "Fed-LAMB", "fedavg": "FedAvg", "fedsgd": "Fed-SGD"}
    assert resolve_method("fedlama", labels) == "fedlama"
    assert resolve_method("FedLAMA", labels) == "fedlama"
    assert resolve_method("Fed-LAMB", labels) == "fedlamb"
    assert resolve_method("FEDSGD", labels) == "fedsgd"
    with pytest.raises(ConfigError, match="did you mean fedlama or fedlamb"):
        resolve_method("fedlamma", labels)
    with pytest.raises(ConfigError) as e:
        resolve_method("zzz", labels)
    assert "did you mean" not in str(e.value) and e.value.key == "algo"


def test_recipe_algo_in_papers_spelling_gets_the_presets_defaults():
    from fedcli.recipes import build_config

    cfg = build_config(None, {"algo": "Fed-LAMB"})
    assert cfg.algo == "fedlamb" and cfg.lr == 0.01  # Fed-LAMB's own default, not the general 0.1


def test_seeds_count_list_range():
    assert parse_seeds(3) == [0, 1, 2]
    assert parse_seeds("3") == [0, 1, 2]
    assert parse_seeds("3,4") == [3, 4]
    assert parse_seeds("2-5") == [2, 3, 4, 5]
    assert parse_seeds("2..4") == [2, 3, 4]
    assert parse_seeds("0,3-4,3") == [0, 3, 4]
    for bad in ("0", "x", "3,a", "5-2", "-1"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)


def test_the_config_and_the_method_registry_need_no_start_up_import_and_no_torch():
    """``TrainConfig`` is whole in a fresh process that imports only ``fedcli.config``: every method's params, every
    preset and every part's declarations are there, read from the specs, and torch is not imported."""
    probe = (
        "import sys\nfrom fedcli.config import TrainConfig\ncfg = TrainConfig(algo='FedLAMA', phi=4).validate()\n"
        "from fedcli import specs\nfrom fedcli.recipes import table_keys\n"
        "print(cfg.algo, cfg.phi, len(specs.METHODS), sorted(specs.PARTS['schedule']), sorted(table_keys('fedprox')),"
        " 'torch' in sys.modules)"
    )
    p = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split(" ", 2)[:2] == ["fedlama", "4"], p.stdout
    assert "['lama', 'lama-accelerate', 'periodic'] ['mu'] False" in p.stdout, p.stdout


def test_the_cli_catalog_is_the_assembled_config():
    from fedcli.cli import catalog
    from fedcli.config import FIELDS
    from fedcli.data.datasets import DATASETS
    from fedcli.specs import METHODS

    loaded = catalog.load()
    assert [f["name"] for f in loaded["fields"]] == list(FIELDS)
    assert all(f["default"] == FIELDS[f["name"]].default for f in loaded["fields"])
    assert set(loaded["methods"]) == set(METHODS)
    assert loaded["datasets"] == sorted(DATASETS)  # the names the command line knows are the loaders registered
