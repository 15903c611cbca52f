"""Stopping a run on request: ``RUN/stop.json``, read by the training at every round boundary (the stop-file contract
of ``fedcli tune``'s pruning, issue 58, and of pruning on a cluster's compute nodes, issue 59; docs/reliability.md,
"Stopping on request", and docs/run-directory.md).

Whoever decides that a run should stop (``fedcli tune``'s coordinator when its pruner gives up on a trial, or a person)
calls :func:`request_stop`, which writes ``stop.json`` into the run directory whole (a temporary file renamed over it,
never through a symbolic link: :mod:`fedcli.safefs`)::

    {"reason": "pruned", "why": "...", "iteration": 40, "at": "2026-11-29T05:00:00Z"}

The training (:class:`fedcli.results.signals.Checkpointer`) looks for the file at every round boundary, after the
round's evaluation and CSV rows: one ``lstat`` per round, by rank 0 only (the run directory is rank 0's), and under
MPI the answer travels in the one small all-reduce the round boundary already makes for the stop signals. A request
acts at the first boundary at or after its ``iteration`` (None, or an iteration already passed: the next boundary):
the run writes a checkpoint, closes its manifest ``status: interrupted``, ``reason: pruned``, ``pruned: {iteration,
round, why}``, and exits with :data:`EXIT_PRUNED` (5). A request met at the last round boundary changes nothing: the
run completes. The file stays (it records the request); ``fedcli train --resume RUN --promote`` removes it
(:func:`clear_stop`) and the pruned mark and finishes the run. No torch import: the coordinator uses this module.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fedcli.errors import ConfigError, Pruned, os_error
from fedcli.safefs import atomic_write, fsync_dir

STOP_FILE = "stop.json"
REASONS = ("pruned",)
EXIT_PRUNED = Pruned.exit_code  # 5: stopped on request (pruned), docs/usage.md "Exit codes"


def stop_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / STOP_FILE


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def request_stop(run_dir: str | Path, reason: str = "pruned", why: str = "", iteration: int | None = None) -> dict:
    """Ask the run in ``run_dir`` to stop at its first round boundary at or after local iteration ``iteration`` (None:
    the next one): ``RUN/stop.json`` written atomically (a link there is refused, exit 2). The run folder must exist
    (a request for a run not started yet goes into its folder: a new run accepts a folder that holds only it). Returns
    the request as written."""
    run_dir = Path(run_dir)
    if reason not in REASONS:
        raise ConfigError(f"stop reason {reason!r}: expected one of {', '.join(REASONS)}")
    if iteration is not None and (isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0):
        raise ConfigError(f"stop iteration {iteration!r}: expected a local iteration (an integer >= 0) or None")
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run folder; a stop request goes into the folder of the run it stops")
    record = {"reason": reason, "why": str(why), "iteration": iteration, "at": _utc_now()}
    atomic_write(stop_path(run_dir), json.dumps(record, indent=2) + "\n")
    return record


def stop_requested(run_dir: str | Path) -> bool:
    """Whether anything lies at ``RUN/stop.json``: one ``lstat``, what the training pays per round without a request."""
    return os.path.lexists(stop_path(run_dir))


def read_stop(run_dir: str | Path) -> dict | None:
    """The stop request of ``run_dir`` (None: there is none), as ``{"reason", "why", "iteration", "at"}``.

    The file's presence is the request: a file that is not a well-formed request (written by hand, empty, cut, not a
    JSON object, a field of the wrong type) still stops the run at the next boundary, its ``why`` saying what was wrong
    and ``malformed`` set; a well-formed field of a malformed file is kept."""
    path = stop_path(run_dir)
    try:
        raw = path.read_bytes()  # reading through a link is fine: nothing is written
    except FileNotFoundError:
        return None
    except OSError as e:
        if not os.path.lexists(path):
            return None
        return _malformed({}, f"{path} cannot be read ({e.strerror or type(e).__name__})")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _malformed({}, f"{path} is not JSON ({len(raw)} bytes)")
    if not isinstance(data, dict):
        return _malformed({}, f"{path} holds a JSON {type(data).__name__}, not an object")
    req = {
        "reason": data.get("reason", "pruned"),
        "why": data.get("why", ""),
        "iteration": data.get("iteration"),
        "at": data.get("at"),
    }
    wrong = []
    if req["reason"] not in REASONS:
        wrong.append(f"reason {req['reason']!r} is not one of {', '.join(REASONS)}")
        req["reason"] = "pruned"
    if not isinstance(req["why"], str):
        wrong.append("why is not a string")
        req["why"] = ""
    it = req["iteration"]
    if it is not None and (isinstance(it, bool) or not isinstance(it, int) or it < 0):
        wrong.append(f"iteration {it!r} is not an integer >= 0")
        req["iteration"] = None
    if not isinstance(req["at"], (str, type(None))):
        req["at"] = None
    return _malformed(req, f"{path}: {'; '.join(wrong)}") if wrong else req


def _malformed(req: dict, what: str) -> dict:
    base = {"reason": "pruned", "why": "", "iteration": None, "at": None, **req}
    base["why"] = (
        f"{base['why']} ({what}; stopped on its presence)" if base["why"] else f"{what}; stopped on its presence"
    )
    base["malformed"] = what
    return base


def due(request: dict, iteration: int) -> bool:
    """Whether ``request`` acts at a round boundary at local iteration ``iteration``."""
    at = request.get("iteration")
    return at is None or iteration >= at


def clear_stop(run_dir: str | Path) -> bool:
    """Remove ``RUN/stop.json`` (a link there is removed itself, never what it points to); whether one was there."""
    path = stop_path(run_dir)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise os_error(e, path, "remove") from None
    fsync_dir(path.parent)
    return True
