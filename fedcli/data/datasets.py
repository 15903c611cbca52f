"""Dataset sources: read a dataset from its standard on-disk layout into in-memory tensors.

Every loader returns a :class:`FedDataset` (float32 inputs, int64 labels, optional writer/user groups).
Loaders register themselves by name with :func:`register_dataset`; :func:`load_dataset` dispatches.

On-disk layouts (read with the numpy readers of ``fedcli.data._formats``, never through torchvision):

- ``mnist``, ``fmnist``, ``emnist``: IDX files as torchvision lays them out
  (``<dir>/MNIST/raw``, ``<dir>/FashionMNIST/raw``, ``<dir>/EMNIST/raw``) or directly in ``<dir>``, gzip or not.
- ``cifar10``, ``cifar100``: the python pickles (``<dir>/cifar-10-batches-py``, ``<dir>/cifar-100-python``, or ``<dir>``).
- ``femnist``: a LEAF ``data/`` folder with ``train/`` and ``test/`` JSON files (Caldas et al. 2018).
- ``digits``: scikit-learn's bundled 8x8 digits; ``synthetic``: Synthetic(alpha, beta) of Li et al. (FedProx, MLSys 2020).

Only ``download=True`` touches the network, through torchvision's own downloaders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedcli.data._formats import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, read_cifar_batch, read_idx, read_leaf_json
from fedcli.errors import ConfigError, DataError

HOLDOUT_SEED = 0  # the held-out test set is a function of the data only, never of a run seed

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
EMNIST_MEAN, EMNIST_STD = 0.1751, 0.3332
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}
FEMNIST_CLASSES = 62


@dataclass
class FedDataset:
    """A dataset held in memory: images ``[N, C, H, W]`` (normalized) or vectors ``[N, D]``, float32."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    train_groups: torch.Tensor | None = None  # int64 [N]: writer/user index of each training sample
    test_groups: torch.Tensor | None = None  # int64 [M]: same indexing for the test samples
    group_names: list[str] | None = None  # group index -> writer id (LEAF ids kept)
    augment: str | None = None  # "cifar": the engine applies fedcli.data.augment at train time
    source: dict = field(default_factory=dict)  # what was read (goes into the run manifest)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def __repr__(self) -> str:
        groups = f", groups={len(self.group_names)}" if self.group_names is not None else ""
        return (
            f"FedDataset({self.name!r}, train={len(self.train_y)}, test={len(self.test_y)}, "
            f"input_shape={list(self.input_shape)}, num_classes={self.num_classes}{groups})"
        )


Loader = Callable[..., FedDataset]
DATASETS: dict[str, Loader] = {}


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    """Register ``loader(data_dir: Path | None, *, download, holdout_fraction, options) -> FedDataset``."""

    def deco(fn: Loader) -> Loader:
        DATASETS[name] = fn
        return fn

    return deco


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    download: bool = False,
    holdout_fraction: float = 0.0,
    options: dict | None = None,
) -> FedDataset:
    """Load dataset ``name`` from ``data_dir`` (default ``./data/<name>`` for on-disk datasets).

    ``holdout_fraction`` F > 0 makes a stratified F fraction of the train pool the test set (seed 0);
    the pool is the official train split, or the test split when only that is on disk.
    ``options`` may hold keys for other datasets too; a loader reads only its own.
    """
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of: {', '.join(sorted(DATASETS))}")
    try:
        frac = float(holdout_fraction)
    except (TypeError, ValueError):
        frac = math.nan
    if not 0.0 <= frac < 1.0:
        raise ConfigError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}")
    path = Path(data_dir).expanduser() if data_dir not in (None, "") else None
    return DATASETS[name](path, download=bool(download), holdout_fraction=frac, options=dict(options or {}))


# ---------------------------------------------------------------------------------------- helpers


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


def _choose_pool(name: str, frac: float, train_missing: Path | None, test_missing: Path | None, hint: str) -> str:
    """Which splits to read: ``"both"`` (F == 0), ``"train"`` or ``"test"`` (the holdout pool)."""
    if train_missing is None:
        if frac > 0:
            return "train"
        if test_missing is None:
            return "both"
        raise DataError(f"{test_missing}: not found; expected the {name} test split ({hint})")
    if frac > 0 and test_missing is None:
        return "test"
    only_test = " (only the test split is there: set --holdout-fraction above 0 to split it)" if test_missing is None else ""
    raise DataError(f"{train_missing}: not found{only_test}; expected the {name} training split ({hint})")


def _assemble(
    name: str,
    pool: str,
    frac: float,
    train: _Split | None,
    test: _Split | None,
    num_classes: int,
    source: dict,
    *,
    image_shape: tuple[int, ...] | None = None,
    group_names: list[str] | None = None,
    augment: str | None = None,
) -> FedDataset:
    """Apply the holdout policy and turn numpy splits into a FedDataset."""
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
        x = np.ascontiguousarray(x, dtype=np.float32)
        if image_shape is not None:
            x = x.reshape((-1, *image_shape))
        return torch.from_numpy(x)

    def g_tensor(g: np.ndarray | None) -> torch.Tensor | None:
        return None if g is None else torch.from_numpy(np.ascontiguousarray(g, dtype=np.int64))

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
        augment=augment,
        source=source,
    )


def _default_dir(name: str, data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else Path("data") / name


def _download_hint() -> str:
    return "pass --download or point --data-dir at the folder that holds it"


def _torchvision_download(name: str, data_dir: Path, cls_name: str, **kwargs: Any) -> None:
    """Fetch both splits with torchvision's downloader (the only network access in fedcli.data)."""
    try:
        import torchvision.datasets as tvd

        data_dir.mkdir(parents=True, exist_ok=True)
        for train in (True, False):
            getattr(tvd, cls_name)(root=str(data_dir), train=train, download=True, **kwargs)
    except Exception as e:  # network, disk, checksum: all are data problems for the user
        raise DataError(
            f"{data_dir}: downloading {name} with torchvision.datasets.{cls_name} failed ({type(e).__name__}: {e}); "
            f"expected a reachable download mirror or the files already in place"
        ) from None


def _check_labels(y: np.ndarray, num_classes: int, path: Path, expected: str) -> None:
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(f"{path}: labels span {y.min()}..{y.max()}, outside 0..{num_classes - 1}; expected {expected}")


# -------------------------------------------------------------------------------- IDX datasets


def _find(dirs: list[Path], stem: str) -> Path | None:
    """First of ``<dir>/<stem>`` and ``<dir>/<stem>.gz`` that exists, over ``dirs`` in order."""
    for d in dirs:
        for cand in (d / stem, d / f"{stem}.gz"):
            if cand.is_file():
                return cand
    return None


def _load_idx_dataset(
    name: str,
    data_dir: Path | None,
    *,
    download: bool,
    holdout_fraction: float,
    raw_folder: str,
    tv_class: str,
    prefix: str,
    mean: float,
    std: float,
    num_classes: int,
    transpose: bool = False,
    label_offset: int = 0,
    tv_kwargs: dict | None = None,
    extra_source: dict | None = None,
) -> FedDataset:
    """MNIST-family loader: IDX files in torchvision's ``<dir>/<raw_folder>/raw`` layout or in ``<dir>``."""
    root = _default_dir(name, data_dir)
    dirs = [root / raw_folder / "raw", root]
    stems = {
        "train": (f"{prefix}train-images-idx3-ubyte", f"{prefix}train-labels-idx1-ubyte"),
        "test": (f"{prefix}t10k-images-idx3-ubyte", f"{prefix}t10k-labels-idx1-ubyte"),
    }
    if download and (_find(dirs, stems["train"][0]) is None or _find(dirs, stems["test"][0]) is None):
        _torchvision_download(name, root, tv_class, **(tv_kwargs or {}))

    found: dict[str, tuple[Path | None, Path | None]] = {
        split: (_find(dirs, img), _find(dirs, lab)) for split, (img, lab) in stems.items()
    }
    hint = f"IDX files {stems['train'][0]}[.gz] etc. in {root / raw_folder / 'raw'} or {root}; " + _download_hint()

    def missing(split: str) -> Path | None:
        img, lab = found[split]
        if img is None and lab is None:
            return dirs[0] / f"{stems[split][0]}[.gz]"
        if img is None or lab is None:  # half a split: always an error
            which = stems[split][0] if img is None else stems[split][1]
            raise DataError(f"{dirs[0] / which}[.gz]: not found next to its partner file; expected both IDX files ({hint})")
        return None

    pool = _choose_pool(name, holdout_fraction, missing("train"), missing("test"), hint)
    expected = f"an IDX image/label pair of {name} (28x28 images, labels 0..{num_classes - 1})"
    files: list[str] = []

    def read(split: str) -> _Split:
        img_path, lab_path = found[split]
        assert img_path is not None and lab_path is not None
        images = read_idx(img_path, IDX_IMAGES_MAGIC)
        labels = read_idx(lab_path, IDX_LABELS_MAGIC)
        files.extend([str(img_path), str(lab_path)])
        if images.shape[1:] != (28, 28):
            raise DataError(f"{img_path}: images are {images.shape[1]}x{images.shape[2]}; expected 28x28 IDX images")
        if len(images) != len(labels):
            raise DataError(
                f"{img_path}: holds {len(images)} images but {lab_path.name} holds {len(labels)} labels; "
                f"expected {expected} with equal counts"
            )
        if transpose:  # EMNIST stores images transposed (torchvision transposes them back)
            images = images.transpose(0, 2, 1)
        x = np.empty((len(images), 1, 28, 28), dtype=np.float32)
        np.divide(images, np.float32(255.0), out=x[:, 0], dtype=np.float32)
        x -= np.float32(mean)
        x /= np.float32(std)
        y = labels.astype(np.int64) - label_offset
        _check_labels(y, num_classes, lab_path, expected)
        return _Split(x, y)

    train = read("train") if pool in ("both", "train") else None
    test = read("test") if pool in ("both", "test") else None
    source = {
        "dataset": name,
        "folder": str(root),
        "format": "IDX (torchvision layout)",
        "files": files,
        "normalization": {"mean": [mean], "std": [std]},
        "download": download,
        **(extra_source or {}),
    }
    return _assemble(name, pool, holdout_fraction, train, test, num_classes, source, image_shape=(1, 28, 28))


@register_dataset("mnist")
def load_mnist(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
               options: dict | None = None) -> FedDataset:
    """MNIST (LeCun et al. 1998), IDX files in torchvision's ``MNIST/raw`` layout."""
    return _load_idx_dataset("mnist", data_dir, download=download, holdout_fraction=holdout_fraction,
                             raw_folder="MNIST", tv_class="MNIST", prefix="", mean=MNIST_MEAN, std=MNIST_STD,
                             num_classes=10)


@register_dataset("fmnist")
def load_fmnist(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                options: dict | None = None) -> FedDataset:
    """Fashion-MNIST (Xiao et al. 2017), IDX files in torchvision's ``FashionMNIST/raw`` layout."""
    return _load_idx_dataset("fmnist", data_dir, download=download, holdout_fraction=holdout_fraction,
                             raw_folder="FashionMNIST", tv_class="FashionMNIST", prefix="", mean=FMNIST_MEAN,
                             std=FMNIST_STD, num_classes=10)


@register_dataset("emnist")
def load_emnist(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                options: dict | None = None) -> FedDataset:
    """EMNIST (Cohen et al. 2017), ``emnist-<split>-*`` IDX files in torchvision's ``EMNIST/raw`` layout.

    ``options["emnist_split"]``: balanced (default), byclass, bymerge, digits, letters, mnist.
    Images are stored transposed and are transposed back; ``letters`` labels 1..26 become 0..25.
    """
    split = (options or {}).get("emnist_split", "balanced")
    if split not in EMNIST_CLASSES:
        raise ConfigError(f"emnist_split must be one of {', '.join(EMNIST_CLASSES)}, got {split!r}")
    return _load_idx_dataset("emnist", data_dir, download=download, holdout_fraction=holdout_fraction,
                             raw_folder="EMNIST", tv_class="EMNIST", prefix=f"emnist-{split}-", mean=EMNIST_MEAN,
                             std=EMNIST_STD, num_classes=EMNIST_CLASSES[split], transpose=True,
                             label_offset=1 if split == "letters" else 0, tv_kwargs={"split": split},
                             extra_source={"options": {"emnist_split": split}})


# ------------------------------------------------------------------------------------- CIFAR


def _load_cifar(
    name: str,
    data_dir: Path | None,
    *,
    download: bool,
    holdout_fraction: float,
    folder: str,
    train_files: list[str],
    test_file: str,
    label_key: str,
    tv_class: str,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
    num_classes: int,
) -> FedDataset:
    """CIFAR python pickles (Krizhevsky 2009) in ``<dir>/<folder>`` (torchvision's layout) or in ``<dir>``."""
    root = _default_dir(name, data_dir)

    def locate() -> Path:
        for d in (root / folder, root):
            if any((d / f).is_file() for f in (*train_files, test_file)):
                return d
        return root / folder

    base = locate()
    if download and not all((base / f).is_file() for f in (*train_files, test_file)):
        _torchvision_download(name, root, tv_class)
        base = locate()
    hint = f"CIFAR python pickles {', '.join(train_files[:1])}... and {test_file} in {root / folder} or {root}; "
    hint += _download_hint()
    train_missing = next((base / f for f in train_files if not (base / f).is_file()), None)
    if train_missing is not None and any((base / f).is_file() for f in train_files):
        raise DataError(f"{train_missing}: not found next to the other training batches; expected all of "
                        f"{', '.join(train_files)} ({hint})")
    test_missing = None if (base / test_file).is_file() else base / test_file
    pool = _choose_pool(name, holdout_fraction, train_missing, test_missing, hint)
    files: list[str] = []
    expected = f"{name} labels 0..{num_classes - 1}"

    def read(names: list[str]) -> _Split:
        xs, ys = [], []
        for f in names:
            x, y = read_cifar_batch(base / f, label_key)
            _check_labels(y, num_classes, base / f, expected)
            xs.append(x)
            ys.append(y)
            files.append(str(base / f))
        raw = np.concatenate(xs) if len(xs) > 1 else xs[0]
        x = np.empty(raw.shape, dtype=np.float32)
        np.divide(raw, np.float32(255.0), out=x, dtype=np.float32)
        x -= np.asarray(mean, dtype=np.float32).reshape(1, 3, 1, 1)
        x /= np.asarray(std, dtype=np.float32).reshape(1, 3, 1, 1)
        return _Split(x, np.concatenate(ys))

    train = read(train_files) if pool in ("both", "train") else None
    test = read([test_file]) if pool in ("both", "test") else None
    source = {
        "dataset": name,
        "folder": str(base),
        "format": "CIFAR python pickle",
        "files": files,
        "normalization": {"mean": list(mean), "std": list(std)},
        "download": download,
    }
    return _assemble(name, pool, holdout_fraction, train, test, num_classes, source, augment="cifar")


@register_dataset("cifar10")
def load_cifar10(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                 options: dict | None = None) -> FedDataset:
    """CIFAR-10: ``cifar-10-batches-py/data_batch_1..5`` and ``test_batch``."""
    return _load_cifar("cifar10", data_dir, download=download, holdout_fraction=holdout_fraction,
                       folder="cifar-10-batches-py", train_files=[f"data_batch_{i}" for i in range(1, 6)],
                       test_file="test_batch", label_key="labels", tv_class="CIFAR10", mean=CIFAR10_MEAN,
                       std=CIFAR10_STD, num_classes=10)


@register_dataset("cifar100")
def load_cifar100(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                  options: dict | None = None) -> FedDataset:
    """CIFAR-100 (fine labels): ``cifar-100-python/train`` and ``test``."""
    return _load_cifar("cifar100", data_dir, download=download, holdout_fraction=holdout_fraction,
                       folder="cifar-100-python", train_files=["train"], test_file="test", label_key="fine_labels",
                       tv_class="CIFAR100", mean=CIFAR100_MEAN, std=CIFAR100_STD, num_classes=100)


# ------------------------------------------------------------------------------------ FEMNIST


def _leaf_files(d: Path) -> list[Path]:
    return sorted((p for p in d.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))),
                  key=lambda p: p.name)


@register_dataset("femnist")
def load_femnist(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                 options: dict | None = None) -> FedDataset:
    """FEMNIST as written by LEAF (Caldas et al. 2018): ``train/`` and ``test/`` with ``*.json[.gz]`` files.

    ``data_dir`` is the LEAF ``data/`` folder (``<dir>/data`` and ``<dir>/femnist/data`` are accepted too).
    Writer ids are kept: ``group_names`` is the sorted union of the writers read, ``*_groups`` index it.
    Pixels stay as stored (1.0 = background), shape [N, 1, 28, 28], 62 classes.
    """
    root = _default_dir("femnist", data_dir)
    candidates = [root, root / "data", root / "femnist" / "data"]
    base = next((d for d in candidates if (d / "train").is_dir() or (d / "test").is_dir()), root)
    hint = (f"a LEAF data/ folder with train/ and test/ holding *.json or *.json.gz files (looked in {root}, "
            f"{root / 'data'}, {root / 'femnist' / 'data'}); fedcli cannot download FEMNIST: generate it with LEAF "
            f"and point --data-dir at its data/ folder")
    split_files = {s: _leaf_files(base / s) if (base / s).is_dir() else [] for s in ("train", "test")}
    missing = {s: None if split_files[s] else base / s / "*.json[.gz]" for s in ("train", "test")}
    pool = _choose_pool("femnist", holdout_fraction, missing["train"], missing["test"], hint)
    expected = f"FEMNIST labels 0..{FEMNIST_CLASSES - 1}"
    files: list[str] = []

    def read(split: str) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
        xs, ys, users, counts = [], [], [], []
        for path in split_files[split]:
            for user, x, y in read_leaf_json(path, 784):
                _check_labels(y, FEMNIST_CLASSES, path, expected)
                xs.append(x)
                ys.append(y)
                users.append(user)
                counts.append(len(y))
            files.append(str(path))
        x = np.concatenate(xs) if xs else np.zeros((0, 784), dtype=np.float32)
        y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
        return x, y, users, np.asarray(counts, dtype=np.int64)

    parts = {s: read(s) for s in ("train", "test") if pool in ("both", s)}
    names = sorted({u for _, _, users, _ in parts.values() for u in users})
    index = {u: i for i, u in enumerate(names)}
    splits: dict[str, _Split] = {}
    for s, (x, y, users, counts) in parts.items():
        groups = np.repeat(np.asarray([index[u] for u in users], dtype=np.int64), counts)
        splits[s] = _Split(x, y, groups)
    source = {
        "dataset": "femnist",
        "folder": str(base),
        "format": "LEAF JSON",
        "files": files,
        "writers": len(names),
        "download": False,
    }
    return _assemble("femnist", pool, holdout_fraction, splits.get("train"), splits.get("test"), FEMNIST_CLASSES,
                     source, image_shape=(1, 28, 28), group_names=names)


# ------------------------------------------------------------------------- generated datasets


@register_dataset("digits")
def load_digits(data_dir: Path | None = None, *, download: bool = False, holdout_fraction: float = 0.0,
                options: dict | None = None) -> FedDataset:
    """scikit-learn's bundled 8x8 digits (1,797 samples, offline): x/16 as [N, 1, 8, 8], 10 classes.

    There is no official split: the holdout fraction defaults to 0.2 (1,437 train / 360 test).
    """
    from sklearn.datasets import load_digits as sk_load_digits

    frac = holdout_fraction if holdout_fraction > 0 else 0.2
    bunch = sk_load_digits()
    x = (np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = np.asarray(bunch.target, dtype=np.int64)
    source = {"dataset": "digits", "folder": None, "format": "sklearn.datasets.load_digits", "files": []}
    return _assemble("digits", "train", frac, _Split(x, y), None, 10, source)


def _option(options: dict, key: str, default: Any, kind: type, lo: float | None = None) -> Any:
    value = options.get(key, default)
    if value is None:
        value = default
    if kind is bool:
        ok = isinstance(value, (bool, np.bool_))
    elif kind is int:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (lo is not None and value < lo):
        bound = f" >= {lo}" if lo is not None else ""
        raise ConfigError(f"option {key} must be a {kind.__name__}{bound}, got {value!r}")
    return kind(value)


@register_dataset("synthetic")
def load_synthetic(data_dir: Path | None = None, *, download: bool = False, holdout_fraction: float = 0.0,
                   options: dict | None = None) -> FedDataset:
    """Synthetic(alpha, beta) of Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020).

    Per user k: u_k ~ N(0, alpha), B_k ~ N(0, beta), W_k ~ N(u_k, 1) [classes, dim], b_k ~ N(u_k, 1),
    v_k ~ N(B_k, 1) [dim], x ~ N(v_k, diag(j^-1.2)), y = argmax(softmax(W_k x + b_k)); the number of
    samples is int(lognormal(4, 2)) + 50 (capped at 5000). IID variant: one W, b ~ N(0, 1) and one
    v ~ N(0, 1) shared by all users. The last 20% of each user's samples are its test samples.
    Options: synthetic_alpha, synthetic_beta, synthetic_users, synthetic_dim, synthetic_classes,
    synthetic_iid, data_seed (numpy Generator seed: the data is a function of these options only).
    As in the authors' generator, the second argument of N(., .) is a standard deviation.
    """
    opts = options or {}
    alpha = _option(opts, "synthetic_alpha", 1.0, float, lo=0.0)
    beta = _option(opts, "synthetic_beta", 1.0, float, lo=0.0)
    users = _option(opts, "synthetic_users", 30, int, lo=1)
    dim = _option(opts, "synthetic_dim", 60, int, lo=1)
    classes = _option(opts, "synthetic_classes", 10, int, lo=2)
    iid = _option(opts, "synthetic_iid", False, bool)
    seed = _option(opts, "data_seed", 0, int, lo=0)

    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.lognormal(4, 2, users).astype(np.int64) + 50, 5000)
    u = rng.normal(0.0, alpha, users)  # model heterogeneity: mean of W_k and b_k
    big_b = rng.normal(0.0, beta, users)  # data heterogeneity: mean of v_k
    sigma = np.arange(1, dim + 1, dtype=np.float64) ** -1.2  # diagonal covariance of x
    if iid:
        w_shared = rng.normal(0.0, 1.0, (classes, dim))
        b_shared = rng.normal(0.0, 1.0, classes)
        v_shared = rng.normal(0.0, 1.0, dim)
    parts = {"train": ([], [], []), "test": ([], [], [])}
    for k in range(users):
        if iid:
            w, b, v = w_shared, b_shared, v_shared
        else:
            w = rng.normal(u[k], 1.0, (classes, dim))
            b = rng.normal(u[k], 1.0, classes)
            v = rng.normal(big_b[k], 1.0, dim)
        n = int(sizes[k])
        x = v + rng.standard_normal((n, dim)) * np.sqrt(sigma)
        y = np.argmax(x @ w.T + b, axis=1)  # softmax is monotone: argmax of the logits
        n_train = int(0.8 * n)
        for split, sl in (("train", slice(0, n_train)), ("test", slice(n_train, n))):
            xs, ys, gs = parts[split]
            xs.append(x[sl])
            ys.append(y[sl])
            gs.append(np.full(len(y[sl]), k, dtype=np.int64))
    train, test = (_Split(np.concatenate(p[0]).astype(np.float32), np.concatenate(p[1]).astype(np.int64),
                          np.concatenate(p[2])) for p in (parts["train"], parts["test"]))
    used = {"synthetic_alpha": alpha, "synthetic_beta": beta, "synthetic_users": users, "synthetic_dim": dim,
            "synthetic_classes": classes, "synthetic_iid": iid, "data_seed": seed}
    source = {"dataset": "synthetic", "folder": None, "format": "generated (Li et al. 2020, Synthetic(alpha, beta))",
              "files": [], "options": used, "samples_per_user": sizes.tolist()}
    pool = "train" if holdout_fraction > 0 else "both"
    return _assemble("synthetic", pool, holdout_fraction, train, test, classes, source,
                     group_names=[f"user_{k}" for k in range(users)])

