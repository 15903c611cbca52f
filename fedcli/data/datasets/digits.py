"""scikit-learn's bundled 8x8 digits (1,797 samples, offline): x/16 as [N, 1, 8, 8], 10 classes; no official split,
so a holdout of 0.2 by default (1,437 / 360). Nothing on disk to check: fedcli's default dataset."""

from __future__ import annotations

import math
from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset

DIGITS_SAMPLES = 1797


def load_digits(
    data_dir: Path | None = None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """scikit-learn's bundled 8x8 digits (1,797 samples, offline): x/16 as [N, 1, 8, 8], 10 classes.

    There is no official split: the holdout fraction defaults to 0.2 (1,437 train / 360 test).
    """
    import numpy as np

    from fedcli.data.sources import _assemble, _Holdout, _Split

    frac = holdout_fraction if holdout_fraction > 0 else 0.2
    data, target = _sklearn_digits()
    x = (np.asarray(data, dtype=np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = np.asarray(target, dtype=np.int64)
    source = {"dataset": "digits", "folder": None, "format": "sklearn.datasets.load_digits", "files": []}
    return _assemble("digits", _Holdout("train", frac), _Split(x, y), None, 10, source)


def _sklearn_digits() -> tuple:
    """(data [1797, 64], target) of scikit-learn's digits: its bundled ``datasets/data/digits.csv.gz`` read directly
    (64 pixel columns and the label, as ``sklearn.datasets.load_digits`` reads it), which spares importing
    scikit-learn (about 1 s of every default ``fedcli train``); ``load_digits`` itself when the file is not there."""
    import importlib.util

    module_spec = importlib.util.find_spec("sklearn")
    found = module_spec and module_spec.submodule_search_locations
    path = Path(module_spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if found else None
    if path is not None and path.is_file():
        from fedcli.data._formats import read_number_table

        table = read_number_table(path)  # kept for the process, read-only (a process that trains again: no re-parse)
        return table[:, :-1], table[:, -1].astype(int)
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    return bunch.data, bunch.target


def digits_facts(cfg: dict) -> tuple:
    """The nominal facts: the default 1,437 / 360 split, or the run's ``--holdout-fraction`` of the 1,797 samples."""
    n_train, n_test = 1437, 360
    if cfg.get("holdout_fraction"):
        n_test = math.ceil(DIGITS_SAMPLES * cfg["holdout_fraction"])
        n_train = DIGITS_SAMPLES - n_test
    return (1, 8, 8), 10, n_train, n_test, None


DATASET = Dataset(
    "digits", load_digits, shape=(1, 8, 8), classes=10, train=1437, test=360, facts=digits_facts, on_disk=False
)
