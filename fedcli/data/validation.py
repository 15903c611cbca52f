"""The validation split (``--val-fraction F``): a stratified share of the training pool held out before the
partition, never trained on, on which every evaluation also measures the global model (``val_loss``, ``val_acc``).

Which samples are held out is a function of the labels, ``F`` and the run's ``--seed`` only: the stratified split
of the test hold-out (``fedcli.data.sources._holdout_indices``: ``ceil(F N)`` samples, allocated to the classes by
largest remainders) drawn from ``numpy.random.default_rng(SeedSequence(seed, spawn_key=(2,)))``, a stream of its
own (the partition draws from ``default_rng(seed)``, the local test splits from spawn key 1). Nothing of it is
stored: a resumed run, and every process of a run, computes the same split. With ``F = 0`` nothing here runs, so the
training pool, its order and the partition are those of a run without it.

An inline partition splits the rest of the pool (the pool without the held-out samples, in its order) and its index
lists are mapped back to indices of the whole pool; a ``--partition-file``'s clients lose the held-out samples they
hold. Either way no client trains on, or tests on, a validation sample.

For personalized methods, ``--client-val-fraction F`` holds out each client's own validation samples from its
training indices after the partition (``Partition.val``; the local test splits untouched), keyed by (seed, client),
on which every evaluation measures the client's own model (``personal_val_acc``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedcli.errors import ConfigError

VAL_SPLIT_STREAM = 2  # spawn key of the split's stream under the run seed (partition.py's local test split: 1)
CLIENT_VAL_STREAM = 3  # --client-val-fraction: client c's split from spawn key (3, c)


def validation_indices(labels, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out): sorted int64 indices into ``labels`` (the training pool's), the held-out ones a stratified
    ``fraction`` keyed by ``seed``. Refuses (exit 2) a fraction that would take every sample of a class."""
    from fedcli.data.sources import _holdout_indices

    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    keep, val = _holdout_indices(y, fraction, seed=np.random.SeedSequence(seed, spawn_key=(VAL_SPLIT_STREAM,)))
    if not len(val):
        raise ConfigError(
            f"--val-fraction {fraction:g} holds out no sample of the {len(y)} in the training pool "
            f"(ceil(F N) = 0): give at least {1 / len(y):.3g}, or 0 for no validation split",
            key="val_fraction",
        )
    classes, counts = np.unique(y, return_counts=True)
    kept = np.bincount(y[keep], minlength=int(classes.max()) + 1)[classes] if len(keep) else np.zeros_like(counts)
    if (kept == 0).any():
        c = int(classes[np.argmax(kept == 0)])
        raise ConfigError(
            f"--val-fraction {fraction} holds out every training sample of class {c} "
            f"({int(counts[classes == c][0])} in the pool); use a smaller fraction",
            key="val_fraction",
        )
    return keep.astype(np.int64), val.astype(np.int64)


def split_validation(cfg, dataset, partition_of):
    """``dataset`` with its validation set (``val_x``, ``val_y``: the held-out samples of the training pool) and the
    partition ``partition_of(pool)`` of the rest, as indices into the whole pool. ``partition_of`` is called with the
    dataset without the held-out samples (only the labels and groups the partition reads are taken)."""
    import torch

    keep, val = validation_indices(dataset.train_y, cfg.val_fraction, cfg.seed)
    kept = torch.as_tensor(keep)
    rest = replace(
        dataset,
        train_y=dataset.train_y[kept],
        train_groups=None if dataset.train_groups is None else dataset.train_groups[kept],
    )
    partition = remap(partition_of(rest), keep, cfg, len(dataset.train_y))
    return with_validation(dataset, val, cfg), partition


def drop_validation(cfg, dataset, partition):
    """A ``--partition-file``'s partition without the held-out samples (each client keeps the rest of its own), and
    ``dataset`` with its validation set."""
    keep, val = validation_indices(dataset.train_y, cfg.val_fraction, cfg.seed)

    def drop(lists):
        return None if lists is None else [np.setdiff1d(np.asarray(t, dtype=np.int64), val) for t in lists]

    return with_validation(dataset, val, cfg), _rebuilt(partition, drop(partition.train), drop(partition.test), cfg)


def remap(partition, keep: np.ndarray, cfg, n_pool: int):
    """The partition of the kept samples with its indices mapped back to the whole pool's (``n_pool`` samples: its
    ``n_train``, so that a partition file of it is read against the whole pool)."""

    def back(lists):
        return None if lists is None else [keep[np.asarray(t, dtype=np.int64)] for t in lists]

    return _rebuilt(partition, back(partition.train), back(partition.test), cfg, n_train=n_pool)


def _rebuilt(partition, train, test, cfg, **config_changes):
    """The partition with these index lists; its config records the split (so its hash differs from F = 0's)."""
    from fedcli.data.partition import Partition, partition_hash

    config = {**partition.config, **config_changes, "val_fraction": cfg.val_fraction, "val_seed": cfg.seed}
    return Partition(config=config, train=train, test=test, hash=partition_hash(config, train, test))


def client_validation_indices(train: list, fraction: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's (training, validation) indices: ``floor(fraction n_c)`` of its ``n_c`` training samples, at
    least 1, drawn by a permutation from ``default_rng(SeedSequence(seed, spawn_key=(3, c)))`` (a function of the
    seed and the client only), both sorted. Refuses (exit 2) a fraction that leaves a client nothing to train on."""
    kept, held = [], []
    for c, idx in enumerate(train):
        idx = np.asarray(idx, dtype=np.int64)
        k = max(1, int(np.floor(fraction * len(idx))))
        if len(idx) - k < 1:
            raise ConfigError(
                f"--client-val-fraction {fraction} leaves client {c} none of its {len(idx)} training "
                f"sample(s) to train on; use a smaller fraction or fewer clients",
                key="client_val_fraction",
            )
        perm = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(CLIENT_VAL_STREAM, c))).permutation(
            len(idx)
        )
        held.append(np.sort(idx[perm[:k]]))
        kept.append(np.sort(idx[perm[k:]]))
    return kept, held


def split_client_validation(cfg, partition):
    """``part`` with each client's own validation samples (``Partition.val``) held out of its training indices."""
    from fedcli.data.partition import Partition, partition_hash

    train, val = client_validation_indices(partition.train, cfg.client_val_fraction, cfg.seed)
    config = {**partition.config, "client_val_fraction": cfg.client_val_fraction, "client_val_seed": cfg.seed}
    return Partition(
        config=config, train=train, test=partition.test, hash=partition_hash(config, train, partition.test), val=val
    )


def with_validation(dataset, val: np.ndarray, cfg):
    import torch

    idx = torch.as_tensor(val)
    source = {
        **dataset.source,
        "validation": {
            "fraction": cfg.val_fraction,
            "seed": cfg.seed,
            "stratified": True,
            "stream": VAL_SPLIT_STREAM,
            "count": int(len(val)),
        },
    }
    return replace(dataset, val_x=dataset.train_x[idx], val_y=dataset.train_y[idx], source=source)
