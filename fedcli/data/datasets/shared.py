"""What several dataset loaders share (numpy; imported by a loader when a run calls it, never by the declarations):
torchvision's downloader, the label range check, the MNIST-family IDX loader and the CIFAR pickle loader
(``fedcli/data/datasets/mnist.py`` and the others call them with their own files and normalization), LEAF's file
listing and the typed read of a loader option.

On-disk layouts are read with the numpy readers of ``fedcli.data._formats``, never through torchvision; only
``download=True`` touches the network, through torchvision's own downloaders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedcli.data._formats import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, read_cifar_batch, read_idx
from fedcli.data.datasets.base import FedDataset, choose_pool, default_dir
from fedcli.data.sources import _assemble, _Holdout, _Inputs, _Split
from fedcli.errors import ConfigError, DataError


def download_hint() -> str:
    return "pass --download or point --data-dir at the folder that holds it"


def torchvision_download(name: str, data_dir: Path, cls_name: str, **kwargs: Any) -> None:
    """Fetch both splits with torchvision's downloader (the only network access in fedcli.data)."""
    try:
        import torchvision.datasets as tvd

        data_dir.mkdir(parents=True, exist_ok=True)
        for train in (True, False):
            getattr(tvd, cls_name)(root=str(data_dir), train=train, download=True, **kwargs)
    except Exception as e:  # network, disk, checksum: all are data problems for the user
        why = " ".join(str(e).split())  # torchvision lists every mirror it tried on lines of their own: one line here
        raise DataError(
            f"{data_dir}: downloading {name} with torchvision.datasets.{cls_name} failed ({type(e).__name__}: {why}); "
            f"expected a reachable download mirror or the files already in place"
        ) from None


def check_labels(y: np.ndarray, num_classes: int, path: Path, expected: str) -> None:
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(f"{path}: labels span {y.min()}..{y.max()}, outside 0..{num_classes - 1}; expected {expected}")


def find(dirs: list[Path], stem: str) -> Path | None:
    """First of ``<dir>/<stem>`` and ``<dir>/<stem>.gz`` that exists, over ``dirs`` in order."""
    for d in dirs:
        for cand in (d / stem, d / f"{stem}.gz"):
            if cand.is_file():
                return cand
    return None


@dataclass(frozen=True)
class IdxLayout:
    """Where and how one MNIST-family dataset lies: torchvision's ``<dir>/<raw_folder>/raw`` folder and class, the
    file-name prefix, the normalization, the classes, EMNIST's transposed images and 1-based labels, torchvision's
    extra arguments and what the source record adds."""

    raw_folder: str
    tv_class: str
    prefix: str
    mean: float
    std: float
    num_classes: int
    transpose: bool = False
    label_offset: int = 0
    tv_kwargs: dict | None = None
    extra_source: dict | None = None


def _idx_missing(found: dict, stems: dict, dirs: list[Path], split: str, hint: str) -> Path | None:
    """The file a split lacks (None when both of its IDX files are there); DataError for half a split."""
    img, lab = found[split]
    if img is None and lab is None:
        return dirs[0] / f"{stems[split][0]}[.gz]"
    if img is None or lab is None:  # half a split: always an error
        which = stems[split][0] if img is None else stems[split][1]
        raise DataError(f"{dirs[0] / which}[.gz]: not found next to its partner file; expected both IDX files ({hint})")
    return None


def _read_idx_split(img_path: Path, lab_path: Path, layout: IdxLayout, expected: str) -> _Split:
    """One split's 28x28 IDX images, scaled to [0, 1] and standardized, and its labels (checked: ``expected``)."""
    images = read_idx(img_path, IDX_IMAGES_MAGIC)
    labels = read_idx(lab_path, IDX_LABELS_MAGIC)
    if images.shape[1:] != (28, 28):
        raise DataError(f"{img_path}: images are {images.shape[1]}x{images.shape[2]}; expected 28x28 IDX images")
    if len(images) != len(labels):
        raise DataError(
            f"{img_path}: holds {len(images)} images but {lab_path.name} holds {len(labels)} labels; "
            f"expected {expected} with equal counts"
        )
    if layout.transpose:  # EMNIST stores images transposed (torchvision transposes them back)
        images = images.transpose(0, 2, 1)
    x = np.empty((len(images), 1, 28, 28), dtype=np.float32)
    np.divide(images, np.float32(255.0), out=x[:, 0], dtype=np.float32)
    x -= np.float32(layout.mean)
    x /= np.float32(layout.std)
    y = labels.astype(np.int64) - layout.label_offset
    check_labels(y, layout.num_classes, lab_path, expected)
    return _Split(x, y)


def load_idx_dataset(
    name: str, data_dir: Path | None, layout: IdxLayout, *, download: bool, holdout_fraction: float
) -> FedDataset:
    """MNIST-family loader: IDX files in torchvision's ``<dir>/<raw_folder>/raw`` layout or in ``<dir>``."""
    root = default_dir(name, data_dir)
    dirs = [root / layout.raw_folder / "raw", root]
    prefix = layout.prefix
    stems = {
        "train": (f"{prefix}train-images-idx3-ubyte", f"{prefix}train-labels-idx1-ubyte"),
        "test": (f"{prefix}t10k-images-idx3-ubyte", f"{prefix}t10k-labels-idx1-ubyte"),
    }
    if download and (find(dirs, stems["train"][0]) is None or find(dirs, stems["test"][0]) is None):
        torchvision_download(name, root, layout.tv_class, **(layout.tv_kwargs or {}))

    found: dict[str, tuple[Path | None, Path | None]] = {
        split: (find(dirs, img), find(dirs, lab)) for split, (img, lab) in stems.items()
    }
    hint = f"IDX files {stems['train'][0]}[.gz] etc. in {root / layout.raw_folder / 'raw'} or {root}; "
    hint += download_hint()
    missing = {split: _idx_missing(found, stems, dirs, split, hint) for split in ("train", "test")}
    pool = choose_pool(name, holdout_fraction, missing["train"], missing["test"], hint)
    expected = f"an IDX image/label pair of {name} (28x28 images, labels 0..{layout.num_classes - 1})"
    files: list[str] = []

    def read(split: str) -> _Split:
        img_path, lab_path = found[split]
        assert img_path is not None and lab_path is not None
        files.extend([str(img_path), str(lab_path)])
        return _read_idx_split(img_path, lab_path, layout, expected)

    train = read("train") if pool in ("both", "train") else None
    test = read("test") if pool in ("both", "test") else None
    source = {
        "dataset": name,
        "folder": str(root),
        "format": "IDX (torchvision layout)",
        "files": files,
        "normalization": {"mean": [layout.mean], "std": [layout.std]},
        "download": download,
        **(layout.extra_source or {}),
    }
    return _assemble(
        name,
        _Holdout(pool, holdout_fraction),
        train,
        test,
        layout.num_classes,
        source,
        inputs=_Inputs(image_shape=(1, 28, 28)),
    )


@dataclass(frozen=True)
class CifarLayout:
    """Where and how one CIFAR dataset lies (Krizhevsky 2009): torchvision's folder, its training and test pickles,
    the label key in them, torchvision's class, the per-channel normalization and the classes."""

    folder: str
    train_files: list[str]
    test_file: str
    label_key: str
    tv_class: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    num_classes: int


def _cifar_pool(name: str, root: Path, base: Path, layout: CifarLayout, holdout_fraction: float) -> str:
    """Which splits are on disk (``choose_pool``); DataError for some training batches without the others."""
    train_files, test_file = layout.train_files, layout.test_file
    hint = f"CIFAR python pickles {', '.join(train_files[:1])}... and {test_file} in {root / layout.folder} or {root}; "
    hint += download_hint()
    train_missing = next((base / f for f in train_files if not (base / f).is_file()), None)
    if train_missing is not None and any((base / f).is_file() for f in train_files):
        raise DataError(
            f"{train_missing}: not found next to the other training batches; expected all of "
            f"{', '.join(train_files)} ({hint})"
        )
    test_missing = None if (base / test_file).is_file() else base / test_file
    return choose_pool(name, holdout_fraction, train_missing, test_missing, hint)


def load_cifar(
    name: str, data_dir: Path | None, layout: CifarLayout, *, download: bool, holdout_fraction: float
) -> FedDataset:
    """CIFAR python pickles (Krizhevsky 2009) in ``<dir>/<folder>`` (torchvision's layout) or in ``<dir>``."""
    root = default_dir(name, data_dir)
    train_files, test_file, num_classes = layout.train_files, layout.test_file, layout.num_classes

    def locate() -> Path:
        for d in (root / layout.folder, root):
            if any((d / f).is_file() for f in (*train_files, test_file)):
                return d
        return root / layout.folder

    base = locate()
    if download and not all((base / f).is_file() for f in (*train_files, test_file)):
        torchvision_download(name, root, layout.tv_class)
        base = locate()
    pool = _cifar_pool(name, root, base, layout, holdout_fraction)
    files: list[str] = []
    expected = f"{name} labels 0..{num_classes - 1}"

    def read(names: list[str]) -> _Split:
        xs, ys = [], []
        for f in names:
            x, y = read_cifar_batch(base / f, layout.label_key)
            check_labels(y, num_classes, base / f, expected)
            xs.append(x)
            ys.append(y)
            files.append(str(base / f))
        raw = np.concatenate(xs) if len(xs) > 1 else xs[0]
        x = np.empty(raw.shape, dtype=np.float32)
        np.divide(raw, np.float32(255.0), out=x, dtype=np.float32)
        x -= np.asarray(layout.mean, dtype=np.float32).reshape(1, 3, 1, 1)
        x /= np.asarray(layout.std, dtype=np.float32).reshape(1, 3, 1, 1)
        return _Split(x, np.concatenate(ys))

    train = read(train_files) if pool in ("both", "train") else None
    test = read([test_file]) if pool in ("both", "test") else None
    source = {
        "dataset": name,
        "folder": str(base),
        "format": "CIFAR python pickle",
        "files": files,
        "normalization": {"mean": list(layout.mean), "std": list(layout.std)},
        "download": download,
    }
    return _assemble(
        name, _Holdout(pool, holdout_fraction), train, test, num_classes, source, inputs=_Inputs(augment="cifar")
    )


def leaf_files(d: Path) -> list[Path]:
    return sorted(
        (p for p in d.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))), key=lambda p: p.name
    )


def option(options: dict, key: str, default: Any, kind: type, lo: float | None = None) -> Any:
    value = options.get(key, default)
    if value is None:
        value = default
    if kind is bool:
        ok = isinstance(value, (bool, np.bool_))
    elif kind is int:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    else:
        ok = (
            isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, bool)
            and math.isfinite(value)
        )
    if not ok or (lo is not None and value < lo):
        bound = f" >= {lo}" if lo is not None else ""
        raise ConfigError(f"option {key} must be a {kind.__name__}{bound}, got {value!r}")
    return kind(value)
