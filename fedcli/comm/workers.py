"""Client-parallel training in one ``fedcli train``: worker processes, one shard of the cohort each.

``--workers N`` starts N - 1 worker processes beside this one (spawned, so none inherits an
initialized torch or OpenMP). Every process runs the same :class:`fedcli.fl.engine.Simulation` on
its share of each round's cohort (``assign_clients``, as MPI ranks do); this process is rank 0 and
the only one that writes the run directory. They talk through :class:`PoolCommunicator`:

- control (barrier, bcast, allgather) over one pipe per worker, rank 0 in the middle. A pipe also
  tells of a death: a dead worker's end reads EOF, so rank 0 stops at the next collective with one
  line naming the worker; a worker whose rank 0 is gone reads EOF and leaves;
- numbers through one shared-memory arena: ``client_sum`` writes each client's p_i x_i in the row
  of its cohort position and each process adds a slice of the columns over all rows in cohort
  order, so the sum has the same bits as the one-process sum (``communicator.ordered_sum``) for any
  number of workers.

A worker dies with its parent: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux, and the pipe's EOF
anywhere. Workers ignore SIGINT and run in a session of their own (so the terminal's Ctrl-C reaches rank 0
only, and Linux's autogroup scheduler gives each worker the CPU share of a separate program rather than
splitting one share among all of them); Ctrl-C is rank 0's to handle (the checkpointer's round-end
all-reduce tells the workers to stop at the same round).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcli.comm.communicator import Communicator, flat_rows
from fedcli.errors import ConfigError, FedcliError

#: bytes of the shared arena (grown for a cohort whose one column block would not fit)
ARENA_BYTES = 64 << 20
#: below this many elements an all-reduce travels through the pipes (rank 0 adds, in rank order)
SMALL = 1 << 12
#: --workers auto: estimated single-core seconds of training above which the pool is worth starting
AUTO_MIN_SECONDS = 10.0
#: ... from these rough single-core rates (femnist_cnn and cnn4 at batch 10-32 on this CPU: 25-55 GFLOP/s)
FLOPS_PER_S = 2e10
STEP_OVERHEAD_S = 2e-4


class WorkerError(FedcliError):
    """A worker process failed or died; ends the run with the worker's exit code (1 for a crash)."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class RootGone(Exception):
    """In a worker: rank 0 closed its pipe (it ended or died)."""


# --------------------------------------------------------------------------------------------- communicator
class PoolCommunicator(Communicator):
    """Rank ``rank`` of a worker pool of ``size`` processes (see the module docstring)."""

    def __init__(self, rank: int, size: int, conns: list, arena: torch.Tensor, describe_death=None):
        self.rank, self.size = rank, size
        self.workers = size
        self.workers_note = None
        self.conns = conns                    # rank 0: the pipes to ranks 1..size-1; a worker: [its pipe to rank 0]
        self.arena = arena                    # uint8 shared memory
        self.describe_death = describe_death  # rank 0: rank -> text saying how that worker ended
        self.reduce_seconds = 0.0

    # ---- control: gather at rank 0, release from rank 0
    def _recv_from(self, r: int):
        conn = self.conns[r - 1]
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            how = self.describe_death(r) if self.describe_death else "ended"
            raise WorkerError(f"worker {r} {how}") from None
        if msg[0] == "fail":
            raise WorkerError(f"worker {r}: {msg[2]}", msg[1])
        return msg[1]

    def _from_root(self):
        try:
            return self.conns[0].recv()
        except (EOFError, OSError):
            raise RootGone() from None

    def _collect(self, obj, combine):
        """Every rank's ``obj`` to rank 0, ``combine(list)`` back to all."""
        if self.rank == 0:
            result = combine([obj, *(self._recv_from(r) for r in range(1, self.size))])
            for r, conn in enumerate(self.conns, 1):
                try:
                    conn.send(result)
                except (BrokenPipeError, OSError):
                    how = self.describe_death(r) if self.describe_death else "ended"
                    raise WorkerError(f"worker {r} {how}") from None
            return result
        try:
            self.conns[0].send(("ok", obj))
        except (BrokenPipeError, OSError):
            raise RootGone() from None
        return self._from_root()

    def barrier(self) -> None:
        self._collect(None, lambda _: None)

    def allgather(self, obj: Any) -> list:
        return self._collect(obj, list)

    def bcast(self, obj: Any) -> Any:
        return self._collect(obj if self.rank == 0 else None, lambda objs: objs[0])

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)

    def fail(self, code: int, message: str) -> None:
        """A worker tells rank 0 it failed (read at rank 0's next collective)."""
        with contextlib.suppress(Exception):
            self.conns[0].send(("fail", code, message))

    # ---- numbers
    # The arena has an input region (each rank's rows) and an output region (the sums), at fixed places: a
    # rank still copying one collective's result out cannot have it overwritten by a faster rank's inputs to
    # the next one (the next results are written only after the next barrier, which waits for it).
    def _view(self, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        size = torch.empty((), dtype=dtype).element_size()
        return self.arena[offset: offset + count * size].view(dtype)

    @property
    def _out_offset(self) -> int:
        return self.arena.numel() // 8 * 7 // 64 * 64

    def _out(self, count: int, dtype: torch.dtype) -> torch.Tensor:
        return self._view(self._out_offset, count, dtype)

    def allreduce_(self, buf: torch.Tensor) -> torch.Tensor:
        """Sum over ranks in rank order (every rank gets the same bits)."""
        t0 = time.perf_counter()
        if buf.numel() <= SMALL:  # through the pipes, as numpy arrays (pickled by value)
            total = self._collect(buf.detach().cpu().numpy(), lambda arrays: _sum_in_order(arrays))
            buf.copy_(torch.from_numpy(total).view_as(buf))
            self.reduce_seconds += time.perf_counter() - t0
            return buf
        host = buf.detach().reshape(-1).cpu() if buf.device.type != "cpu" or not buf.is_contiguous() else buf.view(-1)
        item = buf.element_size()
        stride = self._out_offset // self.size // 64 * 64  # bytes per rank's slot in the input region
        per = min(stride, self.arena.numel() - self._out_offset) // item
        for lo in range(0, host.numel(), per):
            n = min(per, host.numel() - lo)
            self._view(self.rank * stride, n, buf.dtype).copy_(host[lo: lo + n])
            self.barrier()
            a, b = n * self.rank // self.size, n * (self.rank + 1) // self.size
            out = self._out(n, buf.dtype)[a:b]
            out.zero_()
            for r in range(self.size):
                out.add_(self._view(r * stride, n, buf.dtype)[a:b])
            self.barrier()
            host[lo: lo + n].copy_(self._out(n, buf.dtype))
        if host.data_ptr() != buf.data_ptr():
            buf.copy_(host.view_as(buf))
        self.reduce_seconds += time.perf_counter() - t0
        return buf

    def client_sum(self, tensors, weights, positions, total, skip=None) -> torch.Tensor:
        """As :meth:`Communicator.client_sum`, exact: the rows of all ranks meet in the arena, row = cohort
        position, and each rank adds a slice of the columns over every live row in cohort order."""
        t0 = time.perf_counter()
        rows, width, dtype = flat_rows(tensors)
        device = rows[0].device if rows else torch.device("cpu")
        item = torch.empty((), dtype=dtype).element_size()
        flags_bytes = (total + 63) // 64 * 64
        block = min((self._out_offset - flags_bytes) // (total * item), (self.arena.numel() - self._out_offset) // item)
        block = max(1, block // 16 * 16)
        flags = self.arena[:total]
        live = [True] * len(positions) if skip is None else [not d for d in skip.tolist()]
        ws = None if weights is None else [torch.tensor(float(w), dtype=dtype) for w in weights.tolist()]
        for i, p in enumerate(positions):
            flags[p] = 1 if live[i] else 0
        base = flags_bytes
        result = torch.empty(width, dtype=dtype)
        seg = _segments([r.shape[1] for r in rows])
        order = None
        for lo in range(0, width, block):
            n = min(block, width - lo)
            table = self._view(base, total * n, dtype).view(total, n)
            for i, p in enumerate(positions):
                if not live[i]:
                    continue
                for t, a, b, dst in seg(lo, lo + n):
                    x = rows[t][i, a:b]
                    x = x.cpu() if x.device.type != "cpu" else x
                    x = x.to(dtype)
                    if ws is None:
                        table[p, dst: dst + b - a].copy_(x)
                    else:
                        torch.mul(x, ws[i], out=table[p, dst: dst + b - a])
            self.barrier()
            a, b = n * self.rank // self.size, n * (self.rank + 1) // self.size
            acc = self._out(n, dtype)[a:b]
            acc.zero_()
            if order is None:  # every position was flagged by its owner before the first barrier
                order = [p for p, f in enumerate(flags.tolist()) if f]
            for p in order:
                acc.add_(table[p, a:b])
            self.barrier()
            result[lo: lo + n].copy_(self._out(n, dtype))
        self.reduce_seconds += time.perf_counter() - t0
        return result.to(device)


def _sum_in_order(arrays: list) -> Any:
    """The ranks' arrays added in rank order, from zero, in their dtype (numpy: one rounding per addition)."""
    out = np.zeros_like(arrays[0])
    for a in arrays:
        out = np.asarray(out + a)
    return out


def _segments(widths: list[int]):
    """For the concatenation of rows of these widths: the pieces (tensor, start, end, offset in block) of columns [lo, hi)."""
    starts = [0]
    for w in widths:
        starts.append(starts[-1] + w)

    def pieces(lo: int, hi: int):
        for t, w in enumerate(widths):
            a, b = max(lo, starts[t]), min(hi, starts[t + 1])
            if a < b:
                yield t, a - starts[t], b - starts[t], a - lo
    return pieces


# --------------------------------------------------------------------------------------------- worker side
def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux); leave now if the parent is already gone."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(1)


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""


def _worker_main(rank: int, size: int, conn, arena: torch.Tensor, cfg: dict, data, parent_pid: int, run_kwargs: dict) -> None:
    _die_with_parent(parent_pid)
    try:  # a session of its own: out of the terminal's process group (Ctrl-C goes to rank 0 only), and with
        os.setsid()  # autogroup scheduling its own CPU share, as any separately started program (Ray's workers too)
    except OSError:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from fedcli.cli.train import run_train
    from fedcli.config import TrainConfig

    comm = PoolCommunicator(rank, size, [conn], arena)
    code = 0
    try:
        run_train(TrainConfig(**cfg), comm=comm, quiet=True, data=data, **run_kwargs)
        comm.barrier()  # rank 0 closes the run directory while this process is still alive
    except RootGone:
        code = 1
    except FedcliError as e:
        code = int(getattr(e, "exit_code", 1))
        if not getattr(e, "collective", False):
            comm.fail(code, f"{e}")
    except BaseException as e:  # noqa: BLE001 - reported to rank 0 as one line
        code = 1
        comm.fail(1, f"{type(e).__name__}: {e}{_where(e)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------------------------- the pool
class WorkerPool:
    """Rank 0's side: starts ranks 1..size-1 and ends them."""

    def __init__(self, size: int, cfg, data, run_kwargs: dict):
        import multiprocessing as mp

        import torch.multiprocessing  # noqa: F401 - registers the shared-memory pickling of tensors

        ctx = mp.get_context("spawn")
        total = max(1, int(getattr(cfg, "clients", 1)))
        arena_bytes = max(ARENA_BYTES, (total + 2) * 4096 * 8 * 8 // 7)
        self.arena = torch.zeros(arena_bytes, dtype=torch.uint8).share_memory_()
        self.procs, conns = [], []
        for rank in range(1, size):
            mine, theirs = ctx.Pipe(duplex=True)
            p = ctx.Process(target=_worker_main, name=f"fedcli-worker-{rank}", daemon=True,
                            args=(rank, size, theirs, self.arena, cfg.to_dict(), data, os.getpid(), run_kwargs))
            p.start()
            theirs.close()
            self.procs.append(p)
            conns.append(mine)
        self.comm = PoolCommunicator(0, size, conns, self.arena, describe_death=self.describe_death)

    def describe_death(self, rank: int) -> str:
        p = self.procs[rank - 1]
        p.join(timeout=2.0)
        code = p.exitcode
        if code is None:
            return f"(pid {p.pid}) closed its pipe"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"(pid {p.pid}) was killed by {signal.Signals(-code).name}"
        return f"(pid {p.pid}) exited with code {code}"

    def close(self, ok: bool) -> None:
        """After the run: a last barrier when it completed (the workers wait for the run directory to be
        closed), then the workers are joined; after a failure they are ended (SIGTERM, then SIGKILL)."""
        if ok:
            with contextlib.suppress(Exception):
                self.comm.barrier()
        for conn in self.comm.conns:
            with contextlib.suppress(Exception):
                conn.close()
        deadline = time.monotonic() + (10.0 if ok else 2.0)
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)


# --------------------------------------------------------------------------------------------- how many
def physical_cores() -> int:
    """Physical cores this process may run on (affinity mask; hyper-threads of one core count once)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
    cores = set()
    for c in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{c}/topology")
        try:
            cores.add((topo.joinpath("physical_package_id").read_text().strip(), topo.joinpath("core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(c)))
    return max(1, len(cores))


@dataclass
class WorkEstimate:
    client_steps: int        # local steps summed over clients and rounds
    flops_per_step: float    # forward + backward of one client's mini-batch
    seconds: float           # single-core estimate

    def describe(self) -> str:
        return f"about {self.seconds:.0f} s of single-core training ({self.client_steps:,} client steps)"


def estimate_work(cfg, dataset, partition) -> WorkEstimate:
    """Rough single-core training time of a run: client steps x (3 x forward FLOPs x batch / rate + overhead)."""
    from fedcli.fl.cohort import epoch_steps
    from fedcli.fl.engine import build_run_model
    from fedcli.models.flops import forward_flops

    n = len(partition.train)
    active = max(1, int(round(cfg.active_ratio * n)))
    sizes = [len(ix) for ix in partition.train]
    if cfg.local_epochs:
        per_client = sum(epoch_steps(s, cfg.local_epochs, cfg.batch_size, cfg.drop_last) for s in sizes) / max(1, n)
        steps = (cfg.rounds or math.ceil(cfg.iterations / max(1.0, per_client))) * active * per_client
    elif cfg.rounds:
        steps = cfg.rounds * active * cfg.tau
    else:
        steps = cfg.iterations * active
    try:
        with torch.random.fork_rng(devices=[]):
            model = build_run_model(cfg, dataset)
        model.eval()
        fwd = forward_flops(model, dataset.train_x[:1])
    except Exception:  # noqa: BLE001 - an estimate only: count parameters instead
        fwd = 2.0 * sum(p.numel() for p in build_run_model(cfg, dataset).parameters())
    per_step = 3.0 * fwd * cfg.batch_size
    secs = steps * (per_step / FLOPS_PER_S + STEP_OVERHEAD_S)
    return WorkEstimate(int(steps), per_step, secs)


def auto_workers(cfg, dataset, partition, cores: int | None = None) -> tuple[int, str]:
    """``--workers 0``: the physical cores (at most the clients per round) when the run is big enough to pay
    for starting the workers (about 1-2 s each), else 1. Results do not depend on the choice."""
    cores = cores or physical_cores()
    active = max(1, int(round(cfg.active_ratio * len(partition.train))))
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        gpus = torch.cuda.device_count()  # --device cuda: worker k takes GPU k mod gpus (engine.resolve_device)
        n = max(1, min(gpus, active))
        return n, f"auto: {n} (one per CUDA device: {gpus} visible, {active} client(s) per round)"
    if cfg.device.startswith("cuda:"):
        return 1, f"auto: 1 (--device {cfg.device}: one GPU)"
    if cores < 2 or active < 2:
        return 1, f"auto: 1 ({cores} physical core(s), {active} client(s) per round)"
    est = estimate_work(cfg, dataset, partition)
    if est.seconds < AUTO_MIN_SECONDS:
        return 1, f"auto: 1 ({est.describe()}, below {AUTO_MIN_SECONDS:.0f} s)"
    n = min(cores, active)
    return n, f"auto: {n} ({cores} physical cores, {est.describe()})"


@contextlib.contextmanager
def launch(cfg, comm: Communicator, *, resume: str | None = None, overwrite: bool = False, data=None):
    """Yield (communicator, data) for ``run_train``: rank 0 of a new worker pool, or ``comm`` itself.

    ``data`` is (dataset, partition) when they were loaded here (to choose the number of workers, and to hand
    them to the workers in shared memory) or given, else None (``run_train`` loads them)."""
    if comm.size > 1:  # under mpiexec every rank is one worker
        if cfg.workers > 1:
            raise ConfigError(f"--workers {cfg.workers} cannot be combined with mpiexec (each MPI rank is one worker); drop one of them")
        yield comm, data
        return
    n, note = cfg.workers, f"--workers {cfg.workers}"
    if resume and not n:
        from fedcli.results.checkpoint import read_manifest

        n = int(read_manifest(resume).get("world_size", 1))  # a checkpoint is resumed by as many processes
        note = f"auto: {n} (as the run being resumed)"
    if not n:
        if data is None:
            from fedcli.data.setup import load_data_and_partition

            data = load_data_and_partition(cfg)
        n, note = auto_workers(cfg, *data)
    if n <= 1:
        single = Communicator()
        single.workers_note = note
        yield single, data
        return
    if data is None:
        from fedcli.data.setup import load_data_and_partition

        data = load_data_and_partition(cfg)
    pool = WorkerPool(n, cfg, data, {"resume": bool(resume), "overwrite": overwrite})
    pool.comm.workers_note = note
    ok = False
    try:
        yield pool.comm, data
        ok = True
    finally:
        pool.close(ok)
