"""What every dataset loader shares (``fedcli.data.datasets``' built-in sources and ``fedcli.data.custom``'s own
data): the stratified hold-out split and the assembly of numpy splits into a :class:`FedDataset` (declared, with the
loader registry, torch-free in ``fedcli.data.datasets``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedcli.data.datasets.base import FedDataset
from fedcli.data.datasets.base import default_dir as _default_dir  # noqa: F401
from fedcli.errors import DataError

HOLDOUT_SEED = 0  # the held-out test set is a function of the data only, never of a run seed


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


@dataclass(frozen=True)
class _Holdout:
    """The holdout policy of a loader's splits: ``pool`` ``"both"`` keeps the source's train and test splits as they
    are; ``"train"`` or ``"test"`` takes that one split and holds ``fraction`` of it out as the test set
    (:func:`_holdout_indices`, stratified, seed ``HOLDOUT_SEED``)."""

    pool: str
    fraction: float = 0.0


@dataclass(frozen=True)
class _Inputs:
    """How a loader's inputs become tensors: as ``dtype`` (float32, or int64 token ids for text), reshaped to
    ``(-1, *image_shape)`` when given; ``augment`` the training-time augmentation the dataset asks for
    (``FedDataset.augment``: ``"cifar"`` or none)."""

    dtype: type = np.float32
    image_shape: tuple[int, ...] | None = None
    augment: str | None = None


def _assemble(
    name: str,
    holdout: _Holdout,
    train: _Split | None,
    test: _Split | None,
    num_classes: int,
    source: dict,
    *,
    inputs: _Inputs = _Inputs(),
    group_names: list[str] | None = None,
) -> FedDataset:
    """Apply the ``holdout`` policy and turn numpy splits into a FedDataset (inputs as ``inputs`` says)."""
    pool, frac = holdout.pool, holdout.fraction
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
        x = np.ascontiguousarray(x, dtype=inputs.dtype)
        if inputs.image_shape is not None:
            x = x.reshape((-1, *inputs.image_shape))
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
        augment=inputs.augment,
        source=source,
    )
