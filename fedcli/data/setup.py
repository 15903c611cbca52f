"""Load the dataset and the partition a config asks for (shared by ``train`` and ``partition``)."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets import load_dataset
from fedcli.data.partition import load_partition, make_partition


def dataset_options(cfg) -> dict:
    return {"emnist_split": cfg.emnist_split, "synthetic_alpha": cfg.synthetic_alpha, "synthetic_beta": cfg.synthetic_beta,
            "synthetic_users": cfg.synthetic_users, "synthetic_dim": cfg.synthetic_dim, "synthetic_classes": cfg.synthetic_classes,
            "synthetic_iid": cfg.synthetic_iid, "data_seed": cfg.data_seed,
            "agnews_vocab_size": cfg.agnews_vocab_size, "agnews_max_len": cfg.agnews_max_len}


def data_dir(cfg) -> Path | None:
    if cfg.data_dir:
        return Path(cfg.data_dir).expanduser()
    if cfg.dataset in ("digits", "synthetic"):
        return None
    return Path("data") / cfg.dataset


def load_data(cfg):
    return load_dataset(cfg.dataset, data_dir(cfg), download=cfg.download, holdout_fraction=cfg.holdout_fraction,
                        options=dataset_options(cfg))


def inline_partition(cfg, dataset):
    return make_partition(dataset, cfg.partition, cfg.clients, cfg.seed, alpha=cfg.alpha,
                          classes_per_client=cfg.classes_per_client, writers_per_client=cfg.writers_per_client,
                          client_test_fraction=cfg.client_test_fraction, min_size=cfg.min_size)


def load_data_and_partition(cfg):
    """The dataset and its partition: the ``partition_file``'s (it decides the clients, ``len(part.train)``; the
    config is not changed) or an inline one. The caller reads the client count off the partition."""
    dataset = load_data(cfg)
    part = load_partition(cfg.partition_file, dataset) if cfg.partition_file else inline_partition(cfg, dataset)
    return dataset, part
