"""The round hook that feeds the trackers of ``--tracker``: beside the CSV writers (``fedcli.results.runlog``),
never instead of them.

After every round the hook takes what the round produced (``Simulation.record``) and, when the round evaluated or
adjusted intervals, sends one ``log`` at step = the local iteration the round ended at:

- an evaluation: the ``metrics.csv`` row's numbers (``test_acc``, ``test_loss``, ``train_loss``, ``personal_acc``,
  ``comm_params``, ``comm_bytes``, ``lr``, ``round``, ...), ``comm_pct_of_fedavg`` (communication so far as % of
  FedAvg's at the same point, FedLAMA Eq. 8), and per layer ``syncs/<layer>`` and ``interval/<layer>`` (``layers.csv``);
- an interval adjustment of a layer-wise schedule (FedLAMA Algorithm 1): ``adjust/d/<layer>`` (the unit discrepancy,
  Eq. 2) and ``adjust/interval/<layer>`` (``intervals.csv``).

The trackers themselves run in a child process (``fedcli.trackers.worker``): their imports, connections and file
writes never hold the training's interpreter (a thread would: the GIL), and a library that hangs or crashes takes
nothing with it. The round hook only copies a few numbers into a queue; a thread of this process writes them to the
child's stdin (a full pipe waits there, not in the training) and passes the child's warnings on to ``warn``.

At the end ``close(status)`` hands the last messages over (at most ``HANDOVER_S``: the child reads its stdin as it
comes, so this is the time to write a few lines into a pipe) and then waits for the child's end work (figures,
artifacts, the trackers' finish) only ``finish_wait_s()`` seconds: none by default, so the command's wall time is the
training's. The child finishes on its own in its own session and says so in ``RUN_DIR/trackers.json``
(``fedcli.trackers.state``; ``fedcli report RUN_DIR`` tells whether it is still at work). Under Slurm (``SLURM_JOB_ID``
set) a process left behind is killed with the job step, so there the command waits for it (at most
``CLOSE_TIMEOUT_S``); ``FEDCLI_TRACKER_WAIT=SECONDS`` sets the wait anywhere.
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from fedcli.fl.context import LogContext
from fedcli.fl.hooks import RoundHook

#: the longest the end of a run waits for the trackers' end work where it waits at all (Slurm)
CLOSE_TIMEOUT_S = 120.0
#: the longest the end of a run waits to hand the last messages to the trackers' process (a pipe write)
HANDOVER_S = 10.0
WAIT_ENV = "FEDCLI_TRACKER_WAIT"
#: metrics.csv columns that are not numbers a tracker plots (the step is the iteration)
NOT_SCALARS = ("iteration",)


def _stderr(msg: str) -> None:
    print(f"fedcli: warning: {msg}", file=sys.stderr, flush=True)


def finish_wait_s() -> float:
    """How long ``fedcli train`` waits at its end for the trackers' end work: ``FEDCLI_TRACKER_WAIT`` seconds when set;
    else under Slurm ``CLOSE_TIMEOUT_S`` (a job step's processes end with it); else 0 (the work goes on detached)."""
    value = os.environ.get(WAIT_ENV, "").strip()
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
    return CLOSE_TIMEOUT_S if os.environ.get("SLURM_JOB_ID") else 0.0


def sweep_of(run_dir: Path) -> tuple[Path, dict, dict] | None:
    """(sweep folder, its sweep.json, this run's entry) when ``run_dir`` is a run of a ``fedcli sweep``
    (``SWEEP/<run slug>/seed<k>``), else None."""
    root = run_dir.parent.parent
    try:
        manifest = json.loads((root / "sweep.json").read_text())
    except (OSError, ValueError):
        return None
    rel = f"{run_dir.parent.name}/{run_dir.name}"
    entry = next((e for e in manifest.get("runs", []) if e.get("dir") == rel), None)
    return (root, manifest, entry) if entry is not None else None


def run_info(ctx: LogContext, run_dir: Path) -> dict:
    """Name, grouping, tags and hyper-parameters of the run (``fedcli.trackers.base.RunInfo``'s fields)."""
    return info_of(ctx.cfg.to_dict(), ctx.part_names, ctx.comm.size, run_dir)


def info_of(config: dict, part_names: dict, world_size: int, run_dir: Path) -> dict:
    """``run_info`` from the resolved config (``TrainConfig.to_dict``), the method's parts and the process count."""
    from fedcli.version import __version__

    params = {
        **config,
        **{f"part_{k}": v for k, v in part_names.items()},
        "world_size": world_size,
        "fedcli_version": __version__,
    }
    tags = {
        "method": config["algo"],
        "dataset": config["dataset"],
        "model": config["model"],
        "seed": str(config["seed"]),
    }
    info = {"run_dir": str(run_dir), "name": run_dir.name, "experiment": "", "tags": tags, "params": params}
    sweep = sweep_of(run_dir)
    if sweep is not None:
        root, manifest, entry = sweep
        tags.update(sweep=root.name, run=str(entry.get("name", "")), scale=str(manifest.get("scale") or "base"))
        info.update(name=str(entry["dir"]), experiment=root.name)
    return info


class TrackerHook(RoundHook):
    """Round hook of the root process: the run's numbers to the trackers of ``cfg.tracker`` (see the module
    docstring)."""

    def __init__(self, cfg, run_dir, *, resume: bool = False, warn=_stderr, close_timeout: float | None = None):
        self.cfg, self.run_dir, self.resume = cfg, Path(run_dir), resume
        self.warn, self.close_timeout = warn, close_timeout
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.proc: subprocess.Popen | None = None
        self.threads: list[threading.Thread] = []
        self.names: list[str] = []
        self.killed = False  # ``close`` stopped the trackers' process after its timeout
        self.detached = False  # ``close`` returned while the trackers' process still works (it goes on alone)
        self.started = threading.Event()  # the trackers' process has started every tracker (and said any failure)

    # ---------------------------------------------------------------- the training's side (cheap)
    def begin(self, ctx: LogContext, state) -> None:
        if self.proc is not None:
            return
        self.names = [li.name for li in ctx.layers]
        self.total_numel = sum(li.numel for li in ctx.layers)
        self.launch(run_info(ctx, self.run_dir))

    def launch(self, info: dict) -> None:
        """Start the trackers' process and tell it to start every tracker with ``info`` (``run_info``'s fields)."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")) if p
            ),
        }
        from fedcli.trackers.state import pending

        try:  # from now until the child holds the run's trackers lock, .trackers.pending says a trackers' process comes
            fd = pending(self.run_dir)
        except Exception:
            fd = None
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fedcli.trackers.worker",
                    str(self.run_dir),
                    self.cfg.tracker,
                    "resume" if self.resume else "new",
                    str(fd) if fd is not None else "-",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                text=True,
                bufsize=1,
                pass_fds=(fd,) if fd is not None else (),
                start_new_session=True,
            )  # outlives the command; a terminal's Ctrl-C skips it
            widen_pipe(self.proc.stdin)
        except OSError as e:
            self.warn(f"the trackers could not start ({e}); the run goes on without them")
            return
        finally:
            if fd is not None:
                os.close(fd)  # the child holds it now
        self.threads = [
            threading.Thread(target=self._write, name="fedcli-trackers-out", daemon=True),
            threading.Thread(target=self._read, name="fedcli-trackers-in", daemon=True),
        ]
        for t in self.threads:
            t.start()
        self.queue.put({"op": "start", "info": info})

    def __call__(self, ctx: LogContext, state) -> None:
        if self.proc is None:
            return
        rec = ctx.record
        values: dict[str, float] = {}
        if rec.adjustment is not None:
            adj = rec.adjustment
            for name, d, interval in zip(self.names, adj.d, adj.intervals):
                values[f"adjust/d/{name}"] = float(d)
                values[f"adjust/interval/{name}"] = float(interval)
        if rec.metrics is not None:
            values.update(self.evaluation(ctx, rec.metrics))
        if values:
            self.queue.put({"op": "log", "step": int(state.iteration), "values": values})

    def evaluation(self, ctx: LogContext, row: dict) -> dict[str, float]:
        """The scalars of one evaluation: the metrics row, % of FedAvg, and per-layer syncs and intervals."""
        from fedcli.comm.ledger import fedavg_params_so_far

        out = {
            k: float(v)
            for k, v in row.items()
            if k not in NOT_SCALARS and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        fedavg = fedavg_params_so_far(
            self.total_numel, row["iteration"], row["round"], ctx.cfg.tau, bool(ctx.cfg.local_epochs)
        )
        out["comm_pct_of_fedavg"] = 100.0 * row["comm_params"] / fedavg if fedavg else math.nan
        local = set(ctx.local_layers)
        for i, name in enumerate(self.names):
            out[f"syncs/{name}"] = float(ctx.ledger.syncs[i])
            out[f"interval/{name}"] = 0.0 if i in local else float(ctx.schedule.intervals[i])
        return out

    def close(self, status: str) -> None:
        """End of the run (any status): hand the last messages over, then wait ``finish_wait_s()`` at most for the end
        work (the artifacts); past that the trackers' process finishes it alone (see the module docstring)."""
        if self.proc is None:
            return
        self.queue.put({"op": "finish", "status": status})
        self.queue.put(None)
        self.threads[0].join(HANDOVER_S)
        if self.threads[0].is_alive():
            self.warn(
                f"the trackers did not take the run's last messages within {HANDOVER_S:g} s; they may miss its last "
                f"evaluations (the run directory holds everything)"
            )
        wait_s = finish_wait_s() if self.close_timeout is None else self.close_timeout
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            if wait_s == 0:
                self.detached = True  # said by ``fedcli report RUN_DIR`` while it works (trackers.json, its lock)
                if not self.started.is_set():  # a failure to start would be said after the command: point to where
                    self.warn(
                        f"the trackers ({self.cfg.tracker}) were still starting when the run ended; they finish in "
                        f"the background: `fedcli report {self.run_dir}` says when they are done, whether one "
                        f"failed and what they lack if their process ends early"
                    )
                return
            self.warn(
                f"the trackers were still sending after {wait_s:g} s; stopped them (the run directory holds everything)"
            )
            self.killed = True
            self.proc.kill()
            self.proc.wait()
        for t in self.threads:
            t.join(5)

    # ---------------------------------------------------------------- this process's threads
    def _write(self) -> None:
        """Queue -> the child's stdin, one JSON line per message (blocks here when the child is behind)."""
        while True:
            msg = self.queue.get()
            try:
                if msg is None:
                    self.proc.stdin.close()
                    return
                self.proc.stdin.write(json.dumps(msg) + "\n")
            except (OSError, ValueError):  # the child is gone: it said why on its way out (``_read``)
                return

    def _read(self) -> None:
        """The child's warnings (one line each) -> ``warn`` (until ``close`` has returned: then trackers.log alone)."""
        from fedcli.trackers.state import STARTED

        for line in self.proc.stdout:
            if line.rstrip("\n") == STARTED:
                self.started.set()
            elif line.strip() and not self.detached:
                self.warn(line.rstrip("\n"))
        code = self.proc.wait()
        if code != 0 and not self.killed and not self.detached:
            self.warn(
                f"the trackers' process ended with exit code {code} ({self.log_hint()}); the run goes on without "
                f"them: `fedcli report {self.run_dir}` says what they lack, and once the run has completed `fedcli "
                f"train --resume {self.run_dir}` sends it to them"
            )

    def log_hint(self) -> str:
        """Where the trackers' process said why it ended: its log when it has one (killed before its first write, it
        has none)."""
        from fedcli.trackers.state import LOG_FILE

        log = self.run_dir / LOG_FILE
        return f"see {log}" if log.is_file() else f"it ended before writing {LOG_FILE}"


def widen_pipe(stream, size: int = 1 << 20) -> None:
    """Let the pipe to the trackers' process hold ``size`` bytes (Linux; elsewhere its default), so the last messages
    of a run fit into it even when that process is behind."""
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ValueError, ImportError):
        pass
