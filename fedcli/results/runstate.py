"""One truth about a run's state: :func:`run_state` decides it for ``fedcli sweep`` (what to run, skip or resume),
``fedcli sweep --dry-run``, ``fedcli report`` (what a table may be built from) and anything else that asks.

The states (the words every command prints):

- ``done``: ``manifest.json`` says ``completed``, its config is the expected one (``out``, ``threads`` and ``workers``
  aside) and its files pass the report's checks (:func:`fedcli.results.validate.validate_run`);
- ``stale``: the run was written with another config than the one expected (the recipe changed, or the folder was
  replaced by a ``fedcli train --overwrite`` with other flags), whatever its status; the flags that differ are named.
  So is a run whose ``--system-trace`` or ``--availability-trace`` file changed since it read it (the sha256 its
  manifest recorded is not the file's now, :func:`trace_diff`): the same option, other values;
- ``corrupt``: completed, but its files do not match its manifest (cut, edited, deleted), or the manifest cannot
  be read;
- ``failed``, ``interrupted``: as the manifest says (``failed`` includes a run that diverged, :attr:`RunState.diverged`,
  which reports show as far as it got); :attr:`RunState.resumable` when it left a checkpoint;
- ``pruned``: the manifest says ``interrupted`` with ``reason: pruned`` (stopped on request, exit 5:
  fedcli/results/stopfile.py); the reason says where and why and that ``--promote`` finishes it. Never resumable: a
  sweep keeps it as it stands;
- ``running``: the manifest says ``running``; the reason says whether a live process holds the run's lock or the
  process ended without closing the manifest (killed);
- ``missing``: no manifest.

Expected config: a dict (``fedcli sweep`` plans it from the recipe; ``sweep.json`` records it per run), else the
recorded ``config_hash`` of ``sweep.json`` (older sweep manifests), else nothing (no staleness check).
No torch import: reports use this.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

DONE, STALE, CORRUPT = "done", "stale", "corrupt"
COMPLETED, RUNNING, FAILED, INTERRUPTED, MISSING = "completed", "running", "failed", "interrupted", "missing"
PRUNED = "pruned"

#: config keys that do not change what a run computes (where it writes, how many CPU threads or worker processes, which
#: experiment trackers it also reports to)
NEUTRAL_KEYS = ("out", "threads", "workers", "tracker")

# Flags that may differ on --resume: they change how the run is executed or guarded, not the experiment (read by
# fedcli train's --resume check before torch loads, and by the checkpoint's check).
# (--device and --trainer are allowed but void the bitwise guarantee: other kernels, other rounding.)
RESUME_MAY_CHANGE = {
    "device",
    "threads",
    "workers",
    "trainer",
    "client_cache_mb",
    "client_state_keep",
    "cohort_chunk",
    "checkpoint_every",
    "keep_checkpoints",
    "on_diverge",
    "diverge_factor",
    "out",
    "tracker",
}


def config_hash(cfg: dict) -> str:
    core = {k: v for k, v in sorted(cfg.items()) if k not in NEUTRAL_KEYS}
    return hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_diff(expected: dict, recorded: dict) -> list[str]:
    """The keys whose recorded value is not the expected one (neutral keys aside).

    Keys the recorded config lacks (a field added to fedcli after the run) are not held against it;
    ``clients`` is decided by a partition file when one is given."""
    out = []
    for k, v in expected.items():
        if k in NEUTRAL_KEYS or k not in recorded:
            continue
        if k == "clients" and expected.get("partition_file"):
            continue
        if recorded[k] != v and not _moved_with_run(v, recorded[k], expected.get("out"), recorded.get("out")):
            out.append(k)
    return out


def _moved_with_run(expected, recorded, expected_out, recorded_out) -> bool:
    """Whether two absolute paths (a data folder, a partition or trace file) are one path moved along with the run
    directory: the same relative to where the run was recorded (its absolute ``out``) and to where it is expected now
    (a checkout moved with its results and data, swept again from where it is)."""
    if (
        not all(isinstance(p, str) and os.path.isabs(p) for p in (expected, recorded, recorded_out))
        or not isinstance(expected_out, str)
        or not expected_out
    ):
        return False
    here = os.path.abspath(expected_out)
    return here != recorded_out and os.path.relpath(expected, here) == os.path.relpath(recorded, recorded_out)


#: sha256 of a trace file by its identity and version (path, device, inode, size, mtime, ctime): hashed once per process
_TRACE_DIGESTS: dict[tuple, str] = {}


def _trace_sha256(path: str, key: str) -> str | None:
    """The sha256 of the trace file ``path`` (option ``key``) now; None when it cannot be read (not held against a run:
    a sweep refuses it before it trains, a report has no other file to compare)."""
    from fedcli.errors import FedcliError
    from fedcli.userfiles import TRACE_LIMIT, read_input

    try:
        st = os.stat(path)
    except OSError:
        return None
    version = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if version not in _TRACE_DIGESTS:
        try:
            data = read_input(path, _flag(key), TRACE_LIMIT, key=key)
        except FedcliError:
            return None
        _TRACE_DIGESTS[version] = hashlib.sha256(data).hexdigest()
    return _TRACE_DIGESTS[version]


def trace_diff(expected: dict, manifest: dict) -> list[tuple[str, str, str]]:
    """``(option, sha256 recorded, sha256 now)`` of each trace the ``expected`` config names (``--system-trace``,
    ``--availability-trace``, with ``--system``) whose file is not the one the run read: its sha256 differs from the
    one the manifest recorded (``system.trace``, ``system.availability_trace``). A file is hashed only when the config
    names it and the manifest recorded its digest, once per version of the file in a process."""
    if not expected.get("system") or not (expected.get("system_trace") or expected.get("availability_trace")):
        return []
    from fedcli.specs.system import TRACE_ENTRIES  # no torch

    system = manifest.get("system") if isinstance(manifest.get("system"), dict) else {}
    out = []
    for key, entry in TRACE_ENTRIES.items():
        was = system.get(entry).get("sha256") if isinstance(system.get(entry), dict) else None
        if not expected.get(key) or not isinstance(was, str):
            continue
        now = _trace_sha256(str(expected[key]), key)
        if now is not None and now != was:
            out.append((key, was, now))
    return out


def config_matches(expected: dict, recorded: dict) -> bool:
    """True when a run directory's recorded config is the expected one (see :func:`config_diff`)."""
    return not config_diff(expected, recorded)


def read_manifest(run_dir: str | Path) -> tuple[str, dict | None]:
    """(status, manifest) of a run directory; status is ``missing`` or ``corrupt`` when unreadable."""
    f = Path(run_dir) / "manifest.json"
    if not f.exists():
        return MISSING, None
    try:
        m = json.loads(f.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return CORRUPT, None
    if not isinstance(m, dict):
        return CORRUPT, None
    status = m.get("status")
    return (status if status in (COMPLETED, RUNNING, FAILED, INTERRUPTED) else CORRUPT), m


@dataclass
class RunState:
    state: str  # done | stale | corrupt | failed | interrupted | pruned | running | missing
    reason: str | None = None  # why, in a few words (None for done and missing)
    manifest: dict | None = field(default=None, repr=False)
    resumable: bool = False  # stopped early with the expected config and left a checkpoint
    diverged: bool = False  # failed because training diverged (exit 4): a result, reported as far as it got

    def words(self) -> str:
        """The verdict as every command prints it: ``stale: completed with another config: --lr 0.5 where 0.2 is
        expected; ...``, ``damaged: metrics.csv ends in the middle of a row ...``, ``missing``."""
        label = "damaged" if self.state == CORRUPT else self.state
        return f"{label}: {self.reason}" if self.reason else label


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _has_checkpoint(run_dir: Path) -> bool:
    ckpts = run_dir / "checkpoints"
    try:
        return ckpts.is_dir() and any(p.name.startswith("round-") and p.name.endswith(".pt") for p in ckpts.iterdir())
    except OSError:
        return False


def _lock_holder(run_dir: Path) -> dict | None:
    """Who holds the run's lock now (None: nobody). Probed with a *shared* lock, which writes nothing into the file
    and fails only while a writer holds it, so asking about a run's state never changes the run folder."""
    from fedcli.results.lock import RUN_LOCK, FileLock

    path = run_dir / RUN_LOCK
    if not path.is_file():
        return None
    probe = FileLock(path, shared=True)
    try:
        if probe.acquire():
            probe.release()
            return None
    except Exception:
        return None
    return probe.holder() or {}


def resume_command(run_dir, world_size: int = 1, launcher: str = "mpi") -> str:
    """The command that continues ``run_dir`` (a checkpoint only resumes with the process count that wrote it):
    under MPI with as many processes; a ``--workers`` run starts as many workers itself (``--workers 0``)."""
    if world_size > 1 and launcher == "mpi":
        return f"mpiexec -n {world_size} {sys.executable} -m mpi4py -m fedcli train --resume {run_dir}"
    return f"fedcli train --resume {run_dir}"


def manifest_resume_command(run_dir: str | Path, manifest: dict) -> str:
    """:func:`resume_command` for the run whose manifest is ``manifest`` (its process count and launcher)."""
    world = int(manifest.get("world_size") or 1)
    launcher = "mpi" if world > 1 and int(manifest.get("workers") or 1) <= 1 else "workers"
    return resume_command(run_dir, world, launcher)


def killed_note(run_dir: str | Path, manifest: dict | None, how: str | None = None, probe: bool = True) -> str | None:
    """What happened to a run whose manifest still says ``running`` while no process holds its lock (None for any
    other run): it was killed together with its watchdog (``fedcli.results.sentinel``, which otherwise marks such a
    run failed), e.g. SIGKILL to the job's whole process group or cgroup, so nothing closed the manifest. One sentence
    for ``fedcli report``, ``fedcli sweep`` and ``fedcli train --resume``: who held the run, and how to go on. Reads
    only (the lock is probed shared: nothing in the run folder changes). ``how``: what comes next, in place of the
    advice; ``probe`` False: the caller holds the lock itself (a resume that took the run over)."""
    from fedcli.results.lock import RUN_LOCK, FileLock

    run_dir = Path(run_dir)
    if (
        not isinstance(manifest, dict)
        or manifest.get("status") != RUNNING
        or (probe and _lock_holder(run_dir) is not None)
    ):
        return None
    last = FileLock(run_dir / RUN_LOCK).holder() if probe and (run_dir / RUN_LOCK).is_file() else None
    pids = manifest.get("pids") or ([last["pid"]] if last and last.get("pid") else [])
    who = f"process{'es' if len(pids) > 1 else ''} {', '.join(map(str, pids))}" if pids else "its process"
    since = f" (started {manifest.get('start_time')})" if manifest.get("start_time") else ""
    how = how or (
        f"continue from its last checkpoint with: {manifest_resume_command(run_dir, manifest)}"
        if _has_checkpoint(run_dir)
        else "it left no checkpoint: run it again (fedcli train --overwrite, or the sweep)"
    )
    return (
        f"killed: manifest.json still says running, but {who}{since} ended and no process holds its lock "
        f"(the run and its watchdog were killed together, e.g. SIGKILL to the job's process group); {how}"
    )


def _stale_note(status: str, m: dict, expected: dict | None, expected_hash: str | None) -> str | None:
    """Why the run is stale: its recorded config differs from the ``expected`` one (or its hash), or a trace file it
    read changed since; None when neither."""
    recorded = m.get("config") if isinstance(m.get("config"), dict) else {}
    if expected is not None:
        diff = config_diff(expected, recorded)
    elif expected_hash is not None:
        diff = [] if config_hash(recorded) == expected_hash else ["config"]
    else:
        diff = []
    if diff:
        what = (
            "another config"
            if diff == ["config"]
            else f"another config: "
            f"{', '.join(f'{_flag(k)} {recorded[k]} where {expected[k]} is expected' for k in diff[:3])}"
            + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")
        )
        return f"{status} with {what}; the recipe changed or the folder was overwritten"
    changed = trace_diff(expected, m) if expected is not None else []
    if changed:
        what = "; ".join(
            f"{_flag(k)} {expected[k]} changed since the run read it (sha256 {was[:12]}... then, {now[:12]}... now)"
            for k, was, now in changed
        )
        return f"{status} with another trace: {what}"
    return None


def run_state(run_dir: str | Path, expected: dict | None = None, expected_hash: str | None = None) -> RunState:
    """The state of the run in ``run_dir`` against the ``expected`` config (or its ``expected_hash``)."""
    from fedcli.results.validate import diverged, pruned, validate_run

    run_dir = Path(run_dir)
    status, m = read_manifest(run_dir)
    if status == MISSING:
        return RunState(MISSING)
    if status == CORRUPT:
        why = "manifest.json cannot be read" if m is None else f"manifest.json has status {m.get('status')!r}"
        return RunState(CORRUPT, why, m)
    stale = _stale_note(status, m, expected, expected_hash)
    if stale:
        return RunState(STALE, stale, m)
    if status == COMPLETED:
        damage = validate_run(run_dir, m)
        if damage:
            return RunState(CORRUPT, damage[0], m)
        return RunState(DONE, None, m)
    if status == RUNNING:
        holder = _lock_holder(run_dir)
        if holder is not None:
            from fedcli.results.lock import describe

            return RunState(RUNNING, f"in progress ({describe(holder)})", m)
        return RunState(
            RUNNING,
            killed_note(run_dir, m) or "stopped without closing its manifest (killed?)",
            m,
            resumable=_has_checkpoint(run_dir),
        )
    if status == FAILED and diverged(m):
        damage = validate_run(run_dir, m)
        if damage:
            return RunState(CORRUPT, damage[0], m)
        return RunState(
            FAILED, str(m.get("error") or "training diverged"), m, resumable=_has_checkpoint(run_dir), diverged=True
        )
    if status == INTERRUPTED and (where := pruned(m)) is not None:
        return RunState(PRUNED, pruned_note(run_dir, m, where), m)
    return RunState(status, str(m["error"]) if m.get("error") else None, m, resumable=_has_checkpoint(run_dir))


def refuse_pruned(run_dir: str | Path, manifest: dict | None) -> None:
    """``--resume`` of a pruned run without ``--promote``: refused (ConfigError, exit 2, one line saying where it was
    pruned and the command that finishes it); any other run passes."""
    from fedcli.errors import ConfigError
    from fedcli.results.validate import pruned

    where = pruned(manifest)
    if where is None:
        return
    at = f" at iteration {where['iteration']}" if "iteration" in where else ""
    why = f" ({where['why']})" if where.get("why") else ""
    raise ConfigError(
        f"--resume {run_dir}: the run was pruned{at}{why} and is kept as it stands; --promote finishes "
        f"it: {manifest_resume_command(run_dir, manifest)} --promote"
    )


def pruned_note(run_dir: str | Path, manifest: dict, where: dict) -> str:
    """Where and why a pruned run stopped, and the command that finishes it (one phrase, :class:`RunState`'s reason)."""
    at = f"at iteration {where['iteration']} (round {where.get('round')})" if "iteration" in where else "on request"
    why = f": {where['why']}" if where.get("why") else ""
    return f"{at}{why}; kept as it stands; {manifest_resume_command(run_dir, manifest)} --promote finishes it"
