"""The contract of one experiment tracker, and the registry of trackers by ``--tracker`` name.

A tracker sees a run as: :meth:`Tracker.start` (once per process that trains it; on a resume with what it saved the
first time, so it continues the same tracker run), :meth:`Tracker.log` (one call per round that evaluated or adjusted
intervals, ``step`` = the local iteration the round ended at, increasing), :meth:`Tracker.finish` (the run's status and
the files to keep as artifacts: manifest, CSVs, figures). Its calls come from the trackers' process
(``fedcli.trackers.worker``, fed by the round hook ``fedcli.trackers.hook``), which catches whatever they raise: a
tracker never needs to guard itself. ``finish`` may run after ``fedcli train`` has returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedcli.specs.trackers import TrackerDeclaration, check_trackers, declare_tracker, tracker_names

#: the files of the report's figures among a run's artifacts (the image, its PDF, its caption); the rest is the
#: manifest and the CSVs
FIGURE_SUFFIXES = (".png", ".pdf", ".txt")
#: --tracker name -> Tracker subclass (filled by ``register_tracker``; the names are declared torch-free in
#: ``fedcli.specs.trackers``, which the config checks ``--tracker`` against)
TRACKERS: dict[str, type["Tracker"]] = {}


@dataclass
class RunInfo:
    """What a tracker is told about the run when it starts."""

    run_dir: Path
    name: str  # the run's name in the tracker (a sweep's "run-slug/seedK", else the run folder's name)
    experiment: str  # what groups runs: a sweep's folder name (one experiment / project per sweep), else "fedcli"
    tags: dict = field(default_factory=dict)  # method, dataset, model, seed, and a sweep's scale and run name
    params: dict = field(default_factory=dict)  # the resolved config and the method's parts, flat
    saved: dict = field(default_factory=dict)  # what this tracker's ``start`` returned on an earlier attempt (resume)


class Tracker:
    """One experiment tracker. Subclasses set ``declaration`` (``fedcli.specs.trackers``: the ``--tracker`` name and
    the import name of the library the extra ``.[trackers]`` installs), import their library inside ``start`` and
    register with :func:`register_tracker`."""

    declaration: TrackerDeclaration | None = None
    name = ""  # the declaration's, set from it (a tracker of your own may set these two instead of ``declaration``)
    package = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.declaration is not None:
            cls.name, cls.package = cls.declaration.name, cls.declaration.package

    @classmethod
    def declared(cls) -> TrackerDeclaration:
        """The class's declaration: its ``declaration``, else one made of its ``name`` and ``package``."""
        return cls.declaration or TrackerDeclaration(cls.name, cls.package, f"{cls.__module__}:{cls.__qualname__}")

    def start(self, run: RunInfo) -> dict:
        """Open (or, with ``run.saved``, reopen) the tracker run and record ``run.params``; returns what a resume needs
        to continue the same tracker run (ids, store), saved in the run directory's ``trackers.json``."""
        raise NotImplementedError

    def log(self, step: int, values: dict[str, float]) -> None:
        """Scalars at ``step`` (the local iteration)."""
        raise NotImplementedError

    def stored_step(self) -> int | None:
        """After ``start`` reopened a run: the last step its store already holds, or None where the store cannot say.
        The trackers' process records each logged step in ``trackers.json`` right after logging it, so a process killed
        in between leaves a step logged but not recorded; a resume goes on after the larger of the two."""
        return None

    def finish(self, status: str, files: list[Path]) -> None:
        """Close the run with ``status`` (completed, failed, interrupted), keeping ``files`` as artifacts."""
        raise NotImplementedError


def register_tracker(cls: type[Tracker]) -> type[Tracker]:
    """Class decorator: make ``cls`` available as ``--tracker NAME`` (its declaration's name, declared here too when
    the class is a tracker of your own)."""
    declared = cls.declared()
    if declared.name in TRACKERS:
        raise TypeError(f"{cls.__qualname__}: a tracker needs a name of its own, got {declared.name!r}")
    declare_tracker(declared.name, declared.package, declared.impl)
    TRACKERS[declared.name] = cls
    return cls


__all__ = ["FIGURE_SUFFIXES", "TRACKERS", "RunInfo", "Tracker", "check_trackers", "register_tracker", "tracker_names"]
