"""Datasets written in their real on-disk formats at their real image shapes and class counts (random pixels,
random labels), for the paper-scale check (tests/paperkit.py) and the tests that go through a real loader.

Each writer takes the folder that ``--data-dir`` names and a sample count, and lays the files out as the dataset
ships them (what the loaders of ``fedcli/data/datasets/`` read):

- CIFAR-10: ``cifar-10-batches-py/data_batch_1..5``, ``test_batch`` and ``batches.meta``, python-2 pickles of
  ``{b"batch_label", b"labels", b"data" uint8 [N, 3072], b"filenames"}`` (Krizhevsky 2009, 10 classes).
- CIFAR-100: ``cifar-100-python/train``, ``test`` and ``meta``, with ``b"fine_labels"`` (100) and ``b"coarse_labels"``
(20).
- Tiny-ImageNet-200: ``tiny-imagenet-200/wnids.txt``, ``words.txt``, ``train/<wnid>/images/<wnid>_<i>.JPEG`` with
  ``<wnid>_boxes.txt``, ``val/images/val_<i>.JPEG`` with ``val/val_annotations.txt``, ``test/images``: 64x64 RGB JPEGs.
- FEMNIST: LEAF's ``data/train/*.json`` and ``data/test/*.json`` (``users``, ``num_samples``, ``user_data``; 784
  floats per image, 1.0 = background, 62 classes), a user's samples split 90/10 between train and test as LEAF does.
- MNIST, Fashion-MNIST, EMNIST: IDX files in torchvision's ``<Name>/raw`` layout, gzip (``.gz``) or plain.
- AG News: ``train.csv`` / ``test.csv``, no header, every field quoted: class index (1..4), title, description.
"""

from __future__ import annotations

import csv
import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np

WORDS = (
    "market stocks bank oil price game season team win coach league court vote election minister police "
    "space nasa software internet computer phone chip study science health virus storm energy trade deal"
).split()


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)  # the files were written by Python 2's cPickle


def _cifar_batch(rng, n: int, label: str, classes: int, name: str) -> dict:
    obj = {
        b"batch_label": name.encode(),
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        label.encode(): rng.integers(0, classes, n).tolist(),
        b"filenames": [f"image_{i:05d}.png".encode() for i in range(n)],
    }
    if label == "fine_labels":
        obj[b"coarse_labels"] = [y // 5 for y in obj[b"fine_labels"]]
    return obj


def write_cifar10(root: Path, n_train: int = 500, n_test: int = 100, seed: int = 0) -> Path:
    """CIFAR-10's python pickles in ``root/cifar-10-batches-py``: five training batches of ``n_train / 5``."""
    rng, d = _rng(seed), Path(root) / "cifar-10-batches-py"
    per = -(-n_train // 5)
    for i in range(1, 6):
        _pickle(d / f"data_batch_{i}", _cifar_batch(rng, per, "labels", 10, f"training batch {i} of 5"))
    _pickle(d / "test_batch", _cifar_batch(rng, n_test, "labels", 10, "testing batch 1 of 1"))
    _pickle(
        d / "batches.meta",
        {b"num_cases_per_batch": per, b"num_vis": 3072, b"label_names": [f"class{i}".encode() for i in range(10)]},
    )
    return Path(root)


def write_cifar100(root: Path, n_train: int = 500, n_test: int = 100, seed: int = 0) -> Path:
    """CIFAR-100's python pickles in ``root/cifar-100-python`` (fine and coarse labels)."""
    rng, d = _rng(seed), Path(root) / "cifar-100-python"
    _pickle(d / "train", _cifar_batch(rng, n_train, "fine_labels", 100, "training batch 1 of 1"))
    _pickle(d / "test", _cifar_batch(rng, n_test, "fine_labels", 100, "testing batch 1 of 1"))
    _pickle(
        d / "meta",
        {
            b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
        },
    )
    return Path(root)


def write_tinyimagenet(root: Path, per_class: int = 2, n_val: int = 200, seed: int = 0) -> Path:
    """The extracted ``tiny-imagenet-200.zip`` in ``root``: 200 wnids, ``per_class`` training JPEGs each."""
    from PIL import Image

    rng, d = _rng(seed), Path(root) / "tiny-imagenet-200"
    wnids = [f"n{1443537 + 7919 * i:08d}" for i in range(200)]
    d.mkdir(parents=True, exist_ok=True)
    (d / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))
    (d / "words.txt").write_text("".join(f"{w}\tthing {i}\n" for i, w in enumerate(wnids)))

    def jpeg(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "RGB").save(path, "JPEG")

    for w in wnids:
        boxes = []
        for i in range(per_class):
            jpeg(d / "train" / w / "images" / f"{w}_{i}.JPEG")
            boxes.append(f"{w}_{i}.JPEG\t0\t0\t63\t63\n")
        (d / "train" / w / f"{w}_boxes.txt").write_text("".join(boxes))
    ann = []
    for i in range(n_val):
        jpeg(d / "val" / "images" / f"val_{i}.JPEG")
        ann.append(f"val_{i}.JPEG\t{wnids[int(rng.integers(200))]}\t0\t0\t63\t63\n")
    (d / "val" / "val_annotations.txt").write_text("".join(ann))
    jpeg(d / "test" / "images" / "test_0.JPEG")
    return Path(root)


def write_femnist(root: Path, writers: int = 300, per_writer: int = 4, shards: int = 2, seed: int = 0) -> Path:
    """LEAF's FEMNIST output in ``root/data``: ``shards`` JSON files per split, ``per_writer`` samples a writer in
    train and one in test."""
    rng = _rng(seed)
    users = [f"f{i:04d}_{i % 100:02d}" for i in range(writers)]
    for split, n in (("train", per_writer), ("test", 1)):
        d = Path(root) / "data" / split
        d.mkdir(parents=True, exist_ok=True)
        for s in range(shards):
            mine = users[s::shards]
            doc = {
                "users": mine,
                "num_samples": [n] * len(mine),
                "user_data": {
                    u: {"x": np.round(rng.random((n, 784)), 4).tolist(), "y": rng.integers(0, 62, n).tolist()}
                    for u in mine
                },
            }
            (d / f"all_data_{s}_niid_0_keep_0_{split}_9.json").write_text(json.dumps(doc))
    return Path(root)


def _idx(path: Path, arr: np.ndarray, gz: bool) -> None:
    magic = 0x00000803 if arr.ndim == 3 else 0x00000801
    raw = struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in arr.shape) + arr.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(raw, compresslevel=1))
    else:
        path.write_bytes(raw)


def write_idx(  # noqa: PLR0913
    root: Path,
    folder: str,
    prefix: str = "",
    classes: int = 10,
    n_train: int = 500,
    n_test: int = 100,
    gz: bool = True,
    label_offset: int = 0,
    seed: int = 0,
) -> Path:
    """The MNIST family's IDX pairs in ``root/<folder>/raw`` (torchvision's layout), gzip or plain."""
    rng, d = _rng(seed), Path(root) / folder / "raw"
    for split, n in (("train", n_train), ("t10k", n_test)):
        _idx(d / f"{prefix}{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), gz)
        _idx(d / f"{prefix}{split}-labels-idx1-ubyte", rng.integers(0, classes, n) + label_offset, gz)
    return Path(root)


def write_mnist(root: Path, n_train: int = 500, n_test: int = 100, seed: int = 0) -> Path:
    return write_idx(root, "MNIST", n_train=n_train, n_test=n_test, gz=True, seed=seed)


def write_fmnist(root: Path, n_train: int = 500, n_test: int = 100, seed: int = 0) -> Path:
    return write_idx(root, "FashionMNIST", n_train=n_train, n_test=n_test, gz=False, seed=seed)


def write_emnist(root: Path, n_train: int = 500, n_test: int = 100, seed: int = 0) -> Path:
    return write_idx(root, "EMNIST", "emnist-balanced-", classes=47, n_train=n_train, n_test=n_test, seed=seed)


def write_agnews(root: Path, n_train: int = 400, n_test: int = 100, seed: int = 0) -> Path:
    """AG News' ``train.csv`` / ``test.csv`` in ``root/ag_news_csv``."""
    rng, d = _rng(seed), Path(root) / "ag_news_csv"
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        with open(d / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
            for _ in range(n):
                words = rng.choice(WORDS, int(rng.integers(5, 40)))
                w.writerow([int(rng.integers(1, 5)), " ".join(words[:4]).title(), " ".join(words[4:]) + "."])
    return Path(root)


#: dataset name -> writer(root, **sizes); every dataset a recipe names
WRITERS = {
    "cifar10": write_cifar10,
    "cifar100": write_cifar100,
    "tinyimagenet": write_tinyimagenet,
    "femnist": write_femnist,
    "mnist": write_mnist,
    "fmnist": write_fmnist,
    "emnist": write_emnist,
    "agnews": write_agnews,
}
