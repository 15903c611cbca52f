"""Your own data: ``--dataset imagefolder`` (image files, one folder per class) and ``--dataset tensors`` (one
``.npz`` or ``.pt`` file of arrays). Both work with every ``--partition`` (``natural`` needs writer ids) and report
problems as one ``DataError`` sentence (exit 3) naming the file and the format expected.

``imagefolder`` (torchvision's ``ImageFolder`` layout), ``--data-dir DIR``::

    DIR/train/<class>/*.png        the training split (any depth below the class folder)
    DIR/test/<class>/*.png         optional test split (or DIR/val/); its classes must be training classes
    DIR/<class>/*.png              without train/: DIR itself is the training split

Classes are the sorted folder names of the training split (label i = i-th name, as ``ImageFolder``). Files with
torchvision's image extensions count (``.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp``, any case); other files
are ignored. Every image must have the same width and height; all-grayscale datasets load as 1 channel, others as
RGB (alpha dropped). Pixels are scaled to [0, 1] and standardized per channel with the mean and std of the
training split (recorded in the manifest). Writer ids: when every image sits in a subfolder of its class folder
(``DIR/train/<class>/<writer>/x.png``), that subfolder's name is its writer, for ``--partition natural``.

``tensors``, ``--data-dir FILE.npz`` or ``FILE.pt`` (``numpy.savez`` or ``torch.save`` of a dict)::

    x        [N, ...]  float inputs (used as they are), uint8 images (divided by 255) or other integer token ids
    y        [N]       integer labels 0..C-1
    writers  [N]       optional writer ids (integers or strings), for --partition natural
    x_test, y_test, writers_test     an optional test split of the same kind
    num_classes                      optional scalar C (default: the largest label + 1)

Without a test split, a stratified ``--holdout-fraction`` of the training split (default 0.2, as ``digits``) is the
test set; with one, ``--holdout-fraction F > 0`` holds out F of the training split instead (as the other datasets).

Their declarations are ``fedcli/data/datasets/imagefolder.py`` and ``tensors.py``, which call these loaders.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedcli.data._formats import TENSOR_FILE_FORMAT, read_tensor_file
from fedcli.data.sources import FedDataset, _assemble, _default_dir, _Holdout, _holdout_indices, _Inputs, _Split
from fedcli.errors import DataError

DEFAULT_HOLDOUT = 0.2  # without a test split (as digits)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F")
IMAGEFOLDER_FORMAT = (
    "image files in one folder per class: DIR/train/<class>/*.png with an optional DIR/test/<class>/, "
    "or DIR/<class>/*.png (extensions " + " ".join(IMAGE_EXTENSIONS) + ")"
)


def _pool(has_test: bool, holdout_fraction: float) -> tuple[str, float]:
    """Which split(s) to use and the holdout fraction: ``both`` with a test split (F = 0), else ``train``."""
    if has_test and holdout_fraction == 0:
        return "both", 0.0
    return "train", holdout_fraction or DEFAULT_HOLDOUT


# ------------------------------------------------------------------------------------ imagefolder


def _class_dirs(split_dir: Path) -> list[str]:
    return sorted(
        e.name for e in os.scandir(split_dir) if e.is_dir(follow_symlinks=True) and not e.name.startswith(".")
    )


def _images(class_dir: Path) -> list[tuple[Path, str | None]]:
    """(file, writer) of every image below ``class_dir``; writer = the first subfolder's name, None at the top."""
    out = []
    for dirpath, dirnames, filenames in os.walk(class_dir, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(class_dir).parts
        for f in sorted(filenames):
            if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith("."):
                out.append((Path(dirpath) / f, rel[0] if rel else None))
    return out


def _scan(split_dir: Path, classes: list[str], what: str) -> tuple[list[Path], np.ndarray, list[str | None]]:
    files, labels, writers = [], [], []
    for i, c in enumerate(classes):
        found = _images(split_dir / c)
        if not found:
            raise DataError(f"{split_dir / c}: no image files in this class folder; expected {IMAGEFOLDER_FORMAT}")
        for f, w in found:
            files.append(f)
            labels.append(i)
            writers.append(w)
    if not files:
        raise DataError(f"{split_dir}: no class folders in the {what} split; expected {IMAGEFOLDER_FORMAT}")
    return files, np.asarray(labels, dtype=np.int64), writers


def _header(path: Path) -> tuple[str, tuple[int, int]]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return im.mode, im.size
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(
            f"{path}: cannot read the image ({type(e).__name__}: {e}); expected an image file "
            f"({' '.join(IMAGE_EXTENSIONS)})"
        ) from None


def _decode(files: list[Path], gray: bool, size: tuple[int, int]) -> np.ndarray:
    """uint8 [N, C, H, W] (C = 1 for grayscale datasets, else 3)."""
    from PIL import Image, UnidentifiedImageError

    w, h = size
    x = np.empty((len(files), 1 if gray else 3, h, w), dtype=np.uint8)
    for i, f in enumerate(files):
        try:
            with Image.open(f) as im:
                arr = np.asarray(im.convert("L" if gray else "RGB"), dtype=np.uint8)
        except (OSError, UnidentifiedImageError, ValueError) as e:
            raise DataError(f"{f}: cannot decode the image ({type(e).__name__}: {e}); expected an image file") from None
        x[i] = arr[None] if gray else arr.transpose(2, 0, 1)
    return x


def _folder_layout(root: Path) -> tuple[Path, Path | None, list[str]]:
    """The training folder (DIR/train or DIR), the test folder (DIR/test or DIR/val, if any) and the class names;
    DataError without at least two class folders."""
    train_dir = root / "train" if (root / "train").is_dir() else root
    test_dir = next((d for d in (root / "test", root / "val") if train_dir != root and d.is_dir()), None)
    classes = _class_dirs(train_dir)
    if not classes:
        raise DataError(f"{train_dir}: no class folders; expected {IMAGEFOLDER_FORMAT}")
    if len(classes) < 2:
        raise DataError(
            f"{train_dir}: one class folder ({classes[0]}); expected at least two classes ({IMAGEFOLDER_FORMAT})"
        )
    return train_dir, test_dir, classes


def _scan_splits(train_dir: Path, test_dir: Path | None, classes: list[str]) -> dict:
    """The files, labels and writers of the training split and (``test_dir`` given) of the test split, its labels
    the training classes' indices; DataError for a test class with no training folder."""
    splits = {"train": _scan(train_dir, classes, "training")}
    if test_dir is not None:
        unknown = sorted(set(_class_dirs(test_dir)) - set(classes))
        if unknown:
            raise DataError(
                f"{test_dir / unknown[0]}: a test class with no training folder; expected the test classes "
                f"to be among the training classes ({', '.join(classes[:8])}{'...' if len(classes) > 8 else ''})"
            )
        test_classes = [c for c in classes if (test_dir / c).is_dir()]
        files, y, writers = _scan(test_dir, test_classes, "test")
        splits["test"] = (files, np.asarray([classes.index(test_classes[k]) for k in y], dtype=np.int64), writers)
    return splits


def _one_size(files: list[Path]) -> tuple[bool, tuple[int, int]]:
    """Whether every image is grayscale, and the one size they all have (DataError for a second size)."""
    modes, size, first = set(), None, None
    for f in files:
        mode, sz = _header(f)
        if size is None:
            size, first = sz, f
        elif sz != size:
            raise DataError(
                f"{f}: image is {sz[0]}x{sz[1]}; expected {size[0]}x{size[1]} like {first} "
                f"(every image of an imagefolder dataset must have one size: resize them first)"
            )
        modes.add(mode)
    return modes <= set(GRAY_MODES), size


def _channel_stats(fit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation (at least 1e-6) of uint8 images [N, C, H, W] scaled to [0, 1]."""
    scaled = fit.astype(np.float32) / np.float32(255.0)
    mean = scaled.mean(axis=(0, 2, 3), dtype=np.float64)
    std = np.maximum(scaled.std(axis=(0, 2, 3), dtype=np.float64), 1e-6)
    return mean, std


def load_imagefolder(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Images in torchvision's ``ImageFolder`` layout (see the module docstring)."""
    root = _default_dir("imagefolder", data_dir)
    if download:
        raise DataError(f"{root}: --download is not supported for imagefolder; expected {IMAGEFOLDER_FORMAT}")
    if not root.is_dir():
        raise DataError(f"{root}: not found; expected a folder of {IMAGEFOLDER_FORMAT}")
    train_dir, test_dir, classes = _folder_layout(root)
    pool, frac = _pool(test_dir is not None, holdout_fraction)
    splits = _scan_splits(train_dir, test_dir if pool == "both" else None, classes)
    gray, size = _one_size([f for files, _, _ in splits.values() for f in files])
    writers_all = [w for _, _, ws in splits.values() for w in ws]
    grouped = all(w is not None for w in writers_all)
    names = sorted({w for w in writers_all}) if grouped else None
    index = {w: i for i, w in enumerate(names or [])}
    raw = {
        s: _Split(
            _decode(files, gray, size), y, np.asarray([index[w] for w in ws], dtype=np.int64) if grouped else None
        )
        for s, (files, y, ws) in splits.items()
    }
    fit = raw["train"].x if pool == "both" else raw["train"].x[_holdout_indices(raw["train"].y, frac)[0]]
    mean, std = _channel_stats(fit)
    del fit

    def standardize(s: _Split) -> _Split:
        x = s.x.astype(np.float32) / np.float32(255.0)
        x -= mean.astype(np.float32).reshape(1, -1, 1, 1)
        x /= std.astype(np.float32).reshape(1, -1, 1, 1)
        return _Split(x, s.y, s.groups)

    source = {
        "dataset": "imagefolder",
        "folder": str(root),
        "format": "ImageFolder (one folder per class, decoded with PIL)",
        "files": [str(train_dir)] + ([str(test_dir)] if pool == "both" else []),
        "classes": classes,
        "image": {"width": size[0], "height": size[1], "channels": 1 if gray else 3},
        "writers": len(names) if grouped else None,
        "normalization": {"mean": mean.tolist(), "std": std.tolist(), "from": "training split"},
        "download": False,
    }
    return _assemble(
        "imagefolder",
        _Holdout(pool, frac),
        standardize(raw["train"]),
        standardize(raw["test"]) if "test" in raw else None,
        len(classes),
        source,
        group_names=names,
    )


# ---------------------------------------------------------------------------------------- tensors


def _inputs(path: Path, key: str, x: np.ndarray) -> tuple[np.ndarray, str]:
    """Inputs as float32 (float or uint8 images / 255) or int64 token ids, and what they were."""
    if x.ndim < 2 or x.shape[0] == 0:
        raise DataError(f"{path}: '{key}' has shape {list(x.shape)}; expected {TENSOR_FILE_FORMAT}")
    if x.dtype.kind == "f":
        if not np.isfinite(x).all():
            raise DataError(f"{path}: '{key}' holds NaN or infinite values; expected finite inputs")
        return x.astype(np.float32, copy=False), "float"
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0), "uint8 / 255"
    if x.dtype.kind in "iu":
        if x.min() < 0:
            raise DataError(
                f"{path}: '{key}' holds negative integers; expected float inputs, uint8 images or token ids >= 0"
            )
        return x.astype(np.int64, copy=False), "token ids"
    raise DataError(f"{path}: '{key}' has dtype {x.dtype}; expected float inputs, uint8 images or integer token ids")


def _labels(path: Path, key: str, y: np.ndarray, n: int) -> np.ndarray:
    if y.ndim != 1 or y.dtype.kind not in "iu" or len(y) != n:
        raise DataError(
            f"{path}: '{key}' is {y.dtype} {list(y.shape)}; expected {n} integer labels (one per sample of x)"
        )
    if y.min() < 0:
        raise DataError(f"{path}: '{key}' holds a negative label ({int(y.min())}); expected labels 0..C-1")
    return y.astype(np.int64, copy=False)


def _writers(path: Path, key: str, w: np.ndarray, n: int) -> np.ndarray:
    if w.ndim != 1 or len(w) != n or w.dtype.kind not in "iuUS":
        raise DataError(
            f"{path}: '{key}' is {w.dtype} {list(w.shape)}; expected {n} writer ids (integers or strings) [N]"
        )
    return w.astype(str) if w.dtype.kind in "US" else w.astype(np.int64)


def _check_tensor_keys(path: Path, arrays: dict) -> None:
    """Refuse a tensor file without x and y, with x_test or y_test alone, or writers_test without writers."""
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise DataError(
            f"{path}: no '{missing[0]}' array (it holds: {', '.join(sorted(arrays)) or 'nothing'}); "
            f"expected {TENSOR_FILE_FORMAT}"
        )
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataError(
            f"{path}: '{'x_test' if 'x_test' in arrays else 'y_test'}' without its partner; expected both "
            f"x_test and y_test, or neither"
        )
    if ("writers_test" in arrays) and "writers" not in arrays:
        raise DataError(f"{path}: 'writers_test' without 'writers'; expected writer ids for both splits, or neither")


def _tensor_splits(path: Path, arrays: dict, has_test: bool) -> tuple[dict, set, dict]:
    """Each split's checked (inputs, labels), the kinds of inputs, and the writer ids of the splits that have them;
    DataError for two sample shapes or two kinds of inputs."""
    splits, kinds, writer_ids = {}, set(), {}
    for s, sfx in (("train", ""), ("test", "_test")):
        if s == "test" and not has_test:
            continue
        x, kind = _inputs(path, f"x{sfx}", arrays[f"x{sfx}"])
        kinds.add(kind)
        y = _labels(path, f"y{sfx}", arrays[f"y{sfx}"], len(x))
        if f"writers{sfx}" in arrays:
            writer_ids[s] = _writers(path, f"writers{sfx}", arrays[f"writers{sfx}"], len(x))
        splits[s] = (x, y)
    if has_test and splits["test"][0].shape[1:] != splits["train"][0].shape[1:]:
        raise DataError(
            f"{path}: x_test samples are {list(splits['test'][0].shape[1:])} but x samples are "
            f"{list(splits['train'][0].shape[1:])}; expected one sample shape"
        )
    if len(kinds) > 1:
        raise DataError(
            f"{path}: x and x_test are of different kinds ({' and '.join(sorted(kinds))}); expected one dtype"
        )
    return splits, kinds, writer_ids


def _tensor_classes(path: Path, arrays: dict, splits: dict) -> int:
    """The number of classes: ``num_classes`` if given (above the largest label), else the largest label + 1."""
    top = max(int(y.max()) for _, y in splits.values())
    num_classes = top + 1
    if "num_classes" in arrays:
        c = arrays["num_classes"]
        if c.ndim != 0 or c.dtype.kind not in "iu" or int(c) <= top:
            raise DataError(f"{path}: 'num_classes' is {c!r}; expected one integer above the largest label ({top})")
        num_classes = int(c)
    if num_classes < 2:
        raise DataError(f"{path}: 'y' holds one class; expected labels of at least two classes")
    return num_classes


def load_tensors(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Arrays from one ``.npz`` or ``.pt`` file (see the module docstring)."""
    path = data_dir if data_dir is not None else Path("data") / "tensors"
    if download:
        raise DataError(f"{path}: --download is not supported for tensors; expected {TENSOR_FILE_FORMAT}")
    arrays = read_tensor_file(path)
    _check_tensor_keys(path, arrays)
    has_test = "x_test" in arrays
    splits, kinds, writer_ids = _tensor_splits(path, arrays, has_test)
    num_classes = _tensor_classes(path, arrays, splits)
    names = None
    groups = {}
    if "train" in writer_ids:
        names = sorted({str(w) for ids in writer_ids.values() for w in ids.tolist()})
        index = {w: i for i, w in enumerate(names)}
        groups = {s: np.asarray([index[str(w)] for w in ids.tolist()], dtype=np.int64) for s, ids in writer_ids.items()}
    data = {s: _Split(x, y, groups.get(s)) for s, (x, y) in splits.items()}
    pool, frac = _pool(has_test, holdout_fraction)
    kind = kinds.pop()
    source = {
        "dataset": "tensors",
        "folder": str(path.parent),
        "format": f"tensor file ({path.suffix})",
        "files": [str(path)],
        "inputs": kind,
        "writers": len(names) if names is not None else None,
        "download": False,
    }
    if kind == "token ids":
        source["vocab_size"] = max(int(x.max()) for x, _ in splits.values()) + 1
    return _assemble(
        "tensors",
        _Holdout(pool, frac),
        data["train"],
        data.get("test"),
        num_classes,
        source,
        inputs=_Inputs(dtype=np.int64 if kind == "token ids" else np.float32),
        group_names=names,
    )
