"""MNIST (LeCun et al. 1998): IDX files in torchvision's ``MNIST/raw`` layout, or directly in the folder, gzip or not;
28x28 grey images normalized by the training set's mean and std, 10 classes, 60,000 / 10,000 samples."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import DOWNLOAD_HOW, Dataset, FedDataset, idx_check

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def load_mnist(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """MNIST (LeCun et al. 1998), IDX files in torchvision's ``MNIST/raw`` layout."""
    from fedcli.data.datasets.shared import IdxLayout, load_idx_dataset

    return load_idx_dataset(
        "mnist",
        data_dir,
        IdxLayout(
            raw_folder="MNIST",
            tv_class="MNIST",
            prefix="",
            mean=MNIST_MEAN,
            std=MNIST_STD,
            num_classes=10,
        ),
        download=download,
        holdout_fraction=holdout_fraction,
    )


DATASET = Dataset(
    "mnist",
    load_mnist,
    shape=(1, 28, 28),
    classes=10,
    train=60000,
    test=10000,
    check=idx_check("MNIST"),
    how=DOWNLOAD_HOW.format("the IDX files"),
    downloadable=True,
)
