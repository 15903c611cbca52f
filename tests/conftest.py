import os

# One arithmetic on every x86 machine, set before torch and MKL load: the golden records (tests/test_golden.py) are
# bitwise, and torch picks its CPU kernels by the processor (ATen's vectorized kernels by AVX2/AVX-512, MKL by vendor
# and instruction set, oneDNN's convolutions by instruction set). Recorded on an AMD EPYC with AVX2 only, the records
# taken on an earlier machine differed in the last digits of every loss (and a BatchNorm ResNet's by more). Pinned here to
# the AVX2 paths: ATen's AVX2 kernels, MKL's conditional numerical reproducibility (MKL_CBWR, the same bits on any
# processor with AVX2) and oneDNN capped at AVX2. Every test process and its children (workers, mpiexec ranks)
# inherit them; a variable already set is left as it is.
for _name, _value in (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_CBWR", "AVX2"), ("ONEDNN_MAX_CPU_ISA", "AVX2")):
    os.environ.setdefault(_name, _value)

import pytest  # noqa: E402

from simkit import FEMNIST_SAMPLE, MNIST_T10K  # noqa: E402


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
