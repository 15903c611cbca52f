"""CIFAR-100 (Krizhevsky 2009), fine labels: the python pickles ``cifar-100-python/train`` and ``test``; 3x32x32
colour images normalized per channel, 100 classes, 50,000 / 10,000 samples, augmented at train time."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import DOWNLOAD_HOW, Dataset, FedDataset, cifar_check

CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)


def load_cifar100(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """CIFAR-100 (fine labels): ``cifar-100-python/train`` and ``test``."""
    from fedcli.data.datasets.shared import CifarLayout, load_cifar

    return load_cifar(
        "cifar100",
        data_dir,
        CifarLayout(
            folder="cifar-100-python",
            train_files=["train"],
            test_file="test",
            label_key="fine_labels",
            tv_class="CIFAR100",
            mean=CIFAR100_MEAN,
            std=CIFAR100_STD,
            num_classes=100,
        ),
        download=download,
        holdout_fraction=holdout_fraction,
    )


DATASET = Dataset(
    "cifar100",
    load_cifar100,
    shape=(3, 32, 32),
    classes=100,
    train=50000,
    test=10000,
    check=cifar_check("CIFAR-100", "cifar-100-python", "train", "test"),
    how=DOWNLOAD_HOW.format("cifar-100-python/"),
    downloadable=True,
)
