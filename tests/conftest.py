import pytest

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
