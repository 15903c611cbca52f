"""Dataset sources: read a dataset from its standard on-disk layout into in-memory tensors.

Every loader returns a :class:`FedDataset` (float32 inputs, or int64 token ids for text; int64 labels,
optional writer/user groups).
Loaders register themselves by name with :func:`register_dataset`; :func:`load_dataset` dispatches.

On-disk layouts (read with the numpy readers of ``fedcli.data._formats``, never through torchvision):

- ``mnist``, ``fmnist``, ``emnist``: IDX files as torchvision lays them out
  (``<dir>/MNIST/raw``, ``<dir>/FashionMNIST/raw``, ``<dir>/EMNIST/raw``) or directly in ``<dir>``, gzip or not.
- ``cifar10``, ``cifar100``: the python pickles (``<dir>/cifar-10-batches-py``, ``<dir>/cifar-100-python``, or ``<dir>``).
- ``femnist``: a LEAF ``data/`` folder with ``train/`` and ``test/`` JSON files (Caldas et al. 2018).
- ``digits``: scikit-learn's bundled 8x8 digits; ``synthetic``: Synthetic(alpha, beta) of Li et al. (FedProx, MLSys 2020).
- ``tinyimagenet``: the extracted ``tiny-imagenet-200.zip`` (JPEGs, decoded with PIL; val split = test split).
- ``agnews``: the AG News CSV files ``train.csv`` / ``test.csv`` (int64 token ids, vocabulary from train).
- ``imagefolder``, ``tensors``: your own data (fedcli/data/custom.py).

Only ``download=True`` touches the network, through torchvision's own downloaders.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from fedcli.data._formats import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, read_cifar_batch, read_idx, read_leaf_json
from fedcli.data.sources import (DATASETS, HOLDOUT_SEED, FedDataset, Loader, _assemble, _default_dir,  # noqa: F401
                                 _holdout_indices, _Split, register_dataset)
from fedcli.errors import ConfigError, DataError

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
EMNIST_MEAN, EMNIST_STD = 0.1751, 0.3332
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}
FEMNIST_CLASSES = 62


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
        from fedcli.method_names import suggest

        raise ConfigError(f"unknown dataset {name!r}; {suggest(str(name), sorted(DATASETS))}choose one of: "
                          f"{', '.join(sorted(DATASETS))}", key="dataset")
    try:
        frac = float(holdout_fraction)
    except (TypeError, ValueError):
        frac = math.nan
    if not 0.0 <= frac < 1.0:
        raise ConfigError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}")
    path = Path(data_dir).expanduser() if data_dir not in (None, "") else None
    return DATASETS[name](path, download=bool(download), holdout_fraction=frac, options=dict(options or {}))


# ---------------------------------------------------------------------------------------- helpers


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
        why = " ".join(str(e).split())  # torchvision lists every mirror it tried on lines of their own: one line here
        raise DataError(
            f"{data_dir}: downloading {name} with torchvision.datasets.{cls_name} failed ({type(e).__name__}: {why}); "
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
    for s, (_, y, _, _) in parts.items():
        if not len(y):
            raise DataError(f"{base / s}: its LEAF files hold no users with samples; expected {hint}")
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
    frac = holdout_fraction if holdout_fraction > 0 else 0.2
    data, target = _sklearn_digits()
    x = (np.asarray(data, dtype=np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = np.asarray(target, dtype=np.int64)
    source = {"dataset": "digits", "folder": None, "format": "sklearn.datasets.load_digits", "files": []}
    return _assemble("digits", "train", frac, _Split(x, y), None, 10, source)


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """(data [1797, 64], target) of scikit-learn's digits: its bundled ``datasets/data/digits.csv.gz`` read directly
    (64 pixel columns and the label, as ``sklearn.datasets.load_digits`` reads it), which spares importing
    scikit-learn (about 1 s of every default ``fedcli train``); ``load_digits`` itself when the file is not there."""
    import importlib.util

    module_spec = importlib.util.find_spec("sklearn")
    path = Path(module_spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if module_spec and module_spec.submodule_search_locations else None
    if path is not None and path.is_file():
        table = np.loadtxt(path, delimiter=",")
        return table[:, :-1], table[:, -1].astype(int, copy=False)
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    return bunch.data, bunch.target


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
    """Synthetic(alpha, beta) of Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020),
    generated user by user from a stream keyed by (data_seed, user): the model and its equations are in
    ``fedcli.data.synthetic``.

    Per user k: u_k ~ N(0, alpha), B_k ~ N(0, beta), W_k ~ N(u_k, 1) [classes, dim], b_k ~ N(u_k, 1),
    v_k ~ N(B_k, 1) [dim], x ~ N(v_k, diag(j^-1.2)), y = argmax(softmax(W_k x + b_k)); n_k =
    min(int(lognormal(4, 2)) + 50, 5000) samples, n_k - int(0.8 n_k) of them its test samples.
    Options: synthetic_alpha, synthetic_beta, synthetic_users, synthetic_dim, synthetic_classes,
    synthetic_iid, data_seed (the data is a function of these options only).

    The inputs (``train_x``, ``test_x``) are ``GeneratedRows``: generated when indexed, so memory does not grow
    with the number of users; the labels and the user of every sample are computed here. With a holdout fraction
    the inputs are materialized (the stratified split takes rows out of the whole pool).
    """
    from fedcli.data.synthetic import SyntheticSetting, SyntheticUsers

    opts = options or {}
    setting = SyntheticSetting(alpha=_option(opts, "synthetic_alpha", 1.0, float, lo=0.0),
                         beta=_option(opts, "synthetic_beta", 1.0, float, lo=0.0),
                         users=_option(opts, "synthetic_users", 30, int, lo=1),
                         dim=_option(opts, "synthetic_dim", 60, int, lo=1),
                         classes=_option(opts, "synthetic_classes", 10, int, lo=2),
                         iid=_option(opts, "synthetic_iid", False, bool),
                         seed=_option(opts, "data_seed", 0, int, lo=0))
    users = SyntheticUsers(setting)
    ids = np.arange(setting.users, dtype=np.int32)
    train = _Split(users.rows("train"), users.train_y, np.repeat(ids, users.n_train))
    test = _Split(users.rows("test"), users.test_y, np.repeat(ids, users.sizes - users.n_train))
    used = {"synthetic_alpha": setting.alpha, "synthetic_beta": setting.beta, "synthetic_users": setting.users,
            "synthetic_dim": setting.dim, "synthetic_classes": setting.classes, "synthetic_iid": setting.iid, "data_seed": setting.seed}
    source = {"dataset": "synthetic", "folder": None,
              "format": "generated (Li et al. 2020, Synthetic(alpha, beta)), keyed by (data_seed, user), on demand",
              "files": [], "options": used, "samples_per_user": users.sizes.tolist()}
    if holdout_fraction > 0:  # one pool, split by labels: the rows are taken out of the whole table
        train = _Split(train.x[:].numpy(), train.y, train.groups)
        return _assemble("synthetic", "train", holdout_fraction, train, None, setting.classes, source,
                         group_names=[f"user_{k}" for k in range(setting.users)])
    return _assemble("synthetic", "both", 0.0, train, test, setting.classes, source,
                     group_names=[f"user_{k}" for k in range(setting.users)])


# ------------------------------------------------------------------------------ Tiny-ImageNet

TINYIMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
# per-channel mean and std over all training pixels (the values commonly quoted for Tiny-ImageNet-200)
TINYIMAGENET_MEAN, TINYIMAGENET_STD = (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)
TINYIMAGENET_CLASSES = 200
TINYIMAGENET_SIZE = 64


def _decode_rgb(path: Path, size: int) -> np.ndarray:
    """One JPEG as uint8 [size, size, 3] RGB (grayscale images are converted, as torchvision's loader does)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(f"{path}: cannot decode image ({type(e).__name__}: {e}); expected a JPEG") from None
    if arr.shape != (size, size, 3):
        raise DataError(f"{path}: image is {arr.shape[1]}x{arr.shape[0]}; expected {size}x{size} Tiny-ImageNet images")
    return arr


def _cached_images(cache: Path, files: list[Path], labels: np.ndarray, size: int) -> tuple[np.ndarray, bool]:
    """Decode ``files`` to uint8 [N, 3, size, size], through an ``.npz`` cache keyed by paths, sizes and labels.

    Returns (pixels, whether the cache was used). A cache that cannot be written is silently skipped.
    """
    import hashlib
    import os

    h = hashlib.sha256()
    for f, y in zip(files, labels.tolist()):
        h.update(f"{f.name}\t{f.stat().st_size}\t{y}\n".encode())
    key = h.hexdigest()
    if cache.is_file():
        try:
            with np.load(cache, allow_pickle=False) as z:
                if str(z["key"]) == key and z["x"].shape == (len(files), 3, size, size):
                    return np.asarray(z["x"], dtype=np.uint8), True
        except Exception:  # a stale or truncated cache is rebuilt
            pass
    x = np.empty((len(files), 3, size, size), dtype=np.uint8)
    for i, f in enumerate(files):
        x[i] = _decode_rgb(f, size).transpose(2, 0, 1)
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, x=x, key=np.asarray(key))
        os.replace(tmp, cache)
    except OSError:
        tmp.unlink(missing_ok=True)
    return x, False


@register_dataset("tinyimagenet")
def load_tinyimagenet(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                      options: dict | None = None) -> FedDataset:
    """Tiny-ImageNet-200 (the extracted ``tiny-imagenet-200.zip``): ``wnids.txt``, ``train/<wnid>/images/*.JPEG``,
    ``val/images/*.JPEG`` with ``val/val_annotations.txt``; in ``<dir>/tiny-imagenet-200`` or ``<dir>``.

    Train = the train split (500 per class), test = the val split (the test split has no labels). Labels index
    the sorted wnids (torchvision ``ImageFolder``'s order). RGB, normalized per channel, [N, 3, 64, 64].
    Decoded pixels are cached as ``fedcli-cache-<split>.npz`` in the dataset folder (when writable).
    """
    root = _default_dir("tinyimagenet", data_dir)
    base = next((d for d in (root / "tiny-imagenet-200", root) if (d / "wnids.txt").is_file()), None)
    where = f"{root / 'tiny-imagenet-200'} or {root}"
    fetch = (f"fedcli cannot download it: get {TINYIMAGENET_URL}, unzip it and point --data-dir at the folder "
             f"that holds tiny-imagenet-200/")
    if base is None:
        why = "--download is not supported for tinyimagenet" if download else "not found"
        raise DataError(f"{root / 'tiny-imagenet-200' / 'wnids.txt'}: {why}; expected the extracted Tiny-ImageNet-200 "
                        f"folder in {where} ({fetch})")
    hint = f"train/<wnid>/images/*.JPEG and val/val_annotations.txt with val/images/ in {base}; {fetch}"
    wnids = sorted({w.strip() for w in (base / "wnids.txt").read_text().split() if w.strip()})
    if len(wnids) != TINYIMAGENET_CLASSES:
        raise DataError(f"{base / 'wnids.txt'}: lists {len(wnids)} class ids; expected {TINYIMAGENET_CLASSES} wnids")
    label_of = {w: i for i, w in enumerate(wnids)}
    train_missing = None if (base / "train").is_dir() else base / "train"
    ann = base / "val" / "val_annotations.txt"
    test_missing = None if ann.is_file() else ann
    pool = _choose_pool("tinyimagenet", holdout_fraction, train_missing, test_missing, hint)
    mean = np.asarray(TINYIMAGENET_MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(TINYIMAGENET_STD, dtype=np.float32).reshape(1, 3, 1, 1)
    cached: dict[str, bool] = {}

    def finish(split: str, files: list[Path], y: np.ndarray) -> _Split:
        raw, hit = _cached_images(base / f"fedcli-cache-{split}.npz", files, y, TINYIMAGENET_SIZE)
        cached[split] = hit
        x = np.empty(raw.shape, dtype=np.float32)
        np.divide(raw, np.float32(255.0), out=x, dtype=np.float32)
        x -= mean
        x /= std
        return _Split(x, y)

    def read_train() -> _Split:
        files: list[Path] = []
        ys: list[int] = []
        for w in wnids:
            d = base / "train" / w / "images"
            imgs = sorted(p for p in d.glob("*") if p.suffix.lower() in (".jpeg", ".jpg")) if d.is_dir() else []
            if not imgs:
                raise DataError(f"{d}: no images found; expected *.JPEG files for every wnid of wnids.txt ({hint})")
            files.extend(imgs)
            ys.extend([label_of[w]] * len(imgs))
        return finish("train", files, np.asarray(ys, dtype=np.int64))

    def read_val() -> _Split:
        files: list[Path] = []
        ys: list[int] = []
        for n, line in enumerate(ann.read_text().splitlines(), 1):
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) < 2 or cols[1].strip() not in label_of:
                raise DataError(f"{ann}:{n}: cannot read a (file, wnid) pair from {line[:60]!r}; expected tab-separated "
                                f"file, wnid (one of wnids.txt), bbox")
            f = base / "val" / "images" / cols[0].strip()
            if not f.is_file():
                raise DataError(f"{f}: not found; expected the image listed on line {n} of {ann}")
            files.append(f)
            ys.append(label_of[cols[1].strip()])
        if not files:
            raise DataError(f"{ann}: lists no images; expected one line per val image")
        return finish("val", files, np.asarray(ys, dtype=np.int64))

    train = read_train() if pool in ("both", "train") else None
    test = read_val() if pool in ("both", "test") else None
    source = {
        "dataset": "tinyimagenet",
        "folder": str(base),
        "format": "Tiny-ImageNet-200 JPEG folders (PIL, RGB)",
        "files": [str(base / "train"), str(ann)],
        "test_split": "val",
        "normalization": {"mean": list(TINYIMAGENET_MEAN), "std": list(TINYIMAGENET_STD)},
        "cache_hit": cached,
        "download": False,
    }
    return _assemble("tinyimagenet", pool, holdout_fraction, train, test, TINYIMAGENET_CLASSES, source)


# ------------------------------------------------------------------------------------ AG News

AGNEWS_CLASSES = 4
AGNEWS_VOCAB = 50_000  # most frequent training words kept, plus <pad> = 0 and <unk> = 1
AGNEWS_MAX_LEN = 200  # tokens per text (PFLlib / FedALA)
AGNEWS_URL = "https://github.com/mhjabreel/CharCnn_Keras/tree/master/data/ag_news_csv"
PAD_ID, UNK_ID = 0, 1
_TOKEN = None


def agnews_tokenize(text: str) -> list[str]:
    """Lowercase, then words: runs of letters/digits, with inner apostrophes kept (``don't``)."""
    import re

    global _TOKEN
    if _TOKEN is None:
        _TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
    return _TOKEN.findall(text.replace("\\", " ").lower())


def _read_agnews_csv(path: Path) -> tuple[list[list[str]], np.ndarray]:
    import csv

    docs: list[list[str]] = []
    ys: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for n, row in enumerate(csv.reader(fh), 1):
                if not row:
                    continue
                try:
                    label = int(row[0].strip())
                except ValueError:
                    label = 0
                if len(row) < 2 or not 1 <= label <= AGNEWS_CLASSES:
                    raise DataError(f"{path}:{n}: cannot read a row from {','.join(row)[:60]!r}; expected quoted CSV "
                                    f"rows class index (1..{AGNEWS_CLASSES}), title, description without a header")
                docs.append(agnews_tokenize(" ".join(row[1:])))
                ys.append(label - 1)
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{path}: cannot parse ({type(e).__name__}: {e}); expected the AG News UTF-8 CSV") from None
    if not ys:
        raise DataError(f"{path}: no rows; expected the AG News CSV (class index, title, description)")
    return docs, np.asarray(ys, dtype=np.int64)


@register_dataset("agnews")
def load_agnews(data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0,
                options: dict | None = None) -> FedDataset:
    """AG News (Zhang et al. 2015): ``train.csv`` / ``test.csv`` in ``<dir>``, ``<dir>/ag_news_csv`` or
    ``<dir>/AG_NEWS`` (no header; class index 1..4, title, description; quoted).

    Text = title + " " + description, lowercased and split into words (:func:`agnews_tokenize`). The vocabulary
    is the ``agnews_vocab_size`` (loader default 50,000; ``fedcli train`` default 0 = all, FedALA's 98,635 words)
    most frequent words of the training split (the train side of a holdout
    split), ties by word; ids: <pad> = 0, <unk> = 1, words from 2. Each text is truncated or padded (at the end)
    to ``agnews_max_len`` (200) ids: x is int64 [N, L], 4 classes (labels 0..3).
    """
    opts = options or {}
    cap = _option(opts, "agnews_vocab_size", AGNEWS_VOCAB, int, lo=0) or None  # 0: every training word
    max_len = _option(opts, "agnews_max_len", AGNEWS_MAX_LEN, int, lo=1)
    root = _default_dir("agnews", data_dir)
    dirs = [root, root / "ag_news_csv", root / "AG_NEWS"]
    base = next((d for d in dirs if (d / "train.csv").is_file() or (d / "test.csv").is_file()), root)
    hint = (f"train.csv and test.csv in {root}, {root / 'ag_news_csv'} or {root / 'AG_NEWS'}; fedcli cannot download "
            f"AG News: get ag_news_csv (e.g. {AGNEWS_URL}) and point --data-dir at it")
    if download and not (base / "train.csv").is_file():
        raise DataError(f"{base / 'train.csv'}: --download is not supported for agnews; expected the files in place ({hint})")
    train_missing = None if (base / "train.csv").is_file() else base / "train.csv"
    test_missing = None if (base / "test.csv").is_file() else base / "test.csv"
    pool = _choose_pool("agnews", holdout_fraction, train_missing, test_missing, hint)
    parts = {s: _read_agnews_csv(base / f"{s}.csv") for s in ("train", "test") if pool in ("both", s)}
    if pool == "both":
        vocab_docs = parts["train"][0]
    else:  # the same split _assemble makes: the vocabulary sees the train side only
        docs, y = parts[pool]
        vocab_docs = [docs[i] for i in _holdout_indices(y, holdout_fraction)[0]]
    from collections import Counter

    counts = Counter(t for d in vocab_docs for t in d)
    words = sorted(counts, key=lambda w: (-counts[w], w))[:cap]
    ids = {w: i + 2 for i, w in enumerate(words)}

    def encode(docs: list[list[str]], y: np.ndarray) -> _Split:
        x = np.full((len(docs), max_len), PAD_ID, dtype=np.int64)
        for i, d in enumerate(docs):
            row = [ids.get(t, UNK_ID) for t in d[:max_len]]
            x[i, : len(row)] = row
        return _Split(x, y)

    splits = {s: encode(*parts[s]) for s in parts}
    source = {
        "dataset": "agnews",
        "folder": str(base),
        "format": "AG News CSV (class index, title, description)",
        "files": [str(base / f"{s}.csv") for s in parts],
        "tokenizer": "lowercase, regex [a-z0-9]+('[a-z0-9]+)*",
        "vocab_size": len(ids) + 2,
        "vocab_cap": cap or 0,
        "vocab_from": "train",
        "max_len": max_len,
        "specials": {"<pad>": PAD_ID, "<unk>": UNK_ID},
    }
    return _assemble("agnews", pool, holdout_fraction, splits.get("train"), splits.get("test"), AGNEWS_CLASSES,
                     source, x_dtype=np.int64)


from fedcli.data import custom as _custom  # noqa: E402,F401  (registers imagefolder and tensors: your own data)
