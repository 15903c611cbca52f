"""Is every dataset a sweep needs there, before anything starts? (``fedcli sweep``, every executor.)

A paper-scale sweep that starts without its data fails run after run (or job after job, on a cluster) with exit 3.
:func:`check_datasets` looks at each distinct dataset of the runs still to go, at the path its runs will read,
without loading it: the files of the splits the runs need (both, or either one with ``holdout_fraction > 0``,
as the loaders choose in ``fedcli.data.datasets.base.choose_pool``), and for IDX files their magic number. It is a
cheap look, not a full read: a file damaged past its header is still found by the run's own loader (exit 3).
:func:`fetch_missing` downloads the ones torchvision can fetch, once, in this process, before any run starts
(so runs, or jobs on nodes without internet, never download at the same time). :func:`refuse` ends the sweep
with exit 3 and one sentence per missing dataset naming the path and how to get it.

Each dataset's check is part of its declaration (``fedcli/data/datasets/<name>.py``: ``Dataset.check``, ``how``,
``downloadable``, ``on_disk``); a dataset without one (your own loader) is reported as "not checked" and left to its
loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedcli.data.datasets import DECLARED
from fedcli.errors import DataError


@dataclass
class DataCheck:
    """One dataset of a sweep at one path: whether its runs can read it."""

    dataset: str
    path: Path | None
    problem: str | None = None  # None: present (or nothing to check)
    checked: bool = True
    runs: list[str] = field(default_factory=list)  # labels of the runs that read it
    config: dict = field(default_factory=dict)  # one of those runs' configs (for a download)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def downloadable(self) -> bool:
        return self.dataset in DECLARED and DECLARED[self.dataset].downloadable

    @property
    def how(self) -> str:
        return DECLARED[self.dataset].how if self.dataset in DECLARED else "see docs/data.md, Datasets"

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
    declared = DECLARED.get(c.dataset)
    if declared is not None and not declared.on_disk or root is None:
        return DataCheck(c.dataset, None, config=cfg)
    check = declared.check if declared is not None else None
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
        raise DataError(
            f"{len(bad)} dataset(s) this sweep needs are missing ({started}):\n  "
            + "\n  ".join(c.sentence() for c in bad)
        )
