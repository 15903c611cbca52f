"""Tests for fedcli.data.partition, with small synthetic datasets and hand-worked numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from rich.console import Console

from fedcli.data.datasets import FedDataset
from fedcli.data.partition import (
    SCHEMES,
    Partition,
    PartitionOptions,
    load_partition,
    make_partition,
    partition_hash,
    save_partition,
    summary_table,
)
from fedcli.errors import ConfigError, DataError


def make_ds(labels, num_classes, name="toy", groups=None) -> FedDataset:
    y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    n = y.shape[0]
    return FedDataset(
        name=name,
        train_x=torch.zeros(n, 1),
        train_y=y,
        test_x=torch.zeros(2, 1),
        test_y=torch.zeros(2, dtype=torch.int64),
        num_classes=num_classes,
        train_groups=None if groups is None else torch.as_tensor(np.asarray(groups), dtype=torch.int64),
        test_groups=None,
        group_names=None if groups is None else [f"w{i}" for i in range(int(max(groups)) + 1)],
    )


def balanced(classes: int, per_class: int, name="toy") -> FedDataset:
    """Labels 0,1,..,classes-1,0,1,.. (interleaved, so sorting by label matters)."""
    return make_ds(np.tile(np.arange(classes), per_class), classes, name=name)


def assert_disjoint_cover(p: Partition, n: int, include_test: bool = True) -> None:
    parts = list(p.train) + (list(p.test) if include_test and p.test is not None else [])
    allidx = np.concatenate(parts)
    assert len(allidx) == len(np.unique(allidx)), "a sample is in two places"
    assert np.array_equal(np.sort(allidx), np.arange(n)), "union is not all indices"
    for t in parts:
        assert t.dtype == np.int64
        assert np.all(np.diff(t) > 0), "indices not sorted ascending"


# ------------------------------------------------------------------------------------ iid


def test_iid_sizes_and_cover():
    ds = balanced(2, 5)  # N = 10
    p = make_partition(ds, PartitionOptions("iid", 3, seed=0))
    assert p.sizes().tolist() == [4, 3, 3]  # np.array_split(10, 3)
    assert_disjoint_cover(p, 10)
    assert p.test is None
    assert p.config["scheme"] == "iid" and p.config["seed"] == 0 and p.config["n_train"] == 10
    # options that do not apply to the scheme are recorded as None, whatever was passed
    q = make_partition(ds, PartitionOptions("iid", 3, seed=0, alpha=0.5, classes_per_client=2))
    assert q.config["alpha"] is None and q.config["classes_per_client"] is None
    assert q.hash == p.hash


def test_iid_deterministic():
    ds = balanced(4, 25)
    a, b = (
        make_partition(ds, PartitionOptions("iid", 5, seed=7)),
        make_partition(ds, PartitionOptions("iid", 5, seed=7)),
    )
    assert a.hash == b.hash and all(np.array_equal(x, y) for x, y in zip(a.train, b.train))
    assert make_partition(ds, PartitionOptions("iid", 5, seed=8)).hash != a.hash


# ------------------------------------------------------------------------------ dirichlet


def test_dirichlet_properties():
    ds = balanced(10, 100)  # N = 1000
    p = make_partition(ds, PartitionOptions("dirichlet", 10, seed=1, alpha=0.5))
    assert_disjoint_cover(p, 1000)
    assert p.sizes().min() >= 10
    assert p.config["alpha"] == 0.5 and p.config["min_size"] == 10 and p.config["tries"] >= 1
    same = make_partition(ds, PartitionOptions("dirichlet", 10, seed=1, alpha=0.5))
    assert same.hash == p.hash
    assert all(np.array_equal(x, y) for x, y in zip(p.train, same.train))
    other = make_partition(ds, PartitionOptions("dirichlet", 10, seed=2, alpha=0.5))
    assert other.hash != p.hash
    assert not all(np.array_equal(x, y) for x, y in zip(p.train, other.train))


def test_dirichlet_small_alpha_fewer_classes():
    ds = balanced(10, 100)
    labels = ds.train_y
    present = {}
    for alpha in (0.1, 100.0):
        p = make_partition(ds, PartitionOptions("dirichlet", 10, seed=3, alpha=alpha))
        present[alpha] = (p.class_counts(labels) > 0).sum(axis=1).mean()
    assert present[0.1] < present[100.0]
    assert present[100.0] >= 9.0  # near-uniform proportions: almost every class everywhere


@pytest.mark.parametrize("alpha", [0, -1.0])
def test_dirichlet_bad_alpha(alpha):
    with pytest.raises(ConfigError, match="--alpha must be > 0"):
        make_partition(balanced(10, 10), PartitionOptions("dirichlet", 2, seed=0, alpha=alpha))


def test_dirichlet_requires_alpha():
    with pytest.raises(ConfigError, match="--alpha"):
        make_partition(balanced(10, 10), PartitionOptions("dirichlet", 2, seed=0))


def test_dirichlet_impossible_min_size():
    # 20 clients x 10 samples > 100 samples: impossible outright
    with pytest.raises(ConfigError, match="at least 10 samples") as e:
        make_partition(balanced(10, 10), PartitionOptions("dirichlet", 20, seed=0, alpha=1.0))
    assert e.value.exit_code == 2
    # possible on paper (1000 / 50 = 20 each) but alpha -> 0 gives each class to ~1 client,
    # so at most 10 of 50 clients get samples: the retry loop gives up
    with pytest.raises(ConfigError, match="after 5 tries; lower --clients or raise --alpha"):
        make_partition(balanced(10, 100), PartitionOptions("dirichlet", 50, seed=0, alpha=1e-3, max_tries=5))


# --------------------------------------------------------------------------- pathological


def test_pathological_shards():
    # 10 classes x 40 samples, 10 clients x 2 classes: 20 shards of 20 samples, each in one class
    ds = balanced(10, 40)
    p = make_partition(ds, PartitionOptions("pathological", 10, seed=0, classes_per_client=2))
    assert p.sizes().tolist() == [40] * 10
    counts = p.class_counts(ds.train_y)
    assert ((counts > 0).sum(axis=1) <= 2).all()
    assert set(np.unique(counts)) <= {0, 20, 40}
    assert_disjoint_cover(p, 400)
    assert p.config["classes_per_client"] == 2


def test_pathological_bad_k():
    ds = balanced(10, 40)
    with pytest.raises(ConfigError, match="--classes-per-client"):
        make_partition(ds, PartitionOptions("pathological", 10, seed=0, classes_per_client=11))
    with pytest.raises(ConfigError, match="--classes-per-client"):
        make_partition(ds, PartitionOptions("pathological", 10, seed=0, classes_per_client=0))
    with pytest.raises(ConfigError, match="--classes-per-client is required"):
        make_partition(ds, PartitionOptions("pathological", 10, seed=0))


# -------------------------------------------------------------------------------- natural


def writers_dataset() -> FedDataset:
    # 12 writers with 3..14 samples each (sizes 3 + w), labels arbitrary
    groups = np.concatenate([np.full(3 + w, w) for w in range(12)])
    rng = np.random.default_rng(0)
    groups = rng.permutation(groups)  # samples of a writer are not contiguous
    labels = rng.integers(0, 5, size=len(groups))
    return make_ds(labels, 5, name="femnist", groups=groups)


def test_natural_whole_writers():
    ds = writers_dataset()
    groups = ds.train_groups.numpy()
    p = make_partition(ds, PartitionOptions("natural", 5, seed=0, writers_per_client=2))
    owners = {}
    for i, idx in enumerate(p.train):
        ws = np.unique(groups[idx])
        assert len(ws) == 2
        for w in ws:
            assert w not in owners, "writer split across clients"
            owners[w] = i
            # every sample of the writer is with this client
            assert np.array_equal(np.flatnonzero(groups == w), np.intersect1d(idx, np.flatnonzero(groups == w)))
    assert len(owners) == 10
    assert p.config["writers_used"] == 10 and p.config["writers_total"] == 12
    assert p.sizes().sum() == sum(3 + w for w in owners)
    assert_disjoint_cover_partial(p)


def assert_disjoint_cover_partial(p):
    allidx = np.concatenate(p.train)
    assert len(allidx) == len(np.unique(allidx))


def test_natural_errors():
    ds = writers_dataset()
    with pytest.raises(ConfigError, match="--writers-per-client 2 x --clients 7"):
        make_partition(ds, PartitionOptions("natural", 7, seed=0, writers_per_client=2))
    with pytest.raises(ConfigError, match="writer groups"):
        make_partition(balanced(2, 10), PartitionOptions("natural", 2, seed=0, writers_per_client=1))
    with pytest.raises(ConfigError, match="--writers-per-client is required"):
        make_partition(ds, PartitionOptions("natural", 2, seed=0))


# ------------------------------------------------------------------------ local test split


def test_client_test_fraction():
    ds = balanced(5, 20)  # N = 100 -> iid sizes 34, 33, 33
    base = make_partition(ds, PartitionOptions("iid", 3, seed=4))
    p = make_partition(ds, PartitionOptions("iid", 3, seed=4, client_test_fraction=0.25))
    assert [len(t) for t in p.test] == [8, 8, 8]  # floor(0.25 * 34) = floor(0.25 * 33) = 8
    assert p.sizes().tolist() == [26, 25, 25]
    assert_disjoint_cover(p, 100)
    # the client's pool is the same split; only carved into train/test
    for b, tr, te in zip(base.train, p.train, p.test):
        assert len(np.intersect1d(tr, te)) == 0
        assert np.array_equal(np.sort(np.concatenate([tr, te])), b)
    assert p.hash != base.hash


def test_client_test_fraction_at_least_one():
    ds = balanced(2, 5)  # sizes 4, 3, 3; floor(0.1 * n) = 0 -> 1
    p = make_partition(ds, PartitionOptions("iid", 3, seed=0, client_test_fraction=0.1))
    assert [len(t) for t in p.test] == [1, 1, 1]
    assert p.sizes().tolist() == [3, 2, 2]


@pytest.mark.parametrize("f", [-0.1, 1.0, 1.5])
def test_client_test_fraction_range(f):
    with pytest.raises(ConfigError, match="--client-test-fraction"):
        make_partition(balanced(2, 5), PartitionOptions("iid", 2, seed=0, client_test_fraction=f))


# ---------------------------------------------------------------------------- validation


def test_generic_config_errors():
    ds = balanced(2, 5)
    with pytest.raises(ConfigError, match="--partition must be one of"):
        make_partition(ds, PartitionOptions("random", 2, seed=0))
    with pytest.raises(ConfigError, match="--clients must be >= 1"):
        make_partition(ds, PartitionOptions("iid", 0, seed=0))
    with pytest.raises(ConfigError, match="--clients 11 is more than the 10 training samples"):
        make_partition(ds, PartitionOptions("iid", 11, seed=0))
    with pytest.raises(ConfigError, match="--seed"):
        make_partition(ds, PartitionOptions("iid", 2, seed=-1))
    assert SCHEMES == ("iid", "dirichlet", "pathological", "natural")


# --------------------------------------------------------------------------- save / load


@pytest.mark.parametrize(
    "scheme,kw",
    [
        ("iid", {}),
        ("dirichlet", {"alpha": 0.3, "client_test_fraction": 0.25}),
        ("pathological", {"classes_per_client": 2}),
    ],
)
def test_save_load_roundtrip(tmp_path, scheme, kw):
    ds = balanced(10, 40)
    p = make_partition(ds, PartitionOptions(scheme, 8, seed=5, **kw))
    path = tmp_path / "sub" / "part.json"
    save_partition(p, path)
    assert [f.name for f in path.parent.iterdir()] == ["part.json"]  # no temp file left
    q = load_partition(path, ds)
    assert q.config == p.config and q.hash == p.hash
    assert len(q.train) == len(p.train) and all(np.array_equal(a, b) for a, b in zip(p.train, q.train))
    assert all(a.dtype == np.int64 for a in q.train)
    if p.test is None:
        assert q.test is None
    else:
        assert all(np.array_equal(a, b) for a, b in zip(p.test, q.test))
    assert partition_hash(q.config, q.train, q.test) == p.hash
    assert load_partition(path).hash == p.hash  # without a dataset


def test_natural_roundtrip(tmp_path):
    ds = writers_dataset()
    p = make_partition(ds, PartitionOptions("natural", 5, seed=2, writers_per_client=2))
    save_partition(p, tmp_path / "p.json")
    q = load_partition(tmp_path / "p.json", ds)
    assert q.config["writers_used"] == 10 and q.hash == p.hash


def test_hash_changes_with_any_index():
    ds = balanced(2, 5)
    p = make_partition(ds, PartitionOptions("iid", 3, seed=0))
    train = [t.copy() for t in p.train]
    train[2][0], train[1][0] = train[1][0], train[2][0]  # swap one sample between clients
    assert partition_hash(p.config, train, None) != p.hash
    assert partition_hash(p.config, p.train, None) == p.hash


def test_hash_is_the_sha256_of_the_canonical_json():
    # the hash is fed piece by piece; it must stay the digest of json.dumps of the whole content (saved partition
    # files carry it), for numpy arrays and lists, empty clients, with and without local test splits
    import hashlib

    config = {"scheme": "iid", "alpha": None, "seed": 3, "x": 0.25, "name": "d\u00e9j\u00e0"}
    train = [np.array([5, 1, 9], dtype=np.int64), np.array([], dtype=np.int64), [2, 0]]
    for test in (None, [np.array([3]), [], np.array([4, 6], dtype=np.int32)]):
        content = {
            "config": config,
            "train": [[int(v) for v in t] for t in train],
            "test": None if test is None else [[int(v) for v in t] for t in test],
        }
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        assert partition_hash(config, train, test) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert (
        partition_hash(config, [], None)
        == hashlib.sha256(
            (
                '{"config":' + json.dumps(config, sort_keys=True, separators=(",", ":")) + ',"test":null,"train":[]}'
            ).encode()
        ).hexdigest()
    )


def test_load_tampered(tmp_path):
    ds = balanced(10, 40)
    p = make_partition(ds, PartitionOptions("iid", 4, seed=0))
    path = tmp_path / "p.json"
    save_partition(p, path)
    obj = json.loads(path.read_text())
    a, b = obj["train"][0][0], obj["train"][1][0]
    obj["train"][0][0], obj["train"][1][0] = b, a  # still a valid partition, hash kept
    path.write_text(json.dumps(obj))
    with pytest.raises(DataError, match="does not match its hash") as e:
        load_partition(path, ds)
    assert str(path) in str(e.value) and e.value.exit_code == 3


def test_load_wrong_dataset(tmp_path):
    ds = balanced(10, 40, name="mnist")
    path = tmp_path / "p.json"
    save_partition(make_partition(ds, PartitionOptions("iid", 4, seed=0)), path)
    with pytest.raises(DataError, match="expected a fedcli partition file for dataset cifar10") as e:
        load_partition(path, balanced(10, 40, name="cifar10"))
    assert str(path) in str(e.value) and "made for dataset mnist" in str(e.value)
    with pytest.raises(DataError, match="400 training samples"):
        load_partition(path, balanced(10, 41, name="mnist"))


def test_load_malformed(tmp_path):
    ds = balanced(10, 40)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "fedcli-partition", "train": [[1, 2')
    with pytest.raises(DataError, match="not valid JSON") as e:
        load_partition(bad, ds)
    assert str(bad) in str(e.value)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(DataError, match="expected a fedcli partition file"):
        load_partition(other, ds)
    with pytest.raises(DataError, match="no such file"):
        load_partition(tmp_path / "missing.json", ds)


# ------------------------------------------------------------------------------- summary


def rows(text: str) -> list[list[str]]:
    """Table body lines as lists of cell tokens (box-drawing characters removed)."""
    return [line.replace("│", " ").split() for line in text.splitlines() if line.startswith("│")]


def test_summary_table_renders():
    # 4 classes x 3 samples, labels interleaved; pathological k=1 with 4 clients: one class each
    ds = balanced(4, 3)
    p = make_partition(ds, PartitionOptions("pathological", 4, seed=0, classes_per_client=1))
    table = summary_table(p, ds.train_y, 4)
    console = Console(record=True, width=120)
    console.print(table)
    text = console.export_text()
    assert "class histogram" in text
    # every client holds one whole class: a row reads "<client> 3 1 <class>:3"
    counts = p.class_counts(ds.train_y)
    c0 = int(np.flatnonzero(counts[0])[0])
    assert rows(text)[0] == ["0", "3", "1", f"{c0}:3"]
    assert len(rows(text)) == 4
    flat = " ".join(text.split())
    assert "total train 12 of 12" in flat and "min/median/max 3/3/3" in flat


def test_summary_table_histogram_order_and_truncation():
    ds = balanced(10, 100)
    p = make_partition(ds, PartitionOptions("dirichlet", 60, seed=0, alpha=100.0, client_test_fraction=0.25))
    console = Console(record=True, width=200)
    console.print(summary_table(p, ds.train_y, 10, max_rows=5))
    text = console.export_text()
    body = rows(text)
    assert len(body) == 5 and body[-1] == ["..."]  # 4 clients, then an ellipsis row
    assert "more" in text and "local test" in text
    for cells in body[:4]:
        client, train, test, classes = map(int, cells[:4])
        assert train == p.sizes()[client] and test == len(p.test[client])
        hist = [tok for tok in cells[4:] if ":" in tok]
        values = [int(tok.split(":")[1]) for tok in hist]
        assert values == sorted(values, reverse=True) and len(hist) == min(classes, 8)
        assert ("more" in cells) == (classes > 8)


def test_save_never_writes_through_a_link(tmp_path):
    """The partition file is written through fedcli.safefs like every output: a symbolic link at its path is refused
    (exit 2, naming the link) and neither the link nor the file it points to changes (os.replace would have swapped
    the link for the new file)."""
    from fedcli.safefs import LinkRefused

    p = make_partition(balanced(2, 5), PartitionOptions("iid", 3, seed=0))
    target = tmp_path / "elsewhere.json"
    target.write_text("keep")
    link = tmp_path / "part.json"
    link.symlink_to(target)
    with pytest.raises(LinkRefused) as e:
        save_partition(p, link)
    assert e.value.exit_code == 2 and str(link) in str(e.value)
    assert link.is_symlink() and target.read_text() == "keep"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["elsewhere.json", "part.json"]  # no temp file left


def test_options_of_a_run_config():
    """A run's inline partition: each option read off its own field of the config; ``max_tries`` (no flag) at its
    default."""
    from fedcli.config import TrainConfig

    given = {
        "alpha": 0.3,
        "classes_per_client": 2,
        "writers_per_client": 4,
        "client_test_fraction": 0.25,
        "min_size": 5,
        "pathological_rule": "classes",
        "client_test_split": "pfllib",
        "data_pool": "train+test",
    }
    cfg = TrainConfig(partition="pathological", clients=7, seed=3, **given)
    assert PartitionOptions.from_config(cfg) == PartitionOptions("pathological", 7, 3, max_tries=1000, **given)
