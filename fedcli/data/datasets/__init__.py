"""fedcli's datasets, each declared in one file of this package (``mnist.py``, ``cifar10.py``, ...: its name, input
shape, classes, split sizes, preflight check and loader; :class:`~fedcli.data.datasets.base.Dataset`), and the
registry that finds them by name.

Importing this package imports neither numpy nor torch: the command line's list of datasets, the sweep's preflight
(``fedcli.data.preflight``) and its time estimate (``fedcli.sweep.estimate``) read :data:`DECLARED`; a run calls
:func:`load_dataset`, whose loader imports what it reads with. The built-in datasets are listed in :data:`BUILTIN`
(no module is imported for its side effect); a loader of your own registers with :func:`register_dataset`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from fedcli.data.datasets import (
    agnews,
    cifar10,
    cifar100,
    digits,
    emnist,
    femnist,
    fmnist,
    imagefolder,
    mnist,
    synthetic,
    tensors,
    tinyimagenet,
)
from fedcli.data.datasets.agnews import AGNEWS_CLASSES, AGNEWS_MAX_LEN, AGNEWS_VOCAB, agnews_tokenize  # noqa: F401
from fedcli.data.datasets.base import Dataset, FedDataset, Loader
from fedcli.data.datasets.cifar10 import CIFAR10_MEAN, CIFAR10_STD  # noqa: F401
from fedcli.data.datasets.cifar100 import CIFAR100_MEAN, CIFAR100_STD  # noqa: F401
from fedcli.data.datasets.digits import load_digits  # noqa: F401
from fedcli.data.datasets.emnist import EMNIST_CLASSES  # noqa: F401
from fedcli.data.datasets.femnist import FEMNIST_CLASSES  # noqa: F401
from fedcli.data.datasets.tinyimagenet import TINYIMAGENET_MEAN, TINYIMAGENET_STD  # noqa: F401
from fedcli.errors import ConfigError

#: the built-in datasets, one module each, in the order they were added
BUILTIN = (
    mnist,
    fmnist,
    emnist,
    cifar10,
    cifar100,
    femnist,
    digits,
    synthetic,
    tinyimagenet,
    agnews,
    imagefolder,
    tensors,
)
#: name -> declaration of every built-in dataset
DECLARED: dict[str, Dataset] = {m.DATASET.name: m.DATASET for m in BUILTIN}
#: name -> loader of every dataset a run may name: the built-in ones', then any registered by :func:`register_dataset`
DATASETS: dict[str, Loader] = {name: d.load for name, d in DECLARED.items()}


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    """Register ``loader(data_dir: Path | None, *, download, holdout_fraction, options) -> FedDataset`` as dataset
    ``name`` (your own loader; it has no declaration: the preflight leaves it unchecked, the estimate loads it)."""

    def deco(fn: Loader) -> Loader:
        DATASETS[name] = fn
        return fn

    return deco


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    download: bool = False,
    holdout_fraction: float = 0.0,
    options: dict | None = None,
) -> FedDataset:
    """Load dataset ``name`` from ``data_dir`` (default ``./data/<name>`` for on-disk datasets).

    ``holdout_fraction`` F > 0 makes a stratified F fraction of the train pool the test set (seed 0);
    the pool is the official train split, or the test split when only that is on disk.
    ``options`` may hold keys for other datasets too; a loader reads only its own.
    """
    if name not in DATASETS:
        from fedcli.method_names import suggest

        raise ConfigError(
            f"unknown dataset {name!r}; {suggest(str(name), sorted(DATASETS))}choose one of: "
            f"{', '.join(sorted(DATASETS))}",
            key="dataset",
        )
    try:
        frac = float(holdout_fraction)
    except (TypeError, ValueError):
        frac = math.nan
    if not 0.0 <= frac < 1.0:
        raise ConfigError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}")
    path = Path(data_dir).expanduser() if data_dir not in (None, "") else None
    return DATASETS[name](path, download=bool(download), holdout_fraction=frac, options=dict(options or {}))
