"""How a sweep's runs are run: :class:`Executor` (worker processes, ``mpiexec`` per run, or in this process) and the
pieces a worker process or a run needs (``execute_inline``: one run in this process; ``memoize_datasets``: a worker
keeps its last dataset; the run's recipe file, ``toml_flat``). The sweep (:mod:`fedcli.sweep.run`) plans the runs and
hands them here; a Slurm job (:mod:`fedcli.sweep.slurm`) runs a run with the same executor.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

from fedcli.errors import ConfigError, FedcliError
from fedcli.results.lock import RunLocked
from fedcli.results.rundir import atomic_write
from fedcli.results.runstate import COMPLETED, DONE, FAILED, MISSING, PRUNED, STALE
from fedcli.results.sweepdir import PlannedRun, last_line, run_state
from fedcli.safefs import make_dir, open_file, refuse_link

if TYPE_CHECKING:  # the config (so every method file, and torch) loads where a run starts, not where it is planned
    from fedcli.recipes import SweepRecipe


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return (
            repr(v)
            if v == v and v not in (float("inf"), float("-inf"))
            else {"nan": "nan", "inf": "inf", "-inf": "-inf"}[repr(v)]
        )
    return json.dumps(str(v), ensure_ascii=False)


def toml_flat(values: dict, header: str = "") -> str:
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def mpiexec_path() -> str:
    here = Path(sys.executable).parent
    for cand in (here / "mpiexec", shutil.which("mpiexec")):
        if cand and Path(cand).exists():
            return str(cand)
    raise ConfigError("--mpi needs mpiexec (install the [mpi] extra: `make install`)")


def execute_inline(config: dict, log: str | Path, resume: bool = False) -> tuple[int, str | None, float]:
    """Train one run in this process (``run_train``); (exit code, error, seconds). Output goes to ``log``.

    ``resume``: continue from the run's latest checkpoint; if ``fedcli train`` refuses (another config,
    another process count, ...), the run starts again from scratch."""
    import contextlib

    from fedcli.config import TrainConfig
    from fedcli.runner import run_train

    t0 = time.perf_counter()
    log = Path(log)
    code, error = 0, None
    _IDLE.clear()
    with (
        _idle_after(),
        open_file(log, "a" if resume else "w") as f,
        contextlib.redirect_stdout(f),
        contextlib.redirect_stderr(f),
    ):
        try:
            done = False
            if resume:
                try:
                    run_train(TrainConfig(**config).validate(), quiet=True, resume=True)
                    done = True
                except RunLocked:
                    raise  # another process writes this run: neither resume nor start it again
                except ConfigError as e:
                    if kept_as_pruned(config["out"]):
                        raise  # a pruned run is kept as it stands, never started again by accident
                    print(f"fedcli sweep: cannot resume ({e}); starting the run again", file=f)
            if not done:
                cfg = TrainConfig(**config).validate()
                run_train(cfg, quiet=True, overwrite=Path(cfg.out).exists())
        except FedcliError as e:
            code, error = e.exit_code, str(e)
        except Exception as e:
            code, error = 1, f"{type(e).__name__}: {e}"
        if error:
            print(f"fedcli: error: {error}", file=f)
    return code, error, time.perf_counter() - t0


def kept_as_pruned(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` was pruned (stopped on request, fedcli/results/stopfile.py): a resume refused for
    that reason is final, the run is never started again in its place (a coordinator that lost track of it asks to
    resume
    it; the run directory wins)."""
    from fedcli.results.runstate import read_manifest
    from fedcli.results.validate import pruned

    return pruned(read_manifest(run_dir)[1]) is not None


def memoize_datasets() -> None:
    """A pool worker trains run after run on the same data: keep the last loaded dataset for the next run.

    ``fedcli.data.setup.load_data_and_partition`` looks ``load_data`` up in its module, so wrapping it
    here (in the worker process only) skips re-parsing, e.g., FEMNIST's JSON for every run. The
    simulator only reads the dataset's tensors. One dataset is kept at a time (bounded memory).
    """
    import fedcli.data.setup as setup

    original = setup.load_data
    if getattr(original, "sweep_memo", False):
        return
    cache: dict = {}

    def load_data(cfg):
        key = setup.load_key(cfg)
        if key not in cache:
            cache.clear()
            cache[key] = original(cfg)
        return cache[key]

    load_data.sweep_memo = True
    setup.load_data = load_data


_IDLE = threading.Event()  # set while this (worker) process runs no training
_IDLE.set()


class _idle_after:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _IDLE.set()


def _orphaned() -> None:
    """A worker whose sweep is gone (killed with SIGKILL, say): stop the training under way as on a second signal
    (the last round boundary is written, at most the round in progress is lost), then leave: nobody is left to
    hand it more work, and its shared lock keeps the sweep folder taken until it has ended."""
    from fedcli.results import signals

    signals.request_stop(now=True)  # idle: SIGTERM's default action ends the process here
    _IDLE.wait()
    os._exit(143)


def _pool_init(workers_lock: str | None = None, parent: str | None = None, devices=None) -> None:
    # Own process group: a terminal's Ctrl-C reaches only the sweep, which passes exactly one SIGINT on
    # (fedcli train then finishes the round, writes a checkpoint and stops; a second one stops now).
    # ``devices``: a queue of environments, one per worker (its GPU, fedcli/sweep/placement.py), taken before CUDA
    # starts here.
    import importlib

    os.setpgrp()
    if devices is not None:
        os.environ.update(devices.get())
    if workers_lock and parent:
        from fedcli.results.lock import join_sweep

        join_sweep(workers_lock, parent, _orphaned)  # hold the sweep folder while alive; die with the sweep

    importlib.import_module("fedcli.runner")  # import torch once per worker, not once per run
    memoize_datasets()
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # between runs a time-limit warning has nothing to stop; a training
    # in progress handles it (checkpoint at its round boundary, fedcli/results/signals.py)


def _start(cmd: list[str], log, env: dict | None):
    """A run's process, its output into ``log``: ``python -m fedcli ...`` forked from the warm server (torch imported
    once for every run of the sweep or study, fedcli/runtime/warm.py), any other command (``mpiexec``) as a new
    program; either in a process group of its own with no standard input."""
    if cmd[:3] == [sys.executable, "-m", "fedcli"]:
        from fedcli.runtime import warm

        return warm.Command("fedcli", "fedcli.cli.main:main", cmd[3:], log.fileno(), env)
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0, env=env
    )


class Executor:
    """Runs planned runs.

    - default: ``jobs`` worker processes (started once, forked from the warm server that imported torch once; each
      trains its runs one after another with ``run_train``), so a crash of a run cannot take the sweep down;
    - ``mpi=N``: one ``mpiexec -n N python -m fedcli train --recipe RUN.toml`` per run, ``jobs`` at a time;
    - ``in_process``: one after another in this process (tests, debugging).

    ``placement`` (:class:`fedcli.sweep.placement.Placement`): the GPU of each of the ``jobs`` slots; a worker process,
    or an
    ``mpiexec`` run, gets its slot's device as ``CUDA_VISIBLE_DEVICES``.
    """

    def __init__(
        self,
        jobs: int = 1,
        mpi: int = 0,
        in_process: bool = False,
        workers_lock: Path | None = None,
        notify=None,
        placement=None,
    ):
        self.jobs, self.mpi, self.in_process = max(1, jobs), mpi, in_process
        self.placement = placement if placement is not None and placement.gpus else None
        if self.placement is not None:
            self.jobs = placement.concurrent
        self.procs: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.stopping = False
        self.signum = signal.SIGINT
        self.workers_lock = workers_lock  # SweepLock.workers_path: every worker holds it shared
        self.notify = notify or (lambda msg: None)

    def announce(self, running: int) -> None:
        """The first signal: say at once what happens now."""
        name = signal.Signals(self.signum).name
        again = {signal.SIGINT: "Ctrl-C again", signal.SIGUSR1: "SIGTERM"}.get(self.signum, f"{name} again")
        self.notify(
            f"{name}: nothing new starts; the {running} running training(s) stop after their current round, with a "
            f"checkpoint; {again} to stop them now (each loses at most the round in progress)"
        )

    def forward(self) -> int:
        """The signal passed on to the trainings. ``mpiexec`` forwards SIGTERM to every rank each time, but takes a
        second SIGINT as "abort now" (nothing written): under ``--mpi`` the trainings get SIGTERM. SIGHUP is passed on
        as SIGTERM (the same stop); SIGUSR1 as itself (each training checkpoints at its next round boundary)."""
        if self.mpi or self.signum == signal.SIGHUP:
            return signal.SIGTERM
        return self.signum

    def command(self, p: PlannedRun, resume: bool = False) -> list[str]:
        py = (
            [sys.executable, "-m", "mpi4py"] if self.mpi else [sys.executable]
        )  # mpi4py: one rank's exception ends the job
        if resume:
            cmd = py + ["-m", "fedcli", "train", "--resume", str(p.dir), "--quiet"]
        else:
            cmd = py + ["-m", "fedcli", "train", "--recipe", str(p.recipe_file), "--quiet"]
            if p.dir.exists():
                cmd.append("--overwrite")
        if self.mpi:
            cmd = [mpiexec_path(), "-n", str(self.mpi)] + cmd
        return cmd

    def prepare(self, p: PlannedRun, recipe: SweepRecipe) -> None:
        make_dir(p.recipe_file.parent)  # the run's folders, logs and recipe files are never links (fedcli/safefs.py)
        for path in (p.dir, p.log):
            refuse_link(path)
        header = (
            f"fedcli sweep: run '{p.name}', seed {p.seed}, of {recipe.path}"
            + (f" at scale {recipe.scale}" if recipe.scale else "")
            + f"\nconfig hash {p.hash}"
            + f"\nreplay: fedcli train --recipe {p.recipe_file} --overwrite"
        )
        atomic_write(p.recipe_file, toml_flat(p.values, header))

    def finish(self, p: PlannedRun, code: int, error: str | None, wall_s: float) -> None:
        p.wall_s = round(wall_s, 2)
        p.exit_code, p.ran = code, True
        state, err = run_state(p)
        if state == DONE and code == 0:
            p.status, p.error = COMPLETED, None
        elif (
            state == PRUNED
        ):  # stopped on request (RUN/stop.json, exit 5), or a resume of it refused: kept as it stands
            p.status, p.error = PRUNED, err
        else:
            p.status = FAILED
            p.error = error or (err if state == FAILED else None) or last_line(p.log) or f"exit code {code}"
            if p.exit_code == 0:
                p.exit_code = 1

    def device_envs(self, n: int) -> list[dict]:
        """The environments of ``n`` slots: slot i's GPU (fedcli/sweep/placement.py), or nothing without a placement."""
        from fedcli.sweep.placement import device_env

        return [
            device_env(self.placement.slots[i % len(self.placement.slots)]) if self.placement else {} for i in range(n)
        ]

    def _subprocess(self, p: PlannedRun, slots=None) -> None:
        t0 = time.perf_counter()
        if self.stopping:
            return
        dev = slots.get() if slots is not None else {}  # a free slot's device: at most K runs at a time on each GPU
        try:
            code = self._spawn(p, self.command(p, resume=p.resume), "a" if p.resume else "w", dev)
            if (
                p.resume and code == 2 and not self.stopping and not kept_as_pruned(p.dir)
            ):  # resume refused: start again
                code = self._spawn(p, self.command(p), "a", dev)
        finally:
            if slots is not None:
                slots.put(dev)
        self.finish(p, code, None, time.perf_counter() - t0)

    def _spawn(self, p: PlannedRun, cmd: list[str], mode: str, device: dict | None = None) -> int:
        from fedcli.results.lock import sweep_env

        env = {**os.environ, **sweep_env(self.workers_lock)} if self.workers_lock else None
        if device or p.env:  # its GPU; the run's own variables (fedcli tune: FEDCLI_TUNE_TRIAL)
            env = {**(env or os.environ), **p.env, **(device or {})}
        with open_file(p.log, mode) as log:
            proc = _start(cmd, log, env)
            with self.lock:
                self.procs[proc.pid] = proc
            try:
                return proc.wait()
            finally:
                with self.lock:
                    self.procs.pop(proc.pid, None)

    def signal_all(self, pids) -> None:
        """Pass the signal the sweep got (SIGINT, or SIGTERM from a scheduler) on to the trainings."""
        for pid in pids:
            try:
                os.kill(pid, self.forward())
            except OSError:
                pass

    def stop_trainings(self, pids: list[int], wait_all) -> None:
        """After the first Ctrl-C (or SIGTERM): start nothing more, pass one signal to each running training (it
        checkpoints at the end of its round and stops, ``interrupted``) and ``wait_all()`` for them. Meanwhile a
        second signal is passed on too (the trainings stop now, each writing its last round boundary) and a
        third stops waiting (the trainings still stop by themselves: they watch the sweep process)."""
        self.stopping = True
        seen = {"n": 1}

        def again(signum, frame):
            seen["n"] += 1
            if seen["n"] > 2:
                raise KeyboardInterrupt
            self.notify(f"{signal.Signals(signum).name} again: stopping the trainings now")
            self.signal_all(pids)

        main_thread = threading.current_thread() is threading.main_thread()
        old = (
            {s: signal.signal(s, again) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} if main_thread else {}
        )
        if main_thread:  # a further time-limit warning changes nothing: the trainings already stop at their boundary
            old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        try:
            self.announce(len(pids))
            self.signal_all(pids)
            wait_all()
        except KeyboardInterrupt:
            pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def interrupt(self) -> None:
        with self.lock:
            procs = list(self.procs.values())

        def wait_all():
            for proc in procs:
                proc.wait()

        self.stop_trainings([p.pid for p in procs], wait_all)

    def run_all(self, todo: list[PlannedRun], recipe: SweepRecipe, on_done) -> None:
        for p in todo:
            self.prepare(p, recipe)
        if self.in_process:
            for p in todo:
                code, error, wall = execute_inline(p.config, p.log, p.resume)
                self.finish(p, code, error, wall)
                on_done(p)
                if code - 128 in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
                    self.signum, self.stopping = code - 128, True  # the training took the signal: the sweep stops too
                    raise KeyboardInterrupt
        elif self.mpi:
            self._run_mpi(todo, on_done)
        else:
            self._run_pool(todo, on_done)

    def _run_mpi(self, todo, on_done) -> None:
        import queue as queues

        slots = None
        if self.placement is not None:
            slots = queues.Queue()
            for env in self.device_envs(self.jobs):
                slots.put(env)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            pending = {pool.submit(self._subprocess, p, slots): p for p in todo}
            try:
                while pending:
                    done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for fut in done:
                        p = pending.pop(fut)
                        fut.result()
                        if p.ran:
                            on_done(p)
            except KeyboardInterrupt:
                for fut in pending:
                    fut.cancel()
                self.interrupt()
                raise

    def _new_pool(self, n: int):
        """A pool of ``n`` workers, each holding the workers lock and, when placed, one slot's GPU; forked from the
        warm server (fedcli/runtime/warm.py: torch imported once for all of them, not once a worker)."""
        from concurrent.futures import ProcessPoolExecutor

        from fedcli.results.lock import start_time
        from fedcli.runtime import warm

        me = f"{os.getpid()}:{start_time(os.getpid()) or ''}"
        ctx, devices = warm.context(), None
        if self.placement is not None:  # each worker takes one slot's GPU as it starts
            devices = ctx.Queue()
            for env in self.device_envs(n):
                devices.put(env)
        return ProcessPoolExecutor(
            max_workers=n,
            mp_context=ctx,
            initializer=warm.run,
            initargs=(warm.inherit(), _pool_init, (str(self.workers_lock) if self.workers_lock else None, me, devices)),
        )

    def _run_pool(self, todo, on_done) -> None:
        from concurrent.futures.process import BrokenProcessPool

        queue, retried = list(todo), set()
        while queue:
            n = min(self.jobs, len(queue))
            pool = self._new_pool(n)
            try:
                # at most n runs handed to the pool at a time, so that a stop leaves nothing queued in it
                pending, requeue, broken = {}, [], False
                while pending or (queue and not broken):
                    while queue and not broken and len(pending) < n:
                        p = queue.pop(0)
                        pending[pool.submit(execute_inline, p.config, str(p.log), p.resume)] = p
                    done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for fut in done:
                        p = pending.pop(fut)
                        try:
                            code, err, wall = fut.result()
                        except BrokenProcessPool:
                            broken = True
                            state, _ = run_state(p)
                            if state in (MISSING, STALE) and p.rel not in retried:
                                retried.add(p.rel)  # never started: try once more in a fresh pool
                                requeue.append(p)
                                continue
                            code, err, wall = 1, "its worker process died (killed, or out of memory?)", 0.0
                        self.finish(p, code, err, wall)
                        on_done(p)
                queue = requeue + queue
            except KeyboardInterrupt:
                # the workers have their own process group: pass one SIGINT on, so that the runs in
                # progress checkpoint and stop (``interrupted``; the next sweep resumes them)
                workers = [w.pid for w in (getattr(pool, "_processes", None) or {}).values()]
                self.stop_trainings(workers, lambda: pool.shutdown(wait=True, cancel_futures=True))
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            finally:
                if not self.stopping:
                    pool.shutdown(wait=True, cancel_futures=True)
