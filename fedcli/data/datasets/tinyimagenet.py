"""Tiny-ImageNet-200 (the extracted ``tiny-imagenet-200.zip``): 64x64 colour JPEGs, 200 classes, 100,000 training
and 10,000 val (= test) samples, normalized per channel; decoded pixels cached beside the data. fedcli cannot
download it."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset, choose_pool, default_dir, first
from fedcli.errors import DataError

TINYIMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
# per-channel mean and std over all training pixels (the values commonly quoted for Tiny-ImageNet-200)
TINYIMAGENET_MEAN, TINYIMAGENET_STD = (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)
TINYIMAGENET_CLASSES = 200
TINYIMAGENET_SIZE = 64


def _decode_rgb(path: Path, size: int):
    """One JPEG as uint8 [size, size, 3] RGB (grayscale images are converted, as torchvision's loader does)."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(f"{path}: cannot decode image ({type(e).__name__}: {e}); expected a JPEG") from None
    if arr.shape != (size, size, 3):
        raise DataError(f"{path}: image is {arr.shape[1]}x{arr.shape[0]}; expected {size}x{size} Tiny-ImageNet images")
    return arr


def _cached_images(cache: Path, files: list[Path], labels, size: int) -> tuple:
    """Decode ``files`` to uint8 [N, 3, size, size], through an ``.npz`` cache keyed by paths, sizes and labels.

    Returns (pixels, whether the cache was used). A cache that cannot be written is silently skipped.
    """
    import hashlib
    import os

    import numpy as np

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


def _tinyimagenet_base(root: Path, download: bool) -> Path:
    """The extracted folder (``root/tiny-imagenet-200`` or ``root``, the one with wnids.txt); DataError if neither."""
    base = next((d for d in (root / "tiny-imagenet-200", root) if (d / "wnids.txt").is_file()), None)
    if base is None:
        fetch = (
            f"fedcli cannot download it: get {TINYIMAGENET_URL}, unzip it and point --data-dir at the folder "
            f"that holds tiny-imagenet-200/"
        )
        why = "--download is not supported for tinyimagenet" if download else "not found"
        raise DataError(
            f"{root / 'tiny-imagenet-200' / 'wnids.txt'}: {why}; expected the extracted Tiny-ImageNet-200 "
            f"folder in {root / 'tiny-imagenet-200'} or {root} ({fetch})"
        )
    return base


def _train_listing(base: Path, wnids: list[str], label_of: dict, hint: str) -> tuple:
    """The train split's image files (``train/<wnid>/images/*.JPEG``, wnid by wnid) and their labels [N] int64."""
    import numpy as np

    files: list[Path] = []
    ys: list[int] = []
    for w in wnids:
        d = base / "train" / w / "images"
        imgs = sorted(p for p in d.glob("*") if p.suffix.lower() in (".jpeg", ".jpg")) if d.is_dir() else []
        if not imgs:
            raise DataError(f"{d}: no images found; expected *.JPEG files for every wnid of wnids.txt ({hint})")
        files.extend(imgs)
        ys.extend([label_of[w]] * len(imgs))
    return files, np.asarray(ys, dtype=np.int64)


def _val_listing(base: Path, ann: Path, label_of: dict) -> tuple:
    """The val split's image files and labels [N] int64, as ``val/val_annotations.txt`` lists them."""
    import numpy as np

    files: list[Path] = []
    ys: list[int] = []
    for n, line in enumerate(ann.read_text().splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2 or cols[1].strip() not in label_of:
            raise DataError(
                f"{ann}:{n}: cannot read a (file, wnid) pair from {line[:60]!r}; expected "
                f"tab-separated file, wnid (one of wnids.txt), bbox"
            )
        f = base / "val" / "images" / cols[0].strip()
        if not f.is_file():
            raise DataError(f"{f}: not found; expected the image listed on line {n} of {ann}")
        files.append(f)
        ys.append(label_of[cols[1].strip()])
    if not files:
        raise DataError(f"{ann}: lists no images; expected one line per val image")
    return files, np.asarray(ys, dtype=np.int64)


def load_tinyimagenet(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Tiny-ImageNet-200 (the extracted ``tiny-imagenet-200.zip``): ``wnids.txt``, ``train/<wnid>/images/*.JPEG``,
    ``val/images/*.JPEG`` with ``val/val_annotations.txt``; in ``<dir>/tiny-imagenet-200`` or ``<dir>``.

    Train = the train split (500 per class), test = the val split (the test split has no labels). Labels index
    the sorted wnids (torchvision ``ImageFolder``'s order). RGB, normalized per channel, [N, 3, 64, 64].
    Decoded pixels are cached as ``fedcli-cache-<split>.npz`` in the dataset folder (when writable).
    """
    import numpy as np

    from fedcli.data.sources import _assemble, _Holdout, _Split

    root = default_dir("tinyimagenet", data_dir)
    base = _tinyimagenet_base(root, download)
    fetch = (
        f"fedcli cannot download it: get {TINYIMAGENET_URL}, unzip it and point --data-dir at the folder "
        f"that holds tiny-imagenet-200/"
    )
    hint = f"train/<wnid>/images/*.JPEG and val/val_annotations.txt with val/images/ in {base}; {fetch}"
    wnids = sorted({w.strip() for w in (base / "wnids.txt").read_text().split() if w.strip()})
    if len(wnids) != TINYIMAGENET_CLASSES:
        raise DataError(f"{base / 'wnids.txt'}: lists {len(wnids)} class ids; expected {TINYIMAGENET_CLASSES} wnids")
    label_of = {w: i for i, w in enumerate(wnids)}
    train_missing = None if (base / "train").is_dir() else base / "train"
    ann = base / "val" / "val_annotations.txt"
    test_missing = None if ann.is_file() else ann
    pool = choose_pool("tinyimagenet", holdout_fraction, train_missing, test_missing, hint)
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

    train = finish("train", *_train_listing(base, wnids, label_of, hint)) if pool in ("both", "train") else None
    test = finish("val", *_val_listing(base, ann, label_of)) if pool in ("both", "test") else None
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
    return _assemble("tinyimagenet", _Holdout(pool, holdout_fraction), train, test, TINYIMAGENET_CLASSES, source)


def check_tinyimagenet(root: Path, either: bool, cfg) -> str | None:
    """``wnids.txt`` in ``root/tiny-imagenet-200`` or ``root``."""
    found = first([root / "tiny-imagenet-200", root], ["wnids.txt"])
    return None if found else "no tiny-imagenet-200/wnids.txt"


DATASET = Dataset(
    "tinyimagenet",
    load_tinyimagenet,
    shape=(3, TINYIMAGENET_SIZE, TINYIMAGENET_SIZE),
    classes=TINYIMAGENET_CLASSES,
    train=100000,
    test=10000,
    check=check_tinyimagenet,
    how=f"fedcli cannot download it: get {TINYIMAGENET_URL}, unzip it there (tiny-imagenet-200/ with "
    "wnids.txt, train/, val/)",
)
