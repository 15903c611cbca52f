"""The storages ``fedcli tune``'s study workers share, and the locks that make them safe (issue 59, "study workers";
docs/tuning.md, "Study workers").

Several worker processes (``--study-workers K``) ask trials of one Optuna study. Two guarantees need more than
Optuna gives:

- **The trial count is never exceeded.** A worker counts the study's trials and asks a new one as one step under the
  study's *ask lock* (:func:`ask_lock`): PostgreSQL's session advisory lock (``pg_advisory_lock`` on a connection of
  its own: dropped by the server when the worker's connection dies), or on one node an ``flock`` on a file next to the
  journal or the SQLite file (dropped by the kernel when the worker dies). An orphan is claimed under the same lock.
- **SQLite with more than one writer.** Optuna's RDBStorage numbers trials and pops enqueued ones with ``SELECT ... FOR
  UPDATE``, which SQLite ignores: 4 processes popping 40 enqueued trials evaluated 3 to 11 of them twice and crashed
  on ``UpdateFinishedTrialError`` (measured, ``tests/sweep/test_tune_workers.py``). :class:`LockedStorage` serializes
  every call to the storage with an ``flock`` on ``<db>.lock`` (one node: the lock is the kernel's).

The file locks are :class:`fedcli.results.lock.FileLock` in its waiting, re-entrant mode (``wait=True``): the ask lock
of a SQLite study is also the lock of every storage call made inside it.

A journal record cut by a worker killed while appending is dropped by the next append (:class:`RepairingJournal`),
under Optuna's own journal lock, before it writes (a record written after a cut line would make the whole journal
unreadable). Optuna is imported inside the functions.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.results.lock import FileLock
from fedcli.safefs import open_fd


class AdvisoryLock:
    """PostgreSQL's session advisory lock on ``key`` (``pg_advisory_lock``), held on a connection of its own from the
    storage's engine for the ``with`` block; the server drops it when that connection ends (the worker died)."""

    def __init__(self, engine, key: int):
        self.engine, self.key, self.conn = engine, key, None

    def __enter__(self):
        from sqlalchemy import text

        self.conn = self.engine.connect()
        self.conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self.key})
        self.conn.commit()
        return self

    def __exit__(self, *exc):
        from sqlalchemy import text

        try:
            self.conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            self.conn.commit()
        finally:
            self.conn.close()
            self.conn = None


def lock_key(name: str) -> int:
    """A signed 64-bit advisory-lock key for the study ``name`` (the first 8 bytes of its sha256)."""
    return int.from_bytes(hashlib.sha256(f"fedcli-tune:{name}".encode()).digest()[:8], "big", signed=True)


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL, else None."""
    if not url.startswith("sqlite:"):
        return None
    return Path(url.split(":///", 1)[1]) if ":///" in url else None


def dialect(kind: str, what: str) -> str:
    """``journal``, ``sqlite`` or a URL's dialect (``postgresql``, ``mysql``, ...), the word the rules go by."""
    if kind in ("journal", "sqlite"):
        return kind
    if sqlite_path(what) is not None:
        return "sqlite"
    return what.split("://", 1)[0].split("+", 1)[0]


def _delegate(name: str):
    def call(self, *args, **kwargs):
        with self._lock:
            return getattr(self._inner, name)(*args, **kwargs)

    call.__name__ = name
    return call


def _locked_storage_class():
    """The class of :class:`LockedStorage`, built once Optuna is imported: every public method of Optuna's BaseStorage
    delegates to the wrapped storage under the lock."""
    from optuna.storages import BaseStorage

    names = [n for n in dir(BaseStorage) if not n.startswith("_") and callable(getattr(BaseStorage, n))]

    def __init__(self, inner, lock: FileLock):
        self._inner, self._lock = inner, lock

    body = {n: _delegate(n) for n in names}
    body.update(__init__=__init__, __doc__="Optuna's storage ``inner`` with every call serialized by ``lock``.")
    return type("LockedStorage", (BaseStorage,), body)


_CLASS: dict = {}


def LockedStorage(inner, lock: FileLock):
    """``inner`` (Optuna's RDBStorage on SQLite) with every call made under ``lock`` (an ``flock`` on ``<db>.lock``)."""
    if "cls" not in _CLASS:
        _CLASS["cls"] = _locked_storage_class()
    return _CLASS["cls"](inner, lock)


def _repairing_journal_class():
    from optuna.storages.journal import JournalFileBackend

    class RepairingJournal(JournalFileBackend):
        """Optuna's journal file; an append first drops a last record cut by a writer that died mid-append (it holds
        Optuna's journal lock then, so no live writer is appending)."""

        def append_logs(self, logs):
            import json

            data = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in logs).encode()
            self._lock.acquire()
            try:
                drop_cut_tail(Path(self._file_path))
                fd = open_fd(self._file_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, doing="append to the journal")
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                self._lock.release()

    return RepairingJournal


def drop_cut_tail(path: Path) -> int:
    """Truncate ``path`` back to its last newline when its last byte is not one (a record cut mid-write); the bytes
    dropped."""
    fd = open_fd(path, os.O_RDWR | os.O_CREAT, doing="repair the journal")
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return 0
        keep = size
        while keep > 0:
            start = max(0, keep - 65536)
            i = os.pread(fd, keep - start, start).rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            keep = start
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return size - keep
    finally:
        os.close(fd)


class Shared:
    """The storage of a study folder as the workers open it, and its ask locks (module docstring)."""

    def __init__(self, kind: str, what: str, root: Path):
        self.kind, self.what, self.root = kind, what, Path(root)
        self.dialect = dialect(kind, what)
        self.file_lock = None
        self.storage = self._open()

    def _open(self):
        import optuna

        if self.kind == "journal":
            from optuna.storages.journal import JournalStorage

            return JournalStorage(_repairing_journal_class()(self.what))
        rdb = optuna.storages.RDBStorage(self.what)
        if self.dialect == "sqlite":
            self.file_lock = FileLock(f"{sqlite_path(self.what)}.lock", wait=True)
            return LockedStorage(rdb, self.file_lock)
        self.rdb = rdb
        return rdb

    def ask_lock(self, study_name: str):
        """The lock under which a worker counts the study's trials and asks (or claims) one."""
        if self.dialect == "postgresql":
            return AdvisoryLock(self.rdb.engine, lock_key(study_name))
        if self.file_lock is not None:
            return self.file_lock
        if self.kind == "journal":
            if not hasattr(self, "journal_lock"):
                self.journal_lock = FileLock(f"{self.what}.ask.lock", wait=True)
            return self.journal_lock
        raise ConfigError(
            f"study workers cannot share a {self.dialect} database (they serialize their asks with "
            f"PostgreSQL's advisory lock): use a postgresql URL, or journal or sqlite on one node"
        )
