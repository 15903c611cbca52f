"""The trackers' process (``python -m fedcli.trackers.worker RUN_DIR NAMES new|resume``), started by
``fedcli.trackers.hook.TrackerHook``: reads one JSON message a line on stdin (``start``, ``log``, ``finish``), calls the
trackers, writes one warning a line on stdout.

A thread reads stdin as it comes (the training's pipe never fills while a tracker is slow), the main thread calls
the trackers in order. A tracker call that raises turns that tracker off with one warning (the others go on).
Stdin closing without ``finish`` (the training process was killed) closes the tracker runs as interrupted.

The process holds ``RUN_DIR/.trackers.lock`` for its whole life and takes it before it reads ``trackers.json``
(``fedcli.trackers.state``): a resume that starts while the previous attempt's trackers still finish waits for them
(at most ``LOCK_WAIT_S``, in this process: the training does not wait) and then continues the same tracker runs, and
the rounds a resume trains again (those after the last checkpoint) are not sent twice. The end work (figures,
artifacts, the trackers' finish) runs after the training has returned: ``fedcli train`` does not wait for it, this
process lives on in its own session, and ``trackers.json`` says ``finishing`` then ``done``. The libraries' own
output and every warning go to ``RUN_DIR/trackers.log`` (the training may be gone).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from fedcli.trackers import state
from fedcli.trackers.base import TRACKERS, RunInfo, Tracker, tracker_names

STATE_FILE, LOG_FILE = state.STATE_FILE, state.LOG_FILE
#: the longest a trackers' process waits for the one of an earlier attempt of the run to finish (the training goes on)
LOCK_WAIT_S = 600.0
NICE = 10
STARTED = state.STARTED  # the trackers' process runs at a lower CPU priority than the training
ARTIFACTS = ("manifest.json", "metrics.csv", "layers.csv", "intervals.csv", "skipped.csv")


class Channel:
    """One tracker: whether it still works, what it saved and the last step it holds."""

    def __init__(self, tracker: Tracker, saved: dict, warn):
        self.tracker, self.warn = tracker, warn
        self.saved = {k: v for k, v in saved.items() if k not in ("last_step", "failed")}
        self.last_step = int(saved.get("last_step", -1))
        self.alive, self.started = True, False

    def call(self, what: str, fn) -> bool:
        if not self.alive:
            return False
        try:
            fn()
            return True
        except Exception as e:
            self.alive = False
            self.warn(
                f"tracker {self.tracker.name} failed to {what} ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
                f"it is off for the rest of this run (the run directory's CSVs hold everything)"
            )
            return False


class Warnings:
    """One line per warning to the training (which says it once on its stderr) and into ``trackers.log`` (this
    process's stderr): the training may have returned already, then the log alone holds it."""

    def __init__(self, out):
        self.out = out

    def __call__(self, msg: str, log: bool = True) -> None:
        for f in (self.out, sys.stderr if log else None):
            if f is None:
                continue
            try:
                f.write(msg + "\n")
                f.flush()
            except (OSError, ValueError):
                if f is self.out:  # the training has returned (its end of the pipe is closed)
                    self.out = None


class Worker:
    def __init__(self, run_dir: Path, names: str, resume: bool, warn):
        self.run_dir, self.warn = run_dir, warn
        saved = state.read(run_dir).get("trackers", {}) if resume else {}
        self.channels = [Channel(TRACKERS[n](), saved.get(n, {}), self.warn) for n in tracker_names(names)]
        self.state_warned = False
        self.phase, self.status = "logging", None

    def handle(self, msg: dict) -> None:
        getattr(self, "op_" + msg["op"])(msg)

    def op_start(self, msg: dict) -> None:
        info = {**msg["info"], "run_dir": Path(msg["info"]["run_dir"])}
        for ch in self.channels:

            def start(ch=ch):
                reopened = bool(ch.saved)
                ch.saved = ch.tracker.start(RunInfo(**info, saved=dict(ch.saved))) or {}
                stored = ch.tracker.stored_step() if reopened else None
                if stored is not None:  # logged by a process killed before it recorded the step: not sent twice
                    ch.last_step = max(ch.last_step, stored)

            ch.started = ch.call("start", start)
        self.save_state()
        self.warn(STARTED, log=False)
        try:  # the figures' imports (matplotlib) while the training runs, not at its end
            from fedcli.reports.style import plt as _plt

            _plt()
        except Exception:
            pass

    def op_log(self, msg: dict) -> None:
        step, values, logged = int(msg["step"]), msg["values"], False
        for ch in self.channels:
            if (
                ch.started
                and step > ch.last_step
                and ch.call(f"log step {step}", lambda ch=ch: ch.tracker.log(step, values))
            ):
                ch.last_step, logged = step, True
        if logged:
            self.save_state()

    def op_finish(self, msg: dict) -> None:
        self.phase, self.status = "finishing", msg["status"]
        self.save_state()
        try:
            self.end_work(self.status)
        finally:
            self.phase = "done"
            self.save_state()

    def end_work(self, status: str) -> None:
        """The figures, the artifacts and each tracker's finish."""
        live = [ch for ch in self.channels if ch.started and ch.alive]
        if not live:
            return
        tmp = Path(tempfile.mkdtemp(prefix="fedcli-figures-"))
        try:
            files = [self.run_dir / n for n in ARTIFACTS if (self.run_dir / n).is_file()]
            if status == "completed":
                files += self.figures(tmp)
            for ch in live:
                ch.call("finish", lambda ch=ch: ch.tracker.finish(status, files))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def figures(self, out: Path) -> list[Path]:
        """The report's figures of this run (``fedcli report RUN_DIR --figures``), drawn into ``out``."""
        try:
            from fedcli.reports.single import load_run, write_figures

            return [Path(p) for p in write_figures([load_run(self.run_dir)], out) if Path(p).is_file()]
        except Exception as e:
            self.warn(f"trackers: the figures could not be drawn ({type(e).__name__}: {e})")
            return []

    def save_state(self) -> None:
        data = {
            "phase": self.phase,
            "status": self.status,
            "pid": os.getpid(),
            "trackers": {
                ch.tracker.name: {**ch.saved, "last_step": ch.last_step, **({} if ch.alive else {"failed": True})}
                for ch in self.channels
            },
        }
        try:
            state.write(self.run_dir, data)
        except Exception as e:
            if not self.state_warned:
                self.state_warned = True
                self.warn(f"trackers: {STATE_FILE} could not be written ({e}); a resume would start new tracker runs")


def lower_priority() -> None:
    """Where cores are short, the training's process goes first (nice 10: about a tenth of a core's share against it);
    the trackers catch up at the latest after the command has returned. Not lower (nice 19, Linux's ``SCHED_IDLE``):
    on a busy machine the curves would then appear only after the training, not while it runs, and the measured wall
    time of the command did not improve (``make bench-trackers``)."""
    try:
        os.nice(NICE)
    except OSError:
        pass


def read_lines(stream, inbox: queue.SimpleQueue) -> None:
    """Every line of ``stream`` into ``inbox`` as it comes, then None (end of input)."""
    try:
        for line in stream:
            inbox.put(line)
    finally:
        inbox.put(None)


def take_lock(run_dir: Path, inbox: queue.SimpleQueue, warn, wait_s: float = LOCK_WAIT_S):
    """The run directory's trackers lock, waiting at most ``wait_s`` for the process of an earlier attempt (the
    messages wait in ``inbox``); None (said once) when it is still held then."""
    held = state.lock(run_dir)
    deadline = time.monotonic() + wait_s
    try:
        while not held.acquire():
            if time.monotonic() >= deadline:
                from fedcli.results.lock import describe

                warn(
                    f"trackers: the trackers of an earlier attempt of this run are still finishing after {wait_s:g} s "
                    f"({describe(held.holder())}); this attempt's trackers are off (the run directory holds everything)"
                )
                return None
            time.sleep(0.2)
    except Exception as e:
        warn(
            f"trackers: cannot take {run_dir / state.LOCK_FILE} ({type(e).__name__}: {e}); the trackers "
            f"are off for this run"
        )
        return None
    return held


def main(argv: list[str]) -> int:
    run_dir, names, mode = Path(argv[0]), argv[1], argv[2]
    pending_fd = int(argv[3]) if len(argv) > 3 and argv[3].isdigit() else None  # .trackers.pending, until the lock
    # a terminal's Ctrl-C reaches the whole process group: the training decides when to stop, and then says finish
    # (and a scheduler's SIGTERM to the job: the training checkpoints, then closes stdin; that ends this process)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lower_priority()
    out = os.fdopen(os.dup(1), "w")  # warnings; the libraries' own output goes to the log (or nowhere)
    try:
        log_fd = os.open(run_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError:
        log_fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=read_lines, args=(sys.stdin, inbox), name="fedcli-trackers-stdin", daemon=True).start()
    warn = Warnings(out)
    held = take_lock(run_dir, inbox, warn)
    if pending_fd is not None:
        os.close(pending_fd)
    if held is None:
        while inbox.get() is not None:  # the training's messages, dropped: it must never block on this process
            pass
        return 0
    worker = Worker(run_dir, names, mode == "resume", warn)
    worker.save_state()
    finished = False
    while (line := inbox.get()) is not None:
        try:
            msg = json.loads(line)
            worker.handle(msg)
            finished = finished or msg["op"] == "finish"
        except Exception as e:
            worker.warn(f"trackers: {type(e).__name__}: {e}")
    if not finished:  # the training process ended without saying how: keep what was sent
        worker.handle({"op": "finish", "status": "interrupted"})
    held.release()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
