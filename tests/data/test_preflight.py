"""The data check before a sweep starts (fedcli/data/preflight.py): files laid out by hand, states worked out by
hand."""

import gzip
import struct

import pytest

from fedcli.config import TrainConfig
from fedcli.data.preflight import check_datasets, refuse
from fedcli.errors import DataError


def cfg(**kw) -> dict:
    return TrainConfig(**kw).to_dict()


def idx_images(path, magic=0x00000803):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = struct.pack(">IIII", magic, 1, 28, 28) + bytes(784)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def one(**kw):
    (c,) = check_datasets([("r seed 0", cfg(**kw))])
    return c


def test_idx_splits_holdout_and_magic(tmp_path):
    root = tmp_path / "mnist"
    assert (
        one(dataset="mnist", data_dir=str(root)).problem
        == "no MNIST files there (neither the training nor the test split)"
    )
    idx_images(root / "MNIST/raw/t10k-images-idx3-ubyte.gz")
    assert one(dataset="mnist", data_dir=str(root)).problem.startswith("only the MNIST test split is there")
    assert one(dataset="mnist", data_dir=str(root), holdout_fraction=0.2).ok  # the test split is the holdout pool
    idx_images(root / "train-images-idx3-ubyte", magic=0x00000801)  # a label file's magic under an image file's name
    assert "is not an IDX image file" in one(dataset="mnist", data_dir=str(root)).problem
    idx_images(root / "train-images-idx3-ubyte")
    assert one(dataset="mnist", data_dir=str(root)).ok
    # EMNIST's split decides the file names
    e = tmp_path / "emnist"
    idx_images(e / "EMNIST/raw/emnist-letters-train-images-idx3-ubyte")
    idx_images(e / "EMNIST/raw/emnist-letters-t10k-images-idx3-ubyte")
    assert not one(dataset="emnist", data_dir=str(e)).ok  # balanced, the default split, is not there
    assert one(dataset="emnist", data_dir=str(e), emnist_split="letters").ok


def test_cifar_femnist_tinyimagenet_agnews(tmp_path):
    c = tmp_path / "c"
    (c / "cifar-10-batches-py").mkdir(parents=True)
    (c / "cifar-10-batches-py/test_batch").write_bytes(b"x")
    assert one(dataset="cifar10", data_dir=str(c)).problem.startswith("only the CIFAR-10 test split is there")
    (c / "cifar-10-batches-py/data_batch_1").write_bytes(b"x")
    assert one(dataset="cifar10", data_dir=str(c)).ok
    f = tmp_path / "leaf"
    (f / "data/train").mkdir(parents=True)
    (f / "data/test").mkdir(parents=True)
    assert "no FEMNIST" in one(dataset="femnist", data_dir=str(f)).problem  # empty folders
    (f / "data/train/a.json").write_text("{}")
    (f / "data/test/a.json.gz").write_bytes(b"")
    assert one(dataset="femnist", data_dir=str(f)).ok
    t = tmp_path / "tin"
    assert one(dataset="tinyimagenet", data_dir=str(t)).problem == "no tiny-imagenet-200/wnids.txt"
    (t / "tiny-imagenet-200").mkdir(parents=True)
    (t / "tiny-imagenet-200/wnids.txt").write_text("n1\n")
    assert one(dataset="tinyimagenet", data_dir=str(t)).ok
    a = tmp_path / "ag"
    (a / "ag_news_csv").mkdir(parents=True)
    (a / "ag_news_csv/train.csv").write_text("")
    assert "test split is not there" in one(dataset="agnews", data_dir=str(a)).problem


def test_grouping_and_one_sentence_per_dataset(tmp_path):
    runs = [
        (f"r{i} seed {s}", cfg(dataset=d, data_dir=p))
        for i, (d, p) in enumerate(
            [("mnist", str(tmp_path / "m")), ("femnist", str(tmp_path / "f")), ("mnist", str(tmp_path / "m"))]
        )
        for s in (0, 1)
    ]
    runs.append(("digits seed 0", cfg(dataset="digits")))
    checks = check_datasets(runs)
    assert [(c.dataset, len(c.runs), c.ok) for c in checks] == [
        ("mnist", 4, False),
        ("femnist", 2, False),
        ("digits", 1, True),
    ]
    assert checks[2].state() == "ok (generated, nothing on disk)"
    with pytest.raises(DataError) as e:
        refuse(checks)
    lines = [line.strip() for line in str(e.value).splitlines()]
    assert e.value.exit_code == 3 and len(lines) == 3 and "2 dataset(s)" in lines[0]
    assert lines[1].startswith(f"mnist for 4 run(s) at {tmp_path / 'm'}: no MNIST files") and "--download" in lines[1]
    assert lines[2].startswith(f"femnist for 2 run(s) at {tmp_path / 'f'}") and "LEAF" in lines[2]
    refuse(checks[2:])  # all there: nothing raised
