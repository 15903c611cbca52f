"""``fedcli sweep``: run a recipe's grid x seeds (parallel processes or MPI); a second call runs only what is missing."""

from __future__ import annotations

import time

import typer

from fedcli.cli.console import err_console, out_console


def _fmt_s(s: float) -> str:
    m, s = divmod(int(round(s)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def sweep(
    recipe: str = typer.Argument(..., help="Sweep recipe (TOML with [base], [scale.*], [[runs]], [[tables]], [[figures]])."),
    scale: str = typer.Option(None, "--scale", help="Recipe scale: smoke (minutes on a laptop) or paper (the paper's settings). Default: paper if the recipe has it."),
    seeds: int = typer.Option(None, "--seeds", min=1, help="Seeds per run (0..N-1); default: the recipe's `seeds`."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Runs at a time, each in its own process (torch threads = cores / jobs)."),
    out: str = typer.Option(None, "--out", help="Sweep folder (default: results/<recipe name>-<scale>)."),
    mpi: int = typer.Option(0, "--mpi", min=0, help="Run each training under `mpiexec -n N` (N processes per run)."),
    in_process: bool = typer.Option(False, "--in-process", help="Run the trainings one after another in this process (no start-up cost per run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the runs and what would run; run nothing."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the closing line."),
):
    """Run a recipe's grid x seeds into one folder; runs already completed with the same config are skipped."""
    from fedcli.sweep import run_sweep

    t0 = time.perf_counter()
    state = {"progress": None, "task": None, "total": 0}

    def on_start(result, todo):
        state["total"] = len(todo)
        if quiet:
            return
        r = result.recipe
        head = f"[bold]fedcli sweep[/]: {r.path} ({r.paper or r.title}), scale {r.scale or 'base'}: " \
               f"{len(r.runs)} runs x {len(result.runs) // max(1, len(r.runs))} seeds = {len(result.runs)}; " \
               f"{len(result.runs) - len(todo)} already completed, {len(todo)} to run, {jobs} at a time -> {result.root}"
        err_console.print(head, soft_wrap=True)
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
                           on_start=on_start, on_done=on_done)
    finally:
        if state["progress"] is not None:
            state["progress"].stop()
    if dry_run:
        from rich.table import Table

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
