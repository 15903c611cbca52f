"""Your own arrays, one ``.npz`` or ``.pt`` file (``fedcli.data.custom``): read for its facts, checked only to be
there."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset, check_there


def load_tensors(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Arrays from one ``.npz`` or ``.pt`` file (``fedcli.data.custom.load_tensors``)."""
    from fedcli.data.custom import load_tensors as load

    return load(data_dir, download=download, holdout_fraction=holdout_fraction, options=options)


DATASET = Dataset("tensors", load_tensors, check=check_there, how="point data_dir at your .npz or .pt file")
