"""``fedcli sweep``: run a recipe's grid x seeds (parallel processes or MPI); a second call runs only what is missing."""

from __future__ import annotations

import time

import typer

from fedcli.cli.console import err_console, out_console


def _fmt_s(s: float) -> str:
    m, s = divmod(int(round(s)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def sweep(
    recipe: str = typer.Argument(..., help="Sweep recipe (TOML with \\[base], \\[scale.*], \\[\\[runs]], \\[\\[tables]], \\[\\[figures]])."),
    scale: str = typer.Option(None, "--scale", help="Recipe scale: smoke (minutes on a CPU, the data beside the repo) or paper (the paper's settings). Required when the recipe has several scales. \\[default: the recipe's only scale]"),
    seeds: int = typer.Option(None, "--seeds", min=1, help="Seeds per run (0..N-1). \\[default: the recipe's `seeds`]"),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Runs at a time, each in its own process (torch threads = cores / jobs)."),
    out: str = typer.Option(None, "--out", help="Sweep folder. \\[default: results/<recipe name>-<scale>]"),
    mpi: int = typer.Option(0, "--mpi", min=0, help="Run each training under `mpiexec -n N` (N processes per run)."),
    in_process: bool = typer.Option(False, "--in-process", help="Run the trainings one after another in this process (no start-up cost per run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the runs and what would run; run nothing."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the closing line."),
    tracker: list[str] = typer.Option(None, "--tracker", metavar="NAME", help="Also send every run to an experiment tracker: tensorboard, wandb or mlflow (repeatable; one experiment per sweep, one run per run x seed, tagged). \\[default: the recipe's `tracker` key]"),
):
    """Run a recipe's grid x seeds into one folder; runs already completed with the same config are skipped."""
    from fedcli.sweep import run_sweep

    t0 = time.perf_counter()
    state = {"progress": None, "task": None, "total": 0}
    scale = scale if scale is not None else _only_scale(recipe)

    def on_start(result, todo):
        state["total"] = len(todo)
        if quiet:
            return
        _print_plan(result, todo, jobs, mpi)
        if todo:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            prog = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console)
            prog.start()
            state["progress"], state["task"] = prog, prog.add_task("sweep", total=len(todo))

    def on_done(p):
        prog = state["progress"]
        if prog is not None:
            prog.advance(state["task"])
        if quiet:
            return
        if p.status == "completed":
            from fedcli.report.rundata import RunData

            run = RunData(p.dir)
            acc = run.accuracy("best", "auto")  # personalized runs: personal_acc, the papers' metric
            what = "personal acc" if run.personalized else "acc"
            err_console.print(f"  [green]done[/]  {p.label:32s} best {what} {100 * acc:6.2f}%  comm {run.comm_params:,.0f} params  "
                              f"{p.wall_s:.1f}s", soft_wrap=True, highlight=False)
        else:
            err_console.print(f"  [red]failed[/] {p.label:32s} exit {p.exit_code}: {p.error}  (log {p.log})", soft_wrap=True, highlight=False)

    try:
        result = run_sweep(recipe, scale=scale, seeds=seeds, out=out, jobs=jobs, mpi=mpi, in_process=in_process, dry_run=dry_run,
                           on_start=on_start, on_done=on_done, tracker=",".join(tracker or []),
                           notify=lambda msg: err_console.print(f"fedcli sweep: {msg}", markup=False, highlight=False, soft_wrap=True))
    finally:
        if state["progress"] is not None:
            state["progress"].stop()
    if dry_run:
        from rich.table import Table

        if not quiet:
            _print_plan(result, [p for p in result.runs if p.status != "completed"], jobs, mpi)

        t = Table(title=f"fedcli sweep --dry-run: {result.recipe.path} (scale {result.recipe.scale or 'base'}) -> {result.root}",
                  title_justify="left")
        for c in ("run", "seed", "state", "folder", "config hash"):
            t.add_column(c)
        for p in result.runs:
            st = "completed (skip)" if p.status == "completed" else f"{p.status} ({'resume' if p.resume else 'run'})"
            t.add_row(p.name, str(p.seed), st, p.rel, p.hash)
        out_console.print(t)
        return
    names = [p["name"] for p in result.recipe.tables]
    hint = f"fedcli report {result.root}" + (f" --table {names[0]}" if names else "")
    ran = len(result.ran)
    msg = (f"fedcli sweep: {len(result.runs)} runs complete in {result.root} ({ran} ran now, {len(result.runs) - ran} were already done, "
           f"{_fmt_s(time.perf_counter() - t0)}); next: {hint}")
    if ran == 0:
        msg = f"fedcli sweep: nothing to run: all {len(result.runs)} runs in {result.root} are complete; next: {hint}"
    err_console.print(msg, soft_wrap=True, highlight=False, markup=False)


def _only_scale(recipe: str) -> str | None:
    """The scale of a recipe that has one; a recipe with several needs --scale (no paper-scale run by surprise)."""
    from fedcli.errors import ConfigError
    from fedcli.recipes import read_recipe

    data, _ = read_recipe(recipe)
    scales = data.get("scale") if isinstance(data.get("scale"), dict) else {}
    if len(scales) <= 1:
        return next(iter(scales), None)
    names = sorted(scales)
    hint = "; ".join(f"--scale {n}" + {"smoke": " (the same grid reduced to run in minutes on a CPU, on the data beside the repo)",
                                       "paper": " (the paper's setting: its datasets, models and budgets; hours to days, GPU)"}.get(n, "")
                     for n in names)
    raise ConfigError(f"recipe {recipe} has scales {', '.join(names)}: choose one with {hint}; add --dry-run to see what "
                      f"it would run and an estimate of its time")


def _print_plan(result, todo, jobs: int, mpi: int) -> None:
    """Before anything runs: the grid, the budget of each run and the estimated time (fedcli/estimate.py)."""
    from fedcli.estimate import budget_text, estimate
    from fedcli.sweep import load_manifest

    r = result.recipe
    seeds = len(result.runs) // max(1, len(r.runs))
    head = (f"[bold]fedcli sweep[/]: {r.path} ({r.paper or r.title}), scale {r.scale or 'base'}: {len(r.runs)} runs x "
            f"{seeds} seed{'s' if seeds != 1 else ''} = {len(result.runs)} trainings; {len(result.runs) - len(todo)} already "
            f"completed, {len(todo)} to run, {jobs} at a time{f' (mpiexec -n {mpi} each)' if mpi else ''} -> {result.root}")
    err_console.print(head, soft_wrap=True)
    if r.scale and r.scale != "paper":
        err_console.print(f"  scale {r.scale}: a reduced version of {r.paper or 'the paper'}'s setting; it checks the pipeline, "
                          f"not the paper's numbers", soft_wrap=True, highlight=False, markup=False)
    if not todo:
        return
    old = {(e.get("name"), e.get("seed")): e.get("wall_s") for e in (load_manifest(result.root, missing_ok=True) or {}).get("runs", [])}
    done = [p for p in result.runs if p.status == "completed"]
    for p in done:
        p.wall_s = p.wall_s or old.get((p.name, p.seed))
    est = estimate(todo, done, jobs, mpi)
    err_console.print(f"  budget: {budget_text(todo)}; {est.text()}", soft_wrap=True, highlight=False, markup=False)
