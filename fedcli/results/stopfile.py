"""The stop file of a run (docs/tuning.md, the contract of ``fedcli tune`` with the engine): ``RUN/stop.json``, written
atomically by whoever asks a running training to stop at its next round boundary (``fedcli tune``'s pruning).

A minimal version for the coordinator's side: the engine's reaction (checkpoint, manifest ``interrupted`` with
``reason: pruned``, exit 5) is provided by the engine's own version of this module.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fedcli.results.rundir import atomic_write
from fedcli.safefs import refuse_link

STOP_FILE = "stop.json"


def request_stop(run_dir, reason: str = "pruned", why: str = "", iteration: int | None = None) -> None:
    """Ask the training in ``run_dir`` to stop at its next round boundary: ``{"reason", "why", "iteration", "at"}``."""
    path = Path(run_dir) / STOP_FILE
    refuse_link(path)
    body = {"reason": reason, "why": why, "iteration": iteration, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write(path, json.dumps(body) + "\n")


def clear_stop(run_dir) -> None:
    path = Path(run_dir) / STOP_FILE
    refuse_link(path)
    path.unlink(missing_ok=True)


def read_stop(run_dir) -> dict | None:
    path = Path(run_dir) / STOP_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
