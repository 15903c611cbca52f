"""FEMNIST as written by LEAF (Caldas et al. 2018): a ``data/`` folder with ``train/`` and ``test/`` JSON files;
28x28 grey images as stored, 62 classes, each sample's writer kept (the natural partition). fedcli cannot download
it."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset, choose_pool, default_dir, need
from fedcli.errors import DataError

FEMNIST_CLASSES = 62
LEAF_HOW = (
    "fedcli cannot download FEMNIST: generate it with LEAF (https://github.com/TalwalkarLab/leaf, "
    "data/femnist: ./preprocess.sh -s niid --sf 0.1 -k 0 -t sample) and point data_dir at its data/ folder "
    "(train/ and test/ with *.json files)"
)


def _read_leaf_split(paths: list[Path], files: list[str]) -> tuple:
    """One split's LEAF files: pixels [N, 784], labels [N] (checked 0..61), the writers in file order and their sample
    counts; each file read is appended to ``files``."""
    import numpy as np

    from fedcli.data._formats import read_leaf_json
    from fedcli.data.datasets.shared import check_labels

    expected = f"FEMNIST labels 0..{FEMNIST_CLASSES - 1}"
    xs, ys, users, counts = [], [], [], []
    for path in paths:
        for user, x, y in read_leaf_json(path, 784):
            check_labels(y, FEMNIST_CLASSES, path, expected)
            xs.append(x)
            ys.append(y)
            users.append(user)
            counts.append(len(y))
        files.append(str(path))
    x = np.concatenate(xs) if xs else np.zeros((0, 784), dtype=np.float32)
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    return x, y, users, np.asarray(counts, dtype=np.int64)


def _writer_splits(parts: dict) -> tuple[list[str], dict]:
    """The sorted writers of all splits, and each split with every sample's writer index as its groups."""
    import numpy as np

    from fedcli.data.sources import _Split

    names = sorted({u for _, _, users, _ in parts.values() for u in users})
    index = {u: i for i, u in enumerate(names)}
    splits: dict[str, _Split] = {}
    for s, (x, y, users, counts) in parts.items():
        groups = np.repeat(np.asarray([index[u] for u in users], dtype=np.int64), counts)
        splits[s] = _Split(x, y, groups)
    return names, splits


def load_femnist(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """FEMNIST as written by LEAF (Caldas et al. 2018): ``train/`` and ``test/`` with ``*.json[.gz]`` files.

    ``data_dir`` is the LEAF ``data/`` folder (``<dir>/data`` and ``<dir>/femnist/data`` are accepted too).
    Writer ids are kept: ``group_names`` is the sorted union of the writers read, ``*_groups`` index it.
    Pixels stay as stored (1.0 = background), shape [N, 1, 28, 28], 62 classes.
    """
    from fedcli.data.datasets.shared import leaf_files
    from fedcli.data.sources import _assemble, _Holdout, _Inputs

    root = default_dir("femnist", data_dir)
    candidates = [root, root / "data", root / "femnist" / "data"]
    base = next((d for d in candidates if (d / "train").is_dir() or (d / "test").is_dir()), root)
    hint = (
        f"a LEAF data/ folder with train/ and test/ holding *.json or *.json.gz files (looked in {root}, "
        f"{root / 'data'}, {root / 'femnist' / 'data'}); fedcli cannot download FEMNIST: generate it with LEAF "
        f"and point --data-dir at its data/ folder"
    )
    split_files = {s: leaf_files(base / s) if (base / s).is_dir() else [] for s in ("train", "test")}
    missing = {s: None if split_files[s] else base / s / "*.json[.gz]" for s in ("train", "test")}
    pool = choose_pool("femnist", holdout_fraction, missing["train"], missing["test"], hint)
    files: list[str] = []
    parts = {s: _read_leaf_split(split_files[s], files) for s in ("train", "test") if pool in ("both", s)}
    for s, (_, y, _, _) in parts.items():
        if not len(y):
            raise DataError(f"{base / s}: its LEAF files hold no users with samples; expected {hint}")
    names, splits = _writer_splits(parts)
    source = {
        "dataset": "femnist",
        "folder": str(base),
        "format": "LEAF JSON",
        "files": files,
        "writers": len(names),
        "download": False,
    }
    return _assemble(
        "femnist",
        _Holdout(pool, holdout_fraction),
        splits.get("train"),
        splits.get("test"),
        FEMNIST_CLASSES,
        source,
        inputs=_Inputs(image_shape=(1, 28, 28)),
        group_names=names,
    )


def check_femnist(root: Path, either: bool, cfg) -> str | None:
    """A LEAF JSON file in each split folder needed, in ``root``, ``root/data`` or ``root/femnist/data``."""

    def split(s: str) -> Path | None:
        for d in (root, root / "data", root / "femnist" / "data"):
            if (d / s).is_dir():
                return next((f for f in sorted((d / s).iterdir()) if f.name.endswith((".json", ".json.gz"))), None)
        return None

    return need("FEMNIST (LEAF JSON)", either, split("train"), split("test"))


DATASET = Dataset(
    "femnist", load_femnist, shape=(1, 28, 28), classes=FEMNIST_CLASSES, check=check_femnist, how=LEAF_HOW
)
