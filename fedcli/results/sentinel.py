"""A watchdog that marks a run ``failed`` when its training process disappears without closing it.

SIGKILL (the OOM killer, ``kill -9``, an MPI launcher cleaning up after a dead rank) gives a process
no chance to write anything. ``fedcli train`` therefore starts this small process (no torch import)
in its own session; it polls the watched process ids and, when one is gone while ``manifest.json``
still says ``running``, rewrites the manifest atomically with ``status: failed`` and the reason.

Run as ``python -m fedcli.results.sentinel RUN_DIR PID [PID ...]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def mark_failed(run_dir: Path, reason: str, pids: list[int] | None = None) -> bool:
    """Set status failed (only if still running, and, with ``pids``, only if the manifest still names
    those processes: a ``--resume`` that already took over the run is left alone). Returns True if it
    changed the manifest."""
    from fedcli.results.rundir import atomic_write, now

    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("status") != "running":
        return False
    if pids is not None and manifest.get("pids") not in (None, list(pids)):
        return False
    manifest.update(status="failed", end_time=now(), error=reason)
    atomic_write(path, json.dumps(manifest, indent=2, default=str) + "\n")
    return True


def watch(run_dir: Path, pids: list[int], interval: float = 0.25) -> None:
    while True:
        gone = [p for p in pids if not alive(p)]
        if gone:
            # give a process that is exiting normally a moment to write its final manifest
            time.sleep(1.0)
            mark_failed(run_dir, f"process {gone[0]} ended without closing the run (killed?)", pids)
            return
        if not (run_dir / "manifest.json").exists():
            return
        time.sleep(interval)


def start(run_dir: Path, pids: list[int]) -> subprocess.Popen | None:
    """Start the watchdog in its own session, so that a launcher killing the job does not kill it."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "fedcli.results.sentinel", str(run_dir), *map(str, pids)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return None


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    watch(Path(sys.argv[1]), [int(p) for p in sys.argv[2:]])
