"""Is every dataset a sweep needs there, before anything starts? (``fedcli sweep``, every executor.)

A paper-scale sweep that starts without its data fails run after run (or job after job, on a cluster) with exit 3.
:func:`check_datasets` looks at each distinct dataset of the runs still to go, at the path its runs will read,
without loading it: the files of the splits the runs need (both, or either one with ``holdout_fraction > 0``,
as the loaders choose in ``fedcli.data.datasets._choose_pool``), and for IDX files their magic number. It is a
cheap look, not a full read: a file damaged past its header is still found by the run's own loader (exit 3).
:func:`fetch_missing` downloads the ones torchvision can fetch, once, in this process, before any run starts
(so runs, or jobs on nodes without internet, never download at the same time). :func:`refuse` ends the sweep
with exit 3 and one sentence per missing dataset naming the path and how to get it.

Checks are registered by dataset name (:func:`register_check`); a dataset without one (your own loader) is
reported as "not checked" and left to its loader.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fedcli.errors import DataError

#: ``check(root, either, cfg) -> problem or None``; ``either``: one split is enough (a holdout of it); ``cfg``: the
#: run's TrainConfig (for options such as ``emnist_split``)
Check = Callable[[Path, bool, object], str | None]
CHECKS: dict[str, Check] = {}
HOW: dict[str, str] = {}          # dataset -> how to get it (one clause)
DOWNLOADABLE: set[str] = set()    # torchvision can fetch these (``--download``)
NO_FILES = {"digits", "synthetic"}  # generated or bundled: nothing on disk

LEAF_HOW = ("fedcli cannot download FEMNIST: generate it with LEAF (https://github.com/TalwalkarLab/leaf, "
            "data/femnist: ./preprocess.sh -s niid --sf 0.1 -k 0 -t sample) and point data_dir at its data/ folder "
            "(train/ and test/ with *.json files)")


def register_check(name: str, how: str, downloadable: bool = False) -> Callable[[Check], Check]:
    def deco(fn: Check) -> Check:
        CHECKS[name], HOW[name] = fn, how
        if downloadable:
            DOWNLOADABLE.add(name)
        return fn

    return deco


@dataclass
class DataCheck:
    """One dataset of a sweep at one path: whether its runs can read it."""

    dataset: str
    path: Path | None
    problem: str | None = None   # None: present (or nothing to check)
    checked: bool = True
    runs: list[str] = field(default_factory=list)  # labels of the runs that read it
    config: dict = field(default_factory=dict)     # one of those runs' configs (for a download)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def downloadable(self) -> bool:
        return self.dataset in DOWNLOADABLE

    @property
    def how(self) -> str:
        return HOW.get(self.dataset, "see docs/data.md, Datasets")

    def state(self) -> str:
        if not self.checked:
            return "not checked (no check for this dataset; its loader reads it)"
        if self.path is None:
            return "ok (generated, nothing on disk)"
        return "ok" if self.ok else f"MISSING: {self.problem}"

    def sentence(self) -> str:
        return f"{self.dataset} for {len(self.runs)} run(s) at {self.path}: {self.problem}; {self.how}."


def _key(cfg: dict) -> tuple:
    from fedcli.config import TrainConfig
    from fedcli.data.setup import data_dir

    c = TrainConfig(**cfg)
    return c.dataset, str(data_dir(c)), c.holdout_fraction > 0, c.emnist_split


def check_datasets(runs: list[tuple[str, dict]]) -> list[DataCheck]:
    """One :class:`DataCheck` per distinct (dataset, path, splits needed) of ``runs`` = [(label, config dict)]."""
    out: dict[tuple, DataCheck] = {}
    for label, cfg in runs:
        key = _key(cfg)
        if key not in out:
            out[key] = look(cfg)
        out[key].runs.append(label)
    return list(out.values())


def look(cfg: dict) -> DataCheck:
    """The check of one run's dataset, at the path the run reads it from."""
    from fedcli.config import TrainConfig
    from fedcli.data.setup import data_dir

    c = TrainConfig(**cfg)
    root = data_dir(c)
    if c.dataset in NO_FILES or root is None:
        return DataCheck(c.dataset, None, config=cfg)
    check = CHECKS.get(c.dataset)
    if check is None:
        return DataCheck(c.dataset, root, checked=False, config=cfg)
    return DataCheck(c.dataset, root, check(root, c.holdout_fraction > 0, c), config=cfg)


def fetch_missing(checks: list[DataCheck], notify=None) -> None:
    """Download, once and here, every missing dataset that torchvision can fetch; then look again."""
    from fedcli.data.setup import load_data

    for ch in checks:
        if ch.ok or not ch.downloadable:
            continue
        if notify:
            notify(f"downloading {ch.dataset} to {ch.path} (once, before the runs)")
        from fedcli.config import TrainConfig

        load_data(TrainConfig(**{**ch.config, "download": True}))  # a failed download raises DataError (exit 3)
        ch.problem = look(ch.config).problem


def refuse(checks: list[DataCheck], started: str = "no run was started") -> None:
    """Exit 3 (DataError) naming every missing dataset, one sentence each; nothing when all are there."""
    bad = [c for c in checks if not c.ok]
    if bad:
        raise DataError(f"{len(bad)} dataset(s) this sweep needs are missing ({started}):\n  "
                        + "\n  ".join(c.sentence() for c in bad))


# ---------------------------------------------------------------------------------------------- the checks


def _need(name: str, either: bool, train: Path | None, test: Path | None) -> str | None:
    """The problem with splits found (``train``/``test``: a file of each, or None), as the loaders decide."""
    if train and test or either and (train or test):
        return None
    if not train and not test:
        return f"no {name} files there (neither the training nor the test split)"
    if test and not train:
        return f"only the {name} test split is there (set holdout_fraction above 0 to split it)"
    return f"the {name} {'test' if train else 'training'} split is not there"


def _first(dirs: list[Path], names: list[str]) -> Path | None:
    for d in dirs:
        for n in names:
            if (d / n).is_file():
                return d / n
    return None


def _magic(path: Path) -> int | None:
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
            head = f.read(4)
    except (OSError, EOFError):
        return None
    return int.from_bytes(head, "big") if len(head) == 4 else None


def _idx(raw_folder: str, prefix=lambda cfg: ""):
    """MNIST-family IDX files, in ``<root>/<raw_folder>/raw`` or ``<root>`` (``.gz`` or not), magic checked."""
    from fedcli.data._formats import IDX_IMAGES_MAGIC

    def check(root: Path, either: bool, cfg) -> str | None:
        dirs = [root / raw_folder / "raw", root]
        found = {}
        for split in ("train", "t10k"):
            stem = f"{prefix(cfg)}{split}-images-idx3-ubyte"
            f = _first(dirs, [stem, f"{stem}.gz"])
            if f is not None and _magic(f) != IDX_IMAGES_MAGIC:
                return f"{f} is not an IDX image file (damaged?)"
            found[split] = f
        return _need(raw_folder, either, found["train"], found["t10k"])

    return check


def _cifar(name: str, folder: str, train: str, test: str):
    def check(root: Path, either: bool, cfg) -> str | None:
        dirs = [root / folder, root]
        return _need(name, either, _first(dirs, [train]), _first(dirs, [test]))

    return check


register_check("mnist", "pass --download (torchvision fetches it once, before the runs) or put the IDX files there",
               downloadable=True)(_idx("MNIST"))
register_check("fmnist", "pass --download (torchvision fetches it once, before the runs) or put the IDX files there",
               downloadable=True)(_idx("FashionMNIST"))
register_check("emnist", "pass --download (torchvision fetches it once, before the runs) or put the IDX files there",
               downloadable=True)(_idx("EMNIST", lambda cfg: f"emnist-{cfg.emnist_split}-"))
register_check("cifar10", "pass --download (torchvision fetches it once, before the runs) or put cifar-10-batches-py/ there",
               downloadable=True)(_cifar("CIFAR-10", "cifar-10-batches-py", "data_batch_1", "test_batch"))
register_check("cifar100", "pass --download (torchvision fetches it once, before the runs) or put cifar-100-python/ there",
               downloadable=True)(_cifar("CIFAR-100", "cifar-100-python", "train", "test"))


@register_check("femnist", LEAF_HOW)
def _femnist(root: Path, either: bool, cfg) -> str | None:
    def split(s: str) -> Path | None:
        for d in (root, root / "data", root / "femnist" / "data"):
            if (d / s).is_dir():
                return next((f for f in sorted((d / s).iterdir()) if f.name.endswith((".json", ".json.gz"))), None)
        return None

    return _need("FEMNIST (LEAF JSON)", either, split("train"), split("test"))


@register_check("tinyimagenet", "fedcli cannot download it: get http://cs231n.stanford.edu/tiny-imagenet-200.zip, unzip "
                                "it there (tiny-imagenet-200/ with wnids.txt, train/, val/)")
def _tinyimagenet(root: Path, either: bool, cfg) -> str | None:
    found = _first([root / "tiny-imagenet-200", root], ["wnids.txt"])
    return None if found else "no tiny-imagenet-200/wnids.txt"


@register_check("agnews", "fedcli cannot download it: get ag_news_csv (train.csv, test.csv; e.g. "
                          "https://github.com/mhjabreel/CharCnn_Keras/tree/master/data/ag_news_csv) and put it there")
def _agnews(root: Path, either: bool, cfg) -> str | None:
    dirs = [root, root / "ag_news_csv", root / "AG_NEWS"]
    return _need("AG News", either, _first(dirs, ["train.csv"]), _first(dirs, ["test.csv"]))


def _own(root: Path, either: bool, cfg) -> str | None:
    return None if root.exists() else "nothing there"


register_check("imagefolder", "point data_dir at your image folder (one folder per class)")(_own)
register_check("tensors", "point data_dir at your .npz or .pt file")(_own)
