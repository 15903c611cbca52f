"""What every dataset loader shares (``fedcli.data.datasets``' built-in sources and ``fedcli.data.custom``'s own
data): the in-memory :class:`FedDataset`, the loader registry, the stratified hold-out split and the assembly of
numpy splits into a FedDataset."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedcli.errors import DataError

HOLDOUT_SEED = 0  # the held-out test set is a function of the data only, never of a run seed


@dataclass
class FedDataset:
    """A dataset: images ``[N, C, H, W]`` (normalized) or vectors ``[N, D]``, float32, held in memory, or (the
    synthetic data) a table indexed like a tensor whose rows are generated on demand (``GeneratedRows``)."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    train_groups: torch.Tensor | None = None  # int32 [N]: writer/user index of each training sample
    test_groups: torch.Tensor | None = None  # int32 [M]: same indexing for the test samples
    group_names: list[str] | None = None  # group index -> writer id (LEAF ids kept)
    augment: str | None = None  # "cifar": the engine applies fedcli.data.augment at train time
    source: dict = field(default_factory=dict)  # what was read (goes into the run manifest)
    val_x: torch.Tensor | None = None  # --val-fraction: the held-out validation samples (fedcli.data.validation)
    val_y: torch.Tensor | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def share_caches(self, processes: int) -> None:
        """Tables that keep a cache of generated rows (``GeneratedRows``) keep ``1 / processes`` of it in this process:
        the processes of a node (MPI ranks, ``--workers``) share one budget, as each trains its share of the clients."""
        for x in (self.train_x, self.test_x):
            if hasattr(x, "share_cache"):
                x.share_cache(processes)

    def __repr__(self) -> str:
        groups = f", groups={len(self.group_names)}" if self.group_names is not None else ""
        return (
            f"FedDataset({self.name!r}, train={len(self.train_y)}, test={len(self.test_y)}, "
            f"input_shape={list(self.input_shape)}, num_classes={self.num_classes}{groups})"
        )


Loader = Callable[..., FedDataset]
DATASETS: dict[str, Loader] = {}


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    """Register ``loader(data_dir: Path | None, *, download, holdout_fraction, options) -> FedDataset``. fedcli's own
    loaders are also named in ``fedcli.data.dataset_names.DATASET_NAMES`` (the command line's list, read without importing
    them; tests/cli/test_fast_answers.py checks the two agree)."""

    def deco(fn: Loader) -> Loader:
        DATASETS[name] = fn
        return fn

    return deco


@dataclass
class _Split:
    x: np.ndarray
    y: np.ndarray
    groups: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> _Split:
        return _Split(self.x[idx], self.y[idx], None if self.groups is None else self.groups[idx])


def _holdout_indices(y: np.ndarray, fraction: float, seed: int = HOLDOUT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split of ``range(len(y))`` into (train, test) index arrays, both sorted.

    The test set has ``ceil(fraction * N)`` samples (scikit-learn's convention), allocated to the classes
    in proportion to their sizes by largest remainders; which samples of a class are held out is drawn
    with ``numpy.random.default_rng(seed)``.
    """
    n = len(y)
    n_test = math.ceil(fraction * n - 1e-9)
    classes, y_idx, counts = np.unique(y, return_inverse=True, return_counts=True)
    exact = n_test * counts / n
    quota = np.floor(exact).astype(np.int64)
    extra = n_test - int(quota.sum())
    if extra > 0:
        quota[np.argsort(-(exact - quota), kind="stable")[:extra]] += 1
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    order = perm[np.argsort(y_idx[perm], kind="stable")]  # grouped by class, random within a class
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    cls_of = y_idx[order]
    is_test = (np.arange(n) - starts[cls_of]) < quota[cls_of]
    return np.sort(order[~is_test]), np.sort(order[is_test])


def _assemble(
    name: str,
    pool: str,
    frac: float,
    train: _Split | None,
    test: _Split | None,
    num_classes: int,
    source: dict,
    *,
    image_shape: tuple[int, ...] | None = None,
    group_names: list[str] | None = None,
    augment: str | None = None,
    x_dtype: type = np.float32,
) -> FedDataset:
    """Apply the holdout policy and turn numpy splits into a FedDataset (inputs as ``x_dtype``: float32,
    or int64 token ids for text)."""
    if pool != "both":
        base = train if pool == "train" else test
        assert base is not None
        tr_idx, te_idx = _holdout_indices(base.y, frac)
        if len(tr_idx) == 0 or len(te_idx) == 0:
            raise DataError(
                f"{source.get('folder', name)}: holding out {frac} of {len(base.y)} samples leaves an empty split; "
                f"expected a larger {name} {pool} split"
            )
        train, test = base.take(tr_idx), base.take(te_idx)
        source["holdout"] = {"fraction": frac, "pool": pool, "seed": HOLDOUT_SEED, "stratified": True}
    assert train is not None and test is not None

    def x_tensor(x: np.ndarray) -> torch.Tensor:
        if not isinstance(x, np.ndarray):  # a table indexed like a tensor (fedcli.data.synthetic.GeneratedRows)
            return x
        x = np.ascontiguousarray(x, dtype=x_dtype)
        if image_shape is not None:
            x = x.reshape((-1, *image_shape))
        return torch.from_numpy(x)

    def g_tensor(g: np.ndarray | None) -> torch.Tensor | None:  # int32: 4 bytes a sample (2^31 writers is plenty)
        return None if g is None else torch.from_numpy(np.ascontiguousarray(g, dtype=np.int32))

    source["counts"] = {"train": int(len(train.y)), "test": int(len(test.y))}
    source["num_classes"] = num_classes
    return FedDataset(
        name=name,
        train_x=x_tensor(train.x),
        train_y=torch.from_numpy(np.ascontiguousarray(train.y, dtype=np.int64)),
        test_x=x_tensor(test.x),
        test_y=torch.from_numpy(np.ascontiguousarray(test.y, dtype=np.int64)),
        num_classes=num_classes,
        train_groups=g_tensor(train.groups),
        test_groups=g_tensor(test.groups),
        group_names=group_names,
        augment=augment,
        source=source,
    )


def _default_dir(name: str, data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else Path("data") / name
