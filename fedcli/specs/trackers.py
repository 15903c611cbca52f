"""What fedcli knows of its experiment trackers without importing their code: each ``--tracker`` name, the library
it needs (``package``, looked up, never imported, by the config check) and the class that sends a run to it
(``impl``, ``"module:Class"``, imported only by the trackers' process). ``fedcli.config`` checks ``--tracker``
against these declarations, so the config layer never imports ``fedcli.trackers`` (pyproject.toml layers).

The contract of a tracker itself (``start``, ``log``, ``finish``) is ``fedcli.trackers.base.Tracker``
(docs/tracking.md); a tracker of your own registers its class with ``fedcli.trackers.register_tracker``, which
declares it here too.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from fedcli.errors import ConfigError


@dataclass(frozen=True)
class TrackerDeclaration:
    """One tracker: its ``--tracker`` name, the import name of its library, its class as ``"module:Class"``."""

    name: str
    package: str
    impl: str


#: --tracker name -> its declaration, every tracker known to this process
DECLARED_TRACKERS: dict[str, TrackerDeclaration] = {}


def declare_tracker(name: str, package: str, impl: str) -> TrackerDeclaration:
    """Declare the tracker ``name`` (one declaration a name; the same one again is no change)."""
    declared = TrackerDeclaration(name, package, impl)
    if not name or DECLARED_TRACKERS.get(name, declared) != declared:
        raise TypeError(f"{impl}: a tracker needs a name of its own, got {name!r}")
    DECLARED_TRACKERS[name] = declared
    return declared


#: the built-in trackers, declared by name here, their classes in fedcli/trackers/<name>_run.py
MLFLOW = declare_tracker("mlflow", "mlflow", "fedcli.trackers.mlflow_run:MLflowRun")
TENSORBOARD = declare_tracker("tensorboard", "tensorboard", "fedcli.trackers.tensorboard_run:TensorBoardRun")
WANDB = declare_tracker("wandb", "wandb", "fedcli.trackers.wandb_run:WandbRun")


def tracker_names(value: str) -> list[str]:
    """The trackers of a ``tracker`` config value ("tensorboard,mlflow"), in order, each once."""
    return list(dict.fromkeys(n.strip().lower() for n in str(value).split(",") if n.strip()))


def check_trackers(value: str) -> list[str]:
    """The tracker names of ``value``; an unknown one, or one whose library is not installed, is a ConfigError (exit 2).
    Looks the library up without importing it."""
    names = tracker_names(value)
    for n in names:
        declared = DECLARED_TRACKERS.get(n)
        if declared is None:
            raise ConfigError(
                f"--tracker: unknown tracker '{n}'; choose one of: {', '.join(sorted(DECLARED_TRACKERS))}",
                key="tracker",
            )
        if importlib.util.find_spec(declared.package) is None:
            raise ConfigError(
                f"--tracker {n} needs the {declared.package} package, which is not installed: "
                f'pip install -e ".[trackers]" (or make install)',
                key="tracker",
            )
    return names
