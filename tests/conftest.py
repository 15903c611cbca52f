import os
import sys

# pytest rewrites every test module's asserts when it imports it (about 6 s of CPU for the suite, in each xdist worker
# and each nested pytest) and keeps the result in __pycache__, but not where PYTHONDONTWRITEBYTECODE is set (this
# machine, CI's): kept here anyway, as `make install` compiles fedcli's own modules; `make install` collects the suite
# once to write them.
sys.dont_write_bytecode = False

# One arithmetic on every x86 machine, set before torch and MKL load: the golden records (tests/test_golden.py) are
# bitwise, and torch picks its CPU kernels by the processor (ATen's vectorized kernels by AVX2/AVX-512, MKL by vendor
# and instruction set, oneDNN's convolutions by instruction set). Recorded on an AMD EPYC with AVX2 only, the records
# taken on an earlier machine differed in the last digits of every loss (and a BatchNorm ResNet's by more). Pinned here
# to
# the AVX2 paths: ATen's AVX2 kernels, MKL's conditional numerical reproducibility (MKL_CBWR, the same bits on any
# processor with AVX2) and oneDNN capped at AVX2. Every test process and its children (workers, mpiexec ranks)
# inherit them; a variable already set is left as it is.
for _name, _value in (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_CBWR", "AVX2"), ("ONEDNN_MAX_CPU_ISA", "AVX2")):
    os.environ.setdefault(_name, _value)

# A pytest-xdist worker (`make test`) starts with COLUMNS=80 and LINES=24 in its environment, which the parent did not
# have: rich's consoles, made when fedcli is imported, would then keep 80 columns for good, where a test's own COLUMNS
# (CliRunner's env) is what they read otherwise. Each worker has its parent's environment again.
if os.environ.get("PYTEST_XDIST_WORKER"):
    try:
        _parent = dict(v.split("=", 1) for v in open(f"/proc/{os.getppid()}/environ").read().split("\0") if "=" in v)
    except OSError:
        _parent = None
    for _name in ("COLUMNS", "LINES"):
        if _parent is not None and _name not in _parent:
            os.environ.pop(_name, None)

# Each of `make test`'s pytest-xdist workers gets its share of the cores for torch's own threads (1 with 2 workers on 2
# cores): two workers of 2 threads each on 2 cores wait on each other's descheduled threads in every parallel region
# (fedcli's runs use 1 thread anyway, fedcli/fl/engine.py: default_threads). Children inherit it; set before torch
# loads.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))

import atexit  # noqa: E402
import gc  # noqa: E402
import signal  # noqa: E402

# A test process holds torch, matplotlib, mlflow and a thousand tests' objects: each collection of CPython's oldest
# generation walks all of them (0.15-0.3 s). The test processes collect it a tenth as often as the default (every 100
# collections of the middle generation, not 10): measured on tests/engine and tests/algorithms, 28 -> 8 of them, 6.4 ->
# 2.6 s of CPU, the same peak memory (1.2 GB). fedcli's own processes keep CPython's defaults.
gc.set_threshold(700, 10, 100)
# At its exit, after pytest's own last collection (its unraisable-exception check), a test process's objects are
# frozen out of the collections CPython's finalization makes while it clears the modules: each walked them all again
# (a `make test` worker waited 2 to 10 s there, the controller with it, for memory the process is about to return).
atexit.register(gc.freeze)

# A test run started with SIGINT or SIGHUP ignored (`nohup make test`, `make test &` in a script) would pass that on to
# every fedcli it starts, and fedcli rightly leaves an ignored signal ignored (nohup): the signal tests would then fail.
# They get their defaults back (so a hang-up ends such a run: start it with setsid instead of nohup).
for _sig, _default in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGHUP, signal.SIG_DFL),
    (signal.SIGTERM, signal.SIG_DFL),
):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, _default)

import pytest  # noqa: E402

# postgres_server, postgres_url: the local PostgreSQL (scripts/postgres-local.sh), a fresh database per test
from pgkit import postgres_server, postgres_url  # noqa: E402
from sharedkit import FEMNIST_SAMPLE, MNIST_T10K  # noqa: E402


@pytest.fixture
def mnist_t10k():
    if not (MNIST_T10K / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"shared MNIST test split not found at {MNIST_T10K}")
    return MNIST_T10K


@pytest.fixture
def femnist_sample():
    if not (FEMNIST_SAMPLE / "train").is_dir():
        pytest.skip(f"shared FEMNIST LEAF sample not found at {FEMNIST_SAMPLE}")
    return FEMNIST_SAMPLE


@pytest.fixture(scope="session")
def golden_runs(tmp_path_factory):
    """Every golden run (tests/goldenkit.py) once per session: (files per run, Simulation writers per run)."""
    from goldenkit import run_all_watching_writes

    return run_all_watching_writes(tmp_path_factory.mktemp("golden-runs"))


# the longest test files (tens of seconds each on 2 cores), longest first, by their summed durations in a `make test`
# of 2026-11-29 (a per-test plugin); the files whose tests submit Slurm jobs (one at a time across the workers, see
# pytest_runtest_protocol) spaced apart so that they seldom run at the same time. The Makefile's --no-loadscope-reorder
# keeps this order (pytest-xdist otherwise sends the files with the most tests first).
LONG_FILES = (
    "test_trackers.py",
    "test_readme.py",
    "test_slurm.py",
    "test_signals.py",
    "test_workers.py",
    "test_reliability.py",
    "test_tune_slurm.py",
    "test_tune_study.py",
    "test_presets_learn.py",
    "test_paper_scale.py",
    "test_store.py",
    "test_mpi.py",
    "test_mpi_families.py",
    "test_tune_workers.py",
    "test_resume_presets.py",
    "test_cli.py",
    "test_golden.py",
)


def check_long_reasons(items) -> None:
    """Every ``@pytest.mark.long`` test says why it is out of ``make test`` (``reason=``); else a usage error."""
    for item in items:
        mark = item.get_closest_marker("long")
        if mark is not None and not mark.kwargs.get("reason"):
            raise pytest.UsageError(f'{item.nodeid}: @pytest.mark.long needs reason="..." (why it is out of make test)')


def pytest_collection_modifyitems(config, items):
    """Every long test says why (:func:`check_long_reasons`). Under pytest-xdist (`make test`: --dist loadfile, a
    file's tests one after another on one worker), the longest files start first, so that no worker is left alone
    with one of them at the end."""
    check_long_reasons(items)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: i for i, name in enumerate(LONG_FILES)}
        items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``slurm`` holds a file lock shared by every pytest process of this user while it runs, so the
    tests that submit jobs to the one-node cluster (2 CPUs) run one at a time across `make test`'s xdist workers:
    each finds the queue as it left it. Taken outside pytest-timeout's timer (this wrapper runs first), so the wait
    for the lock is not counted against the test's timeout. ``FEDCLI_TESTS_SLURM_LOCK`` names the lock while held
    (sweepkit.require_slurm fails a test that calls it unmarked)."""
    if item.get_closest_marker("slurm") is None:
        yield
        return
    import fcntl
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"fedcli-tests-slurm-{os.getuid()}.lock")
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        os.environ["FEDCLI_TESTS_SLURM_LOCK"] = path
        try:
            yield
        finally:
            os.environ.pop("FEDCLI_TESTS_SLURM_LOCK", None)
            fcntl.flock(f, fcntl.LOCK_UN)


def mpi_required() -> bool:
    """Under CI (``CI`` set, as every CI service does) or with ``FEDCLI_REQUIRE_MPI=1``, an MPI test may not skip."""
    flag = os.environ.get("FEDCLI_REQUIRE_MPI", "")
    if flag:
        return flag not in ("0", "false", "no")
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped ``mpi`` test fails where MPI is required: a broken MPI install must not give a green CI."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("mpi") is not None and mpi_required():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"MPI test skipped where MPI is required (CI or FEDCLI_REQUIRE_MPI=1): {reason}"
