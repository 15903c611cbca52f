"""The trackers' side of a run directory, readable without any tracker library (``fedcli report`` stays fast).

- ``RUN_DIR/trackers.json`` (written atomically by the trackers' process, ``fedcli.trackers.worker``): ``phase``
  (``logging`` while the training sends, ``finishing`` once it has said how the run ended and the end work runs:
  figures, artifacts, the trackers' own finish; ``done`` when that is over), ``status`` (the run's end as the trackers
  were told), ``pid`` of the trackers' process, and per tracker what a resume needs to continue the same tracker run
  (ids, store) and the last step it holds.
- ``RUN_DIR/.trackers.lock``: held (``flock``) by the trackers' process for its whole life. ``fedcli train`` does not
  wait for the end work: the process finishes it on its own (own session, it outlives the command), and the lock
  tells the next comer whether it still runs. A resume's trackers' process takes the lock before it reads
  ``trackers.json``, so two processes never drive one tracker run; ``--overwrite`` takes it before removing the
  previous run's tracker files. The kernel drops the lock when the process ends in any way.
- ``RUN_DIR/.trackers.pending``: a shared ``flock`` from the moment the training starts a trackers' process until
  that process holds ``.trackers.lock`` (the descriptor is handed to it), so the time a resume's trackers wait for
  an earlier attempt's is never mistaken for "done".
- ``RUN_DIR/trackers.log``: the tracker libraries' own output and every warning.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

STATE_FILE = "trackers.json"
LOG_FILE = "trackers.log"
LOCK_FILE = ".trackers.lock"
PENDING_FILE = ".trackers.pending"
#: what the trackers write inside a run directory (``--overwrite`` removes the previous run's; MLflow's store is
#: wherever ``MLFLOW_TRACKING_URI`` says and is never touched)
FILES = ("tensorboard", "wandb", STATE_FILE, LOG_FILE)
#: the line of the trackers' process that tells the training every tracker has started (any failure said before it)
STARTED = "\x1efedcli-trackers-started"
#: the longest ``--overwrite`` waits for the previous run's trackers to finish before it removes their files
OVERWRITE_WAIT_S = 60.0


def lock(run_dir: Path):
    """The trackers lock of ``run_dir`` (not yet taken); its file goes when its holder releases it."""
    from fedcli.results.lock import FileLock

    class TrackersLock(FileLock):
        def release(self) -> None:
            if self.fd is not None and self._same_file(self.fd):  # as RunLock: removed while still held
                try:
                    self.path.unlink()
                except OSError:
                    pass
            super().release()

    return TrackersLock(Path(run_dir) / LOCK_FILE)


def read(run_dir: Path) -> dict:
    """``trackers.json`` as ``{"phase", "status", "pid", "trackers": {name: saved}}``; ``{}`` when there is none."""
    try:
        data = json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    if "trackers" not in data:  # written before the phases existed ({name: saved}), by a command that waited for them
        data = {"phase": "done", "status": None, "trackers": {k: v for k, v in data.items() if isinstance(v, dict)}}
    return data


def write(run_dir: Path, data: dict) -> None:
    from fedcli.results.rundir import atomic_write

    atomic_write(Path(run_dir) / STATE_FILE, json.dumps(data, indent=1) + "\n")


def pending(run_dir: Path) -> int:
    """A descriptor holding a shared lock on ``RUN_DIR/.trackers.pending`` (for a trackers' process about to start:
    handed to it, closed by it once it holds the trackers lock); raises OSError / LinkRefused when it cannot."""
    import fcntl

    from fedcli.safefs import open_fd

    fd = open_fd(Path(run_dir) / PENDING_FILE, os.O_RDWR | os.O_CREAT, doing="create the lock file")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        raise
    return fd


def _pending_held(run_dir: Path) -> bool:
    import fcntl

    path = Path(run_dir) / PENDING_FILE
    if not path.is_file() or path.is_symlink():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def finishing(run_dir: Path) -> dict | None:
    """The trackers' process that still works on this run directory (its lock file's record; ``{"pending": True}`` for
    one that waits to take over), else None."""
    path = Path(run_dir) / LOCK_FILE
    if path.is_file() and not path.is_symlink():
        probe = lock(run_dir)
        try:
            if not probe.acquire():
                return probe.holder() or {}
            probe.release()
        except Exception:
            return None
    return {"pending": True} if _pending_held(run_dir) else None


def wait(run_dir: Path, timeout: float, poll: float = 0.1) -> bool:
    """Wait at most ``timeout`` seconds for the trackers' process of ``run_dir`` to end; True if none runs now."""
    deadline = time.monotonic() + timeout
    while finishing(run_dir) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def asked(run_dir: Path, manifest: dict | None = None) -> list[str]:
    """The trackers the run's manifest says it was given (``config.tracker``; ``manifest``: already read), [] if none:
    what a run's trackers should hold, whatever became of their process (it may have died before its first write)."""
    if manifest is None:
        try:
            manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
        except (OSError, ValueError):
            return []
    config = manifest.get("config") if isinstance(manifest, dict) else None
    names = config.get("tracker") if isinstance(config, dict) else None
    return [n for n in names.split(",") if n] if isinstance(names, str) else []


def evaluations(run_dir: Path) -> list[int]:
    """The iterations of the run's evaluations (``metrics.csv``; [] when it cannot be read): the steps the trackers
    must hold."""
    import csv

    from fedcli.results.rundir import read_rows

    try:  # whole rows only: a last row cut by a killed run is not an evaluation
        return [int(float(r["iteration"])) for r in read_rows(Path(run_dir) / "metrics.csv")]
    except (OSError, ValueError, KeyError, TypeError, csv.Error):
        return []


def lacking(run_dir: Path, data: dict) -> str:
    """``they hold k of the run's n evaluations`` (``data``: trackers.json as :func:`read` gives it; a tracker's
    ``last_step`` is the last iteration it holds, -1 for none), or "" when they hold every one."""
    evals = evaluations(run_dir)
    steps = [int(s.get("last_step", -1)) for s in data.get("trackers", {}).values() if isinstance(s, dict)]
    held = sum(it <= min(steps, default=-1) for it in evals)
    return f"they hold {held} of the run's {len(evals)} evaluations" if held < len(evals) else ""


def describe(run_dir: Path, manifest: dict | None = None) -> tuple[str, str] | None:
    """(kind, one line) on the trackers of a run, None when it had none. kind: ``working`` (its trackers' process still
    receives the run or finishes it in the background), ``done``, ``done-with-failures`` (a tracker failed: the log
    says why), ``ended-early`` (the process ended before it was done, also before its first write, which left no
    ``trackers.json``: the manifest says which trackers the run has; the line says how many evaluations they lack).
    ``manifest``: the run's, when the caller has read it."""
    data = read(run_dir)
    if not data.get("trackers"):
        names = asked(run_dir, manifest)
        if not names:
            return None
        data = {"phase": None, "status": None, "trackers": {n: {"last_step": -1} for n in names}}
    names = ", ".join(data["trackers"])
    phase, status = data.get("phase"), data.get("status")
    holder = finishing(run_dir)
    if holder is not None:
        if holder.get("pending"):
            return "working", f"trackers ({names}): a new attempt's trackers wait for the previous one's to finish"
        what = "still finishing in the background" if phase == "finishing" else "still receiving the run"
        return "working", (
            f"trackers ({names}): {what} (pid {holder.get('pid', data.get('pid', '?'))}, since "
            f"{holder.get('since', '?')})"
        )
    if phase is None and _training_alive(run_dir):
        return "working", f"trackers ({names}): starting with the run"
    failed = [n for n, s in data["trackers"].items() if isinstance(s, dict) and s.get("failed")]
    off = f"; {', '.join(failed)} failed (see {Path(run_dir) / LOG_FILE})" if failed else ""
    if phase == "done":
        return (
            "done-with-failures" if failed else "done"
        ), f"trackers ({names}): done{f', run {status}' if status else ''}{off}"
    when = f"before it was done (phase {phase})" if phase else "before its first write"
    lack = lacking(run_dir, data)
    return "ended-early", (
        f"trackers ({names}): their process ended {when}{'; ' + lack if lack else ''}; the CSVs "
        f"hold everything, `fedcli train --resume {run_dir}` sends the rest{off}"
    )


def _training_alive(run_dir: Path) -> bool:
    """Whether a live process holds the run directory's lock (its training runs: its trackers may not have begun)."""
    from fedcli.results.lock import held_by_other

    return held_by_other(run_dir) is not None


def remove_files(run_dir: Path, wait_s: float | None = None) -> None:
    """``--overwrite``: the previous run's tracker files inside ``run_dir`` go (a symbolic link is removed as a link,
    nothing it points to; nothing outside ``run_dir``), once no trackers' process of that run works on them any more
    (waits at most ``wait_s`` seconds, default ``OVERWRITE_WAIT_S``, else a ConfigError, exit 2, naming it)."""
    from fedcli.errors import ConfigError
    from fedcli.results.lock import describe as holder_text

    run_dir = Path(run_dir)
    wait_s = OVERWRITE_WAIT_S if wait_s is None else wait_s
    if not any(os.path.lexists(run_dir / n) for n in FILES):
        return
    if (run_dir / LOCK_FILE).is_symlink():  # planted: the link goes, nothing it points to
        (run_dir / LOCK_FILE).unlink()
    held = lock(run_dir)
    deadline = time.monotonic() + wait_s
    while _pending_held(run_dir) or not held.acquire():
        if time.monotonic() >= deadline:
            raise ConfigError(
                f"--overwrite: the trackers of the previous run in {run_dir} are still finishing "
                f"({holder_text(held.holder())}) after {wait_s:g} s; wait for them, then run again",
                key="overwrite",
            )
        time.sleep(0.2)
    try:
        for name in (*FILES, PENDING_FILE):
            path = run_dir / name
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)  # does not follow links inside (they are unlinked)
    finally:
        held.release()
