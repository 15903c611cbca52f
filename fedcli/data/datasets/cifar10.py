"""CIFAR-10 (Krizhevsky 2009): the python pickles ``cifar-10-batches-py/data_batch_1..5`` and ``test_batch`` (in that
folder or directly in the data folder); 3x32x32 colour images normalized per channel, 10 classes, 50,000 / 10,000
samples, augmented at train time (``fedcli.data.augment``)."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import DOWNLOAD_HOW, Dataset, FedDataset, cifar_check

CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def load_cifar10(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """CIFAR-10: ``cifar-10-batches-py/data_batch_1..5`` and ``test_batch``."""
    from fedcli.data.datasets.shared import CifarLayout, load_cifar

    return load_cifar(
        "cifar10",
        data_dir,
        CifarLayout(
            folder="cifar-10-batches-py",
            train_files=[f"data_batch_{i}" for i in range(1, 6)],
            test_file="test_batch",
            label_key="labels",
            tv_class="CIFAR10",
            mean=CIFAR10_MEAN,
            std=CIFAR10_STD,
            num_classes=10,
        ),
        download=download,
        holdout_fraction=holdout_fraction,
    )


DATASET = Dataset(
    "cifar10",
    load_cifar10,
    shape=(3, 32, 32),
    classes=10,
    train=50000,
    test=10000,
    check=cifar_check("CIFAR-10", "cifar-10-batches-py", "data_batch_1", "test_batch"),
    how=DOWNLOAD_HOW.format("cifar-10-batches-py/"),
    downloadable=True,
)
