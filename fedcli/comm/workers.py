"""Client-parallel training in one ``fedcli train``: worker processes, one shard of the cohort each.

``--workers N`` starts N - 1 worker processes beside this one, forked from a warm server that has imported torch
and the engine and run nothing (fedcli/runtime/warm.py: none inherits an initialized torch or OpenMP, and the
imports are paid once, not once a worker). Every process runs the same :class:`fedcli.fl.engine.Simulation` on
its share of each round's cohort (``assign_clients``, as MPI ranks do); this process is rank 0 and
the only one that writes the run directory. The pool is told what each worker runs (``fedcli.runner.launch``
passes ``run_in_worker``): this module knows nothing of runs, configs or the CLI. They talk through
:class:`PoolCommunicator`:

- control (barrier, bcast, allgather) over one pipe per worker, rank 0 in the middle. What travels is pickled
  by value (:func:`_send`): a tensor in an allgather is a copy as it stood at the call, never torch's
  shared-memory handle to the sender's storage, which the sender goes on changing in place (issue 48: a
  cohort's after-init models, shared and then trained, reached the evaluating process half trained). A pipe also
  tells of a death: a dead worker's end reads EOF, so rank 0 stops at the next collective with one
  line naming the worker; a worker whose rank 0 is gone reads EOF and leaves;
- numbers through one shared-memory arena: ``client_sum`` writes each client's p_i x_i in the row
  of its cohort position and each process adds a slice of the columns over all rows in cohort
  order, so the sum has the same bits as the one-process sum (``communicator.ordered_sum``) for any
  number of workers.

A worker dies with rank 0: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux (its parent is the warm server, which
ends with rank 0), and the pipe's EOF anywhere. Workers ignore SIGINT and run in a session of their own (so the
terminal's Ctrl-C reaches rank 0 only, and Linux's autogroup scheduler gives each worker the CPU share of a separate
program rather than splitting one share among all of them); Ctrl-C is rank 0's to handle (the checkpointer's
round-end all-reduce tells the workers to stop at the same round).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcli.comm.communicator import Communicator, flat_rows
from fedcli.errors import FedcliError

#: bytes of the shared arena (grown for a cohort whose one column block would not fit)
ARENA_BYTES = 64 << 20
#: below this many elements an all-reduce travels through the pipes (rank 0 adds, in rank order)
SMALL = 1 << 12


class WorkerError(FedcliError):
    """A worker process failed or died; ends the run with the worker's exit code (1 for a crash)."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class RootGone(Exception):
    """In a worker: rank 0 closed its pipe (it ended or died)."""


# --------------------------------------------------------------------------------------------- communicator
def _send(conn, obj) -> None:
    """``obj`` through ``conn`` by value: the standard pickle copies a tensor's data into the message. (``conn.send``
    pickles with multiprocessing's ForkingPickler, for which ``import torch`` registers torch's reduction: a CPU
    tensor's storage moves to shared memory and the receiver maps that same memory, so it sees every later in-place
    change the sender makes: what it reads would depend on the timing of the processes.)"""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _recv(conn):
    return pickle.loads(conn.recv_bytes())


class PoolCommunicator(Communicator):
    """Rank ``rank`` of a worker pool of ``size`` processes (see the module docstring)."""

    def __init__(self, rank: int, size: int, conns: list, arena: torch.Tensor, describe_death=None):
        self.rank, self.size = rank, size
        self.workers = size
        self.workers_note = None
        self.conns = conns  # rank 0: the pipes to ranks 1..size-1; a worker: [its pipe to rank 0]
        self.arena = arena  # uint8 shared memory
        self.describe_death = describe_death  # rank 0: rank -> text saying how that worker ended
        self.reduce_seconds = 0.0

    # ---- control: gather at rank 0, release from rank 0
    def _recv_from(self, r: int):
        conn = self.conns[r - 1]
        try:
            msg = _recv(conn)
        except (EOFError, OSError):
            how = self.describe_death(r) if self.describe_death else "ended"
            raise WorkerError(f"worker {r} {how}") from None
        if msg[0] == "fail":
            raise WorkerError(f"worker {r}: {msg[2]}", msg[1])
        return msg[1]

    def _from_root(self):
        try:
            return _recv(self.conns[0])
        except (EOFError, OSError):
            raise RootGone() from None

    def _collect(self, obj, combine):
        """Every rank's ``obj`` to rank 0, ``combine(list)`` back to all."""
        if self.rank == 0:
            result = combine([obj, *(self._recv_from(r) for r in range(1, self.size))])
            for r, conn in enumerate(self.conns, 1):
                try:
                    _send(conn, result)
                except (BrokenPipeError, OSError):
                    how = self.describe_death(r) if self.describe_death else "ended"
                    raise WorkerError(f"worker {r} {how}") from None
            return result
        try:
            _send(self.conns[0], ("ok", obj))
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
            _send(self.conns[0], ("fail", code, message))

    # ---- numbers
    # The arena has an input region (each rank's rows) and an output region (the sums), at fixed places: a
    # rank still copying one collective's result out cannot have it overwritten by a faster rank's inputs to
    # the next one (the next results are written only after the next barrier, which waits for it).
    def _view(self, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        size = torch.empty((), dtype=dtype).element_size()
        return self.arena[offset : offset + count * size].view(dtype)

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
            self._view(self.rank * stride, n, buf.dtype).copy_(host[lo : lo + n])
            self.barrier()
            a, b = n * self.rank // self.size, n * (self.rank + 1) // self.size
            out = self._out(n, buf.dtype)[a:b]
            out.zero_()
            for r in range(self.size):
                out.add_(self._view(r * stride, n, buf.dtype)[a:b])
            self.barrier()
            host[lo : lo + n].copy_(self._out(n, buf.dtype))
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
                        table[p, dst : dst + b - a].copy_(x)
                    else:
                        torch.mul(x, ws[i], out=table[p, dst : dst + b - a])
            self.barrier()
            a, b = n * self.rank // self.size, n * (self.rank + 1) // self.size
            acc = self._out(n, dtype)[a:b]
            acc.zero_()
            if order is None:  # every position was flagged by its owner before the first barrier
                order = [p for p, f in enumerate(flags.tolist()) if f]
            for p in order:
                acc.add_(table[p, a:b])
            self.barrier()
            result[lo : lo + n].copy_(self._out(n, dtype))
        self.reduce_seconds += time.perf_counter() - t0
        return result.to(device)


def _sum_in_order(arrays: list) -> Any:
    """The ranks' arrays added in rank order, from zero, in their dtype (numpy: one rounding per addition)."""
    out = np.zeros_like(arrays[0])
    for a in arrays:
        out = np.asarray(out + a)
    return out


def _segments(widths: list[int]):
    """For the concatenation of rows of these widths: the pieces (tensor, start, end, offset in block) of columns [lo,
    hi)."""
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
    """SIGKILL this process when its parent, the warm server, dies (Linux: the server ends when rank 0 does,
    fedcli/runtime/warm.py); leave now if rank 0 (``parent_pid``) is already gone."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        os._exit(1)
    except OSError:
        pass


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""


def _worker_main(rank: int, size: int, conn, arena: torch.Tensor, target, args: tuple, parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    try:  # a session of its own: out of the terminal's process group (Ctrl-C goes to rank 0 only), and with
        os.setsid()  # autogroup scheduling its own CPU share, as any separately started program (Ray's workers too)
    except OSError:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    comm = PoolCommunicator(rank, size, [conn], arena)
    code = 0
    try:
        target(comm, *args)
        comm.barrier()  # rank 0 closes the run directory while this process is still alive
    except RootGone:
        code = 1
    except FedcliError as e:
        code = int(getattr(e, "exit_code", 1))
        if not getattr(e, "collective", False):
            comm.fail(code, f"{e}")
    except BaseException as e:
        code = 1
        comm.fail(1, f"{type(e).__name__}: {e}{_where(e)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------------------------- the pool
class WorkerPool:
    """Rank 0's side: starts ranks 1..size-1 and ends them. Each worker runs ``target(comm, *args)`` with its
    :class:`PoolCommunicator` (``target`` a module-level function, ``args`` picklable: the workers start from the
    warm server, fedcli/runtime/warm.py, with this process's environment and standard output and error; the arena
    travels in shared memory, the collectives' objects by value); ``clients``: the run's client count (sizes the
    arena)."""

    def __init__(self, size: int, target, args: tuple, clients: int = 1):
        import torch.multiprocessing

        from fedcli.runtime import warm

        ctx = warm.context()
        total = max(1, int(clients))
        arena_bytes = max(ARENA_BYTES, (total + 2) * 4096 * 8 * 8 // 7)
        self.arena = torch.zeros(arena_bytes, dtype=torch.uint8).share_memory_()
        self.procs, conns = [], []
        for rank in range(1, size):
            mine, theirs = ctx.Pipe(duplex=True)
            p = ctx.Process(
                target=warm.run,
                name=f"fedcli-worker-{rank}",
                daemon=True,
                args=(warm.inherit(), _worker_main, (rank, size, theirs, self.arena, target, args, os.getpid())),
            )
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
            cores.add(
                (topo.joinpath("physical_package_id").read_text().strip(), topo.joinpath("core_id").read_text().strip())
            )
        except OSError:
            cores.add(("cpu", str(c)))
    return max(1, len(cores))
