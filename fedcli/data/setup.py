"""Load the dataset and the partition a config asks for (shared by ``train`` and ``partition``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fedcli.data.datasets import load_dataset
from fedcli.data.partition import PartitionOptions, load_partition, make_partition
from fedcli.data.validation import drop_validation, split_client_validation, split_validation
from fedcli.errors import ConfigError


def dataset_options(cfg) -> dict:
    return {
        "emnist_split": cfg.emnist_split,
        "synthetic_alpha": cfg.synthetic_alpha,
        "synthetic_beta": cfg.synthetic_beta,
        "synthetic_users": cfg.synthetic_users,
        "synthetic_dim": cfg.synthetic_dim,
        "synthetic_classes": cfg.synthetic_classes,
        "synthetic_iid": cfg.synthetic_iid,
        "data_seed": cfg.data_seed,
        "agnews_vocab_size": cfg.agnews_vocab_size,
        "agnews_max_len": cfg.agnews_max_len,
    }


def data_dir(cfg) -> Path | None:
    if cfg.data_dir:
        return Path(cfg.data_dir).expanduser()
    if cfg.dataset in ("digits", "synthetic"):
        return None
    return Path("data") / cfg.dataset


def load_key(cfg) -> tuple:
    """Everything :func:`load_data`'s result depends on: two configs of the same key load the same dataset (a sweep's
    pool worker keeps the last one loaded by it, ``fedcli.sweep.executors.memoize_datasets``)."""
    return (
        cfg.dataset,
        str(data_dir(cfg)),
        cfg.download,
        cfg.holdout_fraction,
        cfg.data_pool,
        tuple(sorted(dataset_options(cfg).items())),
    )


def load_data(cfg):
    """The dataset; with ``--data-pool train+test`` its two splits merged into one pool (``merge_pool``)."""
    dataset = load_dataset(
        cfg.dataset,
        data_dir(cfg),
        download=cfg.download,
        holdout_fraction=cfg.holdout_fraction,
        options=dataset_options(cfg),
    )
    return merge_pool(dataset) if cfg.data_pool == "train+test" else dataset


def merge_pool(dataset):
    """PFLlib's pool (its dataset scripts, as FedALA's numbers): the training split followed by the test split (or
    the two parts of a ``--holdout-fraction`` split), as one training set that the partition splits over the
    clients. The test set is empty until ``pooled_test_set`` sets it to the clients' local test splits."""
    import torch

    from fedcli.data.synthetic import materialize

    def cat(a, b):
        return None if a is None or b is None else torch.cat([a, b])

    source = {
        **dataset.source,
        "pool": "train+test",
        "pool_counts": {"train": int(len(dataset.train_y)), "test": int(len(dataset.test_y))},
    }
    return replace(
        dataset,
        train_x=torch.cat([materialize(dataset.train_x), materialize(dataset.test_x)]),
        train_y=torch.cat([dataset.train_y, dataset.test_y]),
        test_x=materialize(dataset.test_x)[:0],
        test_y=dataset.test_y[:0],
        train_groups=cat(dataset.train_groups, dataset.test_groups),
        test_groups=None if dataset.test_groups is None else dataset.test_groups[:0],
        source=source,
    )


def pooled_test_set(dataset, partition):
    """``--data-pool train+test``: the global test set is the union of the clients' local test splits (PFLlib
    evaluates a global model on them)."""
    import numpy as np
    import torch

    if partition.test is None:
        raise ConfigError(
            "--data-pool train+test: the partition has no local test splits, so there is no test set; give "
            "--client-test-fraction (FedALA/PFLlib: 0.25)",
            key="data_pool",
        )
    idx = torch.as_tensor(np.sort(np.concatenate([np.asarray(t, dtype=np.int64) for t in partition.test])))
    return replace(
        dataset,
        test_x=dataset.train_x[idx],
        test_y=dataset.train_y[idx],
        test_groups=None if dataset.train_groups is None else dataset.train_groups[idx],
    )


def inline_partition(cfg, dataset):
    return make_partition(dataset, PartitionOptions.from_config(cfg))


def split_pool(cfg, dataset):
    """The dataset (with its validation set under ``--val-fraction``) and its inline partition: of the pool less the
    validation samples, as indices into the whole pool (``fedcli.data.validation``), or of the whole pool."""
    if cfg.val_fraction > 0:
        return split_validation(cfg, dataset, lambda pool: inline_partition(cfg, pool))
    return dataset, inline_partition(cfg, dataset)


def load_data_and_partition(cfg):
    """The dataset and its partition: the ``partition_file``'s (it decides the clients, ``len(part.train)``; the
    config is not changed) or an inline one. The caller reads the client count off the partition. With
    ``--data-pool train+test`` the partition splits the merged pool and the test set is the local test splits. With
    ``--val-fraction`` the validation samples are held out of the pool first (``fedcli.data.validation``)."""
    dataset = load_data(cfg)
    if cfg.partition_file:
        made_on = load_partition(cfg.partition_file).config.get("data_pool", "train")
        if made_on != cfg.data_pool:
            raise ConfigError(
                f"{cfg.partition_file} was made with --data-pool {made_on}: give --data-pool {made_on}", key="data_pool"
            )
        partition = load_partition(cfg.partition_file, dataset)
        if cfg.val_fraction > 0:  # its clients lose the held-out samples they hold
            dataset, partition = drop_validation(cfg, dataset, partition)
    else:
        dataset, partition = split_pool(cfg, dataset)
    if cfg.client_val_fraction > 0:  # each client's own validation samples, out of its training data
        partition = split_client_validation(cfg, partition)
    if cfg.data_pool == "train+test":
        dataset = pooled_test_set(dataset, partition)
    return dataset, partition
