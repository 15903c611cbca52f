"""Checkpoint files: what a checkpoint holds, how it is written and read back, and a run captured into it and
restored from it (``fedcli train --resume``; the round hook that takes checkpoints and stops on signals is
:mod:`fedcli.results.signals`, what a resume checks and reopens :mod:`fedcli.results.resume`).

A checkpoint holds everything :meth:`fedcli.fl.engine.Simulation.run` needs to continue as if it had never stopped:

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
done), written atomically (``fedcli.safefs.atomic_write``: temporary file in the same folder, flush, fsync,
``os.replace``, fsync of the folder); the last ``--keep-checkpoints`` are kept. They are read back with
``torch.load(weights_only=True)``: tensors and plain containers only, so a part's ``state_dict()`` must hold nothing
else.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch

from fedcli.config import flag
from fedcli.errors import ConfigError, DataError
from fedcli.fl.context import CheckpointContext
from fedcli.results.runstate import RESUME_MAY_CHANGE, resume_command
from fedcli.safefs import atomic_write, open_dir

FORMAT = "fedcli-checkpoint"
VERSION = 1
FOLDER = "checkpoints"
EXPECTED = f"expected a fedcli checkpoint (torch.save of a '{FORMAT}' version {VERSION} dict)"
_NAME = re.compile(r"^round-(\d+)\.pt$")
_STALE = re.compile(r"^\.round-.*\.pt\.tmp")


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


def is_checkpoint(name: str) -> bool:
    """Whether ``name`` is a checkpoint's file name (``round-NNNNNN.pt``, docs/run-directory.md)."""
    return _NAME.match(name) is not None


def atomic_save(obj, path: str | Path) -> Path:
    """``torch.save``, written with ``fedcli.safefs.atomic_write`` (temporary file in the same folder, flush, fsync,
    ``os.replace``, fsync of the folder; a link at ``path`` is refused).

    The object is serialized in memory first, so a full disk surfaces as one clean ``OSError`` of the write
    (torch's zip writer would turn it into a RuntimeError); it becomes a one-line error naming the file, and
    the previous file (and every older checkpoint) stays as it was."""
    path = Path(path)
    atomic_write(path, _serialized(obj))
    return path


def _serialized(obj) -> memoryview:
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getbuffer()


def save(run_dir: str | Path, ckpt: dict, keep: int) -> Path:
    """Write ``ckpt`` atomically as ``checkpoints/round-NNNNNN.pt`` and keep the last ``keep``: written, listed and
    removed through a descriptor of ``checkpoints/`` reached from the run folder without following a link
    (``fedcli.safefs.open_dir``), so a link planted there during the run neither receives nor loses a file."""
    obj = plain(ckpt)
    obj["digests"] = digests(obj)
    name = f"round-{ckpt['round']:06d}.pt"
    with open_dir(folder(run_dir)) as d:
        d.atomic_write(name, _serialized(obj))
        rounds = sorted((int(m.group(1)), n) for n in d.names() if (m := _NAME.match(n)))
        for _, old in rounds[:-keep]:
            d.unlink(old)
        for stale in (n for n in d.names() if _STALE.match(n)):  # left by a crash in the middle of a save
            d.unlink(stale)
        d.sync()
    return folder(run_dir) / name


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
        raise DataError(
            f"{path}: holds no digests, so it cannot be verified (written by an older fedcli, or damaged); {EXPECTED}"
        )
    got = digests(ckpt)
    bad = [
        k for k in sorted(set(want["tensors"]) | set(got["tensors"])) if want["tensors"].get(k) != got["tensors"].get(k)
    ]
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise DataError(
            f"{path}: tensor {bad[0].lstrip('/')}{more} does not match the digest written with the checkpoint "
            f"(the file changed after it was written: a storage fault or an edit); {EXPECTED}"
        )
    if want["state"] != got["state"]:
        raise DataError(
            f"{path}: its run state (round, loop state, config, CSV lengths) does not match the digest written "
            f"with the checkpoint (the file changed after it was written); {EXPECTED}"
        )


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
    missing = [
        k
        for k in ("round", "iteration", "config", "world_size", "global", "schedule", "ledger", "csv", "ranks")
        if k not in ckpt
    ]
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


def local_state(ctx: CheckpointContext, state, copy: bool = False) -> dict:
    """This process's part of a checkpoint: TrainState, client store, parts, random-generator states.

    ``copy``: a snapshot to be written later (parts' tensors cloned; the client store is copied table by table,
    which suffices because :class:`~fedcli.fl.store.MemoryStore` replaces a client's tensors, never edits them; a
    :class:`~fedcli.fl.store.DiskStore` gives its index, a copy, and never rewrites a row a checkpoint refers to)."""
    parts = {name: part.state_dict() for name, part in ctx.parts.items()}
    return {
        "state": dataclasses.asdict(state),
        "store": ctx.store.state_dict(root=ctx.comm.is_root),
        "parts": _copy(parts) if copy else parts,
        "rng": rng_state(),
    }


def global_state(ctx: CheckpointContext, state) -> dict:
    """The part of a checkpoint every process shares that changes from round to round (the root writes it):
    model, schedule, ledger, CSV lengths."""
    return {
        "round": state.round_idx,
        "iteration": state.iteration,
        "global": {
            "params": {n: _cpu(t) for n, t in ctx.global_params.items()},
            "buffers": {n: _cpu(t) for n, t in ctx.global_buffers.items()},
        },
        "schedule": _copy(ctx.schedule.state_dict()),
        "ledger": _copy(ctx.ledger.state_dict()),
        "csv": ctx.run_dir.csv_positions() if ctx.run_dir is not None else {},
    }


def run_facts(ctx: CheckpointContext) -> dict:
    """The part of a checkpoint that is the same all run long: format, config, process count, versions."""
    from fedcli.results.rundir import versions

    return {
        "format": FORMAT,
        "version": VERSION,
        "config": ctx.cfg.to_dict(),
        "world_size": ctx.comm.size,
        "launcher": ctx.comm.launcher,
        "versions": versions(),
    }


def capture(ctx: CheckpointContext, state) -> dict | None:
    """The checkpoint of ``sim`` at a round boundary. Collective: every process calls it; the root gets
    the dict (with every process's own state), the others None."""
    ranks = ctx.comm.allgather(local_state(ctx, state))
    if not ctx.comm.is_root:
        return None
    return {**run_facts(ctx), **global_state(ctx, state), "ranks": ranks}


def restore(ctx: CheckpointContext, ckpt: dict):
    """Put ``sim`` (set up with the checkpoint's config) back where ``ckpt`` was taken; returns the TrainState."""
    from fedcli.fl.engine import Summary, TrainState

    where = ckpt.get("path", "checkpoint")
    check_config(ckpt, ctx.cfg.to_dict())
    check_world_size(ckpt, ctx.comm.size, ctx.cfg.out)
    for kind, ours in (("params", ctx.global_params), ("buffers", ctx.global_buffers)):
        theirs = ckpt["global"][kind]
        if set(theirs) != set(ours) or any(tuple(theirs[n].shape) != tuple(ours[n].shape) for n in ours):
            raise DataError(f"{where}: its model {kind} do not match the model of the run's config; {EXPECTED}")
        for n, t in ours.items():
            t.copy_(theirs[n])
    ctx.schedule.load_state_dict(ckpt["schedule"])
    led = ckpt["ledger"]
    if list(led["numel"]) != list(ctx.ledger.numel):
        raise DataError(f"{where}: its communication ledger does not match the model; {EXPECTED}")
    ctx.ledger.syncs, ctx.ledger.bytes_, ctx.ledger.extra_bytes = (
        list(led["syncs"]),
        list(led["bytes"]),
        float(led["extra_bytes"]),
    )
    mine = ckpt["ranks"][ctx.comm.rank]
    ctx.store.load_state_dict(mine["store"], ckpt["ranks"][0]["store"])  # tables every process holds: in the root's
    for name, part in ctx.parts.items():
        part.load_state_dict(mine["parts"].get(name, {}))
    set_rng_state(mine["rng"])
    saved = dict(mine["state"])
    summary = saved.pop("summary")
    known_s = {f.name for f in dataclasses.fields(Summary)}
    known_t = {f.name for f in dataclasses.fields(TrainState)} - {"summary"}
    return TrainState(
        **{k: v for k, v in saved.items() if k in known_t},
        summary=Summary(**{k: v for k, v in summary.items() if k in known_s}),
    )


def check_config(ckpt: dict, config: dict) -> None:
    """A checkpoint taken under another experiment than ``config`` (the run's manifest) is refused (exit 3)."""
    changed = [k for k, v in ckpt["config"].items() if k not in RESUME_MAY_CHANGE and k in config and config[k] != v]
    if changed:
        raise DataError(
            f"{ckpt.get('path', 'checkpoint')}: written under another config ({', '.join(flag(k) for k in changed)} "
            f"differ from the run's manifest.json), so it belongs to another run; {EXPECTED}"
        )


def check_world_size(ckpt: dict, size: int, run_dir) -> None:
    if ckpt["world_size"] != size:
        raise ConfigError(
            f"--resume: {ckpt.get('path', 'the checkpoint')} was written by {ckpt['world_size']} process(es), this "
            f"run has {size}; resume it with: "
            f"{resume_command(run_dir, ckpt['world_size'], ckpt.get('launcher', 'mpi'))}"
        )


def save_model(ctx: CheckpointContext, path: str | Path) -> Path:
    """The final global model as a ``state_dict`` (keys in ``model.state_dict()`` order), atomically."""
    state = {}
    for name in ctx.model.state_dict().keys():
        src = ctx.global_params.get(name)
        if src is None:
            src = ctx.global_buffers[name]
        state[name] = _cpu(src)
    return atomic_save(state, path)
