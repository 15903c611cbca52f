"""Signals from the first instant: what SIGINT, SIGTERM, SIGHUP and SIGUSR1 do before training runs.

``fedcli`` installs these handlers first thing (``fedcli/cli/main.py`` imports this module before typer, rich or
torch), so a signal during the imports, the data loading or the setup never shows a traceback:

- SIGINT, SIGTERM, SIGHUP: one line (``fedcli: interrupted by SIGINT before training started``) and exit
  128 + the signal (130, 143, 129). Before that, the callbacks registered with :func:`on_interrupt` run, newest
  first: a run folder that holds nothing but its lock is removed (so no folder is left holding only a lock), and a
  run whose manifest exists is marked ``interrupted`` with the command that continues it.
- SIGUSR1 (Slurm's time-limit warning, ``sbatch --signal=USR1@N``): remembered (:func:`usr1_pending`); once rounds
  run, the training checkpoints at its first round boundary and exits as interrupted (see
  ``fedcli.results.signals.Checkpointer``).

While training runs, ``Checkpointer.signals`` takes these signals over (round boundaries, checkpoints) and gives them
back afterwards. The process exits with ``os._exit`` from the handler: nothing half-imported runs again.
This module imports nothing heavy (os, signal, sys).
"""

from __future__ import annotations

import os
import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_CALLBACKS: list = []
_STATE = {"usr1": False, "installed": False, "when": "before training started"}


def _handler(signum, frame):
    if signum == signal.SIGUSR1:
        _STATE["usr1"] = True
        return
    for s in STOP_SIGNALS:  # a second signal while cleaning up must not interrupt the cleanup
        signal.signal(s, signal.SIG_IGN)
    extra = ""
    for fn in reversed(list(_CALLBACKS)):
        try:
            extra = fn(signum) or extra
        except BaseException:
            pass
    name = signal.Signals(signum).name
    try:
        os.write(2, f"fedcli: interrupted by {name} {_STATE['when']}{extra}\n".encode(errors="replace"))
    except OSError:
        pass
    os._exit(128 + int(signum))


def is_entry() -> bool:
    """Whether this process runs the ``fedcli`` command (its console script, ``python -m fedcli``, ``python -m
    mpi4py -m fedcli``), not a program or test that imports fedcli."""
    main = sys.modules.get("__main__")
    if getattr(main, "__name__", None) != "__main__":  # a multiprocessing child re-importing the script (__mp_main__)
        return False
    module_spec = getattr(main, "__spec__", None)
    if module_spec is not None and module_spec.name in ("fedcli", "fedcli.__main__"):
        return True
    return os.path.basename(getattr(main, "__file__", "") or "") == "fedcli" or _run_as_module()


def _run_as_module() -> bool:
    """Whether the interpreter was started as ``python [OPTIONS] -m fedcli`` (or ``-m mpi4py [...] -m fedcli``),
    read from its own command line (``sys.orig_argv``): while ``python -m fedcli`` imports the ``fedcli`` package,
    before ``__main__`` is fedcli's, nothing else says so."""
    argv = list(getattr(sys, "orig_argv", ()))
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] != "mpi4py":
            return argv[i + 1] in ("fedcli", "fedcli.__main__")
    return False


def install(force: bool = False) -> None:
    """Install the handlers (in the main thread, once) when this process is the ``fedcli`` command, or ``force``."""
    import threading

    if _STATE["installed"] or threading.current_thread() is not threading.main_thread() or not (force or is_entry()):
        return
    for s in (*STOP_SIGNALS, signal.SIGUSR1):
        if signal.getsignal(s) is signal.SIG_IGN and s != signal.SIGUSR1:
            continue  # ignored by whoever started us (nohup: SIGHUP): stays ignored
        signal.signal(s, _handler)
    _STATE["installed"] = True


def done() -> None:
    """The command has done its work (completed, failed or stopped): a stop signal from here to the end of the
    process is ignored. Python's teardown gives the handlers back to the default action, so a Ctrl-C in its last
    fraction of a second would otherwise kill a process whose run is already complete, with no word said
    (exit -2). Only where :func:`install` ran (the ``fedcli`` command, never a program that imports fedcli)."""
    if _STATE["installed"]:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def finish(code: int) -> None:
    """End the ``fedcli`` command's process with ``code`` once its work is done, without the interpreter's teardown:
    the exit handlers run (``atexit``: temporary folders, logging, multiprocessing's children), the standard streams
    are flushed, then ``os._exit``. Freeing torch's and its compiler's ~2,000 modules one by one took 0.6-0.7 s of CPU
    after every run (2-core machine; ``python -c "import torch, torch._dynamo"`` exits in 2.5 s of CPU, 1.9 s with
    ``os._exit``). Only where :func:`install` ran, with no other non-daemon thread alive (Python would wait for
    it) and not under MPI (mpi4py finalizes MPI in the teardown); otherwise it returns and Python exits as usual."""
    import threading

    if not _STATE["installed"] or "mpi4py" in sys.modules:
        return
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_closed(closed: bool = True) -> None:
    """The run's manifest says how it ended (``closed``; False when the next run of this process starts): a stop
    signal from here (e.g. while the trackers upload) still ends the process at once, and its line says the results
    are saved rather than that training had not started."""
    _STATE["when"] = "after the run ended (its results are saved)" if closed else "before training started"


def installed() -> bool:
    return _STATE["installed"]


def on_interrupt(fn):
    """Register ``fn(signum) -> str | None`` to run when a stop signal arrives before training (newest first); it may
    return text to append to the line printed. Returns ``fn`` (pass it to :func:`forget`)."""
    _CALLBACKS.append(fn)
    return fn


def registered() -> list:
    """The callbacks registered now, oldest first (a copy)."""
    return list(_CALLBACKS)


def forget(fn) -> None:
    if fn in _CALLBACKS:
        _CALLBACKS.remove(fn)


def usr1_pending() -> bool:
    """Whether SIGUSR1 arrived before training started (consumed: the next call says False)."""
    got, _STATE["usr1"] = _STATE["usr1"], False
    return got
