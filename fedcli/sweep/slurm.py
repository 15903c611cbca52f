"""``fedcli sweep --executor slurm``: a sweep's runs as Slurm jobs (submitted with submitit), one job per run, or
``--runs-per-job K`` runs packed in one job (run together, sharing its GPUs: :func:`run_jobs`).

Submission goes through submitit (``submitit.SlurmExecutor``, the library Hydra's Slurm launcher uses): it writes
the sbatch script, submits several runs as one job array (``executor.batch()``), and runs a pickled call of
:func:`run_job` in the job with this interpreter (``sys.executable``; the environment, ``PYTHONPATH`` included, is
exported by sbatch). The job runs exactly what a local ``--mpi`` sweep runs for a run: ``fedcli train --recipe
RUN.toml --quiet`` (or ``--resume RUN_DIR`` when the run stopped with a checkpoint), under ``mpiexec -n N`` for
``--mpi N``, from the folder the sweep was started in, writing the run directory, ``seed<k>.log`` and the
manifest as a local sweep does, so ``fedcli report`` works unchanged. Beside the log, ``seed<k>.job.json``
records the job id (at submission) and the training's exit code (at the end of the job).

Signals: scancel, a time limit or a preemption send SIGTERM, then SIGKILL after the cluster's grace time
(KillWait); ``fedcli train`` takes SIGTERM as "checkpoint at the next round boundary and stop as interrupted", and
a second signal or SIGKILL loses at most the round in progress (its periodic and in-memory round-boundary
checkpoints). So that a time limit does not depend on the grace time, each job asks Slurm for SIGTERM
``signal`` seconds before its limit (sbatch ``--signal=TERM@S``, to every process of the job step). The next
``fedcli sweep`` call resumes what stopped; nothing is resubmitted while its job is pending or running (asked of
Slurm) or while the run's own lock is held.

Resources come from the recipe's ``[slurm]`` table (and ``[slurm.scale.<name>]``), then the command line: see
:class:`Resources`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.results.rundir import atomic_write, now

#: Slurm job states (squeue / scontrol / sacct) in which a job may still run: never resubmit its run
ACTIVE = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "RESV_DEL_HOLD",
    "PREEMPTED",
}
JOB_FILE = ".job.json"  # suffix beside the run's log: <slug>/seed<k>.job.json


@dataclass
class Resources:
    """What each job asks for. Recipe ``[slurm]`` keys have these names; flags override them.

    ``time`` is minutes or a Slurm time (``D-HH:MM:SS``, ``HH:MM:SS``, ``MM``); ``mem`` a Slurm size (``16G``);
    ``gpus`` GPUs per job (``--gpus-per-node``; a run's, unless ``runs_per_job`` packs several); ``cpus`` CPUs per
    run (torch threads = cpus / MPI ranks);
    ``signal`` seconds before the time limit that SIGTERM comes (the run checkpoints and stops as interrupted; 0: no
    warning, the SIGTERM of the limit itself);
    ``runs_per_job`` runs packed in one job, run at the same time and sharing its GPUs round-robin (run i of the job
    sees the job's GPU i mod gpus as ``CUDA_VISIBLE_DEVICES``); the job asks for ``cpus`` x ``runs_per_job`` CPUs,
    ``gpus`` and ``mem`` stay per job (fedcli/sweep/placement.py: one run leaves a GPU mostly idle);
    ``options`` extra sbatch options (``--account=A``, ``--qos=Q``, ``--constraint=C``, ...).
    """

    partition: str | None = None
    time: str = "60"
    cpus: int = 1
    mem: str | None = None
    gpus: int = 0
    signal: int = 120
    array_parallelism: int = 256
    runs_per_job: int = 1
    options: list[str] = field(default_factory=list)

    @property
    def minutes(self) -> int:
        return time_minutes(self.time)

    def job_cpus(self, mpi: int = 0) -> int:
        """CPUs a job asks for: each of its runs' CPUs (at least one per MPI rank), times the runs it packs."""
        return max(self.cpus, mpi or 1) * self.runs_per_job

    def describe(self, mpi: int = 0) -> str:
        parts = [
            f"partition {self.partition or '(default)'}",
            f"time {fmt_minutes(self.minutes)}",
            f"{self.job_cpus(mpi)} CPU(s)",
        ]
        if self.mem:
            parts.append(f"mem {self.mem}")
        if self.gpus:
            parts.append(f"{self.gpus} GPU(s)")
        if mpi:
            parts.append(f"mpiexec -n {mpi}")
        if self.runs_per_job > 1:
            parts.append(f"{self.runs_per_job} runs per job")
        parts.append(f"SIGTERM {self.signal} s before the limit" if self.signal else "SIGTERM at the limit")
        return ", ".join(parts + list(self.options))


def time_minutes(value) -> int:
    """Minutes of a Slurm time: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S`` (seconds round up)."""
    s = str(value).strip()
    try:
        days, rest = s.split("-", 1) if "-" in s else ("0", s)
        parts = [int(x) for x in rest.split(":")]
        d = int(days)
        if "-" in s:
            h, m, sec = (parts + [0, 0])[:3]
        elif len(parts) == 3:
            h, m, sec = parts
        elif len(parts) == 2:
            h, (m, sec) = 0, parts
        elif len(parts) == 1:
            h, m, sec = 0, parts[0], 0
        else:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"slurm time {value!r}: expected minutes or D-HH:MM:SS (Slurm's --time)", key="time"
        ) from None
    total = ((d * 24 + h) * 60 + m) * 60 + sec
    if total <= 0:
        raise ConfigError(f"slurm time {value!r}: must be above 0", key="time")
    return -(-total // 60)


def fmt_minutes(m: int) -> str:
    d, rest = divmod(m, 1440)
    h, mm = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{mm:02d}:00"


def resources(recipe, overrides: dict) -> Resources:
    """``[slurm]`` of the recipe, then ``[slurm.scale.<scale>]``, then the flags (``overrides``, None = not given)."""
    names = {f.name for f in fields(Resources)}
    data = recipe.data.get("slurm", {})
    if not isinstance(data, dict):
        raise ConfigError(f"{recipe.where('slurm')}: [slurm] must be a table ({', '.join(sorted(names))})")
    values = {k: v for k, v in data.items() if k != "scale"}
    scaled = data.get("scale", {}) or {}
    if not isinstance(scaled, dict) or any(not isinstance(v, dict) for v in scaled.values()):
        raise ConfigError(f"{recipe.where('scale')}: [slurm.scale.<name>] must be tables of [slurm] keys")
    if recipe.scale in scaled:
        values.update(scaled[recipe.scale])
    for k in values:
        if k not in names:
            raise ConfigError(
                f"{recipe.where(k)}: unknown [slurm] key '{k}' (allowed: {', '.join(sorted(names))})", key=k
            )
    options = values.pop("options", [])
    if not isinstance(options, list):
        raise ConfigError(
            f'{recipe.where("options")}: [slurm] options must be a list of sbatch options, e.g. ["--qos=high"]'
        )
    options = [str(o) for o in options] + list(overrides.get("options") or [])  # --sbatch adds to the recipe's
    values.update({k: v for k, v in overrides.items() if v is not None and k != "options"})
    res = Resources(**values, options=options)
    for k, lo in (("cpus", 1), ("gpus", 0), ("signal", 0), ("array_parallelism", 1), ("runs_per_job", 1)):
        v = getattr(res, k)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"slurm {k} must be an integer >= {lo}, got {v!r}", key=k)
    res.time = str(res.time)
    res.minutes
    if res.signal >= res.minutes * 60:
        raise ConfigError(
            f"slurm signal {res.signal} s must be shorter than the time limit ({fmt_minutes(res.minutes)})",
            key="signal",
        )
    return res


def sbatch_options(options: list[str]) -> dict:
    """``["--account=a", "--exclusive"]`` -> ``{"account": "a", "exclusive": True}`` (submitit's
    additional_parameters)."""
    out = {}
    for o in options:
        if not o.startswith("--") or len(o) < 3:
            raise ConfigError(f"slurm option {o!r}: expected a long sbatch option such as --qos=high or --exclusive")
        k, _, v = o[2:].partition("=")
        out[k.replace("-", "_")] = v if v else True
    return out


# ------------------------------------------------------------------------------------------------- Slurm


def have_slurm() -> str | None:
    """None when sbatch, squeue and scancel are here and the controller answers; else why not."""
    for tool in ("sbatch", "squeue", "scancel"):
        if not shutil.which(tool):
            return f"{tool} is not on PATH (no Slurm client here)"
    try:
        r = subprocess.run(["squeue", "-h", "-o", "%i", "-j", "1"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"squeue failed ({e})"
    if r.returncode != 0 and "Invalid job id" not in r.stderr:
        return f"the Slurm controller does not answer ({' '.join(r.stderr.split())[:200]})"
    return None


def _run(cmd: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def job_states(job_ids: list[str]) -> dict[str, dict]:
    """``{job id: {"state": S, "exit": "code:signal" or None}}`` for the ids Slurm still knows.

    squeue (pending and running jobs, array tasks one per line), then sacct where accounting is on, then
    ``scontrol show job`` (ended jobs, for MinJobAge)."""
    ids = sorted({str(j) for j in job_ids if j})
    out: dict[str, dict] = {}
    if not ids:
        return out
    r = _run(["squeue", "-h", "-r", "--me", "-o", "%i|%T"])
    if r and r.returncode == 0:
        for line in r.stdout.splitlines():
            jid, _, st = line.strip().partition("|")
            if jid in ids:
                out[jid] = {"state": st, "exit": None}
    rest = [j for j in ids if j not in out]
    if rest:
        r = _run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(rest)])
        if r and r.returncode == 0:
            for line in r.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) == 3 and parts[0] in rest:
                    out[parts[0]] = {"state": parts[1].split()[0], "exit": parts[2]}
    for jid in [j for j in ids if j not in out]:
        r = _run(["scontrol", "show", "job", "-o", jid])
        if r and r.returncode == 0:
            kv = dict(tok.split("=", 1) for tok in r.stdout.split() if "=" in tok)
            if kv.get("JobState"):
                out[jid] = {"state": kv["JobState"], "exit": kv.get("ExitCode")}
    return out


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------------------ per run


def job_file(p) -> Path:
    return p.root / f"{p.rel}{JOB_FILE}"


def read_job(p) -> dict:
    try:
        return json.loads(job_file(p).read_text())
    except (OSError, ValueError):
        return {}


def write_job(p, **values) -> None:
    data = {**read_job(p), **values}
    atomic_write(job_file(p), json.dumps(data, indent=1) + "\n")


def run_locked(p) -> bool:
    """Whether a live fedcli process holds the run's own lock (``RUN_DIR/.fedcli.lock``); only looks
    (:func:`fedcli.results.lock.held_by_other`: a training starting meanwhile is not refused)."""
    from fedcli.results.lock import held_by_other

    return p.dir.is_dir() and held_by_other(p.dir) is not None


def progress(p) -> str:
    """``round R, iteration I / N`` (or ``round R / N``) of a run from the last row of its metrics.csv."""
    from fedcli.results.rundir import read_rows

    try:  # whole rows only: the row being written is not read half
        rows = read_rows(p.dir / "metrics.csv")
    except (OSError, ValueError, UnicodeDecodeError):
        return "-"
    last = rows[-1] if rows else None
    if not last:
        return "started"
    if p.config.get("rounds"):
        return f"round {last.get('round')} / {p.config['rounds']}"
    return f"round {last.get('round')}, iteration {last.get('iteration')} / {p.config.get('iterations')}"


def train_in_job(p, mpi: int, executor, device: dict | None = None) -> int:
    """Train run ``p`` as a local ``--mpi`` sweep would (``executor``: the sweep's executor class,
    ``fedcli.sweep.executors.Executor``, handed down by the sweep; ``device``: its ``CUDA_VISIBLE_DEVICES``), record the
    exit
    code in its job file and return it. Resume or start again is decided here, when the job starts (the run may have
    moved on since submission)."""
    from fedcli.results.sweepdir import run_state

    state, _ = run_state(p)  # sets p.resume from what is on disk now
    if state == "pruned":  # stopped on request since it was submitted: kept as it stands, never started again
        from fedcli.errors import Pruned

        write_job(p, ended=now(), exit_code=Pruned.exit_code)
        return Pruned.exit_code
    ex = executor(mpi=mpi)
    write_job(p, started=now(), host=os.uname().nodename, exit_code=None, **({"device": device} if device else {}))
    code = ex._spawn(p, ex.command(p, resume=p.resume), "a" if p.resume else "w", device)
    if p.resume and code == 2 and run_state(p)[0] != "pruned":  # resume refused (another config, ...): start again,
        # as a local sweep does; never a pruned run (kept as it stands)
        code = ex._spawn(p, ex.command(p), "a", device)
    write_job(p, ended=now(), exit_code=code)
    return code


def _enter_job(cwd: str, mpi: int) -> None:
    os.chdir(cwd)
    if mpi:  # one node: MPICH's mpiexec starts the ranks itself (inside a job it would otherwise launch them with srun)
        os.environ.setdefault("HYDRA_LAUNCHER", "fork")


def run_job(p, mpi: int, cwd: str, executor) -> None:
    """The job of one run (runs on the node): :func:`train_in_job`; the job ends with the training's exit code."""
    _enter_job(cwd, mpi)
    code = train_in_job(p, mpi, executor)
    if code:
        sys.exit(code)  # the job ends with the training's exit code (Slurm: FAILED, ExitCode=code:0)


def job_devices(n: int, gpus: int) -> list[dict]:
    """The ``CUDA_VISIBLE_DEVICES`` of the ``n`` runs of a packed job: run i on the job's GPU i mod ``gpus``, named as
    Slurm gave them to the job (its own ``CUDA_VISIBLE_DEVICES``); nothing without GPUs."""
    from fedcli.sweep.placement import device_env, place

    if not gpus:
        return [{} for _ in range(n)]
    slots = place(n, n, [0] * gpus, None, -(-n // gpus)).slots
    return [device_env(d) for d in slots]


def run_jobs(runs: list, mpi: int, cwd: str, executor, gpus: int = 0) -> None:
    """The job of several runs (``runs_per_job``): all at the same time, one thread each, sharing the job's GPUs
    round-robin (:func:`job_devices`; under ``--mpi N`` with N > 1 each run's ranks spread over them instead); the
    job ends with the first failed training's exit code."""
    from concurrent.futures import ThreadPoolExecutor

    _enter_job(cwd, mpi)
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        devices = job_devices(len(runs), gpus if mpi <= 1 else 0)
        codes = list(pool.map(lambda a: train_in_job(a[0], mpi, executor, a[1]), zip(runs, devices)))
    bad = [c for c in codes if c]
    if bad:
        sys.exit(bad[0])


def slurm_executor(root: Path, res: Resources, cpus: int):
    """A submitit executor whose jobs ask for ``res`` (``cpus`` CPUs per job) and log into ``root/.slurm/<job id>``
    (one node, one task; the job's environment is the submitting process's: sbatch exports it)."""
    import submitit

    class Executor(submitit.SlurmExecutor):
        def _make_submission_file_text(self, command: str, uid: str) -> str:
            text = super()._make_submission_file_text(command, uid)
            if not res.signal:  # no warning: SIGTERM comes at the limit itself (then SIGKILL after KillWait)
                text = "\n".join(l for l in text.splitlines() if not l.startswith("#SBATCH --signal=")) + "\n"
            return text

    ex = Executor(folder=str(root / ".slurm" / "%j"), python=sys.executable)
    extra = {"signal": f"TERM@{res.signal}", **sbatch_options(res.options)}
    params = dict(
        time=res.minutes,
        cpus_per_task=cpus,
        ntasks_per_node=1,
        nodes=1,
        job_name=f"fedcli-{root.name}"[:64],
        array_parallelism=res.array_parallelism,
        additional_parameters=extra,
        stderr_to_stdout=True,
    )
    if res.partition:
        params["partition"] = res.partition
    if res.mem:
        params["mem"] = res.mem
    if res.gpus:
        params["gpus_per_node"] = res.gpus
    ex.update_parameters(**params)
    return ex


def submit(todo: list, recipe, res: Resources, mpi: int, executor, notify=None) -> list[str]:
    """Submit ``todo`` (planned runs, recipe files already written) as one job array; their job ids, in order.
    ``executor``: what runs a run in the job (the sweep's executor class, see :func:`run_job`)."""
    root = todo[0].root
    ex = slurm_executor(root, res, res.job_cpus(mpi))
    cwd = os.getcwd()
    jobs, k = [], res.runs_per_job
    groups = [todo[i : i + k] for i in range(0, len(todo), k)]
    try:
        with ex.batch():
            for g in groups:
                if len(g) == 1:
                    jobs.append(ex.submit(run_job, replace(g[0]), mpi, cwd, executor))
                else:
                    jobs.append(ex.submit(run_jobs, [replace(p) for p in g], mpi, cwd, executor, res.gpus))
    except Exception as e:
        msg = " ".join(str(e).split())
        raise ConfigError(
            f"Slurm refused the jobs ({msg[:400]}); check the [slurm] table or the --partition/--time/--sbatch flags"
        ) from None
    ids = [str(j.job_id) for g, j in zip(groups, jobs) for _ in g]  # a packed job's id for each of its runs
    for p, jid in zip(todo, ids):
        atomic_write(job_file(p), json.dumps({"job_id": jid, "submitted": now(), "resume": p.resume}, indent=1) + "\n")
    return ids


# ---------------------------------------------------------------------------------------- status of a sweep


@dataclass
class RunStatus:
    run: object  # PlannedRun
    state: str  # the run's state on disk (fedcli.results.sweepdir.run_state)
    job_id: str | None = None
    slurm: str | None = None  # Slurm's state of the job, None if unknown
    exit_code: int | None = None  # the training's exit code, from the job file
    locked: bool = False

    @property
    def active(self) -> bool:
        return self.slurm in ACTIVE or self.locked


def statuses(runs: list) -> list[RunStatus]:
    """Per planned run: its state on disk, its job (id, Slurm state) and exit code."""
    jobs = {id(p): read_job(p) for p in runs}
    states = job_states([j.get("job_id") for j in jobs.values() if j.get("job_id")])
    out = []
    for p in runs:
        j = jobs[id(p)]
        jid = j.get("job_id")
        st = states.get(str(jid), {}).get("state") if jid else None
        locked = p.status != "done" and run_locked(p)
        code = j.get("exit_code")
        state = p.status
        if code not in (None, 0) and state in ("missing", "running") and st not in ACTIVE:
            state = "failed"  # it ended before its run directory (or its manifest) said so: the job's exit code tells
        if state == "failed" and not p.error:
            from fedcli.results.sweepdir import last_line

            p.error = last_line(p.log)
        out.append(RunStatus(p, state, jid, st, code, locked))
    return out


#: between two looks at Slurm, how often :func:`wait` reads the job files of the runs still active (a job records its
#: training's end there, :func:`train_in_job`)
LOOK_S = 0.5


def wait(runs: list, poll_s: float = 5.0, on_poll=None) -> list[RunStatus]:
    """Until no job of ``runs`` is pending or running; ``on_poll(statuses)`` after each look. Slurm is asked every
    ``poll_s`` seconds, and sooner once every run it still had active has recorded its end in its job file (read
    every :data:`LOOK_S`): the wait ends about a second after the last job's end, not up to ``poll_s`` later."""
    from fedcli.results.sweepdir import run_state

    while True:
        for p in runs:
            p.status, p.error = run_state(p)
        st = statuses(runs)
        if on_poll:
            on_poll(st)
        if not any(s.active for s in st):
            return st
        active = [s.run for s in st if s.active]
        deadline = time.monotonic() + poll_s
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(LOOK_S, left))
            if all(read_job(p).get("ended") for p in active):
                break


def sbatch_preview(res: Resources, mpi: int) -> str:
    """The sbatch options a job gets (for --dry-run)."""
    opts = [f"--time={fmt_minutes(res.minutes)}", f"--cpus-per-task={res.job_cpus(mpi)}"]
    if res.signal:
        opts.append(f"--signal=TERM@{res.signal}")
    if res.partition:
        opts.insert(0, f"--partition={res.partition}")
    if res.mem:
        opts.append(f"--mem={res.mem}")
    if res.gpus:
        opts.append(f"--gpus-per-node={res.gpus}")
    return shlex.join(opts + list(res.options))
