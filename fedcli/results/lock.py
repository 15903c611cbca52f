"""One writer per run directory, and sweep workers that live no longer than their sweep.

- :class:`FileLock`: an ``flock`` on a small file, held through an open descriptor for as long as the holder
  runs. The kernel drops it when the process ends in any way (SIGKILL and the OOM killer included), so a stale
  lock of a dead process is simply taken over, and a reused process id can never keep a lock alive. The file
  holds the holder's pid, host, start time and command, for the message that names it. Where ``flock`` is not
  supported (some network file systems), the content decides: the lock is held while its recorded process is
  alive on this host with the same start time (``/proc/PID/stat``: a reused pid has another start time).
- :class:`RunLock`: ``RUN_DIR/.fedcli.lock``, taken by ``fedcli train`` (rank 0 under MPI) before it writes
  anything, kept to the end of the run; ``--overwrite`` and ``--resume`` need it too.
- Sweeps (``fedcli/sweep/run.py``, ``executors.py``): every worker process holds a *shared* lock on
``SWEEP/.sweep.workers.lock``
  for its whole life, and a sweep takes that lock exclusively before it starts: so the sweep folder is not
  free while any worker of an earlier sweep lives. Each worker also watches its sweep process
  (:func:`watch_process`) and stops when it is gone (SIGKILL of the sweep leaves no worker training).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from fedcli.errors import ConfigError, FedcliError
from fedcli.results.masking import masked
from fedcli.safefs import open_fd

RUN_LOCK = ".fedcli.lock"
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class RunLocked(ConfigError):
    """The run directory is in use by another live fedcli process (exit 2)."""


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, ``/proc/PID/stat`` field 22); None if unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid, start: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, given ``start``, is the same process (not a reused pid)."""
    try:
        pid = int(pid)
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return False
        return start is None or int(fields[19]) == int(start)
    except (OSError, ValueError, IndexError):
        return True  # no /proc: trust kill(0)


def me() -> dict:
    """What a lock file records about its holder."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "start": start_time(os.getpid()),
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": masked(" ".join(sys.argv)),
    }


class FileLock:
    """An exclusive (or ``shared``) ``flock`` on ``path``, held until :meth:`release` or the process ends.

    By default :meth:`acquire` refuses at once (False) when another live process holds the lock. With ``wait=True``
    it waits until the lock is free and is re-entrant within the process: a thread's nested acquire (or ``with``)
    only counts, and the lock goes at the matching last release (other threads of the process wait on a mutex), so
    that the ask lock of a SQLite study is also the lock of every storage call made inside it
    (:mod:`fedcli.tune.storages`). ``with``: a waiting lock is taken on entry; a refusing one is taken before
    (the caller reads :meth:`acquire`'s answer); both are released on exit."""

    #: how often a waiting acquire looks again where ``flock`` is not supported (the recorded holder decides)
    POLL_S = 0.2

    def __init__(self, path: str | Path, shared: bool = False, wait: bool = False):
        self.path, self.shared, self.wait = Path(path), shared, wait
        self.fd: int | None = None
        self.depth = 0
        self.mutex = threading.RLock() if wait else None

    def acquire(self) -> bool:
        """Take the lock: without ``wait`` False when another live process holds it; with ``wait`` True once it is
        this process's (a nested acquire counts, see the class)."""
        if not self.wait:
            return self.fd is not None or self._take()
        self.mutex.acquire()
        try:
            if self.depth == 0:
                while not self._take():
                    time.sleep(self.POLL_S)
        except BaseException:
            self.mutex.release()
            raise
        self.depth += 1
        return True

    def _take(self) -> bool:
        """One try at the file that is at ``path`` now; False when a live process holds it (a waiting lock waits in
        ``flock``, so it is False only where ``flock`` is not supported and the recorded holder lives)."""
        fd = open_fd(self.path, os.O_RDWR | os.O_CREAT, doing="create the lock file")  # never through a link
        try:
            got = self._flock(fd)
        except BaseException:  # an error of a waiting flock, or a signal's exception while it waits
            os.close(fd)
            raise
        if not got:
            os.close(fd)
            return False
        if not self.shared and not self._same_file(fd):  # its holder removed it as we opened it: take the new file
            os.close(fd)
            return self._take()
        self.fd = fd
        if not self.shared:
            self._write(me())
        return True

    def _flock(self, fd: int) -> bool:
        """``flock`` on ``fd`` (waited for with ``wait``); False when another live process holds it."""
        import fcntl

        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode if self.wait else mode | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in _UNSUPPORTED:  # no flock here: the recorded holder decides
                return not self._held_by_record(fd)
            if self.wait:
                raise
            return False  # EWOULDBLOCK: held by a live process
        return True

    def _held_by_record(self, fd: int) -> bool:
        """Whether the holder recorded in the file (exclusive locks only) is another live process of this host."""
        holder = self._read(fd)
        return not self.shared and _lives_here(holder) and holder.get("pid") != os.getpid()

    def _same_file(self, fd: int) -> bool:
        """Whether ``fd`` is still the file at ``self.path`` (a holder that ends removes the file while it holds it,
        so a process that opened the old file before that takes the lock on a file nobody else will see)."""
        try:
            st, now = os.fstat(fd), os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)

    def _read(self, fd: int | None = None) -> dict | None:
        try:
            if fd is None:
                data = self.path.read_bytes()
            else:
                data = os.pread(fd, 4096, 0)
            out = json.loads(data.decode() or "null")
            return out if isinstance(out, dict) else None
        except (OSError, ValueError):
            return None

    def _write(self, info: dict) -> None:
        try:  # informative only: a full disk must not stop the run here
            data = (json.dumps(info) + "\n").encode()
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        except OSError:
            pass

    def holder(self) -> dict | None:
        return self._read()

    def release(self) -> None:
        """Let the lock go (a waiting lock: at the last of its nested acquires)."""
        if not self.wait:
            self._drop()
            return
        if self.depth == 0:
            return
        self.depth -= 1
        try:
            if self.depth == 0:
                self._drop()
        finally:
            self.mutex.release()

    def _drop(self) -> None:
        import fcntl

        if self.fd is None:
            return
        try:
            if not self.shared:
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        if self.wait:
            self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def describe(holder: dict | None) -> str:
    """'pid 123 on host, since T (fedcli train ...)' of a lock holder."""
    if not holder:
        return "another process"
    cmd = str(holder.get("command") or "")
    cmd = f", {cmd[:120]}" if cmd else ""
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since {holder.get('since', '?')}{cmd}"


class RunLock(FileLock):
    """``RUN_DIR/.fedcli.lock``: one writer per run directory, for the life of the run; the file is removed when the
    run ends (while still held: :meth:`FileLock.acquire` checks it took the file that is there)."""

    def release(self) -> None:
        if self.fd is not None and self._same_file(self.fd):
            try:
                self.path.unlink()
            except OSError:
                pass
        super().release()

    def __init__(self, run_dir: str | Path):
        super().__init__(Path(run_dir) / RUN_LOCK)
        self.run_dir = Path(run_dir)

    #: how long :meth:`take` rides out a lock held by no live recorded holder: a look of :func:`held_by_other` (a
    #: sweep's ``--status`` or ``--wait``, a study's worker) holds it for microseconds, and a holder that has just
    #: taken it writes its record at once
    GRACE_S = 0.5

    def take(self, why: str = "") -> "RunLock":
        """Acquire or raise :class:`RunLocked` naming the holder (``why``: what the caller wanted to do). Refused at
        once while a live process is recorded as the holder; a lock held with no such record (another process looking
        whether the run is in use, or a holder between its ``flock`` and its record) is tried again for up to
        :data:`GRACE_S` seconds, so that a look never makes a starting run fail."""
        deadline = time.monotonic() + self.GRACE_S
        while not self.acquire():
            holder = self.holder()
            if _recorded_alive(holder) or time.monotonic() >= deadline:
                raise RunLocked(
                    f"{self.run_dir} is in use by a running fedcli ({describe(holder)}){why}; "
                    f"wait for it to end or stop it (kill -INT {(holder or {}).get('pid', 'PID')})"
                )
            time.sleep(0.02)
        return self


def _lives_here(holder: dict | None) -> bool:
    """Whether a lock file's record names a live process of this host (its pid with that start time)."""
    return bool(
        holder and holder.get("host") == socket.gethostname() and process_alive(holder.get("pid"), holder.get("start"))
    )


def _recorded_alive(holder: dict | None) -> bool:
    """Whether a lock file's record names a process that may hold it: a live one on this host, or one on another host
    (which this host cannot look at)."""
    return bool(holder and "pid" in holder) and (holder.get("host") != socket.gethostname() or _lives_here(holder))


def held_by_other(run_dir: str | Path) -> dict | None:
    """The holder of a run directory's lock when a live process holds it now (its record, ``{}`` when it wrote none),
    else None. Only looks: no lock file is created or written, and the look's shared ``flock`` lasts microseconds
    (a run starting then rides it out, :attr:`RunLock.GRACE_S`). Where ``flock`` is not supported, the record decides
    (:meth:`FileLock._held_by_record`)."""
    import fcntl

    path = Path(run_dir) / RUN_LOCK
    try:
        fd = open_fd(path, os.O_RDONLY, doing="read the lock file")  # never through a link
    except FedcliError:
        return None  # no lock file (the run ended, or never started), or none that can be read
    lock = FileLock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in _UNSUPPORTED and not lock._held_by_record(fd):
                return None
            return lock._read(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def watch_process(pid: int, start: int | None, on_gone, interval: float = 0.5) -> threading.Thread:
    """A daemon thread that calls ``on_gone()`` once process ``pid`` (with that start time) has ended."""

    def loop():
        while process_alive(pid, start):
            time.sleep(interval)
        on_gone()

    t = threading.Thread(target=loop, name="fedcli-lifeline", daemon=True)
    t.start()
    return t


# ------------------------------------------------------------------------------------------------ sweep workers
#: a ``fedcli train`` started by ``fedcli sweep --mpi`` finds its sweep here (pid:start) and the workers lock
ENV_PARENT, ENV_WORKERS_LOCK = "FEDCLI_SWEEP_PARENT", "FEDCLI_SWEEP_WORKERS_LOCK"
_JOINED: dict = {}


def sweep_env(workers_lock: Path) -> dict:
    """Environment for a training process of this sweep (``--mpi`` mode): whom to watch, what lock to hold."""
    return {ENV_PARENT: f"{os.getpid()}:{start_time(os.getpid()) or ''}", ENV_WORKERS_LOCK: str(workers_lock)}


def join_sweep(workers_lock: str | Path, parent: str, on_gone) -> None:
    """In a worker of a sweep: hold the sweep's workers lock (shared) for the rest of this process's life and
    call ``on_gone()`` when the sweep process ``parent`` ("pid:start") has ended."""
    if _JOINED:
        return
    lock = FileLock(workers_lock, shared=True)
    try:
        lock.acquire()
    except ConfigError:
        pass
    _JOINED["lock"] = lock
    pid, _, start = parent.partition(":")
    _JOINED["watch"] = watch_process(int(pid), int(start) if start else None, on_gone)


def join_sweep_from_env(on_gone) -> bool:
    """``join_sweep`` when this process was started by ``fedcli sweep --mpi`` (see :func:`sweep_env`)."""
    parent, path = os.environ.get(ENV_PARENT), os.environ.get(ENV_WORKERS_LOCK)
    if not parent or not path:
        return False
    join_sweep(path, parent, on_gone)
    return True
