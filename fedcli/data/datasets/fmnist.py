"""Fashion-MNIST (Xiao et al. 2017): IDX files in torchvision's ``FashionMNIST/raw`` layout, or directly in the
folder; 28x28 grey images, 10 classes, 60,000 / 10,000 samples."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import DOWNLOAD_HOW, Dataset, FedDataset, idx_check

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530


def load_fmnist(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Fashion-MNIST (Xiao et al. 2017), IDX files in torchvision's ``FashionMNIST/raw`` layout."""
    from fedcli.data.datasets.shared import IdxLayout, load_idx_dataset

    return load_idx_dataset(
        "fmnist",
        data_dir,
        IdxLayout(
            raw_folder="FashionMNIST",
            tv_class="FashionMNIST",
            prefix="",
            mean=FMNIST_MEAN,
            std=FMNIST_STD,
            num_classes=10,
        ),
        download=download,
        holdout_fraction=holdout_fraction,
    )


DATASET = Dataset(
    "fmnist",
    load_fmnist,
    shape=(1, 28, 28),
    classes=10,
    train=60000,
    test=10000,
    check=idx_check("FashionMNIST"),
    how=DOWNLOAD_HOW.format("the IDX files"),
    downloadable=True,
)
