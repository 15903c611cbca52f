"""Checkpoints and ``fedcli train --resume RUN_DIR`` (crash safety).

A checkpoint is taken at a round boundary, after the round's evaluation and CSV rows, every
``--checkpoint-every`` rounds and when SIGINT/SIGTERM/SIGHUP (or SIGUSR1) arrives; a second signal stops the round in progress
and writes the last round boundary, kept in memory for that (:class:`Checkpointer`). It holds everything
:meth:`fedcli.fl.engine.Simulation.run` needs to continue as if it had never stopped:

- the global model (parameters and buffers), the schedule state (FedLAMA intervals and d values),
  the communication ledger, and the config it was taken under;
- per process (a list indexed by rank): the :class:`~fedcli.fl.engine.TrainState` (round, iteration,
  next evaluation, the running train-loss sums, skipped clients, the summary so far), the client store
  (personal models, optimizer moments, control variates, ...), every part's ``state_dict()`` and the
  torch CPU (and CUDA) random-number generator states (dropout under ``vmap`` draws from them);
- the length in bytes and rows of the append-only CSVs (``metrics.csv``, ``intervals.csv``,
  ``skipped.csv``, ``clients.csv``): on resume they are cut back to it, so rows written after the checkpoint are not
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
from fedcli.fl.hooks import RoundHook
from fedcli.results.runstate import resume_command  # noqa: F401 - where the commands that print it look it up
from fedcli.safefs import make_dir, open_file, refuse_link, replace

FORMAT = "fedcli-checkpoint"
VERSION = 1
FOLDER = "checkpoints"
EXPECTED = f"expected a fedcli checkpoint (torch.save of a '{FORMAT}' version {VERSION} dict)"
_NAME = re.compile(r"^round-(\d+)\.pt$")

# Flags that may differ on --resume: they change how the run is executed or guarded, not the experiment.
# (--device and --trainer are allowed but void the bitwise guarantee: other kernels, other rounding.)
RESUME_MAY_CHANGE = {"device", "threads", "workers", "trainer", "client_cache_mb", "client_state_keep", "cohort_chunk", "checkpoint_every", "keep_checkpoints", "on_diverge",
                     "diverge_factor", "out", "tracker"}


#: the signals a training handles (see :meth:`Checkpointer.signals`): SIGHUP (the terminal closed) is a stop like
#: SIGTERM; SIGUSR1 (a scheduler's time-limit warning) a checkpoint at the next round boundary, then the same stop
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


class Interrupted(FedcliError):
    """SIGINT/SIGTERM/SIGHUP/SIGUSR1: a checkpoint was written at a round boundary; exit 128 + signal (130, 143, 129,
    138)."""

    collective = True  # decided together by every process (see Checkpointer)

    def __init__(self, signum: int, message: str, now: bool = False):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + int(signum)
        self.now = now  # stopped mid-round (a second signal): the last round boundary is still to be written


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
    """``torch.save`` to a temporary file in the same folder, flush, fsync, ``os.replace``, fsync the folder.

    The object is serialized in memory first, so a full disk surfaces as one clean ``OSError`` of the write
    (torch's zip writer would turn it into a RuntimeError); it becomes a one-line error naming the file, and
    the previous file (and every older checkpoint) stays as it was."""
    import io

    from fedcli.errors import os_error

    path = refuse_link(path)
    buf = io.BytesIO()
    torch.save(obj, buf)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open_file(tmp, "wb", name=path) as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        replace(tmp, path)
    except OSError as e:
        raise os_error(e, path) from None
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return path


def save(run_dir: str | Path, ckpt: dict, keep: int) -> Path:
    """Write ``ckpt`` atomically as ``checkpoints/round-NNNNNN.pt`` and keep the last ``keep``."""
    d = make_dir(folder(run_dir))
    obj = plain(ckpt)
    obj["digests"] = digests(obj)
    path = atomic_save(obj, d / f"round-{ckpt['round']:06d}.pt")
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    for stale in d.glob(".round-*.pt.tmp*"):  # left by a crash in the middle of a save
        stale.unlink(missing_ok=True)
    _fsync_dir(d)
    return path


def _tensor_digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes."""
    import hashlib

    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel():
        h.update(t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def digests(ckpt: dict) -> dict:
    """What :func:`verify` checks a checkpoint against: the sha256 of every tensor (by its place in the checkpoint,
    ``ranks/0/store/...``) and of everything else (the run state: round, loop state, config, CSV lengths, ...),
    taken from the object written, so a bit changed on disk afterwards is found on resume."""
    import hashlib

    tensors: dict[str, str] = {}

    def skeleton(obj, where: str):
        if isinstance(obj, torch.Tensor):
            tensors[where] = _tensor_digest(obj)
            return ("tensor", where)
        if isinstance(obj, dict):
            return {k: skeleton(v, f"{where}/{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(skeleton(v, f"{where}/{i}") for i, v in enumerate(obj))
        return obj

    rest = skeleton({k: v for k, v in ckpt.items() if k not in ("digests", "path")}, "")
    return {"algorithm": "sha256", "tensors": tensors, "state": hashlib.sha256(repr(rest).encode()).hexdigest()}


def verify(ckpt: dict, path: Path) -> None:
    """A checkpoint whose tensors or run state do not match the digests written with it is a DataError naming the
    file and the first tensor that differs (a storage fault, never taken for a property of the method)."""
    want = ckpt.get("digests")
    if not isinstance(want, dict) or "tensors" not in want or "state" not in want:
        raise DataError(f"{path}: holds no digests, so it cannot be verified (written by an older fedcli, or damaged); "
                        f"{EXPECTED}")
    got = digests(ckpt)
    bad = [k for k in sorted(set(want["tensors"]) | set(got["tensors"])) if want["tensors"].get(k) != got["tensors"].get(k)]
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise DataError(f"{path}: tensor {bad[0].lstrip('/')}{more} does not match the digest written with the checkpoint "
                        f"(the file changed after it was written: a storage fault or an edit); {EXPECTED}")
    if want["state"] != got["state"]:
        raise DataError(f"{path}: its run state (round, loop state, config, CSV lengths) does not match the digest written "
                        f"with the checkpoint (the file changed after it was written); {EXPECTED}")


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
    verify(ckpt, path)
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
                warn(f"skipping a damaged checkpoint, trying the one before it: {e}")
            continue
        ckpt["path"] = str(path)
        return ckpt
    if errors:
        more = f" (and {len(errors) - 1} older checkpoint(s) damaged too)" if len(errors) > 1 else ""
        raise DataError(f"no intact checkpoint to resume from: {errors[0]}{more}")
    return None


# ---------------------------------------------------------------------------------------- capture / restore
class CudaGenerators:
    """This process's CUDA random generators (``torch.cuda``'s), the one place a checkpoint touches them. A CPU test
    hands :func:`rng_state` and :func:`set_rng_state` a stand-in with a stated device count and fake states
    (tests/comm/test_cuda_branches.py): what is saved, kept in the file and given back is then checked without a GPU."""

    def states(self) -> list[torch.Tensor] | None:
        """Every device's generator state, or None where CUDA has not started in this process."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return list(torch.cuda.get_rng_state_all())
        return None

    def count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def current(self) -> int:
        return torch.cuda.current_device()

    def set(self, index: int, state: torch.Tensor) -> None:
        torch.cuda.set_rng_state(state, index)


#: the generators :func:`rng_state` and :func:`set_rng_state` read and set (a test swaps in a stand-in)
CUDA = CudaGenerators()


def rng_state(cuda: CudaGenerators | None = None) -> dict:
    """The random generators' states a checkpoint keeps: torch's CPU generator and, once CUDA has started, every CUDA
    device's (``cuda``: the generators, :data:`CUDA` by default)."""
    out = {"torch": torch.get_rng_state()}
    states = (cuda or CUDA).states()
    if states:
        out["cuda"] = [s.clone() for s in states]
    return out


def cuda_restore(saved: list, count: int, current: int) -> dict[int, torch.Tensor]:
    """Which device's generator gets which saved state: device i the state of device i when the process sees as many
    devices as saved them; another count: the current device the first state (the others start as they do)."""
    if not saved or count == 0:
        return {}
    if len(saved) == count:
        return dict(enumerate(saved))
    return {current: saved[0]}


def set_rng_state(state: dict, cuda: CudaGenerators | None = None) -> None:
    """Put back the generators' states of :func:`rng_state` (the CUDA ones as :func:`cuda_restore` deals them)."""
    cuda = cuda or CUDA
    torch.set_rng_state(state["torch"])
    saved = state.get("cuda")
    count = cuda.count() if saved else 0
    for index, s in cuda_restore(saved or [], count, cuda.current() if count else 0).items():
        cuda.set(index, s)


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


def _copy(obj):
    """``obj`` with its tensors cloned and its containers rebuilt, so later in-place updates do not reach it."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v) for v in obj) if type(obj) in (list, tuple) else [_copy(v) for v in obj]
    return obj


def local_state(sim, state, copy: bool = False) -> dict:
    """This process's part of a checkpoint: TrainState, client store, parts, random-generator states.

    ``copy``: a snapshot to be written later (parts' tensors cloned; the client store is copied table by table,
    which suffices because :class:`~fedcli.fl.store.MemoryStore` replaces a client's tensors, never edits them; a
    :class:`~fedcli.fl.store.DiskStore` gives its index, a copy, and never rewrites a row a checkpoint refers to)."""
    parts = {name: part.state_dict() for name, part in sim.parts.items()}
    return {"state": dataclasses.asdict(state), "store": sim.store.state_dict(root=sim.comm.is_root),
            "parts": _copy(parts) if copy else parts,
            "rng": rng_state()}


def global_state(sim, state) -> dict:
    """The part of a checkpoint every process shares that changes from round to round (the root writes it):
    model, schedule, ledger, CSV lengths."""
    return {
        "round": state.round_idx,
        "iteration": state.iteration,
        "global": {"params": {n: _cpu(t) for n, t in sim.global_params.items()},
                   "buffers": {n: _cpu(t) for n, t in sim.global_buffers.items()}},
        "schedule": _copy(sim.schedule.state_dict()),
        "ledger": _copy(sim.ledger.state_dict()),
        "csv": sim.run_dir.csv_positions() if sim.run_dir is not None else {},
    }


def run_facts(sim) -> dict:
    """The part of a checkpoint that is the same all run long: format, config, process count, versions."""
    from fedcli.results.rundir import versions

    return {"format": FORMAT, "version": VERSION, "config": sim.cfg.to_dict(), "world_size": sim.comm.size,
            "launcher": sim.comm.launcher, "versions": versions()}


def capture(sim, state) -> dict | None:
    """The checkpoint of ``sim`` at a round boundary. Collective: every process calls it; the root gets
    the dict (with every process's own state), the others None."""
    ranks = sim.comm.allgather(local_state(sim, state))
    if not sim.comm.is_root:
        return None
    return {**run_facts(sim), **global_state(sim, state), "ranks": ranks}


def restore(sim, ckpt: dict):
    """Put ``sim`` (set up with the checkpoint's config) back where ``ckpt`` was taken; returns the TrainState."""
    from fedcli.fl.engine import Summary, TrainState

    where = ckpt.get("path", "checkpoint")
    check_config(ckpt, sim.cfg.to_dict())
    check_world_size(ckpt, sim.comm.size, sim.cfg.out)
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
    sim.store.load_state_dict(mine["store"], ckpt["ranks"][0]["store"])  # tables every process holds: in the root's
    for name, part in sim.parts.items():
        part.load_state_dict(mine["parts"].get(name, {}))
    set_rng_state(mine["rng"])
    saved = dict(mine["state"])
    summary = saved.pop("summary")
    known_s = {f.name for f in dataclasses.fields(Summary)}
    known_t = {f.name for f in dataclasses.fields(TrainState)} - {"summary"}
    return TrainState(**{k: v for k, v in saved.items() if k in known_t},
                      summary=Summary(**{k: v for k, v in summary.items() if k in known_s}))


def check_config(ckpt: dict, config: dict) -> None:
    """A checkpoint taken under another experiment than ``config`` (the run's manifest) is refused (exit 3)."""
    changed = [k for k, v in ckpt["config"].items() if k not in RESUME_MAY_CHANGE and k in config and config[k] != v]
    if changed:
        raise DataError(f"{ckpt.get('path', 'checkpoint')}: written under another config ({', '.join(flag(k) for k in changed)} "
                        f"differ from the run's manifest.json), so it belongs to another run; {EXPECTED}")


def check_world_size(ckpt: dict, size: int, run_dir) -> None:
    if ckpt["world_size"] != size:
        raise ConfigError(f"--resume: {ckpt.get('path', 'the checkpoint')} was written by {ckpt['world_size']} process(es), this "
                          f"run has {size}; resume it with: {resume_command(run_dir, ckpt['world_size'], ckpt.get('launcher', 'mpi'))}")


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
class Checkpointer(RoundHook):
    """Round hook (``Simulation.round_hooks``): a checkpoint every ``every`` rounds, and stopping on signals.

    - The first SIGINT/SIGTERM/SIGHUP (or SIGUSR1, which never escalates) is announced at once (``notify``) and acted upon at the next round boundary: a
      checkpoint, then :class:`Interrupted`. Under MPI the processes agree on "a signal arrived" with one small
      all-reduce per round, so all stop at the same boundary.
    - A second signal stops the round in progress (one process: at once; under MPI: after the current local
      step, agreed by a one-number all-reduce per step, :meth:`step`). At every round boundary that is not
      written to disk the hook keeps a snapshot of that boundary in memory (model, parts, client-store tables,
      loop state: one model copy), and a stop mid-round writes it: at most the round in progress is lost, also
      when no periodic checkpoint exists yet.
    - A signal during the last round lets the run complete; :attr:`late` records it for the closing message.
    """

    active: "Checkpointer | None" = None   # the Checkpointer of the training running in this process

    def __init__(self, run_dir: str | Path, every: int, keep: int, world_size: int = 1, notify=None, launcher: str = "mpi"):
        self.run_dir, self.every, self.keep = Path(run_dir), int(every), int(keep)
        self.world_size, self.launcher = int(world_size), launcher
        self.notify = notify                # prints a one-line notice (root only), or None
        self.pending: int | None = None     # signal number received, not acted upon yet
        self.now = False                    # a second signal: stop the round in progress
        self.stopping = False               # writing the last checkpoint on the way out: further signals wait
        self.armed = False                  # True while rounds run (a signal before that stops at once)
        self.last: Path | None = None
        self.last_round = 0                 # rounds done in the checkpoint ``last``
        self.rounds_done = 0                # rounds done at the last boundary
        self.snapshot: tuple | None = None  # (rounds done, global part or None, local part) of the last boundary
        self.late: int | None = None        # a signal that arrived during the last round

    def __call__(self, sim, state) -> None:
        stop = self.pending is not None
        if sim.comm.size > 1:
            stop = float(sim.comm.allreduce_(torch.tensor([1.0 if stop else 0.0], dtype=torch.float64))[0]) > 0
        if sim.done(state):
            if stop:
                self.late = self.pending or signal.SIGTERM
            self.rounds_done = state.round_idx
            return  # the run ends now anyway; the final model is written instead
        snapshot = None
        if stop:  # the boundary a stop waited for: a further signal (Slurm's srun passes the time limit's SIGTERM on
            self.stopping = True  # as well) waits for this checkpoint instead of cutting it short
        if stop or (self.every and state.round_idx % self.every == 0):
            self.write(sim, state)
        else:
            snapshot = (state.round_idx, global_state(sim, state) if sim.comm.is_root else None, local_state(sim, state, copy=True))
        # only now (a signal may interrupt the lines above): this boundary is the one a stop mid-round falls back to
        self.snapshot, self.rounds_done = snapshot, state.round_idx
        if stop:
            signum = self.pending or signal.SIGTERM
            raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name} after round {state.round_idx} "
                                      f"(iteration {state.iteration}); {self.holds()}; continue with: "
                                      f"{resume_command(self.run_dir, self.world_size, self.launcher)}")

    def step(self, sim, state) -> None:
        """Step hook under MPI: every process learns, after each local step, whether a second signal arrived."""
        now = float(sim.comm.allreduce_(torch.tensor([1.0 if self.now else 0.0], dtype=torch.float64))[0]) > 0
        if now:
            self.stopping = True
            raise Interrupted(self.pending or signal.SIGTERM, "stopped mid-round", now=True)

    def write(self, sim, state) -> None:
        ckpt = capture(sim, state)
        if ckpt is not None:
            self.last = save(self.run_dir, ckpt, self.keep)
        sim.store.pin(state.round_idx, self.keep)  # a disk store keeps the files this checkpoint refers to
        self.last_round = state.round_idx

    def write_snapshot(self, sim) -> None:
        """After a stop mid-round (collective): write the last round boundary if no checkpoint holds it yet."""
        snap = self.snapshot
        if snap is None or snap[0] <= self.last_round:
            return
        ranks = sim.comm.allgather(snap[2])
        if snap[1] is not None:
            self.last = save(self.run_dir, {**run_facts(sim), **snap[1], "ranks": ranks}, self.keep)
        sim.store.pin(snap[0], self.keep)
        self.last_round, self.snapshot = snap[0], None

    def holds(self) -> str:
        if self.last is None:
            return "no checkpoint yet (a resume starts over)"
        return f"checkpoint {self.last} holds rounds 1-{self.last_round}" if self.last_round > 1 else f"checkpoint {self.last} holds round 1"

    def stopped_now(self, signum: int) -> "Interrupted":
        """The error of a stop mid-round, once :meth:`write_snapshot` ran."""
        name = signal.Signals(signum).name
        lost = f"round {self.rounds_done + 1} is lost"
        return Interrupted(signum, f"interrupted by {name} during round {self.rounds_done + 1} (stopped at once, {lost}); "
                                   f"{self.holds()}; continue with: {resume_command(self.run_dir, self.world_size, self.launcher)}")

    @contextlib.contextmanager
    def signals(self):
        """SIGINT/SIGTERM/SIGHUP/SIGUSR1: the first is announced and acted upon at the next round boundary, a second one stops
        the round in progress (see the class); one before training started stops at once. Only in the main
        thread (signal handlers live there)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        queued: list[int] = []  # signals that arrived while the handler was still at work

        def handler(signum, frame):
            # Python runs a handler between any two bytecodes, also inside this handler while it prints its notice
            # (which may import a module lazily: a signal landing mid-import left that module half-initialized and
            # the run failed on an ImportError). A signal arriving meanwhile (Slurm's time limit sends SIGTERM twice:
            # slurmd and srun) is queued and acted upon, in order, once the one before it is done.
            queued.append(signum)
            if len(queued) > 1:
                return
            try:
                while queued:
                    act(queued[0])
                    queued.pop(0)
            finally:
                queued.clear()

        def act(signum):
            name = signal.Signals(signum).name
            again = "Ctrl-C again" if signum == signal.SIGINT else f"{name} again"
            if self.world_size > 1 and self.launcher == "mpi":  # mpiexec forwards SIGTERM, aborts the job on a second Ctrl-C
                again = "SIGTERM to mpiexec (not a second Ctrl-C: mpiexec would abort the job)"
            if self.stopping:  # already stopping, or closing the run: the manifest is written first
                self.late = self.late or signum
                return
            if signum == signal.SIGUSR1:  # a scheduler's warning (Slurm --signal=USR1@N): checkpoint at the next boundary
                if self.pending is None:
                    self.pending = signum
                    if self.notify and self.armed:
                        self.notify(f"SIGUSR1 (time-limit warning): stopping after round {self.rounds_done + 1} (the one in "
                                    f"progress), with a checkpoint; SIGTERM to stop now")
                return  # never escalates: a later SIGTERM (the time limit itself) stops the round in progress
            if not self.armed:
                err = Interrupted(signum, f"interrupted by {name} before training started"
                                          + (f"; the last checkpoint is {self.last}" if self.last else ""), now=True)
                err.collective = False  # processes may be anywhere in the setup: under MPI the job is aborted
                raise err
            if self.pending is None:
                self.pending = signum
                if self.notify:
                    self.notify(f"{name}: stopping after round {self.rounds_done + 1} (the one in progress), with a checkpoint; "
                                f"{again} to stop now (losing at most that round)")
                return
            self.now = True
            if self.notify:
                self.notify(f"{name} again: stopping now; round {self.rounds_done + 1} is lost")
            if self.world_size == 1:
                self.stopping = True
                raise Interrupted(signum, "stopped mid-round", now=True)
            # under MPI the processes stop together after the current local step (Checkpointer.step)

        old = {s: signal.signal(s, handler) for s in HANDLED if signal.getsignal(s) is not signal.SIG_IGN or s == signal.SIGUSR1}
        Checkpointer.active = self
        try:
            yield self
        finally:
            Checkpointer.active = None
            for s, h in old.items():
                signal.signal(s, h)


def request_stop(now: bool) -> None:
    """From any thread: ask this process's training to stop as on SIGTERM (``now``: as on a second one, waiting
    for the first to be seen). With no training under way, SIGTERM's default action ends the process."""
    import time

    os.kill(os.getpid(), signal.SIGTERM)
    cp = Checkpointer.active
    if not now or cp is None:
        return
    for _ in range(100):  # two signals sent at once would be seen as one
        if cp.pending is not None or Checkpointer.active is not cp:
            break
        time.sleep(0.05)
    if Checkpointer.active is cp and not cp.now:
        os.kill(os.getpid(), signal.SIGTERM)


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


def resume_config(run_dir: str | Path, flags: dict, *, recipe=None, scale=None, overwrite: bool = False) -> TrainConfig:
    """The config to continue ``run_dir`` with: its manifest's, plus the ``flags`` that may change
    (:data:`RESUME_MAY_CHANGE`); any other flag that differs is refused (exit 2)."""
    run_dir = Path(run_dir)
    if recipe or scale:
        raise ConfigError("--resume takes the run's config from RUN_DIR/manifest.json; --recipe/--scale cannot be combined with it")
    if overwrite:
        raise ConfigError("--resume continues a run; --overwrite cannot be combined with it")
    if run_dir.is_dir():
        from fedcli.results.rundir import refuse_links

        refuse_links(run_dir)  # a planted link is named before anything is read through it
    man = read_manifest(run_dir)
    status = man.get("status")
    if status == "completed":
        raise ConfigError(f"--resume {run_dir}: the run already completed; nothing to resume")
    # a run still in progress is refused by its lock (fedcli/results/lock.py), taken before anything is touched
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


def load_for_resume(run_dir: str | Path, comm, warn=None, config: dict | None = None) -> dict | None:
    """The latest checkpoint, read by the root and sent to every process (errors raised on all of them).

    A checkpoint of another experiment (``config``: the run's) or of another number of processes is refused
    before the CSVs are looked at, so the message says what is wrong with it."""
    payload = None
    if comm.is_root:
        try:
            ckpt = load_latest(run_dir, warn)
            if ckpt is not None:
                if config is not None:
                    check_config(ckpt, config)
                check_world_size(ckpt, comm.size, run_dir)
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
    from fedcli.results.rundir import (APPEND_CSVS, CLIENTS_COLUMNS, INTERVALS_COLUMNS, PART_CSVS, SKIPPED_COLUMNS,
                                       SYSTEM_COLUMNS, AppendCSV, RunDir, git_commit, now, rewind_csvs, versions)
    from fedcli.results.runlog import extra_columns, layer_rows

    run_dir = Path(run_dir)
    positions = {name: {"bytes": 0, "rows": 0} for name in APPEND_CSVS}
    if ckpt is not None:
        positions.update(ckpt["csv"])
    rewind_csvs(run_dir, positions)
    rd = RunDir(run_dir, extra_columns(sim))
    for name, attr, cols in (("intervals.csv", "intervals", INTERVALS_COLUMNS), ("skipped.csv", "skipped", SKIPPED_COLUMNS),
                             ("clients.csv", "clients", CLIENTS_COLUMNS), ("system.csv", "system", SYSTEM_COLUMNS)):
        if (run_dir / name).exists():
            setattr(rd, attr, AppendCSV(run_dir / name, cols))
    rd.part_csvs = {name: AppendCSV(run_dir / name, cols) for name, cols in PART_CSVS.items() if (run_dir / name).exists()}
    rd.manifest = read_manifest(run_dir)
    entry = {"time": now(), "checkpoint": Path(ckpt["path"]).name if ckpt else None,
             "round": ckpt["round"] if ckpt else 0, "iteration": ckpt["iteration"] if ckpt else 0,
             "host": socket.gethostname(), "pid": os.getpid(), "versions": versions(), "git_commit": git_commit(),
             "command": sys.argv}
    rd.manifest.pop("error", None)
    rd.manifest.pop("summary", None)
    rd.write_manifest(status="running", end_time=None, pid=os.getpid(), host=socket.gethostname(), config=sim.cfg.to_dict(),
                      resumes=list(rd.manifest.get("resumes", [])) + [entry], **(manifest_updates or {}))
    rd.write_layers(layer_rows(sim))
    return rd


def version_drift(manifest: dict) -> list[str]:
    """Packages whose version differs from the ones the run started with (the bitwise guarantee needs none)."""
    from fedcli.results.rundir import versions

    before, now_ = manifest.get("versions") or {}, versions()
    return [f"{k} {before[k]} -> {now_[k]}" for k in sorted(before) if k in now_ and before[k] != now_[k]]
