"""What a dataset is to fedcli, read without numpy or torch: the :class:`Dataset` declaration each dataset's file makes
(``fedcli/data/datasets/<name>.py``), the in-memory :class:`FedDataset` its loader returns, and the pieces the
declarations' preflight checks share (docs/data.md, "Add a dataset").

The command line (``--help``, a dataset's name checked), the sweep's preflight (``fedcli.data.preflight``) and time
estimate (``fedcli.sweep.estimate``) read the declarations; only a run calls a loader, which imports numpy and torch
when it is called.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from fedcli.errors import DataError

if TYPE_CHECKING:
    import torch


@dataclass
class FedDataset:
    """A dataset: images ``[N, C, H, W]`` (normalized) or vectors ``[N, D]``, float32, held in memory, or (the
    synthetic data) a table indexed like a tensor whose rows are generated on demand (``GeneratedRows``)."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    train_groups: torch.Tensor | None = None  # int32 [N]: writer/user index of each training sample
    test_groups: torch.Tensor | None = None  # int32 [M]: same indexing for the test samples
    group_names: list[str] | None = None  # group index -> writer id (LEAF ids kept)
    augment: str | None = None  # "cifar": the engine applies fedcli.data.augment at train time
    source: dict = field(default_factory=dict)  # what was read (goes into the run manifest)
    val_x: torch.Tensor | None = None  # --val-fraction: the held-out validation samples (fedcli.data.validation)
    val_y: torch.Tensor | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def share_caches(self, processes: int) -> None:
        """Tables that keep a cache of generated rows (``GeneratedRows``) keep ``1 / processes`` of it in this process:
        the processes of a node (MPI ranks, ``--workers``) share one budget, as each trains its share of the clients."""
        for x in (self.train_x, self.test_x):
            if hasattr(x, "share_cache"):
                x.share_cache(processes)

    def __repr__(self) -> str:
        groups = f", groups={len(self.group_names)}" if self.group_names is not None else ""
        return (
            f"FedDataset({self.name!r}, train={len(self.train_y)}, test={len(self.test_y)}, "
            f"input_shape={list(self.input_shape)}, num_classes={self.num_classes}{groups})"
        )


#: ``loader(data_dir: Path | None, *, download, holdout_fraction, options) -> FedDataset``
Loader = Callable[..., FedDataset]
#: ``check(root, either, cfg) -> problem or None``; ``either``: one split is enough (a holdout of it); ``cfg``: the
#: run's TrainConfig (for options such as ``emnist_split``)
Check = Callable[[Path, bool, object], "str | None"]


@dataclass(frozen=True)
class Dataset:
    """One dataset as fedcli knows it before loading it, declared once in its own file.

    ``load``: its loader (imports numpy and torch when called). ``shape`` (one sample's input shape), ``classes`` and
    ``train``/``test`` (the samples of its standard splits; None: unknown until read) are the sweep estimate's
    nominal facts; ``facts(cfg)`` gives them under a run's options instead (EMNIST's split, AG News' length:
    ``(shape, classes, train, test, tokens)``). A dataset with no ``classes`` is loaded for its facts (your own data,
    the synthetic data). ``check``: the preflight's look at its files without reading them (None: not checked);
    ``how``: how to get it, one clause; ``downloadable``: torchvision fetches it (``--download``); ``on_disk``: False
    for data generated or bundled (nothing to check)."""

    name: str
    load: Loader
    shape: tuple[int, ...] | None = None
    classes: int | None = None
    train: int | None = None
    test: int | None = None
    facts: Callable | None = None
    check: Check | None = None
    how: str = ""
    downloadable: bool = False
    on_disk: bool = True

    def nominal(self, cfg: dict) -> tuple:
        """(input shape, classes, training samples, test samples, vocabulary size or None) under the run's ``cfg``."""
        if self.facts is not None:
            return self.facts(cfg)
        return self.shape, self.classes, self.train, self.test, None


# ------------------------------------------------------------------------------------- the preflight's pieces
#: how to get a dataset torchvision fetches
DOWNLOAD_HOW = "pass --download (torchvision fetches it once, before the runs) or put {} there"


def need(name: str, either: bool, train: Path | None, test: Path | None) -> str | None:
    """The problem with splits found (``train``/``test``: a file of each, or None), as the loaders decide."""
    if train and test or either and (train or test):
        return None
    if not train and not test:
        return f"no {name} files there (neither the training nor the test split)"
    if test and not train:
        return f"only the {name} test split is there (set holdout_fraction above 0 to split it)"
    return f"the {name} {'test' if train else 'training'} split is not there"


def first(dirs: list[Path], names: list[str]) -> Path | None:
    """The first of ``names`` that is a file, over ``dirs`` in order."""
    for d in dirs:
        for n in names:
            if (d / n).is_file():
                return d / n
    return None


def magic(path: Path) -> int | None:
    """The first four bytes of ``path`` (gunzipped for ``.gz``) as a big-endian number; None if unreadable."""
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as f:
            head = f.read(4)
    except (OSError, EOFError):
        return None
    return int.from_bytes(head, "big") if len(head) == 4 else None


def idx_check(raw_folder: str, prefix=lambda cfg: "") -> Check:
    """The check of MNIST-family IDX files, in ``<root>/<raw_folder>/raw`` or ``<root>`` (``.gz`` or not), magic
    checked."""

    def check(root: Path, either: bool, cfg) -> str | None:
        from fedcli.data._formats import IDX_IMAGES_MAGIC

        dirs = [root / raw_folder / "raw", root]
        found = {}
        for split in ("train", "t10k"):
            stem = f"{prefix(cfg)}{split}-images-idx3-ubyte"
            f = first(dirs, [stem, f"{stem}.gz"])
            if f is not None and magic(f) != IDX_IMAGES_MAGIC:
                return f"{f} is not an IDX image file (damaged?)"
            found[split] = f
        return need(raw_folder, either, found["train"], found["t10k"])

    return check


def cifar_check(name: str, folder: str, train: str, test: str) -> Check:
    """The check of a CIFAR pickle folder: its first training batch and its test batch."""

    def check(root: Path, either: bool, cfg) -> str | None:
        dirs = [root / folder, root]
        return need(name, either, first(dirs, [train]), first(dirs, [test]))

    return check


def check_there(root: Path, either: bool, cfg) -> str | None:
    """Your own data: only whether its path exists (its loader reads the rest)."""
    return None if root.exists() else "nothing there"


def choose_pool(name: str, frac: float, train_missing: Path | None, test_missing: Path | None, hint: str) -> str:
    """Which splits a loader reads: ``"both"`` (F == 0), ``"train"`` or ``"test"`` (the holdout pool)."""
    if train_missing is None:
        if frac > 0:
            return "train"
        if test_missing is None:
            return "both"
        raise DataError(f"{test_missing}: not found; expected the {name} test split ({hint})")
    if frac > 0 and test_missing is None:
        return "test"
    only_test = (
        " (only the test split is there: set --holdout-fraction above 0 to split it)" if test_missing is None else ""
    )
    raise DataError(f"{train_missing}: not found{only_test}; expected the {name} training split ({hint})")


def default_dir(name: str, data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else Path("data") / name
