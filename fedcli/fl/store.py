"""Per-client state that lives across rounds, kept off the device: in memory while small, on disk beyond that.

Personalized models, optimizer moments, control variates and ALA weights belong to a client, not to a cohort slot.
The store keeps one row per (table name, client) and gathers/scatters them as stacked ``[K, *shape]`` tensors for the
cohort on this process. Two kinds, chosen once per run by ``--client-state`` (``choose_mode``):

- :class:`MemoryStore`: one CPU tensor per (table, client). Fast, and memory grows with every client that has state.
- :class:`DiskStore`: the rows on disk in ``RUN_DIR/client-state/``, in memory only the rows of the clients being
  trained or evaluated now plus an LRU cache of ``--client-cache-mb``. Memory does not grow with the client count.

The disk format is raw fixed-size rows, one append-only file per (table, process): ``g<gen>/r<rank>/<table>.bin``,
row ``i`` at byte ``i * row_bytes`` (readable with ``numpy.memmap(path, dtype, shape=(rows, *shape))``), and an index
(client -> process, row, CRC-32) that every process holds and every checkpoint records. Why not safetensors or one
file per client: a safetensors file is written whole with its header, so updating a few of 10,000 clients would
rewrite the file (or keep 10^4-10^5 small files, one header parse per read); fixed rows appended to one file per
process let every process write without locks, let any process read exactly the rows it needs (``os.pread``; the
pages stay in the OS page cache, not in the process), and make a checkpoint cheap: the index and the file lengths
(a few bytes per client), not a copy of the state. A resume cuts each file back to the length its checkpoint
recorded, so rows written after the checkpoint (a SIGKILL mid-round) are dropped and the resumed run is bitwise the
uninterrupted one. Files grow by the cohort's rows each round; when dead rows outweigh live ones (and pass
``COMPACT_SLACK`` bytes) every process rewrites its live rows into a new generation ``g<gen+1>`` at a round
boundary; a generation is deleted once neither the current state nor a kept checkpoint refers to it (so at most
``--keep-checkpoints`` + 1 generations are on disk). A row whose bytes do not match its CRC-32, or that lies beyond
its file's end, is a :class:`~fedcli.errors.DataError` (exit 3) naming the client and the file. When the run
completes, what it no longer needs goes (:meth:`DiskStore.finish_run`): every table but the clients' personal models
(``--client-state-keep``), which stay with ``client-state/index.pt``.

Never through a link: every file of ``client-state/`` the store opens, creates, truncates, replaces or deletes is
reached through descriptors (``fedcli.safefs.Folder``): the run folder (the user's choice of place) as a path, then the
store's folder, the generation and the rank folder each opened from the one above with ``O_NOFOLLOW``, and the file
relative to the last; folders are listed and removed through them too. A link at any of them is refused (exit 2,
naming it), whenever it was planted: there is no window between a check and the write in which one redirects it.
"""

from __future__ import annotations

import os
import re
import shutil
import zlib
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedcli.errors import DataError, os_error
from fedcli.fl.context import StoreContext
from fedcli.safefs import Folder

FOLDER = "client-state"  # RUN_DIR/client-state (fedcli.results.rundir.CLIENT_STATE, the run directory's contract)
MiB = 1 << 20
COMPACT_SLACK = 64 * MiB  # dead bytes tolerated before a compaction, whatever the live size
INDEX = "index.pt"  # a completed run's index of the rows it kept (client -> process, row, CRC-32), in client-state/
# the hooks in which a part may keep state in the store: a class that defines one declares ``kept_state`` again
STATE_HOOKS = (
    "setup",
    "begin_round",
    "end_round",
    "initialize",
    "download",
    "received",
    "update",
    "synchronized",
    "offer",
)


def choose_mode(cfg, projected: int) -> tuple[str, int]:
    """``(mode, projected bytes)``: ``--client-state`` memory or disk as asked; auto: disk when the state the run
    projects to keep (:func:`projection`) exceeds ``--client-state-limit-mb``. The same on every process (it
    depends on the config and the model only)."""
    projected = int(projected)
    if cfg.client_state != "auto":
        return cfg.client_state, projected
    return ("disk" if projected > cfg.client_state_limit_mb * MiB else "memory"), projected


def size(n: float) -> str:
    """``n`` bytes for a person: KiB below one MiB, MiB below one GiB, else GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 1024:,.1f} KiB"


def declared_state(part, view) -> int | None:
    """The bytes ``part`` declares it keeps across rounds (``Part.kept_state``), or None when a class below the one
    that declared it adds round hooks (``STATE_HOOKS``) without declaring again: unknown."""
    mro = type(part).__mro__
    at = next(i for i, c in enumerate(mro) if "kept_state" in vars(c))
    if any(h in vars(c) for c in mro[:at] for h in STATE_HOOKS):
        return None
    return int(part.kept_state(view))


def projection(ctx: StoreContext) -> tuple[int, list[str]]:
    """``(bytes, what)``: the client state the run will keep at most, by what is really kept: each part's declaration
    (SGD momentum by cohort slot: the cohort size x the parameters, not every client's), the BatchNorm statistics
    per slot (``--bn-buffers never``), and one model per client for a personalized method (its local models) or a
    part that does not say what it keeps."""
    params = sum(t.numel() * t.element_size() for t in ctx.global_params.values())
    buffers = sum(t.numel() * t.element_size() for t in ctx.global_buffers.values())
    clients, total, what, unknown = len(ctx.client_indices), 0, [], []
    for family, part in ctx.parts.items():
        n = declared_state(part, ctx.view)
        if n is None:
            unknown.append(f"{family} {getattr(part, 'name', type(part).__name__)}")
        elif n:
            total += n
            what.append(f"{family} {getattr(part, 'name', type(part).__name__)}: {size(n)}")
    if ctx.cfg.bn_buffers == "never" and buffers:
        total += ctx.n_active * buffers
        what.append(f"BatchNorm statistics by slot: {ctx.n_active} x {size(buffers)}")
    parts = ctx.parts.values()
    if ctx.method.personalized or unknown or any(p.keeps_local_models or p.personal_prefix for p in parts):
        total += clients * (params + buffers)
        why = f"per-client state of {', '.join(unknown)}" if unknown else "personal models"
        what.append(f"{why}: {clients} clients x {size(params + buffers)}")
    return total, what


def build_store(ctx: StoreContext) -> "MemoryStore | DiskStore":
    """The run's client store (the engine's ``store``), by :func:`choose_mode`; a disk store lives in
    ``RUN_DIR/client-state`` (a temporary folder, removed at exit, when the run has no directory)."""
    cfg, comm = ctx.cfg, ctx.comm
    projected, what = projection(ctx)
    mode, projected = choose_mode(cfg, projected)
    info = {
        "mode": mode,
        "projected_mb": round(projected / MiB, 1),
        "projected_bytes": projected,
        "limit_mb": cfg.client_state_limit_mb,
        "projected_from": what,
        "keep_at_end": cfg.client_state_keep,
    }
    if mode == "memory":
        store = MemoryStore()
    else:
        if cfg.out:
            root = Path(cfg.out) / FOLDER
        else:
            import atexit
            import tempfile

            made = tempfile.mkdtemp(prefix="fedcli-client-state-") if comm.is_root else None
            root = Path(comm.bcast(made))
            if comm.is_root:
                atexit.register(shutil.rmtree, root, True)
        # --client-cache-mb is the node's: its processes (MPI ranks, --workers) keep an even share each
        store = DiskStore(root, comm.rank, comm.size, cache_bytes=cfg.client_cache_mb * MiB // comm.node_size)
        info.update(
            folder=str(root) if not cfg.out else FOLDER,
            cache_mb=cfg.client_cache_mb,
            cache_mb_per_process=round(cfg.client_cache_mb / comm.node_size, 1),
            format="raw rows + CRC-32 index",
        )
    store.info = info
    return store


def describe(info: dict) -> str | None:
    """The line a run says about its client state (where it goes, how big it may grow); None when it keeps none."""
    if not info.get("projected_bytes"):
        return None
    where = f"on disk in {info['folder']}" if info["mode"] == "disk" else "in memory (checkpoints hold a copy)"
    return (
        f"client state: up to {size(info['projected_bytes'])} ({'; '.join(info.get('projected_from', []))}), "
        f"{where}; --client-state-limit-mb {info['limit_mb']}"
    )


def _who(name: str, key: int) -> str:
    return f"slot {key}" if ".slot:" in name else f"client {key}"


def _merged(state: dict, root_state: dict | None) -> dict:
    """A memory store's checkpoint tables, those every process holds (``MemoryStore.REPLICATED``) taken from the root
    process's part of the checkpoint, where they are written once."""
    names = state.get(MemoryStore.REPLICATED, [])
    tables = {n: t for n, t in state.items() if n != MemoryStore.REPLICATED}
    for n in names:
        if n not in tables:
            tables[n] = root_state[n]
    return tables


class MemoryStore:
    """Every row a CPU tensor in ``tables[name][client]``.

    A table that every process holds whole (``publish`` gave every process every row: cohort slots, or partial
    participation under several processes) is ``replicated``: a checkpoint holds it once, in the root's part, not
    once per process (two workers would double the checkpoint of the FEMNIST example's slot momentum, docs/usage.md)."""

    kind = "memory"
    REPLICATED = "memory-store-replicated"

    def __init__(self):
        self.tables: dict[str, dict[int, torch.Tensor]] = {}
        self.replicated: set[str] = set()
        self.info: dict = {"mode": "memory"}

    def get(self, name: str, key: int) -> torch.Tensor | None:
        return self.tables.get(name, {}).get(key)

    def gather(self, name: str, clients: list[int], init: Callable[[int], torch.Tensor], device) -> torch.Tensor:
        """Stacked state of ``clients``; a client without state yet gets ``init(client)``."""
        rows = [self.get(name, c) for c in clients]
        rows = [r if r is not None else init(c).detach().cpu() for r, c in zip(rows, clients)]
        return torch.stack(rows).to(device)

    def scatter(self, name: str, clients: list[int], stacked: torch.Tensor) -> None:
        table = self.tables.setdefault(name, {})
        cpu = stacked.detach().cpu()
        for k, c in enumerate(clients):
            table[c] = cpu[k].clone()

    def has(self, name: str, client: int) -> bool:
        return self.get(name, client) is not None

    def names(self) -> list[str]:
        return list(self.tables)

    def forget(self, name: str, key: int) -> None:
        self.tables.get(name, {}).pop(key, None)

    # round boundaries, checkpoints and the end: nothing to do in memory
    def end_round(self, comm) -> None:
        pass

    def end_plan(self, keep_prefixes: tuple[str, ...]) -> dict:
        return {}

    def write_end(self) -> None:
        pass

    def finish_run(self) -> None:
        pass

    def pin(self, round_idx: int, keep: int) -> None:
        pass

    def close(self) -> None:
        pass

    def state_dict(self, root: bool = True) -> dict:
        """The tables (``root`` False: a process other than the root leaves out the replicated ones)."""
        out = {n: dict(t) for n, t in self.tables.items() if root or n not in self.replicated}
        return {**out, self.REPLICATED: sorted(self.replicated)} if self.replicated else out

    def load_state_dict(self, state: dict, root_state: dict | None = None) -> None:
        """Back to a checkpoint: this process's part ``state``, the replicated tables from the root's ``root_state``."""
        if DiskStore.KEY in state:
            raise DataError(
                "the checkpoint keeps its client state on disk (RUN_DIR/client-state) but this run keeps it in "
                "memory; resume with the --client-state it was written with"
            )
        self.replicated = set(state.get(self.REPLICATED, []))
        self.tables = {n: {int(c): v for c, v in t.items()} for n, t in _merged(state, root_state).items()}


class _Table:
    """One table's layout and index: for each key the process whose file holds its row, the row, its CRC-32."""

    def __init__(self, name: str, dtype: torch.dtype, shape: tuple, world: int):
        self.name, self.dtype, self.shape = name, dtype, tuple(int(s) for s in shape)
        self.row_bytes = int(np.prod(self.shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
        self.file = f"{safe}-{zlib.crc32(name.encode()):08x}.bin"
        self.where = np.full(0, -1, dtype=np.int32)
        self.row = np.zeros(0, dtype=np.int64)
        self.crc = np.zeros(0, dtype=np.int64)
        self.rows = [0] * world  # rows in each process's file (live or dead)

    def grow(self, n: int) -> None:
        if n > self.where.size:
            size = max(n, 2 * self.where.size)
            self.where = np.concatenate([self.where, np.full(size - self.where.size, -1, dtype=np.int32)])
            self.row = np.concatenate([self.row, np.zeros(size - self.row.size, dtype=np.int64)])
            self.crc = np.concatenate([self.crc, np.zeros(size - self.crc.size, dtype=np.int64)])

    def live(self) -> int:
        return int((self.where >= 0).sum())

    def state(self) -> dict:
        return {
            "dtype": str(self.dtype).removeprefix("torch."),
            "shape": list(self.shape),
            "rows": list(self.rows),
            "where": torch.from_numpy(self.where.copy()),
            "row": torch.from_numpy(self.row.copy()),
            "crc": torch.from_numpy(self.crc.copy()),
        }

    @classmethod
    def from_state(cls, name: str, s: dict, world: int) -> "_Table":
        t = cls(name, getattr(torch, s["dtype"]), tuple(s["shape"]), world)
        t.where, t.row, t.crc = (
            np.asarray(s[k].numpy(), dtype=d).copy()
            for k, d in (("where", np.int32), ("row", np.int64), ("crc", np.int64))
        )
        t.rows = [int(r) for r in s["rows"]]
        return t


class DiskStore:
    """Rows on disk (see the module docstring), an LRU cache of recently read or written rows in memory.

    Every process holds the same index: ``publish`` appends this process's rows to its own files and then applies
    every process's index entries (an allgather of a few integers per client, not of the tensors)."""

    kind = "disk"
    KEY = "disk-store"

    def __init__(
        self, root: Path, rank: int = 0, world: int = 1, cache_bytes: int = 64 * MiB, slack: int | None = None
    ):
        self.root, self.rank, self.world = Path(root), int(rank), int(world)
        self.cache_bytes, self.slack = int(cache_bytes), int(COMPACT_SLACK if slack is None else slack)
        self.tables: dict[str, _Table] = {}
        self.gen = 0
        self.cache: OrderedDict = OrderedDict()
        self.cache_used = 0
        self.fds: dict[tuple, int] = {}  # (gen, rank, file, for writing) -> open descriptor
        self.pins: dict[int, int] = {}  # checkpointed round -> the generation it refers to
        self.resumed = False  # older checkpoints of unknown generations may be on disk
        self.fresh = True  # nothing written yet: this process's old files are wiped first
        self.info: dict = {"mode": "disk"}

    # ------------------------------------------------------------------ files
    def path(self, gen: int, rank: int, file: str = "") -> Path:
        p = self.root / f"g{gen}" / f"r{rank}"
        return p / file if file else p

    @contextmanager
    def _in(self, *parts: str, create: bool = False):
        """The folder ``client-state/<parts>`` held by a descriptor (:class:`~fedcli.safefs.Folder`), or None where one
        of
        them is missing (``create``: made): the folder holding the store's (the run folder, the user's choice of place)
        reached as a path, each folder below it opened from the one above without following a link, so a link at any
        of them is refused (``LinkRefused``, exit 2, naming it) whenever it was planted, and never written through."""
        if not create and not os.path.isdir(self.root.parent):
            yield None
            return
        folder = Folder.at(self.root.parent)
        try:
            for piece in (self.root.name, *parts):
                inner = folder.sub(piece, create=create)
                folder.close()
                folder = inner
                if folder is None:
                    break
            yield folder
        finally:
            if folder is not None:
                folder.close()

    def _remove_own(self, gen: int) -> None:
        """Delete this process's folder of generation ``gen`` and everything in it (through descriptors)."""
        with self._in(f"g{gen}") as g:
            if g is not None:
                g.remove_tree(f"r{self.rank}")

    def _generations(self) -> list[int]:
        """Every generation with a folder on disk (listed through the store's folder's descriptor)."""
        with self._in() as root:
            names = root.names() if root is not None else []
        return sorted(int(n[1:]) for n in names if n[:1] == "g" and n[1:].isdigit())

    def _fd(self, rank: int, file: str, write: bool = False) -> int:
        k = (self.gen, rank, file, write)
        fd = self.fds.get(k)
        if fd is None:
            with self._in(f"g{self.gen}", f"r{rank}", create=write) as d:
                if not write and (d is None or d.size(file) < 0):
                    raise DataError(
                        f"{self.path(self.gen, rank, file)}: missing; expected the client-state file of "
                        f"process {rank} (raw rows of the client store)"
                    )
                fd = self.fds[k] = d.open_fd(file, os.O_RDWR | os.O_CREAT if write else os.O_RDONLY, doing="open")
        return fd

    def _close(self, gen: int | None = None) -> None:
        for k in [k for k in self.fds if gen is None or k[0] == gen]:
            os.close(self.fds.pop(k))

    def _wipe_own(self) -> None:
        """A fresh run in a folder that held another: drop this process's files of every generation."""
        self.fresh = False
        for gen in self._generations():
            self._remove_own(gen)

    # ------------------------------------------------------------------ cache
    def _cache_put(self, k, t: torch.Tensor) -> None:
        if k in self.cache:
            self.cache_used -= self.cache.pop(k).nbytes
        n = t.numel() * t.element_size()
        if n > self.cache_bytes:
            return
        self.cache[k] = t
        self.cache_used += n
        while self.cache_used > self.cache_bytes:
            _, old = self.cache.popitem(last=False)
            self.cache_used -= old.numel() * old.element_size()

    def _cache_drop(self, k) -> None:
        t = self.cache.pop(k, None)
        if t is not None:
            self.cache_used -= t.numel() * t.element_size()

    # ------------------------------------------------------------------ rows
    def table(self, name: str, dtype: torch.dtype, shape) -> _Table:
        t = self.tables.get(name)
        if t is None:
            t = self.tables[name] = _Table(name, dtype, shape, self.world)
        return t

    def get(self, name: str, key: int) -> torch.Tensor | None:
        k = (name, int(key))
        t = self.cache.get(k)
        if t is not None:
            self.cache.move_to_end(k)
            return t
        tab = self.tables.get(name)
        if tab is None or key >= tab.where.size or tab.where[key] < 0:
            return None
        rank, row = int(tab.where[key]), int(tab.row[key])
        buf = os.pread(self._fd(rank, tab.file), tab.row_bytes, row * tab.row_bytes) if tab.row_bytes else b""
        if len(buf) != tab.row_bytes or (zlib.crc32(buf) & 0xFFFFFFFF) != int(tab.crc[key]):
            why = "cut short" if len(buf) != tab.row_bytes else "checksum mismatch"
            raise DataError(
                f"{self.path(self.gen, rank, tab.file)}: {_who(name, key)}'s state '{name}' is damaged ({why}); "
                f"expected raw {str(tab.dtype).removeprefix('torch.')} rows of shape {list(tab.shape)} matching "
                f"the checkpoint's CRC-32 index (resume from another checkpoint, or start the run again)"
            )
        t = (
            torch.frombuffer(bytearray(buf), dtype=tab.dtype).reshape(tab.shape)
            if tab.row_bytes
            else torch.empty(tab.shape, dtype=tab.dtype)
        )
        self._cache_put(k, t)
        return t

    def has(self, name: str, key: int) -> bool:
        tab = self.tables.get(name)
        return tab is not None and key < tab.where.size and tab.where[key] >= 0

    def names(self) -> list[str]:
        return list(self.tables)

    def gather(self, name: str, clients: list[int], init: Callable[[int], torch.Tensor], device) -> torch.Tensor:
        """Stacked state of ``clients`` (read from disk or the cache, row by row into the stacked tensor); a client
        without state yet gets ``init(client)``."""
        out = None
        for i, c in enumerate(clients):
            row = self.get(name, c)
            row = row if row is not None else init(c).detach().cpu()
            if out is None:
                out = torch.empty((len(clients), *row.shape), dtype=row.dtype)
            out[i] = row
        return (out if out is not None else torch.stack([])).to(device)

    def write(self, keys: list[int], tables: dict[str, torch.Tensor]) -> dict:
        """Append this process's rows (``tables``: name -> ``[K, ...]`` CPU, rows in the order of ``keys``) to its
        files; returns the index entries every process applies with :meth:`apply`."""
        if self.fresh:
            self._wipe_own()
        record = {}
        for name, t in tables.items():
            tab = self.table(name, t.dtype, t.shape[1:])
            start = tab.rows[self.rank]
            crcs = []
            if keys and tab.row_bytes:
                raw = t.detach().contiguous().reshape(len(keys), -1).view(torch.uint8).numpy()
                crcs = [zlib.crc32(raw[k]) & 0xFFFFFFFF for k in range(len(keys))]
                fd, p = self._fd(self.rank, tab.file, write=True), self.path(self.gen, self.rank, tab.file)
                data = memoryview(raw).cast("B")
                try:
                    done = 0
                    while done < len(data):
                        done += os.pwrite(fd, data[done:], start * tab.row_bytes + done)
                except OSError as e:
                    raise os_error(e, p) from None
            elif keys:
                crcs = [0] * len(keys)
            for k, key in enumerate(keys):
                self._cache_put((name, int(key)), t[k].clone())
            record[name] = (str(t.dtype).removeprefix("torch."), list(t.shape[1:]), start, crcs)
        return record

    def apply(self, rank: int, keys: list[int], record: dict) -> None:
        """Point ``keys`` at the rows process ``rank`` wrote (:meth:`write`); on every process, in rank order."""
        for name, (dtype, shape, start, crcs) in record.items():
            tab = self.table(name, getattr(torch, dtype), shape)
            if keys:
                ks = np.asarray(keys, dtype=np.int64)
                tab.grow(int(ks.max()) + 1)
                tab.where[ks] = rank
                tab.row[ks] = start + np.arange(len(ks))
                tab.crc[ks] = np.asarray(crcs, dtype=np.int64)
                tab.rows[rank] = start + len(ks)
                if rank != self.rank:
                    for key in keys:
                        self._cache_drop((name, int(key)))

    def scatter(self, name: str, clients: list[int], stacked: torch.Tensor) -> None:
        """One process's store only (``publish`` is the collective way)."""
        self.apply(self.rank, clients, self.write(clients, {name: stacked.detach().cpu()}))

    def forget(self, name: str, key: int) -> None:
        tab = self.tables.get(name)
        if tab is not None and key < tab.where.size:
            tab.where[key] = -1
        self._cache_drop((name, int(key)))

    # ------------------------------------------------------------------ round boundaries, checkpoints
    def end_round(self, comm) -> None:
        """At a round boundary (every process, same decision): compact when dead rows outweigh live ones."""
        live = sum(t.live() * t.row_bytes for t in self.tables.values())
        total = sum(sum(t.rows) * t.row_bytes for t in self.tables.values())
        if total - live > max(live, self.slack):
            self.compact(comm)

    def compact(self, comm) -> None:
        """Rewrite every process's live rows into generation ``gen + 1``, in key order (each process its own files;
        every process computes the new rows of all of them, so no index travels). Collective."""
        old, new = self.gen, self.gen + 1
        moves = []
        for tab in self.tables.values():
            keys = np.nonzero(tab.where >= 0)[0]
            row = np.zeros_like(tab.row)
            rows = [0] * self.world
            for q in range(self.world):
                mine = keys[tab.where[keys] == q]
                row[mine] = np.arange(len(mine))
                rows[q] = len(mine)
                if q == self.rank and len(mine):
                    moves.append((tab, [int(tab.row[k]) for k in mine]))
            tab.row, tab.rows = row, rows
        self.gen = new
        self._remove_own(new)  # left by a run resumed from before it
        for tab, rows in moves:
            self.gen = old
            src = self._fd(self.rank, tab.file)
            self.gen = new
            dst = self._fd(self.rank, tab.file, write=True)
            for i, r in enumerate(rows):
                buf = os.pread(src, tab.row_bytes, r * tab.row_bytes)
                os.pwrite(dst, buf, i * tab.row_bytes)
        self._close(old)
        comm.barrier()  # every process's new files are complete before anyone reads them
        self._release()

    def pin(self, round_idx: int, keep: int) -> None:
        """A checkpoint of ``round_idx`` was written (every process): it refers to the current generation. Other
        generations that no kept checkpoint refers to are deleted; the files are flushed to the disk."""
        for fd in self.fds.values():
            try:
                os.fsync(fd)
            except OSError:
                pass
        self.pins[int(round_idx)] = self.gen
        self.pins = dict(sorted(self.pins.items())[-int(keep) :])
        self.keep = int(keep)
        self._release()

    def _release(self) -> None:
        """Delete this process's files of every generation older than the current one that no kept checkpoint
        refers to (a generation between two pinned ones goes too): at most ``keep`` + 1 generations stay."""
        if self.resumed and len(self.pins) < getattr(self, "keep", 1 << 30):
            return  # a checkpoint older than the resumed one may still refer to an older generation
        needed = {*self.pins.values(), self.gen}
        for gen in self._generations():
            if gen < self.gen and gen not in needed:
                self._drop_generation(gen)

    def _drop_generation(self, gen: int) -> None:
        self._remove_own(gen)
        with self._in() as root:
            if root is not None:
                root.rmdir(f"g{gen}")  # unless another process's files are still there

    def state_dict(self, root: bool = True) -> dict:
        return {self.KEY: {"gen": self.gen, "tables": {n: t.state() for n, t in self.tables.items()}}}

    def load_state_dict(self, state: dict, root_state: dict | None = None) -> None:
        """Back to a checkpoint: its index, and this process's files cut back to the lengths it recorded (rows
        written after it are dropped; files of later generations deleted)."""
        self._close()
        self.cache.clear()
        self.cache_used = 0
        self.fresh, self.resumed = False, True
        if self.KEY not in state:  # a checkpoint of a run that kept its state in memory: write it here
            self._write_memory_checkpoint(state, root_state)
            return
        s = state[self.KEY]
        self.gen = int(s["gen"])
        self.tables = {n: _Table.from_state(n, t, self.world) for n, t in s["tables"].items()}
        for gen in self._generations():
            if gen > self.gen:
                self._remove_own(gen)
        with self._in(f"g{self.gen}", f"r{self.rank}") as d:
            for tab in self.tables.values():
                self._cut_back(d, tab)
        self.pins = {}

    def _write_memory_checkpoint(self, state: dict, root_state: dict | None) -> None:
        """Start the store afresh from a checkpoint of a run that kept its client state in memory."""
        self.tables, self.gen = {}, 0
        self._wipe_own()
        for name, rows in _merged(state, root_state).items():
            keys = sorted(int(c) for c in rows)
            if keys:
                self.scatter(name, keys, torch.stack([rows[c] for c in keys]))

    def _cut_back(self, d, tab: "_Table") -> None:
        """Cut this process's file of ``tab`` back to the length the checkpoint recorded; a shorter file is lost."""
        want = tab.rows[self.rank] * tab.row_bytes
        if not want:
            return
        p = self.path(self.gen, self.rank, tab.file)
        size = d.size(tab.file) if d is not None else -1
        if size < want:
            first = next(
                (
                    int(k)
                    for k in np.nonzero((tab.where == self.rank) & ((tab.row + 1) * tab.row_bytes > max(size, 0)))[0]
                ),
                None,
            )
            whose = f"{_who(tab.name, first)}'s state '{tab.name}' is " if first is not None else ""
            raise DataError(
                f"{p}: {'missing' if size < 0 else f'cut short ({size} of {want} bytes)'}, so "
                f"{whose}lost; expected "
                f"the client-state file the checkpoint refers to (resume from another checkpoint, "
                f"or start again)"
            )
        if size > want:  # through the rank folder's descriptor, O_NOFOLLOW: never the file a link points to
            fd = d.open_fd(tab.file, os.O_WRONLY, doing="truncate")
            try:
                os.ftruncate(fd, want)
            except OSError as e:
                raise os_error(e, p, "truncate") from None
            finally:
                os.close(fd)

    def close(self) -> None:
        self._close()

    # ------------------------------------------------------------------ the end of a completed run
    def end_plan(self, keep_prefixes: tuple[str, ...]) -> dict:
        """What :meth:`finish_run` will leave: the tables whose names start with one of ``keep_prefixes`` (the
        personal models, ``--client-state-keep personal``), their live rows' size; the manifest records it."""
        self.keep_tables = sorted(n for n in self.tables if keep_prefixes and n.startswith(keep_prefixes))
        kept = sum(self.tables[n].live() * self.tables[n].row_bytes for n in self.keep_tables)
        return {
            "kept_tables": len(self.keep_tables),
            "kept_mb": round(kept / MiB, 1),
            "kept": f"{FOLDER}/g{self.gen} with {FOLDER}/{INDEX}" if self.keep_tables else "nothing",
        }

    def write_end(self) -> None:
        """The last round is done (every process, before the manifest says ``completed``): this process's files are
        flushed to the disk and the root writes the index of the tables :meth:`end_plan` keeps
        (``client-state/index.pt``,
        the checkpoint's format). Nothing goes yet: a failure here (a full disk) leaves every file the last checkpoint
        refers to, so the run resumes from it; :meth:`finish_run` removes the rest once the manifest says completed."""
        for fd in self.fds.values():
            try:
                os.fsync(fd)
            except OSError:
                pass
        keep = getattr(self, "keep_tables", [])
        if keep and self.rank == 0:
            import io

            buf = io.BytesIO()
            torch.save({self.KEY: {"gen": self.gen, "tables": {n: self.tables[n].state() for n in keep}}}, buf)
            with self._in(create=True) as root:
                root.atomic_write(INDEX, buf.getvalue())

    def finish_run(self) -> None:
        """The run completed (every process, after the manifest says so, which :meth:`write_end` preceded; no
        collective): this process's files of every other generation go, and of the current one every table but those
        :meth:`end_plan` keeps (indexed by ``client-state/index.pt``); an empty folder goes."""
        self._close()
        keep = getattr(self, "keep_tables", [])
        files = {self.tables[n].file for n in keep}
        for gen in self._generations():
            if gen != self.gen or not keep:
                self._drop_generation(gen)
                continue
            with self._in(f"g{gen}", f"r{self.rank}") as mine:
                for name in mine.names() if mine is not None else []:
                    if name not in files:
                        mine.refuse_link(name)
                        mine.unlink(name)
        if not keep:
            with self._in() as root:
                there = root is not None  # not a link (refused)
            if there:
                with Folder.at(self.root.parent) as top:
                    top.rmdir(self.root.name)  # unless another process's files are still there


ClientStore = MemoryStore  # the name other code used for the in-memory store


def publish(view, clients: list[int], tables: dict[str, torch.Tensor], skipped=(), everywhere: bool = False) -> None:
    """Keep stacked per-client tensors (table name -> ``[K, ...]``, rows in the order of ``clients``, this process's
    cohort clients, or other keys such as cohort slots) in the client store across rounds: the one way parts store
    per-client state.

    Skip-aware: a client in ``skipped`` (``--on-diverge skip-client``) keeps its previous state. Collective under
    MPI: every process calls it at the same point, with or without clients of its own.

    On disk (:class:`DiskStore`): each process appends its own rows to its own files and every process learns where
    they are (an allgather of the index entries, a few integers per client); the process that trains or evaluates a
    client later reads its rows from the file, so no tensor is copied to every process. In memory: one process, or
    full participation (a client always trains and is evaluated on the same process, ``everywhere`` False), keeps its
    own rows; otherwise every process gets every update (one allgather of the tensors), so the next process to train
    or evaluate a client finds its state. ``everywhere``: keys that move between processes even with full
    participation (cohort slots).
    """
    keep = [k for k, c in enumerate(clients) if c not in skipped]
    kept = [clients[k] for k in keep]
    if len(keep) == len(clients):  # nobody skipped: no row-selecting copy of the cohort's tensors
        cpu = {name: t.detach().cpu() for name, t in tables.items()}
    else:
        rows = torch.tensor(keep, dtype=torch.long)
        cpu = {name: t.detach().cpu()[rows] for name, t in tables.items()}
    comm, store = view.comm, view.store
    if store.kind == "disk":
        record = store.write(kept, cpu)
        gathered = [(kept, record)] if comm.size == 1 else comm.allgather((kept, record))
        for rank, (cl, rec) in enumerate(gathered):
            store.apply(rank, cl, rec)
        return
    if comm.size == 1 or (view.full_participation and not everywhere):
        gathered = [(kept, cpu)]
    else:
        gathered = comm.allgather((kept, cpu))
        store.replicated.update(tables)  # every process holds every row: a checkpoint needs it once
    for cl, tabs in gathered:
        if cl:
            for name, t in tabs.items():
                store.scatter(name, cl, t)
