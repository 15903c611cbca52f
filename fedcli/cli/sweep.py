"""``fedcli sweep``: run a recipe's grid x seeds (parallel processes or MPI); a second call runs only what is
missing."""

from __future__ import annotations

import time

import typer

from fedcli.cli.console import err_console, out_console


def _fmt_s(s: float) -> str:
    m, s = divmod(int(round(s)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


#: options ``fedcli tune`` shares with ``fedcli sweep`` (fedcli/cli/tune.py): declared once, meaning the same
SCALE = typer.Option(
    None,
    "--scale",
    help="Recipe scale: smoke (minutes on a CPU, the data beside the repo) or paper (the paper's settings). "
    "Required when the recipe has several scales. \\[default: the recipe's only scale]",
)
JOBS = typer.Option(
    1,
    "--jobs",
    "-j",
    min=1,
    help="Runs at a time, each in its own process (torch threads = cores / jobs). With CUDA devices: spread "
    "over them round-robin, at most --runs-per-gpu on each.",
)
MPI = typer.Option(0, "--mpi", min=0, help="Run each training under `mpiexec -n N` (N processes per run).")
DRY_RUN = typer.Option(
    False, "--dry-run", help="Show the runs, what would run, each job's resources and the data check; run nothing."
)
EXECUTOR = typer.Option(
    "local",
    "--executor",
    help="Where runs go (local or slurm): local (worker processes, or --mpi) or slurm (one Slurm job per run, "
    "submitted with submitit; returns at once, see --wait/--status/--cancel).",
)
#: the Slurm resources of a job (--executor slurm), shared by ``fedcli sweep`` and ``fedcli tune``
PARTITION = typer.Option(
    None,
    "--partition",
    help="Slurm: partition of the jobs. \\[default: the recipe's \\[slurm] partition, else the cluster's default]",
    rich_help_panel="Slurm (--executor slurm)",
)
TIME_LIMIT = typer.Option(
    None,
    "--time",
    help="Slurm: time limit per job, minutes or D-HH:MM:SS. \\[default: the recipe's \\[slurm] time, else 60]",
    rich_help_panel="Slurm (--executor slurm)",
)
CPUS = typer.Option(
    None,
    "--cpus",
    min=1,
    help="Slurm: CPUs per job (torch threads = CPUs / MPI ranks). \\[default: \\[slurm] cpus, else 1]",
    rich_help_panel="Slurm (--executor slurm)",
)
MEM = typer.Option(
    None,
    "--mem",
    help="Slurm: memory per job (e.g. 16G). \\[default: \\[slurm] mem, else the partition's default]",
    rich_help_panel="Slurm (--executor slurm)",
)
GPUS = typer.Option(
    None,
    "--gpus",
    min=0,
    help="Slurm: GPUs per job (--gpus-per-node; the runs use --device auto/cuda from the recipe). \\[default: "
    "\\[slurm] gpus, else 0]",
    rich_help_panel="Slurm (--executor slurm)",
)
RUNS_PER_JOB = typer.Option(
    None,
    "--runs-per-job",
    min=1,
    help="Slurm: runs packed in one job, run at the same time and sharing its GPUs round-robin (each sees one "
    "as CUDA_VISIBLE_DEVICES); the job asks for --cpus x K CPUs, --gpus and --mem stay per job. "
    "\\[default: \\[slurm] runs_per_job, else 1]",
    rich_help_panel="Slurm (--executor slurm)",
)
SBATCH = typer.Option(
    None,
    "--sbatch",
    help="Slurm: an extra sbatch option for every job, e.g. --sbatch=--qos=high (repeatable; added to \\[slurm] "
    "options).",
    rich_help_panel="Slurm (--executor slurm)",
)
SIGNAL = typer.Option(
    None,
    "--signal",
    min=0,
    help="Slurm: SIGTERM this many seconds before the time limit, so the run checkpoints at its next round "
    "boundary and stops as interrupted. \\[default: \\[slurm] signal, else 120]",
    rich_help_panel="Slurm (--executor slurm)",
)


def sweep(  # noqa: PLR0913
    recipe: str = typer.Argument(
        ..., help="Sweep recipe (TOML with \\[base], \\[scale.*], \\[\\[runs]], \\[\\[tables]], \\[\\[figures]])."
    ),
    scale: str = SCALE,
    seeds: str = typer.Option(
        None,
        "--seeds",
        help="Seeds per run: a count N (seeds 0..N-1), a list (3,4) or a range (2-5). \\[default: the recipe's "
        "`seeds`]",
    ),
    jobs: int = JOBS,
    runs_per_gpu: str = typer.Option(
        "auto",
        "--runs-per-gpu",
        metavar="K|auto",
        help="Local runs with --device cuda or auto on a machine with CUDA devices: at most K runs at a time on "
        "one GPU (each process sees its GPU as CUDA_VISIBLE_DEVICES); auto: as many as fit in 90% of the "
        "least free GPU's free memory by a run's memory (measured on an earlier seed, else estimated from "
        "the model and the cohort), at most 4, 1 if unknown. The plan says how many run on each device.",
    ),
    out: str = typer.Option(None, "--out", help="Sweep folder. \\[default: results/<recipe name>-<scale>]"),
    mpi: int = MPI,
    in_process: bool = typer.Option(
        False, "--in-process", help="Run the trainings one after another in this process (no start-up cost per run)."
    ),
    dry_run: bool = DRY_RUN,
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Run into an --out folder that holds the sweep of another recipe (another text; or this one at "
        "another --scale, or with tables it does not make), replacing it: its sweep.json then describes "
        "this recipe. The other's runs that share a folder with a run of this recipe are trained over "
        "(named first); its other runs stay on disk, but no report is made of them. Without it such a "
        "folder is refused (exit 2), --dry-run included.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the closing line."),
    download: bool = typer.Option(
        False, "--download", help="Download the missing datasets torchvision can fetch, once, before any run starts."
    ),
    executor: str = EXECUTOR,
    partition: str = PARTITION,
    time_limit: str = TIME_LIMIT,
    cpus: int = CPUS,
    mem: str = MEM,
    gpus: int = GPUS,
    runs_per_job: int = RUNS_PER_JOB,
    sbatch: list[str] = SBATCH,
    signal_s: int = SIGNAL,
    status: bool = typer.Option(
        False,
        "--status",
        help="Slurm: per run its state, job id and Slurm state, progress (round, iteration), and for failed "
        "runs the exit code and log; submits nothing.",
        rich_help_panel="Slurm (--executor slurm)",
    ),
    wait: bool = typer.Option(
        False,
        "--wait",
        help="Slurm: after submitting, follow the jobs with a progress bar until all have ended (Ctrl-C stops "
        "following; the jobs keep running).",
        rich_help_panel="Slurm (--executor slurm)",
    ),
    cancel: bool = typer.Option(
        False,
        "--cancel",
        help="Slurm: scancel the sweep's pending and running jobs (each running one checkpoints at its round "
        "boundary; the next call resumes it).",
        rich_help_panel="Slurm (--executor slurm)",
    ),
    progress: str = typer.Option(
        "auto",
        "--progress",
        metavar="<choice>",
        show_default=False,
        help="Progress on stderr: a live bar with the remaining time and the runs in flight (bar); one plain "
        "flushed line per event for job logs (lines): a run started, its evaluations at each tenth of its "
        "budget (or a minute after its last line), a run finished, each with the sweep's elapsed and "
        "remaining time; none; or auto (bar on a terminal, else lines). Local runs only (--executor slurm: "
        "see --wait). \\[choices: auto, bar, lines, none] \\[default: auto]",
    ),
    tuned: str = typer.Option(
        None,
        "--tuned",
        metavar="DIR",
        help="Run each \\[\\[runs]] row at the confirmed best values of its study in the `fedcli tune` study "
        "folder DIR (the study named as the row; chosen by the mean validation objective of `fedcli tune "
        "DIR --confirm K --seeds N`); a row without one is refused. \\[default --out: results/<recipe "
        "name>-<scale>-tuned]",
    ),
    tracker: list[str] = typer.Option(
        None,
        "--tracker",
        metavar="NAME",
        help="Also send every run to an experiment tracker: tensorboard, wandb or mlflow (repeatable; one "
        "experiment per sweep, one run per run x seed, tagged). \\[default: the recipe's `tracker` key]",
    ),
):
    """Run a recipe's grid x seeds into one folder; runs already completed with the same config are skipped."""
    from fedcli.sweep.run import run_sweep

    _refuse_flag_mix(progress, tuned, executor, status or cancel)
    t0 = time.perf_counter()
    scale = scale if scale is not None else _only_scale(recipe)
    flags = _slurm_flags(partition, time_limit, cpus, mem, gpus, signal_s, runs_per_job, sbatch)
    if status or cancel:
        from fedcli.cli.slurm_status import show_status

        show_status(recipe, scale, seeds, out, mpi, flags, cancel=cancel)
        return
    _refuse_local_runs_per_job(runs_per_job, executor)
    if executor == "slurm" and not dry_run:
        from fedcli.cli.slurm_status import submit_and_follow
        from fedcli.sweep.run import SweepOptions

        options = SweepOptions(seeds=seeds, out=out, mpi=mpi, slurm=flags, download=download, overwrite=overwrite)
        submit_and_follow(recipe, scale, options, wait, quiet, _print_plan)
        return
    tuned_values, tuned_record = _tuned_values(tuned, recipe, scale)
    said = _RunLines(quiet=quiet, jobs=jobs, mpi=mpi, in_process=in_process, progress=progress)
    try:
        result = run_sweep(
            recipe,
            scale=scale,
            seeds=seeds,
            out=out,
            jobs=jobs,
            mpi=mpi,
            in_process=in_process,
            dry_run=dry_run,
            on_start=said.on_start,
            on_done=said.on_done,
            download=download,
            executor=executor,
            slurm=flags,
            tracker=",".join(tracker or []),
            runs_per_gpu=runs_per_gpu,
            overwrite=overwrite,
            tuned=tuned_values,
            tuned_record=tuned_record,
            notify=lambda msg: err_console.print(f"fedcli sweep: {msg}", markup=False, highlight=False, soft_wrap=True),
        )
    finally:
        said.stop()
    if dry_run:
        _print_dry_run_shared(result, said)
    else:
        _print_closing(result, time.perf_counter() - t0)


def _refuse_flag_mix(progress: str, tuned: str | None, executor: str, status_or_cancel: bool) -> None:
    """Refuse an unknown --progress mode, and --tuned with --executor slurm, --status or --cancel (exit 2)."""
    from fedcli.cli.console import PROGRESS_MODES
    from fedcli.errors import ConfigError

    if progress not in PROGRESS_MODES:
        raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)}, got '{progress}'", key="progress")
    if tuned is not None and (executor != "local" or status_or_cancel):
        raise ConfigError(
            "--tuned runs the tuned table locally (--jobs, --mpi); --executor slurm, --status and --cancel "
            "do not take it yet",
            key="tuned",
        )


def _refuse_local_runs_per_job(runs_per_job: int | None, executor: str) -> None:
    """Refuse --runs-per-job without --executor slurm (exit 2): it packs runs into one Slurm job."""
    from fedcli.errors import ConfigError

    if runs_per_job is not None and executor != "slurm":
        raise ConfigError(
            f"--runs-per-job {runs_per_job} packs runs into one Slurm job: it applies to --executor slurm "
            f"only (local runs: --jobs runs at a time, --runs-per-gpu on a GPU)",
            key="runs_per_job",
        )


def _tuned_values(tuned: str | None, recipe: str, scale: str | None) -> tuple:
    """The confirmed best values per [[runs]] row from the study folder ``tuned``, and its record (None, None
    without --tuned)."""
    if tuned is None:
        return None, None
    from fedcli.recipes import read_sweep
    from fedcli.tune.confirm import tuned_rows

    return tuned_rows(tuned, read_sweep(recipe, scale).run_names)


def _print_dry_run_shared(result, said: _RunLines) -> None:
    """Print the dry run's plan, its estimate and each Slurm job's sharing one set of measurements."""
    from fedcli.sweep.estimate import shared_measurements

    with shared_measurements():  # the plan's estimate and, under Slurm, each job's share what they measure
        _print_dry_run(result, said.jobs, said.mpi, quiet=said.quiet, in_process=said.in_process)


def _slurm_flags(partition, time_limit, cpus, mem, gpus, signal_s, runs_per_job, sbatch) -> dict:
    """The Slurm flags as the sweep's ``slurm`` settings (None: the recipe's ``[slurm]`` table, else the default)."""
    flags = {
        "partition": partition,
        "time": time_limit,
        "cpus": cpus,
        "mem": mem,
        "gpus": gpus,
        "signal": signal_s,
        "runs_per_job": runs_per_job,
    }
    if sbatch:
        flags["options"] = list(sbatch)
    return flags


class _RunLines:
    """What a local sweep says while it runs: the plan and the progress display when the runs start
    (:meth:`on_start`), a line per run finished (:meth:`on_done`); nothing but warnings with ``quiet``."""

    def __init__(self, *, quiet: bool, jobs: int, mpi: int, in_process: bool, progress: str):
        self.quiet, self.jobs, self.mpi, self.in_process, self.mode = quiet, jobs, mpi, in_process, progress
        self.progress = self.estimate = None

    def on_start(self, result, todo) -> None:
        from fedcli.cli.console import progress_mode

        _say_replaces(result)
        _warn_if_large(result, todo)
        if self.quiet:
            return
        self.estimate = _print_plan(result, todo, self.jobs, self.mpi, "inline" if self.in_process else None)
        if todo:
            placed = result.placement if result.placement is not None and result.placement.gpus else None
            at_once = (
                1 if self.in_process else (placed.concurrent if placed else self.jobs)
            )  # --runs-per-gpu may cap --jobs
            prog = SweepProgress(todo, at_once, self.estimate, mode=progress_mode(self.mode))
            prog.start()
            self.progress = prog

    def on_done(self, p) -> None:
        prog = self.progress
        if prog is not None:
            prog.finished(p)
        if self.quiet:
            return
        word, body = _done_text(p, prog)
        if prog is not None and prog.mode == "lines":
            prog.say(f"fedcli sweep: {word} {body}")
            prog.tick()  # the run that takes its place: "started" after this "done"
        else:
            from rich.text import Text

            line = Text(f"  {word}{'  ' if word == 'done' else ' '}", style="green" if word == "done" else "red")
            err_console.print(line + Text(body), soft_wrap=True, highlight=False)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _done_text(p, prog) -> tuple[str, str]:
    """A finished run's line: ("done", its best accuracy, communication and wall time) or ("failed", its exit code,
    error and log), with where the sweep stands."""
    if p.status == "pruned":  # stopped on request (RUN/stop.json, exit 5): kept as it stands
        return "pruned", f"{p.label:32s} {p.error}{sofar(prog)}"
    if p.status != "completed":
        return "failed", f"{p.label:32s} exit {p.exit_code}: {p.error}  (log {p.log}){sofar(prog)}"
    from fedcli.reports.rundata import RunData

    run = RunData(p.dir)
    acc = run.accuracy("best", "auto")  # personalized runs: personal_acc, the papers' metric
    what = "personal acc" if run.personalized else "acc"
    return "done", (
        f"{p.label:32s} best {what} {100 * acc:6.2f}%  comm {run.comm_params:,.0f} params  {p.wall_s:.1f}s{sofar(prog)}"
    )


def _print_dry_run(result, jobs: int, mpi: int, *, quiet: bool, in_process: bool) -> None:
    """``--dry-run``: the plan (not with ``quiet``), a table of every run with its state and why, the data check and,
    with Slurm, the jobs it would submit."""
    from rich.table import Table

    _say_replaces(result)
    todo = [p for p in result.runs if p.status not in ("completed", "pruned")]  # a pruned run is kept: nothing to run
    _warn_if_large(result, todo)

    if not quiet:
        _print_plan(result, todo, jobs, mpi, "inline" if in_process else None)

    t = Table(
        title=f"fedcli sweep --dry-run: {result.recipe.path} (scale {result.recipe.scale or 'base'}) -> {result.root}",
        title_justify="left",
    )
    for c in ("run", "seed", "state", "folder", "config hash", "why"):
        t.add_column(c, overflow="fold")
    for p in result.runs:  # the state and its reason in the words `fedcli report` uses (fedcli/results/runstate.py)
        st = (
            "completed (skip)"
            if p.status == "completed"
            else "pruned (kept)"
            if p.status == "pruned"
            else f"{p.status} ({'resume' if p.resume else 'run'})"
        )
        t.add_row(p.name, str(p.seed), st, p.rel, p.hash, "" if p.status == "completed" else (p.error or ""))
    source = {(p.name, p.seed): p for p in result.runs}
    for v in result.recipe.retimed:  # runs of the report, not trained: read from their training's records
        for p in (source[(v.of, s)] for (n, s) in source if n == v.of):
            t.add_row(
                v.name,
                str(p.seed),
                f"re-timed from '{v.of}' (no training)",
                p.rel,
                "",
                ", ".join(f"{k} {val}" for k, val in v.options.items()),
            )
    out_console.print(t)
    _print_data(result.data)
    if result.resources is not None:
        from fedcli.cli.slurm_status import print_jobs_plan

        print_jobs_plan(result, mpi)


def _print_closing(result, seconds: float) -> None:
    """The closing line: how many runs are complete (run now, already done), the time taken, and the report to make."""
    names = [p["name"] for p in result.recipe.tables]
    hint = f"fedcli report {result.root}" + (f" --table {names[0]}" if names else "")
    ran = len(result.ran)
    pruned = sum(p.status == "pruned" for p in result.runs)
    kept = (
        f"; {pruned} pruned, kept as they stand (fedcli train --resume RUN_DIR --promote finishes one)"
        if pruned
        else ""
    )
    ran_ok = sum(p.status == "completed" for p in result.ran)
    msg = (
        f"fedcli sweep: {len(result.runs) - pruned} runs complete in {result.root} ({ran_ok} ran now, "
        f"{len(result.runs) - ran_ok - pruned} were already done, {_fmt_s(seconds)}){kept}; next: {hint}"
    )
    if ran == 0:
        msg = (
            f"fedcli sweep: nothing to run: all {len(result.runs) - pruned} runs in {result.root} are complete{kept}; "
            f"next: {hint}"
        )
    err_console.print(msg, soft_wrap=True, highlight=False, markup=False)


def _say_replaces(result) -> None:
    """``--overwrite`` on a folder that held another sweep: said before anything runs (also with --quiet)."""
    if result.replaces:
        err_console.print(
            f"fedcli sweep: --overwrite: {result.replaces}; this sweep replaces it",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )


#: a sweep with more trainings to run than this is said before it starts (also with --quiet), never planned silently
LARGE_SWEEP = 500


def _warn_if_large(result, todo) -> None:
    if len(todo) <= LARGE_SWEEP:
        return
    err_console.print(
        f"fedcli sweep: warning: {len(todo):,} trainings to run ({len(result.runs):,} in the grid x seeds, more "
        f"than {LARGE_SWEEP}); check the grid and its estimate (--dry-run lists both) and stop with Ctrl-C if "
        f"this is not what you meant",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _print_data(checks) -> None:
    """The data check of ``--dry-run`` (fedcli/data/preflight.py): one row per dataset the runs to go read."""
    if not checks:
        return
    from rich.table import Table

    t = Table(title="data: every dataset the runs to go need, looked at before anything starts", title_justify="left")
    for c in ("dataset", "path", "runs", "state", "how to get it"):
        t.add_column(c, overflow="fold")
    for c in checks:
        t.add_row(c.dataset, str(c.path or "-"), str(len(c.runs)), c.state(), "" if c.ok else c.how)
    out_console.print(t)
    bad = [c for c in checks if not c.ok]
    if bad:
        err_console.print(
            f"fedcli sweep: {len(bad)} dataset(s) missing: the sweep would stop with exit 3 before starting any run",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )


def sofar(prog) -> str:
    """``  [3/7, elapsed 0:00:12  remaining 0:00:16]``: where the sweep stands, on each run's line (a job log has
    no live bar)."""
    return f"  [{len(prog.done)}/{len(prog.todo)}, {prog.times()}]" if prog is not None else ""


def _only_scale(recipe: str) -> str | None:
    """The scale of a recipe that has one; a recipe with several needs --scale (no paper-scale run by surprise)."""
    from fedcli.errors import ConfigError
    from fedcli.recipes import read_recipe

    data, _ = read_recipe(recipe)
    scales = data.get("scale") if isinstance(data.get("scale"), dict) else {}
    if len(scales) <= 1:
        return next(iter(scales), None)
    names = sorted(scales)
    hint = "; ".join(
        f"--scale {n}"
        + {
            "smoke": " (the same grid reduced to run in minutes on a CPU, on the data beside the repo)",
            "paper": " (the paper's setting: its datasets, models and budgets; hours to days, GPU)",
        }.get(n, "")
        for n in names
    )
    raise ConfigError(
        f"recipe {recipe} has scales {', '.join(names)}: choose one with {hint}; add --dry-run to see what "
        f"it would run and an estimate of its time"
    )


class SweepProgress:
    """The sweep's progress: runs done of the runs to go, labelled elapsed and remaining times, and the runs in flight
    with their iterations (or rounds) done, read from their metrics.csv at most once a second.

    Remaining time: each run to go costs its estimated seconds (fedcli/sweep/estimate.py: start-up, data loading,
    compute)
    times a factor calibrated on the runs this sweep has finished (their measured wall time over their estimate), less
    the part of the in-flight runs already done; the jobs share it (never less than the longest run left). It counts
    down between readings. Without an estimate (a run that could not be estimated): the time per unit of work done so
    far (runs done plus the in-flight runs' fractions).

    ``mode`` (``--progress``): ``bar``, a live rich bar; ``lines``, one plain flushed line on stderr per event (a run
    started, an evaluation at each tenth of a run's budget or a minute after that run's last line; the CLI writes the
    run-finished line through :meth:`say`, then :meth:`tick`), never cut (a job log); ``none``."""

    #: an in-flight run gets an evaluation line at each tenth of its budget, or this many seconds after its last one
    LINE_EVERY_S = 60.0

    def __init__(self, todo: list, jobs: int, est=None, mode: str = "bar", stream=None):
        import sys
        import threading
        import time

        self.todo, self.jobs, self.mode = list(todo), max(1, jobs), mode
        self.stream = (
            stream if stream is not None else sys.stderr
        )  # the terminal's, before an in-process run redirects it
        known = est is not None and not est.unknown and all(id(p) in est.per_run for p in self.todo)
        self.cost = {p.rel: est.per_run[id(p)] for p in self.todo} if known else None  # run -> estimated seconds
        self.startup_s = est.startup_s if known else 0.0
        self.done: dict = {}  # rel -> wall seconds of the runs finished here
        self.t0, self.now = time.monotonic(), time.monotonic
        self._flight, self._read_at, self._fractions = "", -1.0, {}
        self._rows: dict = {}  # rel -> last metrics row read
        self._said: dict = {}  # rel -> (tenth, time, row) of its last line
        self._left = None  # (remaining seconds, when computed, state it came from)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = None
        me = self

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
        from rich.text import Text

        class Times(ProgressColumn):
            def render(self, task):
                return Text(me.times(), style="progress.remaining", no_wrap=True)

        class Flight(ProgressColumn):
            def render(self, task):  # one line: cut with an ellipsis at the terminal's edge, never wrapped mid-name
                return Text(me.in_flight(), style="dim", no_wrap=True, overflow="ellipsis")

        self.progress = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(bar_width=12),
            MofNCompleteColumn(),
            Times(),
            Flight(),
            console=err_console,
            disable=mode != "bar",
        )
        self.task = self.progress.add_task("sweep", total=len(self.todo))

    def start(self) -> None:
        import threading

        self.t0 = self.now()
        self.progress.start()
        if self.mode == "lines":
            self.tick()
            self._thread = threading.Thread(target=self._follow, name="sweep-progress", daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.progress.stop()

    def say(self, line: str) -> None:
        """One plain line on stderr, flushed (``--progress lines``)."""
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def finished(self, p) -> None:
        with self._lock:
            self.done[p.rel] = p.wall_s or 0.0
            self._read_at = -1.0  # the runs in flight changed: read them again
            self.progress.advance(self.task)
            if len(self.done) == len(self.todo):
                self.progress.stop()  # the last frame stays; no clock ticking while the workers close

    # -------------------------------------------------------------------------------------------- remaining time

    def factor(self) -> float:
        """Measured over estimated wall time of the runs finished here (1 before any)."""
        ran = [(w, self.cost[r]) for r, w in self.done.items() if w and self.cost.get(r)]
        return sum(w for w, _ in ran) / sum(e for _, e in ran) if ran else 1.0

    def remaining(self) -> float | None:
        with self._lock:
            self.in_flight()
            now = self.now()
            state = (len(self.done), tuple(sorted(self._fractions.items())))
            if self._left is None or self._left[2] != state:
                self._left = (self._estimate_left(now - self.t0), now, state)
            left, at, _ = self._left
            if left is None or (left - (now - at) < 0 and len(self.done) < len(self.todo)):
                return None  # nothing known, or runs go on past the estimate: "estimating" until the next reading
            return max(0.0, left - (now - at))

    def _estimate_left(self, elapsed: float) -> float | None:
        if self.cost is None:  # no estimate: from the rate of the work done so far
            work = len(self.done) + sum(self._fractions.values())
            return elapsed / work * (len(self.todo) - work) if work > 0 else None
        f = self.factor()
        left = [
            self.cost[p.rel] * f * (1 - self._fractions.get(p.rel, 0.0)) for p in self.todo if p.rel not in self.done
        ]
        if not left:
            return 0.0
        moved = bool(self.done) or any(self._fractions.values())
        startup = 0.0 if moved else max(0.0, self.startup_s - elapsed)  # the workers are still starting
        return startup + max(sum(left) / self.jobs, max(left))

    def times(self) -> str:
        from fedcli.cli.console import clock

        left = self.remaining()
        return f"elapsed {clock(self.now() - self.t0)}  remaining {clock(left) if left is not None else 'estimating'}"

    # ------------------------------------------------------------------------------------------ the runs in flight

    def going(self) -> list:
        """The runs started and not done (runs start in plan order, ``jobs`` at a time)."""
        return [p for p in self.todo if p.rel not in self.done][: self.jobs]

    def in_flight(self) -> str:
        """``in flight: NAME sSEED done/total, ...``, read from their metrics.csv at most once a second."""
        with self._lock:
            if self.now() - self._read_at < 1.0:
                return self._flight
            from fedcli.reports.rundata import read_csv

            parts, fractions, going_names = [], {}, []
            for p in self.going():
                try:
                    rows = read_csv(p.dir / "metrics.csv")
                except (OSError, ValueError):
                    rows = []
                done, total = self._count(p, rows[-1] if rows else None)
                if rows:
                    self._rows[p.rel] = rows[-1]
                same = bool(parts) and going_names[-1] == p.name  # seeds of one run share its name
                going_names.append(p.name)
                parts.append(f"{'' if same else p.name + ' '}s{p.seed} {done}/{total}")
                fractions[p.rel] = min(1.0, done / total) if isinstance(done, (int, float)) and total else 0.0
            self._flight, self._read_at, self._fractions = (
                ("in flight: " + ", ".join(parts)) if parts else "",
                self.now(),
                fractions,
            )
            return self._flight

    @staticmethod
    def _count(p, row: dict | None) -> tuple:
        cfg = p.config
        total = cfg.get("rounds") or cfg.get("iterations")
        if row is None:
            return 0, total
        return (row.get("round") if cfg.get("rounds") else row.get("iteration")), total

    # ------------------------------------------------------------------------------------ --progress lines: events

    def tick(self) -> None:
        """Read the runs in flight and say what happened since the last reading: runs started, evaluations."""
        with self._lock:
            self._read_at = -1.0
            self.in_flight()
            now = self.now()
            for p in self.going():
                if p.rel not in self._said:
                    self._said[p.rel] = (-1, now, None)
                    self.say(f"fedcli sweep: started {p.label}{sofar(self)}")
                row = self._rows.get(p.rel)
                tenth, last, said_row = self._said[p.rel]
                if row is None or row == said_row:
                    continue
                now_tenth = int(10 * self._fractions.get(p.rel, 0.0))
                if now_tenth > tenth or now - last >= self.LINE_EVERY_S:
                    self._said[p.rel] = (now_tenth, now, row)
                    self.say(self.line(p, row))

    def line(self, p, row: dict) -> str:
        """``fedcli sweep: NAME seed S: iteration 80/160 (50.0%)  round 40  acc 61.20%  loss 0.4312  [1/4, ...]``."""
        from fedcli.cli.console import accuracy_text

        done, total = self._count(p, row)
        unit = "round" if p.config.get("rounds") else "iteration"
        pct = f" ({100 * done / total:.1f}%)" if isinstance(done, (int, float)) and total else ""
        other = f"  iteration {row.get('iteration')}" if unit == "round" else f"  round {row.get('round')}"
        try:
            acc = f"  {accuracy_text(row)}"
        except (KeyError, TypeError, ValueError):
            acc = ""
        loss = row.get("train_loss")
        loss = f"  loss {loss:.4f}" if isinstance(loss, (int, float)) else ""
        return f"fedcli sweep: {p.label}: {unit} {done}/{total}{pct}{other}{acc}{loss}{sofar(self)}"


#: what the settings of re-timed runs are, by the one option they set
SETTINGS = {
    "uplink": "uplink bandwidths",
    "downlink": "downlink bandwidths",
    "speed": "device speeds",
    "latency": "latencies",
    "system_trace": "system traces",
    "server_time": "server times",
}


def retimed_text(recipe, seeds: int = 1) -> str:
    """The plan's account of the recipe's re-timed runs (its runs' ``retime`` lists; docs/sweeps.md): "the 2
    trainings (FedAvg, FedLAMA) re-timed at 4 uplink bandwidths (...) each: 8 runs of the report from their records,
    not trained", or "" for a recipe without them."""
    variants = recipe.retimed
    if not variants:
        return ""
    of = list(dict.fromkeys(v.of for v in variants))
    settings = list(dict.fromkeys(tuple(sorted(v.options.items())) for v in variants))
    keys = {k for s in settings for k, _ in s}
    what = SETTINGS[next(iter(keys))] if len(keys) == 1 else "system settings"
    shown = ", ".join(" ".join(f"{v}" if len(keys) == 1 else f"{k}={v}" for k, v in s) for s in settings)
    per = {sum(v.of == name for v in variants) for name in of}
    each = f"{per.pop()} each" if len(per) == 1 else "each its own"
    runs = len(recipe.runs)
    return (
        f"{'the' if len(of) == runs else f'{len(of)} of the'} {runs} training{'s' if runs != 1 else ''} "
        f"({', '.join(of)}) re-timed at {len(settings)} {what} ({shown}), {each}: {len(variants)} runs of the report "
        f"from their records{f' (x {seeds} seeds)' if seeds > 1 else ''}, not trained; training each at each "
        f"setting would be {len(variants) * seeds} trainings"
    )


def _print_recipe_notes(r, seeds: int) -> None:
    """The plan's lines on the recipe ``r``: its runs re-timed, where its relative paths resolve, a reduced scale."""
    said = retimed_text(r, seeds)
    if said:
        err_console.print(f"  re-timed: {said}", soft_wrap=True, highlight=False, markup=False)
    err_console.print(
        f"  paths: the recipe's relative paths (data_dir, partition_file, model files) resolve against {r.root}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    if r.scale and r.scale != "paper":
        err_console.print(
            f"  scale {r.scale}: a reduced version of scale paper, the setting of "
            f"{r.paper or 'the paper'}; it checks the pipeline, "
            f"not the paper's numbers",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )


def _print_plan(result, todo, jobs: int, mpi: int, executor: str | None = None):
    """Before anything runs: the grid, the budget of each run and the estimated time (fedcli/sweep/estimate.py); returns
    the :class:`fedcli.sweep.estimate.Estimate` (None when there is nothing to run). ``executor``: see
    :func:`fedcli.sweep.estimate.estimate`."""
    from fedcli.sweep.estimate import budget_text, estimate
    from fedcli.sweep.run import load_manifest

    r = result.recipe
    seeds = len(result.runs) // max(1, len(r.runs))
    placed = getattr(result, "placement", None)
    if placed is not None and placed.gpus:
        jobs = placed.concurrent
    pruned = sum(p.status == "pruned" for p in result.runs)
    head = (
        f"[bold]fedcli sweep[/]: {r.path} ({r.paper or r.title}), scale {r.scale or 'base'}: {len(r.runs)} runs x "
        f"{seeds} seed{'s' if seeds != 1 else ''} = {len(result.runs)} trainings; "
        f"{len(result.runs) - len(todo) - pruned} "
        f"already completed, {f'{pruned} pruned (kept), ' if pruned else ''}{len(todo)} to run, {jobs} at "
        f"a time{f' (mpiexec -n {mpi} each)' if mpi else ''} -> {result.root}"
    )
    err_console.print(head, soft_wrap=True)
    _print_recipe_notes(r, seeds)
    if not todo:
        return None
    if placed is not None:  # on a machine without CUDA too: "no CUDA device: runs on the CPU"
        err_console.print(f"  devices: {placed.text()}", soft_wrap=True, highlight=False, markup=False)
    old = {
        (e.get("name"), e.get("seed")): e.get("wall_s")
        for e in (load_manifest(result.root, missing_ok=True) or {}).get("runs", [])
    }
    done = [p for p in result.runs if p.status == "completed"]
    for p in done:
        p.wall_s = p.wall_s or old.get((p.name, p.seed))
    est = estimate(todo, done, jobs, mpi, executor=executor)
    err_console.print(f"  budget: {budget_text(todo)}; {est.text()}", soft_wrap=True, highlight=False, markup=False)
    for p in todo:  # killed with their watchdog (manifest still running): said here, not only in the run's log
        if p.status == "running" and str(p.error or "").startswith("killed:"):
            what = str(p.error).split("; ")[0]
            err_console.print(
                f"  {p.label}: {what}; {'resumed from its last checkpoint' if p.resume else 'run again'}",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    return est
