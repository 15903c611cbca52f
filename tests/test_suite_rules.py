"""Rules of the test suite itself: MPI tests fail instead of skipping under CI; modules stand alone; run_forked."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import srckit

TESTS = Path(__file__).resolve().parent

SKIPPING = """
import pytest

@pytest.mark.mpi
@pytest.mark.skipif(True, reason="mpiexec not installed")
def test_needs_mpi():
    pass

@pytest.mark.mpi
def test_skips_inside():
    pytest.skip("mpiexec not installed")

@pytest.mark.skipif(True, reason="no data")
def test_not_mpi():
    pass
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "env,code,outcome",
    [
        ({"CI": "true"}, 1, "1 failed, 1 skipped, 1 error"),  # skipif: at setup
        ({"FEDCLI_REQUIRE_MPI": "1"}, 1, "1 failed, 1 skipped, 1 error"),
        ({"CI": ""}, 0, "3 skipped"),
        ({"CI": "true", "FEDCLI_REQUIRE_MPI": "0"}, 0, "3 skipped"),
    ],
)
def test_mpi_tests_fail_instead_of_skipping_under_ci(tmp_path, env, code, outcome):
    (tmp_path / "test_x.py").write_text(SKIPPING)
    # the suite's conftest, as a plugin, on a throwaway test file
    full = {k: v for k, v in os.environ.items() if k not in ("CI", "FEDCLI_REQUIRE_MPI", "PYTEST_ADDOPTS")}
    full.update(env, PYTHONPATH=os.pathsep.join([str(TESTS), full.get("PYTHONPATH", "")]))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-o",
            "markers=mpi",
            str(tmp_path / "test_x.py"),
        ],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert p.returncode == code, p.stdout + p.stderr
    assert outcome in p.stdout, p.stdout
    if code:
        summary = p.stdout.split("short test summary")[-1]
        assert summary.count("MPI test skipped where MPI is required") == 2 and "test_not_mpi" not in summary


@pytest.fixture
def suite_conftest(request):
    """tests/conftest.py as pytest loaded it (``import conftest`` may find a folder's own conftest.py instead)."""
    path = str(TESTS / "conftest.py")
    return next(m for m in request.config.pluginmanager.get_plugins() if getattr(m, "__file__", None) == path)


@pytest.mark.parametrize(
    "env,required",
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"CI": "1"}, True),
        ({"CI": "false"}, False),
        ({"CI": "0"}, False),
        ({"FEDCLI_REQUIRE_MPI": "1"}, True),
        ({"CI": "true", "FEDCLI_REQUIRE_MPI": "0"}, False),
        ({"CI": "", "FEDCLI_REQUIRE_MPI": "yes"}, True),
        ({"CI": "true", "FEDCLI_REQUIRE_MPI": "no"}, False),
    ],
)
def test_mpi_required_reads_ci_and_its_override(monkeypatch, suite_conftest, env, required):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("FEDCLI_REQUIRE_MPI", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert suite_conftest.mpi_required() is required


class _Item:
    def __init__(self, nodeid, marker):
        self.nodeid, self.marker = nodeid, marker

    def get_closest_marker(self, name):
        return self.marker if name == "long" else None


def test_a_long_test_must_say_why(suite_conftest):
    """``@pytest.mark.long`` (out of ``make test``, in ``make test-long`` and CI) is refused at collection without a
    reason."""
    check_long_reasons = suite_conftest.check_long_reasons
    check_long_reasons([_Item("a", None), _Item("b", pytest.mark.long(reason="15 s").mark)])
    with pytest.raises(pytest.UsageError, match="tests/x.py::t: @pytest.mark.long needs reason="):
        check_long_reasons([_Item("tests/x.py::t", pytest.mark.long.mark)])
    with pytest.raises(pytest.UsageError):
        check_long_reasons([_Item("tests/x.py::t", pytest.mark.long(reason="").mark)])


def test_ci_runs_make_test_then_the_long_tests():
    """The long tier leaves ``make test`` only: CI (.ci/run) runs ``make test`` (the README's test command), then
    ``make test-long``, so CI runs every test that is not slow."""
    root = TESTS.parent
    ci = [ln.strip() for ln in (root / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    runs = [ln.split("make ", 1)[1] for ln in ci if "make test" in ln]
    assert runs == ["test", "test-long"], ci
    make = (root / "Makefile").read_text()
    recipe = lambda target: make.split(f"\n{target}:\n", 1)[1].split("\n", 1)[0]  # noqa: E731
    assert '-m "not slow and not long"' in recipe("test") and '-m "long and not slow"' in recipe("test-long")
    assert recipe("test-all").rstrip().endswith("-m pytest -q")  # every marker


def test_test_modules_do_not_import_each_other():
    """Helpers shared between test modules live in kit modules (simkit, runkit, goldenkit, lama_ref, baselines_kit,
    fedala_kit, sweepkit, signalkit, systemkit): a test module
    that imports another runs (and collects) it twice and ties the two together."""
    found = set()
    for path in TESTS.rglob("test_*.py"):
        for node in ast.walk(srckit.tree(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            found |= {(path.relative_to(TESTS).as_posix(), n) for n in names if n.split(".")[0].startswith("test_")}
    assert not found, sorted(found)


def test_the_run_cache_keys_on_the_data():
    """simkit's cached runs: the same arguments on other data are another run."""
    from fedcli.config import TrainConfig
    from fedcli.data.setup import load_data_and_partition
    from simkit import cached_runner, configurer

    config = configurer(
        dict(
            algo="fedavg",
            dataset="digits",
            model="mlp",
            mlp_hidden="4",
            clients=2,
            rounds=1,
            tau=1,
            batch_size=8,
            device="cpu",
            threads=1,
        )
    )
    run = cached_runner(config)
    a = load_data_and_partition(TrainConfig(dataset="digits", clients=2, seed=0).validate())
    b = load_data_and_partition(TrainConfig(dataset="digits", clients=2, seed=1).validate())  # another split
    ra, ra2, rb = run(a), run(a), run(b)
    assert ra2 is not None and ra[0] is ra2[0] and rb[0] is not ra[0]
    assert rb[0].partition is b[1] and ra[0].partition is a[1]


def test_run_forked_is_a_process_of_its_own_with_python_c_exit_codes(tmp_path):
    """``runkit.run_forked`` stands in for ``python -c SCRIPT ARGV`` (a fork of this process): its own pid, its stdout
    and stderr read back, ``env`` and ``cwd`` applied, sys.exit's code, -N when signal N ended it, 1 and the traceback
    for an exception, and nothing of this process run at its end."""
    from runkit import run_forked

    script = (
        "import os, signal, sys\nprint(os.getpid(), os.getcwd(), os.environ['FORKED'], *sys.argv[1:])\n"
        "print('to stderr', file=sys.stderr)\n"
        "if sys.argv[1] == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
        "if sys.argv[1] == 'raise': raise ValueError('boom')\nsys.exit(int(sys.argv[2]))\n"
    )
    env = {**os.environ, "FORKED": "yes"}
    p = run_forked(script, ["exit", "3"], env=env, cwd=tmp_path)
    pid, cwd, flag, *argv = p.stdout.split()
    assert p.returncode == 3 and int(pid) != os.getpid() and cwd == str(tmp_path) and flag == "yes"
    assert argv == ["exit", "3"] and p.stderr == "to stderr\n"
    assert run_forked(script, ["exit", "0"], env=env).returncode == 0
    assert run_forked(script, ["kill", "0"], env=env).returncode == -9
    q = run_forked(script, ["raise", "0"], env=env)
    assert q.returncode == 1 and "ValueError: boom" in q.stderr
    assert os.getcwd() != str(tmp_path) and "FORKED" not in os.environ  # this process is as it was
