"""The trackers' process (``python -m fedcli.trackers.worker RUN_DIR NAMES new|resume``), started by
``fedcli.trackers.hook.TrackerHook``: reads one JSON message a line on stdin (``start``, ``log``, ``finish``), calls the
trackers, writes one warning a line on stdout.

A tracker call that raises turns that tracker off with one warning (the others go on). ``RUN_DIR/trackers.json``
keeps what each tracker needs to continue the same tracker run on ``--resume`` and the last step it holds, so the
rounds a resume trains again (those after the last checkpoint) are not sent twice. The libraries' own output goes
to ``RUN_DIR/trackers.log``. Stdin closing without ``finish`` (the training process was killed) closes the tracker
runs as interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from fedcli.trackers.base import TRACKERS, RunInfo, Tracker, tracker_names

STATE_FILE = "trackers.json"
LOG_FILE = "trackers.log"
NICE = 10  # the trackers' process runs at a lower CPU priority than the training
ARTIFACTS = ("manifest.json", "metrics.csv", "layers.csv", "intervals.csv", "skipped.csv")


class Channel:
    """One tracker: whether it still works, what it saved and the last step it holds."""

    def __init__(self, tracker: Tracker, saved: dict, warn):
        self.tracker, self.warn = tracker, warn
        self.saved = {k: v for k, v in saved.items() if k != "last_step"}
        self.last_step = int(saved.get("last_step", -1))
        self.alive, self.started = True, False

    def call(self, what: str, fn) -> bool:
        if not self.alive:
            return False
        try:
            fn()
            return True
        except Exception as e:  # noqa: BLE001 - any failure of a tracker turns it off; the training goes on
            self.alive = False
            self.warn(f"tracker {self.tracker.name} failed to {what} ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
                      f"it is off for the rest of this run (the run directory's CSVs hold everything)")
            return False


class Worker:
    def __init__(self, run_dir: Path, names: str, resume: bool, out):
        self.run_dir, self.out = run_dir, out
        saved = self.read_state() if resume else {}
        self.channels = [Channel(TRACKERS[n](), saved.get(n, {}), self.warn) for n in tracker_names(names)]
        self.state_warned = False

    def warn(self, msg: str) -> None:
        """To the training (which says it once on its stderr) and into ``trackers.log``: the training may be gone."""
        for f in (self.out, sys.stderr):
            try:
                f.write(msg + "\n")
                f.flush()
            except (OSError, ValueError):
                pass

    def handle(self, msg: dict) -> None:
        getattr(self, "op_" + msg["op"])(msg)

    def op_start(self, msg: dict) -> None:
        info = {**msg["info"], "run_dir": Path(msg["info"]["run_dir"])}
        for ch in self.channels:
            def start(ch=ch):
                ch.saved = ch.tracker.start(RunInfo(**info, saved=dict(ch.saved))) or {}
            ch.started = ch.call("start", start)
        self.save_state()
        try:  # the figures' imports (matplotlib) while the training runs, not at its end
            from fedcli.report.style import plt as _plt

            _plt()
        except Exception:  # noqa: BLE001 - op_finish says it if the figures cannot be drawn
            pass

    def op_log(self, msg: dict) -> None:
        step, values, logged = int(msg["step"]), msg["values"], False
        for ch in self.channels:
            if ch.started and step > ch.last_step and ch.call(f"log step {step}", lambda ch=ch: ch.tracker.log(step, values)):
                ch.last_step, logged = step, True
        if logged:
            self.save_state()

    def op_finish(self, msg: dict) -> None:
        status = msg["status"]
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
            from fedcli.report.single import load_run, write_figures

            return [Path(p) for p in write_figures([load_run(self.run_dir)], out) if Path(p).is_file()]
        except Exception as e:  # noqa: BLE001 - the trackers still get the manifest and CSVs
            self.warn(f"trackers: the figures could not be drawn ({type(e).__name__}: {e})")
            return []

    def read_state(self) -> dict:
        try:
            data = json.loads((self.run_dir / STATE_FILE).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def save_state(self) -> None:
        from fedcli.results.rundir import atomic_write

        data = {ch.tracker.name: {**ch.saved, "last_step": ch.last_step} for ch in self.channels}
        try:
            atomic_write(self.run_dir / STATE_FILE, json.dumps(data, indent=1) + "\n")
        except Exception as e:  # noqa: BLE001 - a resume then starts new tracker runs; said once
            if not self.state_warned:
                self.state_warned = True
                self.warn(f"trackers: {STATE_FILE} could not be written ({e}); a resume would start new tracker runs")


def main(argv: list[str]) -> int:
    run_dir, names, mode = Path(argv[0]), argv[1], argv[2]
    # a terminal's Ctrl-C reaches the whole process group: the training decides when to stop, and then says finish
    # (and a scheduler's SIGTERM to the group: the training checkpoints, then closes stdin; that ends this process)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:  # where cores are short, the training's process goes first; the trackers catch up (at the latest at the end)
        os.nice(NICE)
    except OSError:
        pass
    out = os.fdopen(os.dup(1), "w")  # warnings; the libraries' own output goes to the log (or nowhere)
    try:
        log_fd = os.open(run_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError:
        log_fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    worker = Worker(run_dir, names, mode == "resume", out)
    finished = False
    for line in sys.stdin:
        try:
            msg = json.loads(line)
            worker.handle(msg)
            finished = finished or msg["op"] == "finish"
        except Exception as e:  # noqa: BLE001 - one bad message costs that message only
            worker.warn(f"trackers: {type(e).__name__}: {e}")
    if not finished:  # the training process ended without saying how: keep what was sent
        worker.handle({"op": "finish", "status": "interrupted"})
    try:
        out.flush()
    except (OSError, ValueError):  # the training is gone (killed): what it was sent has been handled
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
