import os

import pytest

import fedcli.fl.methods  # noqa: F401 - start-up: the method registry extends the config (fedcli/config.py)
from simkit import FEMNIST_SAMPLE, MNIST_T10K


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
