"""fedcli.results.lock.FileLock's waiting, re-entrant mode (``wait=True``), the lock of ``fedcli tune``'s shared
storages (fedcli/tune/storages.py: every call to a SQLite study, the ask lock, trials.csv): a real ``flock`` on a real
file, a second real process; the refusing mode's behaviour beside it unchanged."""

import errno
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedcli.results.lock import FileLock, start_time
from fedcli.safefs import LinkRefused

ROOT = Path(__file__).resolve().parents[2]

#: takes the lock waiting, then writes the marker file ``argv[2]`` and the time it got it
WAITER = """
import sys, time
from pathlib import Path
from fedcli.results.lock import FileLock
lock = FileLock(sys.argv[1], wait=True)
print("waiting", flush=True)
lock.acquire()
Path(sys.argv[2]).write_text(repr(time.time()))
lock.release()
"""


def start(script: str, *args) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=env, stdout=subprocess.PIPE, text=True)


def taken_after_kill(path: Path, holder: subprocess.Popen, after: float) -> float:
    """The seconds a waiting acquire of ``path`` takes while ``holder`` (the process holding it) is killed ``after`` s
    from now; a refusing probe is refused before, the lock records this process once taken."""
    try:
        assert not FileLock(path).acquire()
        threading.Timer(after, holder.kill).start()
        t0 = time.monotonic()
        with FileLock(path, wait=True):
            waited = time.monotonic() - t0
            assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        holder.kill()
        holder.wait()
    return waited


def test_a_waiting_acquire_in_another_process_blocks_until_the_holder_releases(tmp_path):
    """The child asks while this process holds the lock: 1 s later it still waits (no marker), a refusing probe is
    refused; it gets the lock after the release and not before."""
    path, marker = tmp_path / "x.lock", tmp_path / "got"
    held = FileLock(path, wait=True)
    held.acquire()
    child = start(WAITER, path, marker)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(1.0)
        assert child.poll() is None and not marker.exists()
        assert not FileLock(path).acquire()  # the refusing mode sees the waiting mode's lock
        assert json.loads(path.read_text())["pid"] == os.getpid()  # the holder recorded, as the refusing mode does
        released = time.time()
        held.release()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
    assert float(marker.read_text()) >= released
    assert path.read_text() == ""  # released: no holder recorded


def test_a_waiting_acquire_gets_the_lock_of_a_killed_holder(tmp_path):
    """A holder killed by SIGKILL: the kernel drops its flock, the waiting acquire returns."""
    path = tmp_path / "x.lock"
    holder = start(
        "import sys, time\nfrom fedcli.results.lock import FileLock\nassert FileLock(sys.argv[1]).acquire()"
        "\nprint('held', flush=True)\ntime.sleep(120)\n",
        path,
    )
    assert holder.stdout.readline().strip() == "held"
    assert 0.4 < taken_after_kill(path, holder, 0.5) < 30


def test_re_entrant_within_the_process(tmp_path):
    """Nested acquires of one waiting lock count (depth 1, 2, 3, then 1, 0) and keep the one flock: a second
    descriptor of this process (a refusing probe) is refused until the last release; then it takes the lock."""
    path = tmp_path / "x.lock"
    lock = FileLock(path, wait=True)
    depths = []
    with lock:
        depths.append(lock.depth)
        fd = lock.fd
        with lock:
            depths.append(lock.depth)
            assert lock.fd == fd and lock.acquire()
            depths.append(lock.depth)
            lock.release()
        depths.append(lock.depth)
        assert not FileLock(path).acquire()
    depths.append(lock.depth)
    assert depths == [1, 2, 3, 1, 0] and lock.fd is None
    probe = FileLock(path)
    assert probe.acquire()
    probe.release()
    lock.release()  # an extra release is nothing
    assert lock.depth == 0


def test_another_thread_waits_for_the_holding_thread(tmp_path):
    """Re-entrant for the thread that holds it, not for the process's other threads: they wait for the last release."""
    lock, order = FileLock(tmp_path / "x.lock", wait=True), []

    def other():
        with lock:
            order.append("other")

    with lock:
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.5)
        order.append("holder")
    t.join(timeout=30)
    assert order == ["holder", "other"]


def test_a_waiting_lock_never_opens_a_link(tmp_path):
    (tmp_path / "target").write_text("keep")
    (tmp_path / "x.lock").symlink_to(tmp_path / "target")
    lock = FileLock(tmp_path / "x.lock", wait=True)
    with pytest.raises(LinkRefused):
        lock.acquire()
    assert (tmp_path / "target").read_text() == "keep" and lock.depth == 0
    # the mutex was let go: this thread can try again (and is refused again), another thread is not blocked
    result = []
    t = threading.Thread(target=lambda: result.append(pytest.raises(LinkRefused, lock.acquire)))
    t.start()
    t.join(timeout=10)
    assert not t.is_alive() and result


def test_without_flock_a_waiting_acquire_waits_for_the_recorded_holder(tmp_path, monkeypatch):
    """Where flock is not supported (ENOLCK), the recorded holder decides: alive on this host, the waiting acquire
    looks again every POLL_S until it has ended."""
    real = fcntl.flock

    def no_flock(fd, op):
        if op & fcntl.LOCK_UN:
            return real(fd, op)
        raise OSError(errno.ENOLCK, "No locks available")

    holder = start("import time\nprint('up', flush=True)\ntime.sleep(120)\n")
    assert holder.stdout.readline().strip() == "up"
    path = tmp_path / "x.lock"
    path.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "start": start_time(holder.pid)}))
    monkeypatch.setattr(fcntl, "flock", no_flock)
    assert 0.5 < taken_after_kill(path, holder, 0.6) < 30
