"""Processes started warm: forked from one server process that imported torch and fedcli's engine once
(multiprocessing's ``forkserver`` start method), where a spawned process is a fresh interpreter that imports them
again (about 1.8 s of CPU each on the 2-core CI machine). ``--workers N`` starts N - 1 of them and a local sweep's
pool ``--jobs`` of them: the server costs one import, each process after it a fork.

A process started here gets what a spawned one got: the starter's environment as it is when the process starts (not
when the server started), its working directory and ``sys.path`` (multiprocessing's preparation data), its standard
output and error (the starter's descriptors 1 and 2, handed over the server's socket), and no standard input. The
server forks from a clean state: it has imported the :data:`PRELOAD` modules and run nothing, so no torch thread pool
exists to be copied half-held (the hazard of forking a process that has trained).

The server belongs to the process that started it (it ends when that process ends, and its children get SIGKILL
then: fedcli/comm/workers.py sets ``PR_SET_PDEATHSIG``). A process forked from a starter (a test's forked command)
is not the server's client: it forgets the server and starts its own when it needs one (:func:`_forget_server`, run
after every ``os.fork``).

Imports nothing of fedcli but its neighbour ``fedcli.runtime.early`` (the bottom layer): :data:`PRELOAD` names the
modules above it, for the server to import.
"""

import multiprocessing as mp
import os
import signal
import stat
import sys
import threading
from multiprocessing import forkserver, reduction

#: what every warm server imports before its first fork: torch and the training engine, the modules a worker or a
#: sweep's pool process reads first (names, not imports: this layer imports nothing above it)
PRELOAD = (
    "fedcli.runtime.warm",
    "torch",
    "fedcli.runner",
    "fedcli.fl.engine",
    "fedcli.comm.workers",
    "fedcli.cli.main",
)

#: what the server ignores (multiprocessing's server ignores SIGINT itself): a signal sent to every process of a Slurm
#: job (scancel's SIGTERM, the time limit's SIGUSR1) or of a terminal (SIGHUP) must reach the commands it started, which
#: checkpoint and stop, and not end the server, which alone can tell their starter how they ended (Popen's wait
#: would read 255 for each). The server still ends with its starter. Its children get the starter's dispositions back.
SERVER_IGNORES = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def context():
    """multiprocessing's ``forkserver`` context, its server (when it starts: the first process started through it)
    importing :data:`PRELOAD` first."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


class _Fd:
    """A descriptor of the starter, duplicated into the started process when the process object is pickled
    (multiprocessing's ``DupFd``: sent over the server's socket with ``SCM_RIGHTS``)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _received, (reduction.DupFd(self.fd),)


def _received(dup) -> int:
    return dup.detach()


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def inherit(env: dict | None = None, fds: tuple[int, int] = (1, 2)) -> tuple:
    """What :func:`enter` needs in the started process: ``env`` (default: the starter's environment now), the
    starter's descriptors ``fds`` to become its standard output and error (None for one that is closed), and which of
    :data:`SERVER_IGNORES` the starter ignores (``nohup``: a new program would inherit that). Pass it in the process's
    arguments: the descriptors travel when they are pickled."""
    ignored = tuple(int(s) for s in SERVER_IGNORES if signal.getsignal(s) is signal.SIG_IGN)
    return dict(os.environ if env is None else env), tuple(_Fd(fd) if _open(fd) else None for fd in fds), ignored


def enter(inherited: tuple) -> None:
    """In the started process, first: the dispositions a new program of the starter's would have for the signals the
    server ignores, the starter's environment, its standard output and error (from :func:`inherit`)."""
    env, fds, ignored = inherited
    for s in SERVER_IGNORES:
        signal.signal(s, signal.SIG_IGN if int(s) in ignored else signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(env)
    for target, fd in zip((1, 2), fds):
        if fd is None or fd == target:
            continue
        os.dup2(fd, target)
        os.close(fd)


def run(inherited: tuple, target, args: tuple):
    """A warm process's target: :func:`enter`, then ``target(*args)``."""
    enter(inherited)
    return target(*args)


def _forget_server() -> None:
    """After ``os.fork`` in the child: the parent's server is not this process's (``waitpid`` on it would fail, and
    holding its liveness pipe would keep it alive after the parent ends); the next warm start starts a new one."""
    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass
    server.__init__()


os.register_at_fork(after_in_child=_forget_server)

if any("multiprocessing.forkserver import main" in a for a in getattr(sys, "orig_argv", ())):
    for _s in SERVER_IGNORES:  # this process is the warm server, importing PRELOAD (this module first)
        signal.signal(_s, signal.SIG_IGN)


# --------------------------------------------------------------------------------------------- a command, warm
_STARTS = threading.Lock()  # multiprocessing's bookkeeping of its children is not thread-safe


class Command:
    """``python -m MODULE ARGS`` as ``subprocess.Popen`` runs it (in a process group of its own, standard input from
    /dev/null, standard output and error into ``log_fd``, environment ``env``), but forked from the warm server: the
    program's ``main(ARGS)`` (``entry``: ``"module:function"``) runs in a process that has torch imported already.
    What the executors read of a Popen: ``pid``, ``args``, ``poll()``, ``wait()``, ``returncode`` (negative: killed by
    that signal). Not a child of the starter in multiprocessing's books: nothing joins it at the starter's exit (a
    sweep stopped by a third signal leaves its trainings to stop by themselves, as with Popen)."""

    def __init__(self, module: str, entry: str, argv: list[str], log_fd: int, env: dict | None = None):
        from multiprocessing import process

        self.args = [sys.executable, "-m", module, *argv]
        name = f"{module}-{argv[0] if argv else ''}"[:15]  # no space (_command)
        p = context().Process(target=_command, args=(inherit(env, (log_fd, log_fd)), name, module, entry, list(argv)))
        with _STARTS:
            p.start()
            process._children.discard(p)
        self._popen, self.pid, self.returncode = p._popen, p.pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._popen.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._popen.wait(timeout)
            if code is None:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = code
        return self.returncode


def _command(inherited: tuple, name: str, module: str, entry: str, argv: list[str]) -> None:
    """The warm process of a :class:`Command`: the starter's environment and the log as standard output and error,
    its ``name``, its own process group, /dev/null as standard input, the command line ``python -m MODULE ARGS``
    would have (the program reads it: ``sys.argv``, and ``sys.orig_argv`` that tells it it is the command), then
    ``main(ARGS)``; its return value or ``SystemExit`` is the exit code."""
    import importlib
    import importlib.util

    from fedcli.runtime import early

    enter(inherited)
    try:  # its name in ps -o comm, top and pgrep (its command line stays the server's); no space: tools that parse
        # /proc/PID/stat with scanf's %s (Slurm's proctrack/linuxproc, which then never signalled it) break on one
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    found = importlib.util.find_spec(module)
    if found is not None and found.submodule_search_locations is not None:  # a package: -m runs its __main__
        found = importlib.util.find_spec(f"{module}.__main__") or found
    sys.argv = [found.origin if found is not None and found.origin else module, *argv]
    sys.orig_argv = [sys.executable, "-m", module, *argv]
    early.install(force=True)  # the first signal handlers, as a new interpreter's import of fedcli installs them
    entry_module, _, fn = entry.partition(":")
    main = getattr(importlib.import_module(entry_module), fn)
    sys.exit(main(argv))
