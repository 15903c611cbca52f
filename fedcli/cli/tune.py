"""``fedcli tune``: a crash-safe hyper-parameter search whose trials are ordinary runs (issue 58; docs/tuning.md).

Nothing here imports optuna or torch at import: ``fedcli tune --help`` and every recipe error answer without them.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from fedcli.cli.console import err_console, out_console
from fedcli.cli.sweep import CPUS, DRY_RUN, GPUS, MEM, MPI, PARTITION, RUNS_PER_JOB, SBATCH, SCALE, SIGNAL, TIME_LIMIT


def tune(  # noqa: PLR0913
    recipe: str = typer.Argument(
        ...,
        help="Tune recipe: a sweep recipe with a \\[tune] table (one study per \\[\\[runs]] row); with "
        "--promote, the study folder.",
    ),
    scale: str = SCALE,
    out: str = typer.Option(
        None,
        "--out",
        help="Study folder. \\[default: results/tune/<recipe name>, -<scale> appended for a scale other than "
        "the recipe's default]",
    ),
    trials: int = typer.Option(
        None, "--trials", min=1, help="Trials per study. \\[default: the recipe's \\[tune] trials, else 20]"
    ),
    jobs: int = typer.Option(
        1,
        "--jobs",
        "-j",
        min=1,
        help="Trials at a time: local processes (torch threads = cores / jobs; with CUDA devices spread over "
        "them round-robin), or with --executor slurm Slurm jobs pending or running.",
    ),
    mpi: int = MPI,
    executor: str = typer.Option(
        "local",
        "--executor",
        help="Where trials train: local (--jobs processes, or --mpi) or slurm (each trial an ordinary `fedcli "
        "sweep --executor slurm` job, --jobs in flight; this process stays on the login node asking, "
        "watching over the shared file system and telling until the study ends; killed and run again, it "
        "adopts the trials whose jobs still run).",
    ),
    partition: str = PARTITION,
    time_limit: str = TIME_LIMIT,
    cpus: int = CPUS,
    mem: str = MEM,
    gpus: int = GPUS,
    runs_per_job: int = RUNS_PER_JOB,
    sbatch: list[str] = SBATCH,
    signal_s: int = SIGNAL,
    storage: str = typer.Option(
        "journal",
        "--storage",
        help="Where Optuna keeps the search state: journal (a file in the study folder, default), sqlite (one "
        "file, portable), a database URL, or env:NAME (the URL from environment variable NAME, default "
        "FEDCLI_TUNE_STORAGE; the password is masked wherever written).",
    ),
    sampler: str = typer.Option(
        None, "--sampler", help="tpe, gp, random or grid (a finite space). \\[default: the recipe's, else tpe]"
    ),
    pruner: str = typer.Option(
        None,
        "--pruner",
        help="none, sha (successive halving) or median (best-so-far values against the median at the same "
        "rung); one objective only; the hopeless rule is always on. \\[default: the recipe's, else sha]",
    ),
    seed: int = typer.Option(
        None,
        "--seed",
        min=0,
        help="The sampler's seed (with --jobs 1 two fresh studies propose the same sequence). \\[default: the "
        "recipe's, else 0]",
    ),
    dry_run: bool = DRY_RUN,
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Start the study over: its storage, record and trial folders in --out are deleted first (needed "
        "when the recipe, space, objectives or scale changed).",
    ),
    select_on: str = typer.Option(
        "validation",
        "--select-on",
        help="validation (default: objectives read the validation split; a recipe without one is refused) or "
        "test (optimistic: the accuracy objectives read the test set; the record says so).",
    ),
    promote: int = typer.Option(
        None,
        "--promote",
        metavar="T",
        min=0,
        help="Finish the pruned trial T of the study folder RECIPE (train --resume --promote) and record its value.",
    ),
    confirm: int = typer.Option(
        None,
        "--confirm",
        metavar="K",
        min=1,
        help="Re-run the K best configurations of each study of the study folder RECIPE over --seeds seeds, as "
        "an ordinary sweep in RECIPE/confirm (then `fedcli sweep TABLE --tuned RECIPE` fills a table at "
        "the confirmed values).",
    ),
    seeds: int = typer.Option(
        3, "--seeds", min=1, help="With --confirm: how many seeds (0..N-1) each configuration is re-run with."
    ),
    study: str = typer.Option(
        None,
        "--study",
        help="With --promote: the study (a \\[\\[runs]] row's folder name) when the folder holds several.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the closing line."),
    study_workers: int = typer.Option(
        None,
        "--study-workers",
        metavar="K",
        min=1,
        help="K workers share the study instead of one coordinator: with --executor slurm K Slurm jobs, else K "
        "local processes; each asks, trains and tells trials until the study has its trials, and adopts "
        "those of a worker that died. Storage: journal or sqlite on one node (pin Slurm jobs with "
        "--sbatch=--nodelist=NODE), a PostgreSQL URL across nodes. Returns once they are started (see "
        "--wait).",
    ),
    wait: bool = typer.Option(
        False,
        "--wait",
        help="With --study-workers: follow the workers until they have ended and print the study's summary "
        "(Ctrl-C stops following; Slurm jobs keep running, local workers checkpoint and stop).",
    ),
):
    """Tune a recipe's hyper-parameters: one crash-safe Optuna study per row, every trial an ordinary run.

    The recipe's \\[tune] table gives the trials, sampler, seed, pruner, objectives and \\[tune.space] ranges;
    \\[tune.space.<method>] defaults = true takes the method's declared default ranges, shown as \\[tune: ...] in
    `fedcli train --help` (lr for every method; FedLAMA tau, phi; FedProx mu; FedALA ala_lr, ala_sample_percent,
    ala_layers; Fed-LAMB and Mime-LAMB lr, weight_decay). docs/tuning.md: how to tune fairly."""
    from fedcli.errors import ConfigError

    if promote is not None and confirm is not None:
        raise ConfigError("--promote and --confirm: one at a time (promote the pruned trial first, then confirm)")
    if promote is not None:
        return _promote(Path(recipe), promote, study)
    if confirm is not None:
        return _confirm(Path(recipe), confirm, seeds, jobs, mpi, quiet)
    if executor not in ("local", "slurm"):
        raise ConfigError(f"--executor must be local or slurm, got {executor!r}")
    from fedcli.cli.sweep import _only_scale, _slurm_flags
    from fedcli.tune.coordinator import SearchFlags, make_plan, trial_threads

    flags = _slurm_flags(partition, time_limit, cpus, mem, gpus, signal_s, runs_per_job, sbatch)
    _check_run_flags(executor, flags, wait, study_workers)
    t0 = time.perf_counter()
    scale = scale if scale is not None else _only_scale(recipe)
    res = _slurm_resources(executor, recipe, scale, flags)
    search = SearchFlags(trials, sampler, pruner, seed)
    plan = make_plan(
        recipe, scale, out, search, storage, select_on, trial_threads(jobs, res.cpus if res else None, mpi)
    )
    if study_workers is not None:
        from fedcli.tune.launch import check_rules

        check_rules(plan, study_workers, executor, res, storage, jobs)
    if dry_run or not quiet:
        _say_plan(plan, jobs, mpi, res, dry_run=dry_run, workers=study_workers is not None)
    if study_workers is not None:
        return _workers(
            plan,
            study_workers,
            executor,
            res,
            mpi,
            storage,
            {"fresh": fresh, "dry_run": dry_run, "wait": wait, "quiet": quiet, "t0": t0},
        )
    if dry_run:
        return plan
    return _coordinate(plan, jobs, mpi, res, fresh=fresh, quiet=quiet, t0=t0)


def _check_run_flags(executor: str, flags: dict, wait: bool, study_workers: int | None) -> None:
    """The flags of a study run checked together: Slurm resources with --executor slurm only, --wait with
    --study-workers only."""
    from fedcli.errors import ConfigError

    given = [k for k, v in flags.items() if v is not None]
    if executor != "slurm" and given:
        raise ConfigError(
            f"--{given[0].replace('_', '-')} sets a Slurm job's resources: it applies to --executor slurm only",
            key=given[0],
        )
    if wait and study_workers is None:
        raise ConfigError(
            "--wait follows study workers: it applies to --study-workers K only (a coordinator runs "
            "until the study ends)"
        )


def _slurm_resources(executor: str, recipe: str, scale, flags: dict):
    """With --executor slurm: a trial's Slurm job resources (the recipe's [slurm] table and the flags), else None."""
    if executor != "slurm":
        return None
    from fedcli.recipes import read_sweep
    from fedcli.sweep.slurm import resources

    return resources(read_sweep(recipe, scale), flags)


def _say_plan(plan, jobs: int, mpi: int, res, *, dry_run: bool, workers: bool) -> None:
    """The study's plan on stderr and, for trials as Slurm jobs of a coordinator, what each job asks for."""
    _print_plan(plan, jobs, mpi, estimate=dry_run)
    if res is not None and not workers:
        from fedcli.sweep.slurm import sbatch_preview

        err_console.print(
            f"  Slurm: each trial an ordinary sweep job, {jobs} in flight; each job asks for "
            f"{res.describe(mpi)} (sbatch {sbatch_preview(res, mpi)})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _coordinate(plan, jobs: int, mpi: int, res, *, fresh: bool, quiet: bool, t0: float):
    """The study run by this process's coordinator to its end (an interruption: exit 130, saying how to resume),
    then its closing lines."""
    from fedcli.tune.coordinator import run_tune

    say = (lambda kind, study, number, text: None) if quiet else _event
    try:
        co = run_tune(
            plan,
            jobs,
            mpi,
            fresh,
            notify=lambda m: err_console.print(f"fedcli tune: {m}", markup=False, highlight=False, soft_wrap=True),
            on_event=say,
            slurm=res,
        )
    except KeyboardInterrupt:
        from fedcli.errors import FedcliError

        err = FedcliError(
            f"interrupted: the running trials checkpointed and stopped; run the same command again to resume "
            f"them in {plan.root}"
            if res is None
            else f"interrupted: the trials' Slurm jobs keep running; run the same command again to adopt them "
            f"in {plan.root}"
        )
        err.exit_code = 130
        raise err from None
    _print_closing(plan, co, time.perf_counter() - t0)
    return co


def _workers(plan, k: int, executor: str, res, mpi: int, storage: str, how: dict):
    """``--study-workers K`` (fedcli.tune.launch; docs/tuning.md, "Study workers"): the workers started (their job ids
    or pids printed) and, with ``--wait``, followed to the study's summary. ``how``: the flags fresh, dry_run, wait,
    quiet and the start time t0."""
    from fedcli.errors import ConfigError
    from fedcli.tune import launch

    def say(m: str) -> None:
        if not how["quiet"]:
            err_console.print(f"fedcli tune: {m}", markup=False, highlight=False, soft_wrap=True)

    if how["dry_run"]:
        said = f"{k} Slurm job(s), each asking for {res.describe(mpi)}" if res is not None else f"{k} local process(es)"
        say(f"study workers: {said}, sharing the study in {plan.root}")
        return plan
    if executor == "slurm":
        from fedcli.sweep.slurm import have_slurm

        why = have_slurm()
        if why:
            raise ConfigError(f"--executor slurm: {why}; start the study workers where sbatch works (a login node)")
    started = launch.launch(plan, k, executor, res, mpi, storage, how["fresh"], say)
    if started:
        ids = ", ".join(w.get("job_id") or f"pid {w['pid']}" for w in started)
        err_console.print(
            f"fedcli tune: {len(started)} study worker(s) started: {ids}"
            + ("" if how["wait"] else f"; `fedcli report {plan.root}` reads the study as it goes"),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if not how["wait"]:
        return started
    co = launch.follow(plan, started, executor, say)
    _print_closing(plan, co, time.perf_counter() - how["t0"])
    return co


def _event(kind: str, study: str, number: int, text: str) -> None:
    err_console.print(f"  {kind:8s} {study} trial {number}: {text}", markup=False, highlight=False, soft_wrap=True)


def _print_plan(plan, jobs: int, mpi: int, estimate: bool) -> None:
    """The studies, their spaces, the storage, the validation split, the trial count, the pruning floor and rungs and,
    with ``estimate``, the cost with and without pruning (the sweep's estimator)."""
    from fedcli.tune.study import storage_label

    lines = [
        f"fedcli tune: {plan.recipe.path} (scale {plan.recipe.scale or 'base'}) -> {plan.root}",
        f"  storage {storage_label(*plan.storage)}; sampler {plan.table.sampler} (seed {plan.table.seed}); pruner "
        f"{plan.table.pruner}; {plan.trials} trials per study; selected on {plan.select_on}"
        + (" (optimistic: the test set)" if plan.select_on == "test" else ""),
        "  objectives: " + "; ".join(f"{o.metric} {o.reduce} ({o.direction})" for o in plan.table.objectives),
    ]
    for s in plan.studies:
        c = s.config
        split = f"val_fraction {c.get('val_fraction', 0)}" + (
            f", client_val_fraction {c.get('client_val_fraction')}" if c.get("client_val_fraction") else ""
        )
        lines.append(f"  study {s.name} ({c['algo']}, {s.budget} {s.unit}s, {split}):")
        lines.append(
            "    space: "
            + "; ".join(f"{k} {json_range(p)}" for k, p in s.space.items())
            + (f"; full grid {s.grid_size} configurations" if s.grid_size else "")
        )
        if s.trials < plan.trials:
            lines.append(f"    trials: {s.trials} (the full grid; --trials {plan.trials} would repeat configurations)")
        lines.append(
            "    trial 0: "
            + (
                f"the recipe's own configuration {s.baseline}"
                if s.baseline is not None
                else f"no baseline ({s.baseline_why})"
            )
        )
        floor = (
            f"floor {s.unit} {s.floor} ({'; '.join(s.floor_why)})"
            if s.floor
            else "floor 0 (no warm-up, decay or interval adjustment)"
        )
        lines.append(f"    pruning: {floor}; rungs {', '.join(map(str, s.rungs)) or 'none'}")
    if estimate:
        lines += _estimate_lines(plan, jobs, mpi)
    out_console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def json_range(p) -> str:
    from fedcli.tune.space import _range_words

    return _range_words(p)


def _estimate_lines(plan, jobs: int, mpi: int) -> list[str]:
    """The sweep's estimator on each study's trial 0, times the trials; with pruning, the share of the budget that
    successive halving trains (each rung keeps half)."""
    from fedcli.sweep.estimate import estimate, fmt_duration
    from fedcli.tune.coordinator import Coordinator

    co = Coordinator(plan, jobs, mpi)
    total = pruned = 0.0
    out = []
    for s in plan.studies:
        run = co.trial_run(
            s, 0, s.baseline or {k: (p.choices[0] if p.kind == "choices" else p.low) for k, p in s.space.items()}
        )
        est = estimate([run], [], jobs, mpi, executor="process")
        one = est.per_run.get(id(run))
        if one is None:
            out.append(f"  estimate {s.name}: unknown ({'; '.join(est.unknown)})")
            continue
        share = (
            pruned_share(s.budget, s.rungs) if plan.table.pruner != "none" and len(plan.table.objectives) == 1 else 1.0
        )
        total += one * s.trials
        pruned += one * s.trials * share
        out.append(
            f"  estimate {s.name}: {fmt_duration(one)} a trial; {fmt_duration(one * s.trials / max(1, jobs))} "
            f"for {s.trials} trials at --jobs {jobs} without pruning, about "
            f"{fmt_duration(one * s.trials * share / max(1, jobs))} "
            f"with it (at most {100 * share:.0f}% of the budget trained)"
        )
    out.append(
        f"  estimate in all: {fmt_duration(total / max(1, jobs))} without pruning, about "
        f"{fmt_duration(pruned / max(1, jobs))} with it"
    )
    return out


def pruned_share(budget: int, rungs: list[int]) -> float:
    """The share of ``trials x budget`` successive halving trains when each rung keeps half of the trials."""
    if not rungs or budget <= 0:
        return 1.0
    edges = [0, *rungs, budget]
    return sum((edges[i + 1] - edges[i]) / budget * 0.5**i for i in range(len(edges) - 1))


def _print_closing(plan, co, seconds: float) -> None:
    from collections import Counter

    rows = list(co.rows.values())
    states = Counter(r["state"] for r in rows)
    said = ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()))
    best = []
    if len(plan.table.objectives) == 1:
        o = plan.table.objectives[0]
        for s in plan.studies:
            done = [r for r in rows if r["study"] == s.name and r["state"] == "COMPLETE" and r.get("values")]
            if done:
                pick = (max if o.direction == "maximize" else min)(done, key=lambda r: r["values"][0])
                best.append(f"{s.name}: trial {pick['number']} {pick['params']} {o.metric} {pick['values'][0]:.4g}")
    m, sec = divmod(int(round(seconds)), 60)
    err_console.print(
        f"fedcli tune: {len(rows)} trials in {plan.root} ({said}; {m}m{sec:02d}s)"
        + (f"; best: {'; '.join(best)}" if best else "")
        + f"; index: {plan.root / 'trials.csv'}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _confirm(root: Path, top: int, seeds: int, jobs: int, mpi: int, quiet: bool):
    """``fedcli tune DIR --confirm K --seeds N``: :func:`fedcli.tune.confirm.run_confirm` (docs/tuning.md, "Confirming
    over seeds"), then the confirmed choice per study."""
    from fedcli.tune.confirm import confirmed, run_confirm
    from fedcli.tune.results import is_study

    if not is_study(root):
        from fedcli.errors import ConfigError

        raise ConfigError(
            f"--confirm {top}: {root} is not a study folder of `fedcli tune` (no tune.json); give the folder "
            f"the study was written to"
        )
    notify = (
        None
        if quiet
        else (lambda m: err_console.print(f"fedcli tune: {m}", markup=False, highlight=False, soft_wrap=True))
    )
    result = run_confirm(root, top, seeds, jobs=jobs, mpi=mpi, notify=notify)
    for name, entry in confirmed(root).items():
        best = entry.get("best")
        said = (
            f"trial {best['number']} {best['params']} mean {best['mean']:.4f} over {best['seeds']} seeds"
            if best
            else "no configuration completed every seed"
        )
        err_console.print(f"fedcli tune: confirmed {name}: {said}", markup=False, highlight=False, soft_wrap=True)
    return result


def _promote(root: Path, number: int, study: str | None):
    from fedcli.errors import FedcliError
    from fedcli.tune.coordinator import promote

    run_dir, code = promote(root, number, study)
    if code != 0:
        err = FedcliError(f"--promote {number}: the training of {run_dir} ended with exit {code}; see its log")
        err.exit_code = code if code in (2, 3, 4) else 1
        raise err
    err_console.print(
        f"fedcli tune: trial {number} promoted: {run_dir} completed; trials.csv updated",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
