"""``fedcli sweep --executor slurm``: submit, follow (``--wait``), show (``--status``) and cancel (``--cancel``)."""

from __future__ import annotations

import shlex
import sys

from fedcli.cli.console import err_console, out_console


def _say(msg: str) -> None:
    err_console.print(f"fedcli sweep: {msg}", soft_wrap=True, highlight=False, markup=False)


def print_jobs_plan(result, mpi: int) -> None:
    """``--dry-run``: what each job asks for, and the estimated time of each run next to the time limit."""
    from rich.table import Table

    from fedcli.sweep.estimate import estimate, fmt_duration
    from fedcli.sweep.slurm import sbatch_preview

    res = result.resources
    todo = [p for p in result.runs if p.status not in ("completed", "pruned")]  # a pruned run is kept: no job
    est = estimate(todo, [], 1, mpi, executor="process")  # one Slurm job, one fresh process, per run
    limit = res.minutes * 60
    k = res.runs_per_job
    per = (
        "one job per run" if k == 1 else f"{k} runs per job ({-(-len(todo) // k)} jobs), run together sharing its GPUs"
    )
    t = Table(title=f"Slurm: {per}; each asks for: {sbatch_preview(res, mpi)}", title_justify="left")
    for c in ("run", "seed", "estimate (this machine)", "time limit", ""):
        t.add_column(c)
    over = 0
    for p in todo:
        s = est.per_run.get(id(p))
        warn = ""
        if s is None:
            shown = "?"
        else:
            shown = fmt_duration(s)
            if s > limit:
                over += 1
                warn = "estimate exceeds the limit: the job stops at it (checkpointed) and the next call resumes it"
        t.add_row(p.name, str(p.seed), shown, fmt_duration(limit), warn)
    out_console.print(t)
    if over:
        _say(
            f"warning: {over} run(s) are estimated to take longer than the time limit {res.time} (estimated on this "
            f"machine with {'/'.join(map(str, sorted(est.threads))) or '?'} thread(s), not on the "
            f"cluster's nodes); raise "
            f"--time, or let each call resume them from their last checkpoint"
        )


def _fmt_status(statuses) -> "Table":  # noqa: F821
    from rich.table import Table

    from fedcli.sweep.slurm import progress

    t = Table(title_justify="left")
    for c in ("run", "seed", "state", "job", "slurm", "progress", "exit"):
        t.add_column(c)
    for s in statuses:
        p = s.run
        state = "completed" if s.state in ("done", "completed") else s.state
        t.add_row(
            p.name,
            str(p.seed),
            state + (" (locked)" if s.locked else ""),
            s.job_id or "-",
            s.slurm or "-",
            progress(p),
            "-" if s.exit_code is None else str(s.exit_code),
        )
    return t


def _failures(statuses) -> None:
    """One line per run that failed or stopped: exit code, log and the error it ended with."""
    for s in statuses:
        if s.state in ("failed", "interrupted", "corrupt", "stale") and not s.active:
            p = s.run
            code = f"exit {s.exit_code}, " if s.exit_code not in (None, 0) else ""
            out_console.print(
                f"{p.label}: {s.state} ({code}job {s.job_id or '-'} {s.slurm or ''}); log {p.log}"
                + (f": {p.error}" if p.error else ""),
                soft_wrap=True,
                highlight=False,
                markup=False,
            )


def show_status(recipe, scale, seeds, out, mpi, flags, cancel: bool = False) -> None:
    """``--status``: a table of the sweep's runs; ``--cancel``: scancel its pending and running jobs."""
    from fedcli.sweep import slurm
    from fedcli.sweep.run import prepare_sweep

    _, root, _, runs, _ = prepare_sweep(recipe, scale, seeds, out, mpi=mpi, cpus=flags.get("cpus") or 1)
    st = slurm.statuses(runs)
    if cancel:
        ids = [s.job_id for s in st if s.slurm in slurm.ACTIVE and s.job_id]
        slurm.cancel(ids)
        _say(
            f"cancelled {len(ids)} job(s) of {root}"
            + (f" ({', '.join(ids)})" if ids else "")
            + "; running ones checkpoint at their round boundary; the same `fedcli sweep ... --executor "
            "slurm` resumes them"
        )
        return
    out_console.print(_fmt_status(st))
    _failures(st)
    done = sum(1 for s in st if s.state == "done")
    active = sum(1 for s in st if s.active)
    _say(
        f"{root}: {done} of {len(st)} runs completed, {active} job(s) pending or running, "
        f"{len(st) - done - active} to (re)submit by the next `fedcli sweep ... --executor slurm`"
    )


def submit_and_follow(recipe, scale, options, wait: bool, quiet: bool, print_plan) -> None:
    """``fedcli sweep --executor slurm``: submit the sweep's runs to go (``options``: a
    :class:`fedcli.sweep.run.SweepOptions` with the seeds, folder, MPI ranks, resource flags, download and overwrite),
    say what was submitted, and with ``wait`` follow the jobs to their end (exit code of the first failure)."""
    from fedcli.sweep import slurm
    from fedcli.sweep.run import failed_error, run_state, run_sweep

    mpi = options.mpi

    def on_start(result, go):
        if not quiet:
            print_plan(result, go, len(go) or 1, mpi, "process")
            _say(f"each job asks for {result.resources.describe(mpi)}")

    result = run_sweep(recipe, scale, options, executor="slurm", on_start=on_start, notify=_say)
    _say_submitted(result)
    follow = [p for p in result.runs if p.status not in ("completed", "pruned")]
    if not wait:
        if follow:
            _say(
                f"follow with: fedcli sweep {recipe} {'--scale ' + scale + ' ' if scale else ''}--executor "
                f"slurm --status "
                f"(or --wait); stop with --cancel"
            )
        return
    if follow:
        seeds, out = options.seeds, options.out
        again = shlex.join(
            [
                "fedcli",
                "sweep",
                str(recipe),
                *(["--scale", scale] if scale else []),
                *(["--seeds", str(seeds)] if seeds else []),
                *(["--out", str(out)] if out else []),
                "--executor",
                "slurm",
            ]
        )
        _follow(follow, again, quiet)
    for p in result.runs:
        if p.status != "completed":
            p.status, p.error = run_state(p)
            if p.status == "done":
                p.status = "completed"
            else:
                p.exit_code = slurm.read_job(p).get("exit_code")
    err = failed_error(result)
    if err:
        raise err
    _say(f"{len(result.runs)} runs complete in {result.root}; next: fedcli report {result.root}")


def _say_submitted(result) -> None:
    """The jobs just submitted, the runs whose job was pending or running already, or that there was nothing to do."""
    sub, queued = result.submitted, result.queued
    if sub:
        ids = list(dict.fromkeys(p.job_id for p in sub))  # a packed job (--runs-per-job) holds several runs
        packed = f" holding {len(sub)} runs" if len(ids) < len(sub) else ""
        _say(f"submitted {len(ids)} job(s){packed} to Slurm: {', '.join(ids[:6])}{' ...' if len(ids) > 6 else ''}")
    if queued:
        _say(
            f"{len(queued)} run(s) already have a pending or running job (not submitted again): "
            + ", ".join(f"{p.label} job {p.job_id}" for p in queued[:6])
        )
    pruned = sum(p.status == "pruned" for p in result.runs)  # stopped on request: kept as they stand, never resubmitted
    kept = (
        f" ({pruned} pruned, kept as they stand: fedcli train --resume RUN_DIR --promote finishes one)"
        if pruned
        else ""
    )
    if not sub and not queued:
        _say(f"nothing to submit: all {len(result.runs)} runs in {result.root} are complete{kept}")


def _follow(runs, again: str, quiet) -> None:
    """``--wait``: a progress bar until every job has ended. Ctrl-C says at once that the jobs keep running and how to
    see, follow or cancel them (``again``: the sweep's command line), then stops following (exit 130)."""
    import signal

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fedcli.sweep import slurm

    prog = Progress(
        TextColumn("[bold]slurm"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console,
        disable=quiet,
    )
    task = prog.add_task("", total=len(runs))

    def on_poll(st):
        ended = sum(1 for s in st if not s.active)
        pending = sum(1 for s in st if s.slurm == "PENDING")
        running = sum(1 for s in st if s.active) - pending
        prog.update(task, completed=ended, description=f"{running} running, {pending} pending")

    def on_int(signum, frame):
        prog.stop()
        _say(
            f"Ctrl-C: stopped following; the jobs keep running on the cluster. See them with `{again} --status`, "
            f"follow again with `{again} --wait`, cancel them with `{again} --cancel`"
        )
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_int)
    try:
        with prog:
            slurm.wait(runs, poll_s=3.0, on_poll=on_poll)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        signal.signal(signal.SIGINT, old)
