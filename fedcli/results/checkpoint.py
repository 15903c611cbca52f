"""Checkpoints and ``fedcli train --resume RUN_DIR`` (crash safety).

A checkpoint is taken at a round boundary, after the round's evaluation and CSV rows, every
``--checkpoint-every`` rounds and when SIGINT/SIGTERM arrives. It holds everything
:meth:`fedcli.fl.engine.Simulation.run` needs to continue as if it had never stopped:

- the global model (parameters and buffers), the schedule state (FedLAMA intervals and d values),
  the communication ledger, and the config it was taken under;
- per process (a list indexed by rank): the :class:`~fedcli.fl.engine.TrainState` (round, iteration,
  next evaluation, the running train-loss sums, skipped clients, the summary so far), the client store
  (personal models, optimizer moments, control variates, ...), every part's ``state_dict()`` and the
  torch CPU (and CUDA) random-number generator states (dropout under ``vmap`` draws from them);
- the length in bytes and rows of the append-only CSVs (``metrics.csv``, ``intervals.csv``,
  ``skipped.csv``): on resume they are cut back to it, so rows written after the checkpoint are not
  duplicated.

Cohort sampling, mini-batches and augmentation are keyed by (seed, round, client) (``fedcli.fl.rng``)
and need no state. Files are ``RUN_DIR/checkpoints/round-NNNNNN.pt`` (``torch.save``; NNNNNN = rounds
done), written atomically (temporary file in the same folder, flush, fsync, ``os.replace``, fsync of the
folder); the last ``--keep-checkpoints`` are kept. They are read back with ``torch.load(weights_only=True)``:
tensors and plain containers only, so a part's ``state_dict()`` must hold nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import sys
import threading
from pathlib import Path

import torch

from fedcli.config import FIELDS, TrainConfig, flag
from fedcli.errors import ConfigError, DataError, FedcliError
from fedcli.results import sentinel

FORMAT = "fedcli-checkpoint"
VERSION = 1
FOLDER = "checkpoints"
EXPECTED = f"expected a fedcli checkpoint (torch.save of a '{FORMAT}' version {VERSION} dict)"
_NAME = re.compile(r"^round-(\d+)\.pt$")

# Flags that may differ on --resume: they change how the run is executed or guarded, not the experiment.
# (--device and --trainer are allowed but void the bitwise guarantee: other kernels, other rounding.)
RESUME_MAY_CHANGE = {"device", "threads", "workers", "trainer", "checkpoint_every", "keep_checkpoints", "on_diverge", "out"}


class Interrupted(FedcliError):
    """SIGINT/SIGTERM: a checkpoint was written at a round boundary; exit 128 + signal (130, 143)."""

    collective = True  # decided together by every process (see Checkpointer)

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + int(signum)


# ---------------------------------------------------------------------------------------- files
def folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / FOLDER


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(rounds done, path) of every checkpoint of a run directory, oldest first."""
    d = folder(run_dir)
    if not d.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return sorted(out)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def atomic_save(obj, path: str | Path) -> Path:
    """``torch.save`` to a temporary file in the same folder, flush, fsync, ``os.replace``, fsync the folder."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return path


def save(run_dir: str | Path, ckpt: dict, keep: int) -> Path:
    """Write ``ckpt`` atomically as ``checkpoints/round-NNNNNN.pt`` and keep the last ``keep``."""
    d = folder(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = atomic_save(plain(ckpt), d / f"round-{ckpt['round']:06d}.pt")
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    for stale in d.glob(".round-*.pt.tmp*"):  # left by a crash in the middle of a save
        stale.unlink(missing_ok=True)
    _fsync_dir(d)
    return path


def load(path: str | Path) -> dict:
    """Read and check one checkpoint file; any problem is a DataError (exit 3) naming it."""
    path = Path(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DataError(f"{path}: not found; {EXPECTED}") from None
    except Exception as e:  # truncated zip, foreign pickle, objects weights_only refuses
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{path}: cannot be read ({type(e).__name__}: {msg[:200]}); {EXPECTED}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise DataError(f"{path}: not a fedcli checkpoint; {EXPECTED}")
    if ckpt.get("version") != VERSION:
        raise DataError(f"{path}: checkpoint version {ckpt.get('version')!r} is not supported; {EXPECTED}")
    missing = [k for k in ("round", "iteration", "config", "world_size", "global", "schedule", "ledger", "csv", "ranks") if k not in ckpt]
    if missing:
        raise DataError(f"{path}: checkpoint lacks {', '.join(missing)}; {EXPECTED}")
    return ckpt


def load_latest(run_dir: str | Path, warn=None) -> dict | None:
    """The newest readable checkpoint (an unreadable one is reported through ``warn`` and the previous
    one tried); None when the run has none yet; DataError when none of them can be read."""
    found = list_checkpoints(run_dir)
    errors = []
    for _, path in reversed(found):
        try:
            ckpt = load(path)
        except DataError as e:
            errors.append(str(e))
            if warn is not None:
                warn(f"skipping unreadable checkpoint: {e}")
            continue
        ckpt["path"] = str(path)
        return ckpt
    if errors:
        raise DataError(errors[0])
    return None


# ---------------------------------------------------------------------------------------- capture / restore
def rng_state() -> dict:
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = list(torch.cuda.get_rng_state_all())
    return out


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:  # another GPU count: the current device gets the first generator state
            torch.cuda.set_rng_state(cuda[0])


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


def plain(obj):
    """``obj`` with only what ``torch.load(weights_only=True)`` reads back: tensors, dicts, lists, tuples and
    built-in scalars (numpy scalars and str/int/float subclasses such as ``torch.__version__`` are converted,
    numpy arrays become tensors)."""
    import numpy as np

    if isinstance(obj, torch.Tensor) or obj is None:
        return obj
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    for t in (int, float, str, bytes):
        if isinstance(obj, t):
            return t(obj)
    if isinstance(obj, dict):
        return {plain(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj) if type(obj) in (list, tuple) else [plain(v) for v in obj]
    return obj


def capture(sim, state) -> dict | None:
    """The checkpoint of ``sim`` at a round boundary. Collective: every process calls it; the root gets
    the dict (with every process's own state), the others None."""
    from fedcli.results.rundir import versions

    local = {
        "state": dataclasses.asdict(state),
        "store": sim.store.state_dict(),
        "parts": {name: part.state_dict() for name, part in sim.parts.items()},
        "rng": rng_state(),
    }
    ranks = sim.comm.allgather(local)
    if not sim.comm.is_root:
        return None
    return {
        "format": FORMAT,
        "version": VERSION,
        "round": state.round_idx,
        "iteration": state.iteration,
        "config": sim.cfg.to_dict(),
        "world_size": sim.comm.size,
        "versions": versions(),
        "global": {"params": {n: _cpu(t) for n, t in sim.global_params.items()},
                   "buffers": {n: _cpu(t) for n, t in sim.global_buffers.items()}},
        "schedule": sim.schedule.state_dict(),
        "ledger": sim.ledger.state_dict(),
        "csv": sim.run_dir.csv_positions() if sim.run_dir is not None else {},
        "ranks": ranks,
    }


def restore(sim, ckpt: dict):
    """Put ``sim`` (set up with the checkpoint's config) back where ``ckpt`` was taken; returns the TrainState."""
    from fedcli.fl.engine import Summary, TrainState

    where = ckpt.get("path", "checkpoint")
    changed = [k for k, v in ckpt["config"].items() if k not in RESUME_MAY_CHANGE and getattr(sim.cfg, k, v) != v]
    if changed:
        raise DataError(f"{where}: written under another config ({', '.join(flag(k) for k in changed)} differ from "
                        f"the run's manifest.json); {EXPECTED}")
    if ckpt["world_size"] != sim.comm.size:
        raise ConfigError(f"--resume: {where} was written by {ckpt['world_size']} process(es); resume it with the same number "
                          f"(mpirun -n {ckpt['world_size']}), this run has {sim.comm.size}")
    for kind, ours in (("params", sim.global_params), ("buffers", sim.global_buffers)):
        theirs = ckpt["global"][kind]
        if set(theirs) != set(ours) or any(tuple(theirs[n].shape) != tuple(ours[n].shape) for n in ours):
            raise DataError(f"{where}: its model {kind} do not match the model of the run's config; {EXPECTED}")
        for n, t in ours.items():
            t.copy_(theirs[n])
    sim.schedule.load_state_dict(ckpt["schedule"])
    led = ckpt["ledger"]
    if list(led["numel"]) != list(sim.ledger.numel):
        raise DataError(f"{where}: its communication ledger does not match the model; {EXPECTED}")
    sim.ledger.syncs, sim.ledger.bytes_, sim.ledger.extra_bytes = list(led["syncs"]), list(led["bytes"]), float(led["extra_bytes"])
    mine = ckpt["ranks"][sim.comm.rank]
    sim.store.load_state_dict(mine["store"])
    for name, part in sim.parts.items():
        part.load_state_dict(mine["parts"].get(name, {}))
    set_rng_state(mine["rng"])
    saved = dict(mine["state"])
    summary = saved.pop("summary")
    known_s = {f.name for f in dataclasses.fields(Summary)}
    known_t = {f.name for f in dataclasses.fields(TrainState)} - {"summary"}
    return TrainState(**{k: v for k, v in saved.items() if k in known_t},
                      summary=Summary(**{k: v for k, v in summary.items() if k in known_s}))


def save_model(sim, path: str | Path) -> Path:
    """The final global model as a ``state_dict`` (keys in ``model.state_dict()`` order), atomically."""
    state = {}
    for name in sim.model.state_dict().keys():
        src = sim.global_params.get(name)
        if src is None:
            src = sim.global_buffers[name]
        state[name] = _cpu(src)
    return atomic_save(state, path)


# ---------------------------------------------------------------------------------------- the round hook
class Checkpointer:
    """Round hook (``Simulation.round_hooks``): a checkpoint every ``every`` rounds, and at the first round
    boundary after SIGINT/SIGTERM, after which it raises :class:`Interrupted`. Under MPI the processes
    agree on "a signal arrived" with one small all-reduce per round, so all stop at the same boundary."""

    def __init__(self, run_dir: str | Path, every: int, keep: int):
        self.run_dir, self.every, self.keep = Path(run_dir), int(every), int(keep)
        self.pending: int | None = None   # signal number received, not acted upon yet
        self.armed = False                # True while rounds run (a signal before that stops at once)
        self.last: Path | None = None

    def __call__(self, sim, state) -> None:
        stop = self.pending is not None
        if sim.comm.size > 1:
            stop = float(sim.comm.allreduce_(torch.tensor([1.0 if stop else 0.0], dtype=torch.float64))[0]) > 0
        done = sim.done(state) if hasattr(sim, "done") else state.iteration >= sim.cfg.iterations
        if done:
            return  # the run ends now anyway; the final model is written instead
        if stop or (self.every and state.round_idx % self.every == 0):
            self.write(sim, state)
        if stop:
            signum = self.pending or signal.SIGTERM
            where = f"; checkpoint {self.last}" if self.last else ""
            raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name} after round {state.round_idx - 1} "
                                      f"(iteration {state.iteration}){where}; continue with: fedcli train --resume {self.run_dir}")

    def write(self, sim, state) -> None:
        ckpt = capture(sim, state)
        if ckpt is not None:
            self.last = save(self.run_dir, ckpt, self.keep)

    @contextlib.contextmanager
    def signals(self):
        """SIGINT/SIGTERM ask for a checkpoint at the next round boundary; a second one (or one before
        training started) stops at once. Only in the main thread (signal handlers live there)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum, frame):
            if self.pending is not None or not self.armed:
                raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name} before a checkpoint could be written"
                                          + (f"; the last one is {self.last}" if self.last else ""))
            self.pending = signum

        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


# ---------------------------------------------------------------------------------------- --resume
def read_manifest(run_dir: str | Path) -> dict:
    run_dir = Path(run_dir)
    path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise ConfigError(f"--resume {run_dir}: no such folder; expected a run directory written by fedcli train")
    if not path.exists():
        raise ConfigError(f"--resume {run_dir}: it has no manifest.json; expected a run directory written by fedcli train")
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot be read ({e}); expected the JSON manifest of a fedcli run") from None
    if not isinstance(man, dict) or not isinstance(man.get("config"), dict):
        raise DataError(f"{path}: has no 'config' table; expected the JSON manifest of a fedcli run")
    return man


def _alive(pid) -> bool:
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid == os.getpid() or pid <= 0 or not sentinel.alive(pid):
        return False
    try:  # a live pid counts only if it is still a fedcli process (pids are reused)
        return b"fedcli" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def resume_config(run_dir: str | Path, flags: dict, *, recipe=None, scale=None, overwrite: bool = False) -> TrainConfig:
    """The config to continue ``run_dir`` with: its manifest's, plus the ``flags`` that may change
    (:data:`RESUME_MAY_CHANGE`); any other flag that differs is refused (exit 2)."""
    run_dir = Path(run_dir)
    if recipe or scale:
        raise ConfigError("--resume takes the run's config from RUN_DIR/manifest.json; --recipe/--scale cannot be combined with it")
    if overwrite:
        raise ConfigError("--resume continues a run; --overwrite cannot be combined with it")
    man = read_manifest(run_dir)
    status = man.get("status")
    if status == "completed":
        raise ConfigError(f"--resume {run_dir}: the run already completed; nothing to resume")
    pids = [man.get("pid"), *(man.get("pids") or [])]
    live = [p for p in pids if p is not None and _alive(p)] if status == "running" and man.get("host") == socket.gethostname() else []
    if live:
        raise ConfigError(f"--resume {run_dir}: the run is still running (pid {live[0]}); stop it first")
    values = dict(man["config"])
    try:
        cfg = TrainConfig.from_dict(values, where=str(run_dir / "manifest.json"))
    except ConfigError as e:
        raise ConfigError(f"--resume: {e} (written by another fedcli version?)") from None
    for key, value in flags.items():
        if key == "out" and Path(value).resolve() != run_dir.resolve():
            raise ConfigError(f"--out {value} differs from --resume {run_dir}; a resumed run stays in its folder")
        if key in RESUME_MAY_CHANGE:
            setattr(cfg, key, value)
        elif key in FIELDS and getattr(cfg, key) != value:
            raise ConfigError(f"{flag(key)} {value} would change the experiment being resumed (it ran with "
                              f"{flag(key)} {getattr(cfg, key)}); only {', '.join(sorted(flag(k) for k in RESUME_MAY_CHANGE - {'out'}))} may change")
    cfg.out = str(run_dir)
    return cfg.validate()


def load_for_resume(run_dir: str | Path, comm, warn=None) -> dict | None:
    """The latest checkpoint, read by the root and sent to every process (errors raised on all of them)."""
    payload = None
    if comm.is_root:
        try:
            ckpt = load_latest(run_dir, warn)
            from fedcli.results.rundir import APPEND_CSVS, rewind_csvs

            positions = {name: {"bytes": 0, "rows": 0} for name in APPEND_CSVS}
            positions.update(ckpt["csv"] if ckpt is not None else {})
            rewind_csvs(run_dir, positions)  # checked here, so a bad file stops every process
            payload = {"ckpt": ckpt}
        except FedcliError as e:
            payload = {"error": (type(e).__name__, str(e))}
    payload = comm.bcast(payload)
    if "error" in payload:
        kind, msg = payload["error"]
        err = (ConfigError if kind == "ConfigError" else DataError)(msg)
        err.collective = True
        raise err
    return payload["ckpt"]


def reopen_run_dir(run_dir: str | Path, ckpt: dict | None, sim, manifest_updates: dict | None = None):
    """The RunDir of a resumed run: CSVs cut back to the checkpoint (to nothing without one), reopened
    for appending, the manifest back to ``running`` with a ``resumes`` entry, layers.csv as of the checkpoint."""
    from fedcli.results.rundir import (APPEND_CSVS, INTERVALS_COLUMNS, SKIPPED_COLUMNS, AppendCSV, RunDir, git_commit,
                                       now, rewind_csvs, versions)

    run_dir = Path(run_dir)
    positions = {name: {"bytes": 0, "rows": 0} for name in APPEND_CSVS}
    if ckpt is not None:
        positions.update(ckpt["csv"])
    rewind_csvs(run_dir, positions)
    rd = RunDir(run_dir)
    for name, attr, cols in (("intervals.csv", "intervals", INTERVALS_COLUMNS), ("skipped.csv", "skipped", SKIPPED_COLUMNS)):
        if (run_dir / name).exists():
            setattr(rd, attr, AppendCSV(run_dir / name, cols))
    rd.manifest = read_manifest(run_dir)
    entry = {"time": now(), "checkpoint": Path(ckpt["path"]).name if ckpt else None,
             "round": ckpt["round"] if ckpt else 0, "iteration": ckpt["iteration"] if ckpt else 0,
             "host": socket.gethostname(), "pid": os.getpid(), "versions": versions(), "git_commit": git_commit(),
             "command": sys.argv}
    rd.manifest.pop("error", None)
    rd.manifest.pop("summary", None)
    rd.write_manifest(status="running", end_time=None, pid=os.getpid(), host=socket.gethostname(), config=sim.cfg.to_dict(),
                      resumes=list(rd.manifest.get("resumes", [])) + [entry], **(manifest_updates or {}))
    rd.write_layers(sim.layer_rows())
    return rd


def version_drift(manifest: dict) -> list[str]:
    """Packages whose version differs from the ones the run started with (the bitwise guarantee needs none)."""
    from fedcli.results.rundir import versions

    before, now_ = manifest.get("versions") or {}, versions()
    return [f"{k} {before[k]} -> {now_[k]}" for k in sorted(before) if k in now_ and before[k] != now_[k]]
