"""--val-fraction's split (fedcli/data/validation.py): stratified counts worked by hand, keyed by the seed, disjoint
from every client's training and local test samples, and nothing changed at F = 0."""

import numpy as np
import pytest

from fedcli.config import TrainConfig
from fedcli.data.partition import save_partition
from fedcli.data.setup import inline_partition, load_data, load_data_and_partition
from fedcli.data.validation import validation_indices
from fedcli.errors import ConfigError


def test_stratified_counts_by_hand():
    # 10 samples: 6 of class 0, 3 of class 1, 1 of class 2; F = 0.3 holds out ceil(3.0) = 3. Shares 3 * (6, 3, 1) / 10 =
    # (1.8, 0.9, 0.3): floors (1, 0, 0), the 2 left go to the largest remainders, class 1 (0.9) and class 0 (0.8)
    y = np.array([0, 1, 0, 2, 0, 1, 0, 0, 1, 0])
    keep, val = validation_indices(y, 0.3, seed=0)
    assert np.bincount(y[val], minlength=3).tolist() == [2, 1, 0]
    assert np.bincount(y[keep], minlength=3).tolist() == [4, 2, 1]
    assert sorted(keep.tolist() + val.tolist()) == list(range(10))
    assert keep.tolist() == sorted(keep.tolist()) and val.tolist() == sorted(val.tolist())


def test_keyed_by_the_seed():
    y = np.repeat(np.arange(5), 40)
    a, b, c = (validation_indices(y, 0.2, seed=s)[1] for s in (0, 0, 1))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    assert np.bincount(y[a]).tolist() == [8] * 5


def test_a_fraction_that_empties_a_class_is_refused():
    # 3 samples, F = 0.6: ceil(1.8) = 2 held out, shares (1.33, 0.67): class 1's only sample goes
    with pytest.raises(ConfigError, match="every training sample of class 1") as e:
        validation_indices(np.array([0, 0, 1]), 0.6, seed=0)
    assert e.value.key == "val_fraction"


def cfg(**kw):
    return TrainConfig(
        **{"dataset": "digits", "clients": 8, "partition": "dirichlet", "alpha": 0.5, "seed": 3, **kw}
    ).validate()


@pytest.mark.parametrize("extra", [{}, {"client_test_fraction": 0.2}, {"partition": "pathological"}])
def test_held_out_samples_are_in_no_client(extra):
    dataset, part = load_data_and_partition(cfg(val_fraction=0.15, **extra))
    pool = len(dataset.train_y)
    val = set(validation_indices(dataset.train_y, 0.15, 3)[1].tolist())
    assert len(val) == len(dataset.val_y) == int(np.ceil(0.15 * pool - 1e-9))
    assert dataset.val_y.tolist() == dataset.train_y[sorted(val)].tolist()
    held = [set(t.tolist()) for t in part.train] + [set(t.tolist()) for t in (part.test or [])]
    assert all(not (h & val) for h in held)
    # the clients hold every other sample of the pool (the partitions here use them all)
    assert set().union(*held) == set(range(pool)) - val
    assert part.config["val_fraction"] == 0.15


def test_a_partition_files_clients_lose_the_held_out_samples(tmp_path):
    plain = cfg()
    path = tmp_path / "part.json"
    save_partition(inline_partition(plain, load_data(plain)), path)
    dataset, part = load_data_and_partition(cfg(val_fraction=0.1, partition_file=str(path)))
    val = set(validation_indices(dataset.train_y, 0.1, 3)[1].tolist())
    assert len(dataset.val_y) == len(val) > 0
    assert all(not (set(t.tolist()) & val) for t in part.train)
    assert sum(len(t) for t in part.train) == len(dataset.train_y) - len(val)


def test_zero_changes_nothing():
    a_data, a = load_data_and_partition(cfg())
    assert a_data.val_y is None and "val_fraction" not in a.config
    b = inline_partition(cfg(), load_data(cfg()))
    assert a.hash == b.hash


def test_client_validation_by_hand_and_keyed_by_seed_and_client():
    from fedcli.data.validation import client_validation_indices

    train = [np.arange(10), np.arange(10, 13), np.arange(13, 15)]
    kept, held = client_validation_indices(train, 0.25, seed=4)
    # floor(0.25 n), at least 1: 2 of 10, 1 of 3, 1 of 2
    assert [len(h) for h in held] == [2, 1, 1] and [len(k) for k in kept] == [8, 2, 1]
    for t, k, h in zip(train, kept, held):
        assert sorted(k.tolist() + h.tolist()) == t.tolist() and not set(k.tolist()) & set(h.tolist())
    # client 1's draw does not depend on the other clients
    assert client_validation_indices([np.arange(7), train[1]], 0.25, seed=4)[1][1].tolist() == held[1].tolist()
    assert client_validation_indices(train, 0.25, seed=5)[1][0].tolist() != held[0].tolist()
    with pytest.raises(ConfigError, match="leaves client 0 none of its 1 training sample") as e:
        client_validation_indices([np.arange(1)], 0.25, seed=0)
    assert e.value.key == "client_val_fraction"


def test_client_validation_is_out_of_training_and_local_test():
    plain_data, plain = load_data_and_partition(cfg(client_test_fraction=0.2))
    _, part = load_data_and_partition(cfg(client_test_fraction=0.2, client_val_fraction=0.25))
    assert plain.val is None and len(part.val) == len(part.train)
    for c, (tr, te, va) in enumerate(zip(part.train, part.test, part.val)):
        tr, te, va = set(tr.tolist()), set(te.tolist()), set(va.tolist())
        assert va and not (va & tr) and not (va & te)
        assert tr | va == set(plain.train[c].tolist()) and te == set(plain.test[c].tolist())


def test_fedcli_partition_with_a_validation_split_leaves_it_out(tmp_path):
    from fedcli.cli.main import main
    from fedcli.data.partition import load_partition

    path = tmp_path / "p.json"
    assert main(
        [
            "partition",
            "--dataset",
            "digits",
            "--clients",
            "8",
            "--seed",
            "3",
            "--val-fraction",
            "0.15",
            "--out",
            str(path),
        ]
    ) in (0, None)
    made = load_partition(path)
    dataset, part = load_data_and_partition(cfg(val_fraction=0.15))
    assert [t.tolist() for t in made.train] == [t.tolist() for t in part.train]
    # a run of the same fraction and seed on the file drops nothing more
    _, again = load_data_and_partition(cfg(val_fraction=0.15, partition_file=str(path)))
    assert [t.tolist() for t in again.train] == [t.tolist() for t in part.train]
