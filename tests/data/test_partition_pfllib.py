"""PFLlib's data pipeline (``--data-pool train+test``, ``--pathological-rule classes``, ``--client-test-split
pfllib``) against an independent re-implementation of PFLlib's ``dataset/utils/dataset_utils.py`` written here from
its code's logic: ``separate_data(..., niid=True, balance, partition='pat')`` on the merged pool (the dataset
scripts concatenate the training and test images) and ``split_data`` (scikit-learn's ``train_test_split`` with
``train_size=0.75`` per client), all on numpy's global stream seeded as the scripts seed it (``np.random.seed``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedcli.config import TrainConfig
from fedcli.data.partition import PartitionOptions, load_partition, make_partition, save_partition
from fedcli.data.setup import load_data, load_data_and_partition
from fedcli.errors import ConfigError


def pfllib_pat(
    labels: np.ndarray,
    num_clients: int,
    num_classes: int,
    class_per_client: int,
    balance: bool,
    seed: int,
    train_size: float = 0.75,
):
    """PFLlib's 'pat' split then its per-client train/test split; returns (train, test) index sets per client."""
    from sklearn.model_selection import train_test_split  # here, not at collection: scikit-learn takes 1.3 s to import

    np.random.seed(seed)
    idxs = np.array(range(len(labels)))
    idx_for_each_class = [idxs[labels == i] for i in range(num_classes)]
    class_num_per_client = [class_per_client for _ in range(num_clients)]
    dataidx_map = {}
    for i in range(num_classes):
        selected_clients = [c for c in range(num_clients) if class_num_per_client[c] > 0]
        selected_clients = selected_clients[: int(np.ceil((num_clients / num_classes) * class_per_client))]
        num_all_samples = len(idx_for_each_class[i])
        num_per = num_all_samples / len(selected_clients)
        if balance:
            num_samples = [int(num_per) for _ in range(len(selected_clients) - 1)]
        else:
            num_samples = np.random.randint(
                max(num_per / 10, 1 / num_classes), num_per, len(selected_clients) - 1
            ).tolist()
        num_samples.append(num_all_samples - sum(num_samples))
        idx = 0
        for client, num_sample in zip(selected_clients, num_samples):
            part = idx_for_each_class[i][idx : idx + num_sample]
            dataidx_map[client] = part if client not in dataidx_map else np.append(dataidx_map[client], part, axis=0)
            idx += num_sample
            class_num_per_client[client] -= 1
    train, test = [], []
    for client in range(num_clients):
        x = dataidx_map[client]  # the pool indices stand in for the images: the split moves them the same way
        x_train, x_test = train_test_split(x, train_size=train_size, shuffle=True)
        train.append(sorted(x_train.tolist()))
        test.append(sorted(x_test.tolist()))
    return train, test


def fedcli_split(data_dir: str, dataset: str, clients: int, k: int, rule: str, seed: int, **kw):
    cfg = TrainConfig(
        dataset=dataset,
        data_dir=data_dir,
        clients=clients,
        partition="pathological",
        classes_per_client=k,
        pathological_rule=rule,
        client_test_split="pfllib",
        data_pool="train+test",
        client_test_fraction=0.25,
        seed=seed,
        **kw,
    ).validate()
    return load_data_and_partition(cfg)


@pytest.mark.parametrize("rule,balance", [("classes", False), ("classes-balanced", True)])
@pytest.mark.parametrize("seed", [1, 7])
def test_digits_pool_matches_pfllib(rule, balance, seed):
    ds, part = fedcli_split("", "digits", 10, 2, rule, seed)
    labels = ds.train_y.numpy()
    assert len(labels) == 1797  # the whole pool: digits' training and test parts merged
    train, test = pfllib_pat(labels, 10, 10, 2, balance, seed)
    assert [t.tolist() for t in part.train] == train
    assert [t.tolist() for t in part.test] == test
    for c in range(10):  # every client exactly 2 classes, in both its splits together
        assert len(np.unique(labels[np.concatenate([part.train[c], part.test[c]])])) == 2
    # the global test set is the union of the local test splits
    union = np.sort(np.concatenate(part.test))
    assert ds.test_y.tolist() == labels[union].tolist()
    assert (ds.test_x.numpy() == ds.train_x.numpy()[union]).all()


def test_mnist_slice_matches_pfllib(mnist_t10k):
    ds, part = fedcli_split(str(mnist_t10k), "mnist", 20, 2, "classes", 1, holdout_fraction=0.2)
    labels = ds.train_y.numpy()
    assert len(labels) == 10000  # the holdout's two parts merged back: every image of the slice
    train, test = pfllib_pat(labels, 20, 10, 2, False, 1)
    assert [t.tolist() for t in part.train] == train and [t.tolist() for t in part.test] == test
    classes = [len(np.unique(labels[part.train[c]])) for c in range(20)]
    assert classes == [2] * 20
    sizes = [len(part.train[c]) + len(part.test[c]) for c in range(20)]
    assert len(set(sizes)) > 10  # random unbalanced amounts, as FedALA's `noniid - pat`
    assert all(len(part.test[c]) == n - int(0.75 * n) for c, n in enumerate(sizes))  # 75/25, sklearn's rounding


def test_shards_straddle_but_classes_do_not(mnist_t10k):
    cfg = TrainConfig(
        dataset="mnist",
        data_dir=str(mnist_t10k),
        holdout_fraction=0.2,
        clients=20,
        partition="pathological",
        classes_per_client=2,
    ).validate()
    ds = load_data(cfg)
    y = ds.train_y.numpy()
    shards = make_partition(ds, PartitionOptions("pathological", 20, 0, classes_per_client=2))
    counts = sorted(len(np.unique(y[t])) for t in shards.train)
    assert counts[0] == 1 and counts[-1] >= 3  # the default rule: 1 to 4 classes (docs/data.md)
    rule = make_partition(
        ds, PartitionOptions("pathological", 20, 0, classes_per_client=2, pathological_rule="classes")
    )
    assert [len(np.unique(y[t])) for t in rule.train] == [2] * 20


def test_defaults_keep_the_partition_and_its_hash():
    from fedcli.data.datasets import load_dataset

    ds = load_dataset("digits")
    old = make_partition(ds, PartitionOptions("pathological", 8, 3, classes_per_client=2, client_test_fraction=0.25))
    new = make_partition(
        ds,
        PartitionOptions(
            "pathological",
            8,
            3,
            classes_per_client=2,
            client_test_fraction=0.25,
            pathological_rule="shards",
            client_test_split="fedcli",
            data_pool="train",
        ),
    )
    assert old.hash == new.hash and "pathological_rule" not in old.config and "data_pool" not in old.config


def test_partition_file_contract(tmp_path):
    ds, part = fedcli_split("", "digits", 10, 2, "classes", 1)
    path = tmp_path / "p.json"
    save_partition(part, path)
    obj = json.loads(path.read_text())
    assert obj["format"] == "fedcli-partition" and obj["version"] == 1
    assert obj["config"]["pathological_rule"] == "classes" and obj["config"]["data_pool"] == "train+test"
    back = load_partition(path, ds)
    assert back.hash == part.hash and [t.tolist() for t in back.test] == [t.tolist() for t in part.test]
    # the run reads it back on the same pool; on another pool it says which one it needs
    cfg = TrainConfig(partition_file=str(path), data_pool="train+test", client_test_fraction=0.25).validate()
    assert load_data_and_partition(cfg)[1].hash == part.hash
    with pytest.raises(ConfigError, match="data-pool train\\+test"):
        load_data_and_partition(TrainConfig(partition_file=str(path)).validate())


def test_pool_needs_local_test_splits():
    with pytest.raises(ConfigError, match="client-test-fraction"):
        TrainConfig(data_pool="train+test").validate()
    with pytest.raises(ConfigError, match="no client with a class slot"):
        make_partition(
            load_data(TrainConfig().validate()),
            PartitionOptions("pathological", 3, 0, classes_per_client=2, pathological_rule="classes"),
        )
