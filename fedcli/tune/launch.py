"""Starting and following ``fedcli tune RECIPE --study-workers K`` (issue 59; docs/tuning.md, "Study workers"): the
storage rules, the study folder prepared once (record, studies, trial 0 enqueued), K workers submitted as Slurm jobs
or started as local processes (:mod:`fedcli.tune.workers`), and with ``--wait`` followed until they end.

Storage rules (exit 2, one sentence, nothing written): workers on several nodes need a PostgreSQL URL; a journal or a
SQLite file is shared by workers of one node only (its locks are one kernel's), so K > 1 Slurm workers on a journal or
SQLite must be pinned to one node (``--sbatch=--nodelist=NODE``). A URL's password never reaches a file: a worker is
handed ``env:NAME`` (the launcher's environment variable, exported to the job by sbatch), never the URL.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from fedcli.errors import ConfigError, FedcliError
from fedcli.results.rundir import atomic_write, now
from fedcli.safefs import make_dir, open_file, refuse_link
from fedcli.tune import study as folder
from fedcli.tune.coordinator import Coordinator, open_study, start_fresh
from fedcli.tune.workers import CSV_LOCK, WORKERS_FILE

#: how often ``--wait`` looks at the workers and the study, per executor (seconds)
FOLLOW_S = {"local": 1.0, "slurm": 5.0}


def pinned_node(options: list[str]) -> str | None:
    """The one node ``--nodelist=NODE`` pins every job to (sbatch options), None when not pinned to a single node."""
    for o in options:
        if o.startswith("--nodelist="):
            node = o.split("=", 1)[1]
            return node if re.fullmatch(r"[\w.-]+", node) else None
    return None


def check_rules(plan, workers: int, executor: str, res, storage_arg: str, jobs: int = 1) -> None:
    """The storage rules of the module docstring, and the flags study workers take (exit 2 before anything runs)."""
    from fedcli.tune.storages import dialect

    if jobs != 1 or (res is not None and res.runs_per_job != 1):
        raise ConfigError(
            "--jobs and --runs-per-job set a coordinator's trials in flight; with --study-workers K each "
            "of the K workers trains one trial at a time"
        )
    kind, what = plan.storage
    d = dialect(kind, what)
    if d not in ("journal", "sqlite", "postgresql"):
        raise ConfigError(
            f"--study-workers: a {d} database cannot be shared by the workers (they serialize their asks "
            f"with PostgreSQL's advisory lock); use a postgresql+psycopg:// URL, or journal or sqlite on "
            f"one node"
        )
    if executor == "slurm" and workers > 1 and d != "postgresql" and res is not None and not pinned_node(res.options):
        raise ConfigError(
            f"--storage {storage_arg} with {workers} Slurm workers: Slurm may place the jobs on several "
            f"nodes, where the {d} file's locks do not reach; pin them to one node with "
            f"--sbatch=--nodelist=NODE, or use a PostgreSQL URL (--storage env:NAME)"
        )
    export = [o for o in (res.options if res is not None else []) if o.startswith("--export=")]
    if kind == "url" and export and export[-1] != "--export=ALL" and env_name(storage_arg) not in export[-1]:
        raise ConfigError(
            f"{export[-1]}: the worker jobs need the environment variable {env_name(storage_arg)} (the "
            f"database URL); add it to --export or drop the option"
        )


def env_name(storage_arg: str) -> str:
    """The environment variable a worker reads the database URL from."""
    if storage_arg.startswith("env:") and storage_arg[4:]:
        return storage_arg[4:]
    return folder.STORAGE_ENV


def worker_storage(plan, storage_arg: str) -> str:
    """What a worker is handed for the storage: ``journal``, ``sqlite``, or ``env:NAME`` (a URL is put into this
    process's environment variable NAME, which sbatch exports to the job and a local worker inherits)."""
    kind, what = plan.storage
    if kind != "url":
        return kind
    name = env_name(storage_arg)
    os.environ[name] = what
    return f"env:{name}"


def prepare(plan, fresh: bool, notify) -> dict:
    """Under ``tune.lock``: ``--fresh`` (refused while workers run), the record checked or written, every study
    created and trial 0 enqueued; returns the folder's ``workers.json``."""
    import optuna

    from fedcli.results.lock import FileLock, describe
    from fedcli.tune.storages import Shared

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root = make_dir(plan.root, "create the study folder")
    lock = FileLock(root / folder.LOCK)
    if not lock.acquire():
        raise ConfigError(
            f"another fedcli tune ({describe(lock.holder())}) is running in {root}; wait for it or stop it"
        )
    try:
        if fresh:
            free = FileLock(root / folder.WORKERS_LOCK)
            if not free.acquire():
                raise ConfigError(f"--fresh: workers of the study in {root} are still running; stop them first")
            free.release()
            start_fresh(plan)
        old = folder.read_record(root)
        why = folder.record_differs(old, plan.record) if old is not None else None
        if why:
            raise ConfigError(
                f"--out {root} holds another study: {why}; choose another --out, or pass --fresh to "
                f"start this one over (its trials are deleted)"
            )
        folder.write_record(root, plan.record)
        shared = Shared(*plan.storage, root)
        for sp in plan.studies:
            with shared.ask_lock(sp.optuna_study):
                open_study(plan, sp, shared.storage)
        return read_workers(root)
    finally:
        lock.release()


def read_workers(root: Path) -> dict:
    try:
        data = json.loads((root / WORKERS_FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def submit(plan, indices: list[int], executor: str, res, mpi: int, storage: str) -> list[dict]:
    """The workers ``indices`` started: Slurm jobs (one array), or detached local processes logging into
    ``DIR/.workers/worker-<i>.log``. Each ``{"index", "job_id" | "pid", ...}``."""
    threads = max(1, res.cpus // max(1, mpi)) if res is not None else max(1, (os.cpu_count() or 1) // len(indices))
    root = plan.root
    if executor == "slurm":
        from fedcli.sweep.slurm import slurm_executor
        from fedcli.tune.workers import worker_job

        ex = slurm_executor(root, res, res.job_cpus(mpi))
        try:
            with ex.batch():
                jobs = [ex.submit(worker_job, str(root), storage, i, threads, mpi, os.getcwd()) for i in indices]
        except Exception as e:
            raise ConfigError(
                f"Slurm refused the worker jobs ({' '.join(str(e).split())[:400]}); check the [slurm] "
                f"table or the --partition/--time/--sbatch flags"
            ) from None
        return [{"index": i, "job_id": str(j.job_id), "submitted": now()} for i, j in zip(indices, jobs)]
    logs = make_dir(root / ".workers")
    out = []
    for i in indices:
        log = logs / f"worker-{i}.log"
        refuse_link(log)
        with open_file(log, "a") as f:
            p = subprocess.Popen(
                [sys.executable, "-m", "fedcli.tune.workers", str(root), storage, str(i), str(threads), str(mpi)],
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        out.append(
            {"index": i, "pid": p.pid, "host": os.uname().nodename, "log": str(log), "started": now(), "_proc": p}
        )
    return out


def launch(
    plan, workers: int, executor: str, res, mpi: int, storage_arg: str, fresh: bool = False, notify=None
) -> list[dict]:
    """Prepare the folder and start ``workers`` workers (none when every study is done); what was started."""
    notify = notify or (lambda m: None)
    from fedcli.tune.storages import Shared

    data = prepare(plan, fresh, notify)
    if study_done(plan, Shared(*plan.storage, plan.root)):
        notify(f"every study in {plan.root} has its {plan.trials} trials and none runs: no worker started")
        return []
    first = int(data.get("next_index", 0))
    started = submit(plan, list(range(first, first + workers)), executor, res, mpi, worker_storage(plan, storage_arg))
    record = {
        "executor": executor,
        "storage": folder.storage_label(*plan.storage),
        "next_index": first + workers,
        "workers": [*data.get("workers", []), *({k: v for k, v in w.items() if k != "_proc"} for w in started)],
    }
    refuse_link(plan.root / WORKERS_FILE)
    atomic_write(plan.root / WORKERS_FILE, json.dumps(record, indent=1) + "\n")
    return started


def counts(plan, shared) -> tuple[dict, Coordinator]:
    """``{state: n}`` over the studies' trials (Optuna's states, trials.csv's words), and a coordinator whose rows
    hold them; trials.csv rewritten under its lock. ``shared``: the storage (:class:`fedcli.tune.storages.Shared`),
    opened once for all the looks (a database connection each would exhaust the server's)."""
    from fedcli.results.lock import FileLock

    co = Coordinator(plan)
    with FileLock(plan.root / CSV_LOCK, wait=True):
        for sp in plan.studies:
            co.refresh(sp, open_study(plan, sp, shared.storage))
        co.write_csv()
    out: dict[str, int] = {}
    for r in co.rows.values():
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out, co


def study_done(plan, shared) -> bool:
    """Every study holds its trials and none is RUNNING or WAITING."""
    import optuna

    for sp in plan.studies:
        trials = open_study(plan, sp, shared.storage).get_trials(deepcopy=False)
        live = [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)]
        if len(trials) < sp.trials or live:
            return False
    return True


def alive(started: list[dict]) -> list[dict]:
    """The workers of ``started`` still running: a local process not yet ended, a Slurm job pending or running."""
    from fedcli.sweep import slurm

    jobs = [w["job_id"] for w in started if w.get("job_id")]
    states = slurm.job_states(jobs) if jobs else {}
    out = []
    for w in started:
        if "_proc" in w:
            if w["_proc"].poll() is None:
                out.append(w)
        elif (st := states.get(str(w.get("job_id")))) and st["state"] in slurm.ACTIVE:
            out.append(w)
    return out


def follow(plan, started: list[dict], executor: str, say) -> Coordinator:
    """``--wait``: until every worker of ``started`` has ended (a line each time the trials' states change); then
    trials.csv rewritten and the study checked: a study left with unfinished trials is an error (exit 1) that says
    to run the command again (new workers adopt them)."""
    import optuna

    from fedcli.tune.storages import Shared

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shared = Shared(*plan.storage, plan.root)
    last = None
    try:
        while True:
            running = alive(started)
            got, _ = counts(plan, shared)
            line = ", ".join(f"{n} {s.lower()}" for s, n in sorted(got.items()))
            if line != last:
                say(f"{line or 'no trials yet'}; {len(running)} of {len(started)} workers running")
                last = line
            if not running:
                break
            time.sleep(FOLLOW_S[executor])
    except KeyboardInterrupt:
        stop_local(started)
        why = (
            "the worker jobs keep running (scancel stops them)"
            if executor == "slurm"
            else "the local workers checkpointed their trials and stopped; run the same command again to resume them"
        )
        err = FedcliError(f"interrupted: {why}")
        err.exit_code = 130
        raise err from None
    _, co = counts(plan, shared)
    if not study_done(plan, shared):
        left = sum(1 for r in co.rows.values() if r["state"] in ("RUNNING", "WAITING"))
        raise FedcliError(
            f"the workers ended with the study unfinished ({left} trial(s) RUNNING or waiting, or fewer "
            f"than {plan.trials}); run the same command again: new workers adopt and finish them"
        )
    return co


def stop_local(started: list[dict]) -> None:
    """Ctrl-C while following local workers: each gets SIGTERM (its training checkpoints and stops), waited for."""
    import signal

    procs = [w["_proc"] for w in started if "_proc" in w and w["_proc"].poll() is None]
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except OSError:
            pass
    for p in procs:
        p.wait()
