"""Your own images, one folder per class (torchvision's ``ImageFolder`` layout; ``fedcli.data.custom``): read for its
facts (shape, classes, size), checked only to be there."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset, check_there


def load_imagefolder(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Images in torchvision's ``ImageFolder`` layout (``fedcli.data.custom.load_imagefolder``)."""
    from fedcli.data.custom import load_imagefolder as load

    return load(data_dir, download=download, holdout_fraction=holdout_fraction, options=options)


DATASET = Dataset(
    "imagefolder", load_imagefolder, check=check_there, how="point data_dir at your image folder (one folder per class)"
)
