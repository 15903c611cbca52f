"""A watchdog that marks a run ``failed`` when its training process disappears without closing it.

SIGKILL (the OOM killer, ``kill -9``, an MPI launcher cleaning up after a dead rank) gives a process
no chance to write anything. ``fedcli train`` therefore starts this small process (no torch import)
in its own session; it polls the watched process ids and, when one is gone while ``manifest.json``
still says ``running``, rewrites the manifest atomically with ``status: failed`` and the reason.

Every run starts one, so it starts lean (:func:`start`): ``python -I -S`` runs this file by its path, not as a
module of the ``fedcli`` package, whose import (the API, dataclasses, inspect) took most of its 45 ms of CPU; about
14 ms now. Only when it marks a run failed does it import fedcli (the atomic write), on the starter's ``sys.path``.
Its command line names it: ``python -I -S -c ... fedcli.results.sentinel RUN_DIR PID [PID ...]``.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing's flag without importing typing: the watchdog's start stays lean
if TYPE_CHECKING:
    import subprocess
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
    import json
    from pathlib import Path

    from fedcli.results.rundir import atomic_write, now

    path = Path(run_dir) / "manifest.json"
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


#: how long the watchdog waits, once one of the run's processes is gone while others live, before it marks it failed
GRACE_S = 1.0


def watch(run_dir: Path, pids: list[int], interval: float = 0.25) -> None:
    while True:
        gone = [p for p in pids if not alive(p)]
        if gone:
            if len(gone) < len(pids):  # another of the run's processes (an MPI rank, the pool's parent) may still
                time.sleep(GRACE_S)  # be closing the run: a moment for it to write the final manifest
            # (a process that is gone has written all it will: a run whose processes are all gone is marked at once)
            mark_failed(run_dir, f"process {gone[0]} ended without closing the run (killed?)", pids)
            return
        if not os.path.exists(os.path.join(run_dir, "manifest.json")):
            return
        time.sleep(interval)


#: the watchdog's program: this file loaded by its path (no package import), the folder holding the fedcli package
#: and the starter's ``sys.path`` for the modules it imports when it marks a run failed, then :func:`watch`
_PROGRAM = (
    "import os, sys, importlib.util as u; s = u.spec_from_file_location('fedcli_sentinel', sys.argv[1]); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); sys.path[:0] = sys.argv[2].split(os.pathsep); "
    "m.watch(sys.argv[4], [int(p) for p in sys.argv[5:]])"
)


def start(run_dir: Path, pids: list[int]) -> subprocess.Popen | None:
    """Start the watchdog in its own session, so that a launcher killing the job does not kill it."""
    import subprocess

    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    paths = os.pathsep.join([package_root, *(p for p in sys.path if p and os.pathsep not in p)])
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _PROGRAM, __file__, paths, __name__, str(run_dir), *map(str, pids)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return None


def stop(proc: subprocess.Popen | None) -> None:
    import subprocess

    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    watch(sys.argv[1], [int(p) for p in sys.argv[2:]])
