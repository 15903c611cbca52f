"""``fedcli tune RECIPE --study-workers K``: K workers share one Optuna study (issue 59, "study workers"; the contract
in docs/tuning.md, "Study workers", and docs/slurm.md).

Each worker (a Slurm job with ``--executor slurm``, a process of this machine with ``--executor local``) loops: under
the study's ask lock (:mod:`fedcli.tune.storages`) it first claims an *orphan* (a RUNNING trial whose worker is gone,
per Slurm for a job, per the process table on this host otherwise, and whose run directory is not locked by a
training), else asks a new trial while the study holds fewer than ``trials`` trials (enqueued ones waiting aside), and
records itself on the trial (user attr ``worker``: its Slurm job id, host, pid). Then, without the lock, it trains the
trial as the coordinator does (:class:`fedcli.tune.coordinator.Coordinator`: the same run directory, recipe file,
manifest ``tune`` entry, pruning at the rungs through the stop file, and tell from the run directory), resuming an
orphan's checkpoint (``train --resume``) or running its stored parameters under its number. A worker with nothing left
to ask waits while another live worker's trial runs (it adopts it if that worker dies), then ends.

``trials.csv`` is written by every worker after each change, under ``trials.csv.lock``, from the storage read inside
that lock (so a later write never holds an older state); the run directories stay the truth (``fedcli report``).

A worker stopped by a signal (scancel, a time limit's warning, Ctrl-C) lets its training checkpoint and stop, leaves
the trial RUNNING (an orphan once the worker is gone) and ends. Sampler seeds: worker ``i`` samples with seed + i
(the launcher numbers workers on across calls, ``workers.json``), so workers never propose from one random stream.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from fedcli.errors import ConfigError, FedcliError
from fedcli.tune import study as folder
from fedcli.tune.coordinator import POLL_S, Active, Coordinator, SearchFlags, make_plan, open_study

WORKERS_FILE = "workers.json"
CSV_LOCK = "trials.csv.lock"
#: how often a worker with nothing to ask looks again for orphans while other workers' trials run
WAIT_S = 3.0


def slurm_job_id() -> str | None:
    """This process's Slurm job as squeue names it (``ARRAY_TASK`` for a task of a job array), None outside a job."""
    arr, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if arr and task:
        return f"{arr}_{task}"
    return os.environ.get("SLURM_JOB_ID") or None


def whoami(index: int) -> dict:
    """What a worker records on the trials it runs (user attr ``worker``)."""
    from fedcli.results.lock import start_time

    return {
        "index": index,
        "job_id": slurm_job_id(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": start_time(os.getpid()),
    }


def owner_states(infos: list, me: dict) -> dict:
    """``{id(info): "alive" | "gone" | "unknown"}`` for the ``worker`` attrs ``infos``: a Slurm job is alive while
    Slurm lists it pending or running (asked once for all; if Slurm does not list this worker's own job, its answer
    is not trusted: "unknown"); a process of this host while it runs with its start time; another host's process:
    "unknown" (never adopted)."""
    from fedcli.results.lock import process_alive
    from fedcli.sweep import slurm

    jobs = [str(i["job_id"]) for i in infos if isinstance(i, dict) and i.get("job_id")]
    states, trusted = {}, False
    if jobs and slurm.have_slurm() is None:
        states = slurm.job_states(jobs + ([me["job_id"]] if me.get("job_id") else []))
        own = states.get(str(me.get("job_id")))
        trusted = not me.get("job_id") or bool(own and own["state"] in slurm.ACTIVE)
    out = {}
    for info in infos:
        if not isinstance(info, dict):
            out[id(info)] = "gone"  # asked, then killed before it recorded its worker
        elif info.get("job_id") and str(info["job_id"]) == str(me.get("job_id")):  # this job, requeued: its
            same = (info.get("pid"), info.get("start")) == (me["pid"], me["start"])  # earlier process is gone
            out[id(info)] = "alive" if same else "gone"
        elif info.get("job_id"):
            st = states.get(str(info["job_id"]))
            out[id(info)] = ("alive" if st and st["state"] in slurm.ACTIVE else "gone") if trusted else "unknown"
        elif info.get("host") == socket.gethostname():
            out[id(info)] = "alive" if process_alive(info.get("pid"), info.get("start")) else "gone"
        else:
            out[id(info)] = "unknown"
    return out


class Worker(Coordinator):
    """One study worker (module docstring): :meth:`run` until no trial is left to ask, claim or wait for."""

    def __init__(self, plan, shared, index: int, mpi: int = 0, notify=None, on_event=None):
        super().__init__(plan, 1, mpi, notify, on_event)
        self.shared, self.index = shared, index
        self.me = whoami(index)
        self.studies: list = []

    # ---- the loop
    def run(self) -> None:
        import optuna

        from fedcli.results.lock import FileLock
        from fedcli.tune.executors import LocalTrials

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.held = FileLock(self.plan.root / folder.WORKERS_LOCK, shared=True)  # no coordinator while workers run
        self.held.acquire()
        self.studies = [(sp, open_study(self.plan, sp, self.shared.storage)) for sp in self.plan.studies]
        self.trials = LocalTrials(self)
        self.catch_signals()
        try:
            while not self.stopping:
                if self.step() is None:
                    if self.stopping or not any(self.others_alive(sp, st) for sp, st in self.studies):
                        break
                    time.sleep(WAIT_S)
        finally:
            self.trials.close()
            self.write_csv()

    def step(self):
        """One trial claimed or asked, and trained (or an orphan that had ended, told); None: nothing to do now."""
        for sp, study in self.studies:
            got = self.next_trial(sp, study)
            if isinstance(got, Active):
                self.train(sp, study, got)
            if got is not None:
                return got
        return None

    def next_trial(self, sp, study):
        """Under the ask lock: an orphan claimed, else a new trial while the study has room (module docstring). An
        Active to train, True (an orphan whose run had ended, told), or None."""
        import optuna

        RUNNING, WAITING = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING
        with self.shared.ask_lock(sp.optuna_study):
            trials = study.get_trials(deepcopy=False)
            got = self.claim(sp, study, [t for t in trials if t.state == RUNNING])
            if got is not None:
                return got
            if len(trials) >= sp.trials and not any(t.state == WAITING for t in trials):
                return None
            a = self.ask(sp, study)
            study._storage.set_trial_user_attr(a.trial_id, "worker", self.me)
            return a

    def claim(self, sp, study, running: list):
        """The first orphan among ``running`` (its worker gone, its run directory not locked): recorded as this
        worker's, then resumed (``Coordinator.recover``); True when its run had ended (told), None: no orphan."""
        from fedcli.sweep.slurm import run_locked

        infos = [t.user_attrs.get("worker") for t in running]
        states = owner_states(infos, self.me) if running else {}
        for ft, info in zip(running, infos):
            if states[id(info)] != "gone" or run_locked(self.trial_run(sp, ft.number, dict(ft.params))):
                continue
            study._storage.set_trial_user_attr(ft._trial_id, "worker", self.me)
            was = (
                f"Slurm job {info['job_id']}"
                if isinstance(info, dict) and info.get("job_id")
                else f"process {info.get('pid')} on {info.get('host')}"
                if isinstance(info, dict)
                else "a worker"
            )
            self.on_event("adopt", sp.name, ft.number, f"its worker ({was}) is gone")
            a = self.recover(sp, study, ft)
            return True if a is None else a
        return None

    def others_alive(self, sp, study) -> bool:
        """Whether a trial of the study runs in another live worker (this one waits for it, to adopt it if it dies)."""
        import optuna

        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        infos = [t.user_attrs.get("worker") for t in running]
        states = owner_states(infos, self.me) if running else {}
        return any(states[id(i)] == "alive" for i in infos)

    def train(self, sp, study, a: Active) -> None:
        """Train ``a`` (a process, as the coordinator's local trials), watched at the rungs, then told. A training
        ended by a signal means this worker's job is ending: the trial stays RUNNING for another worker."""
        self.trials.start(a)
        while not a.future.done():
            time.sleep(POLL_S)
            if not self.stopping:
                self.watch(sp, study, a)
        code = a.future.result()
        if code is not None and (code < 0 or code >= 128):
            self.stopping = True
        self.finish(sp, study, a, code)

    def catch_signals(self) -> None:
        """SIGTERM/SIGINT/SIGHUP: ask nothing more, let the training checkpoint and stop (in a Slurm job Slurm signals
        it too; elsewhere the signal is passed on, once)."""

        def stop(signum, frame):
            first = not self.stopping
            self.stopping = self.ex.stopping = True
            self.notify(f"{signal.Signals(signum).name}: the running trial checkpoints and stops")
            if first and not slurm_job_id():
                with self.ex.lock:
                    pids = list(self.ex.procs)
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except OSError:
                        pass

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, stop)

    # ---- trials.csv
    def write_csv(self) -> None:
        """trials.csv from the storage as it is now, read and written under ``trials.csv.lock`` (module docstring)."""
        from fedcli.results.lock import FileLock

        if not self.studies:  # stopped before it opened the studies: nothing read, the index is left as it is
            return
        with FileLock(self.plan.root / CSV_LOCK, wait=True):
            for sp, study in self.studies:
                self.refresh(sp, study)
            super().write_csv()


# ------------------------------------------------------------------------------------------------ a worker's process
def worker_plan(root: Path, storage: str, index: int, threads: int | None):
    """The plan of the study folder ``root`` from its tune.json (the recipe, scale, trials, sampler, pruner, seed as
    the launcher recorded them); refused when the recipe no longer makes that record."""
    rec = folder.read_record(root)
    if rec is None:
        raise ConfigError(f"{root}: no {folder.RECORD}; a study worker works on a folder `fedcli tune` prepared")
    plan = make_plan(
        rec["recipe"],
        rec.get("scale"),
        root,
        SearchFlags.of_record(rec),
        storage,
        rec.get("select_on", "validation"),
    )
    why = folder.record_differs(rec, plan.record)
    if why:
        raise ConfigError(f"{root} holds another study than its recipe makes now: {why}")
    plan.threads = threads or None
    plan.table.seed = int(plan.table.seed) + index
    return plan


def run_worker(root: str | Path, storage: str, index: int, threads: int = 0, mpi: int = 0) -> int:
    """A worker's whole life (in a Slurm job or a local process); 0, or the exit code of the error that stopped it."""
    from fedcli.tune.storages import Shared

    def say(msg: str) -> None:
        print(f"fedcli tune worker {index}: {msg}", file=sys.stderr, flush=True)

    def event(kind: str, study: str, number: int, text: str) -> None:
        say(f"{kind:8s} {study} trial {number}: {text}")

    try:
        plan = worker_plan(Path(root), storage, index, threads)
        Worker(plan, Shared(*plan.storage, plan.root), index, mpi, say, event).run()
    except FedcliError as e:
        say(f"error: {e}")
        return e.exit_code
    return 0


def worker_job(root: str, storage: str, index: int, threads: int, mpi: int, cwd: str) -> None:
    """A study worker as a Slurm job (submitit calls it on the node, in the launcher's folder)."""
    os.chdir(cwd)
    if mpi:
        os.environ.setdefault("HYDRA_LAUNCHER", "fork")
    code = run_worker(root, storage, index, threads, mpi)
    if code:
        sys.exit(code)


def main(argv: list[str]) -> int:
    """``python -m fedcli.tune.workers ROOT STORAGE INDEX THREADS MPI``: a local study worker (``--executor local``)."""
    root, storage, index, threads, mpi = argv
    return run_worker(root, storage, int(index), int(threads), int(mpi))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
