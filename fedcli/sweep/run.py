"""``fedcli sweep``: a recipe's grid x seeds, run in parallel processes, resumable.

Layout of a sweep folder (default ``results/<recipe stem>-<scale>``)::

    sweep.json                  the sweep manifest: recipe, scale, seeds, report products, every run
    <run slug>/seed<k>.toml     the exact ``fedcli train --recipe`` file of the run
    <run slug>/seed<k>.log      its stdout and stderr
    <run slug>/seed<k>/         its run directory (manifest.json, metrics.csv, layers.csv, intervals.csv)

A run counts as done only when its ``manifest.json`` says ``completed``, its config is the one the
recipe asks for now (``out`` and ``threads`` aside) and its data passes the report's checks
(``fedcli.results.validate``), so a second call runs only what is missing, failed, interrupted, changed or
damaged. ``sweep.json`` is replaced atomically after every run. One sweep at a time per folder
(:class:`SweepLock`), and no worker outlives its sweep (``fedcli.results.lock``). The runs are run by
:class:`fedcli.sweep.executors.Executor`.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from fedcli.errors import ConfigError, FedcliError
from fedcli.results.runstate import (
    COMPLETED,
    CORRUPT,
    DONE,
    FAILED,
    INTERRUPTED,
    MISSING,
    NEUTRAL_KEYS,  # noqa: F401
    PRUNED,
    RUNNING,
    STALE,
    config_hash,
    config_matches,  # noqa: F401
)
from fedcli.results.sweepdir import (
    FORMAT,  # noqa: F401
    MANIFEST,
    PlannedRun,
    SweepManifest,
    default_out,
    entry_dirs,  # noqa: F401
    last_line,  # noqa: F401
    load_manifest,
    path_ref,
    recipe_by_text,
    recipe_hints,
    recipe_of,  # noqa: F401
    recipe_shown,
    run_state,
    text_sha256,
)
from fedcli.safefs import refuse_link
from fedcli.sweep.executors import Executor

if (
    TYPE_CHECKING
):  # the config (so every method file, and torch) loads where a sweep is planned or run, not for a report
    from fedcli.recipes import SweepRecipe


class SweepFailed(FedcliError):
    """Some runs of a sweep failed; exit code of the first failure (3 data, 4 diverged, ...)."""


class SweepInterrupted(FedcliError):
    """Ctrl-C or SIGTERM: the trainings were told to checkpoint and stop (exit 130 or 143)."""


def slugify(name: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s or "run"


def parse_seeds(text: str | int) -> list[int]:
    """``--seeds``: a count ``3`` (seeds 0, 1, 2), a list ``3,4`` or an inclusive range ``2-5`` / ``2..5``
    (lists may mix: ``0,3-4``). Seeds are distinct non-negative integers, kept in the order given."""
    if isinstance(text, int):
        text = str(text)
    bad = ConfigError(
        f"--seeds takes a count (3: seeds 0,1,2), a list (3,4) or a range (2-5), got '{text}'", key="seeds"
    )
    items = [t.strip() for t in str(text).split(",")]
    if len(items) == 1 and items[0].isdigit():
        n = int(items[0])
        if n < 1:
            raise ConfigError(f"--seeds must be >= 1 (a count), got {n}", key="seeds")
        return list(range(n))
    out: list[int] = []
    for item in items:
        lo, sep, hi = item.replace("..", "-").partition("-")
        if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
            raise bad
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ConfigError(f"--seeds: the range {item} runs backwards", key="seeds")
        out += [s for s in range(a, b + 1) if s not in out]
    return out


def seed_list(recipe: SweepRecipe, seeds: int | str | None) -> list[int]:
    """The seeds of a sweep: ``--seeds`` (see :func:`parse_seeds`), else the recipe's count."""
    return parse_seeds(seeds if seeds is not None else recipe.seeds)


def plan(
    recipe: SweepRecipe, root: Path, seeds: list[int], threads: int | None = None, tracker: str = ""
) -> list[PlannedRun]:
    """Every (run, seed) of the recipe, validated (exit 2 names the run), with its state on disk. ``tracker``
    (``fedcli sweep --tracker``) replaces the recipe's ``tracker`` key in every run."""
    from fedcli.recipes import run_config

    slugs: dict[str, str] = {}
    out = []
    for run in recipe.runs:
        slug = slugify(run.name)
        k = 2
        while slug in slugs.values():
            slug = f"{slugify(run.name)}-{k}"
            k += 1
        slugs[run.name] = slug
        for seed in seeds:
            rel = f"{slug}/seed{seed}"
            extra = {}
            if threads and "threads" not in run.values:
                extra["threads"] = threads
            if tracker:
                extra["tracker"] = tracker
            cfg = run_config(run, seed, root / rel, extra)
            values = {**run.values, **extra, "seed": seed, "out": str(root / rel)}
            d = cfg.to_dict()
            p = PlannedRun(run.name, slug, seed, root, values, d, config_hash(d))
            p.status, p.error = run_state(p)
            out.append(p)
    return out


# ------------------------------------------------------------------------------------------------ manifest


def products_of(recipe: SweepRecipe) -> dict:
    from fedcli.reports.products import parse_products, product_to_dict

    tables, figures = parse_products(recipe)
    return {"tables": [product_to_dict(t) for t in tables], "figures": [product_to_dict(f) for f in figures]}


class SweepLock:
    """An exclusive lock on the sweep folder, so that two sweeps never run the same runs.

    Two ``flock`` files (fedcli/results/lock.py): ``.sweep.lock``, held by the sweep process, and
    ``.sweep.workers.lock``, held *shared* by every worker process of the sweep for its whole life. A sweep
    starts only when it gets both exclusively, so the folder stays taken while a worker of an earlier sweep
    lives (a sweep killed with SIGKILL: its workers notice, stop within a local step and write the last
    round boundary, then exit). Locks held by dead processes are dropped by the kernel."""

    WAIT_S = 15.0  # how long a new sweep waits for the workers of a killed one to finish stopping

    def __init__(self, root: Path):
        from fedcli.results.lock import FileLock

        self.path = root / ".sweep.lock"
        self.workers_path = root / ".sweep.workers.lock"
        self.lock, self.workers = FileLock(self.path), FileLock(self.workers_path)

    def __enter__(self):
        from fedcli.results.lock import describe

        if not self.lock.acquire():
            raise ConfigError(
                f"another fedcli sweep ({describe(self.lock.holder())}) is running in {self.path.parent}; "
                f"wait for it or stop it"
            ) from None
        deadline = time.monotonic() + self.WAIT_S
        while not self.workers.acquire():
            if time.monotonic() > deadline:
                self.lock.release()
                raise ConfigError(
                    f"worker processes of an earlier fedcli sweep in {self.path.parent} are still running "
                    f"(they stop after their current local step or round); wait for them to end"
                ) from None
            time.sleep(0.25)
        self.workers.release()  # this sweep's workers take it shared; the sweep lock keeps other sweeps out meanwhile
        return self

    def __exit__(self, *exc):
        self.lock.release()


# ------------------------------------------------------------------------------------------------ the command


@dataclass
class SweepResult:
    root: Path
    recipe: SweepRecipe
    runs: list[PlannedRun]
    ran: list[PlannedRun] = field(default_factory=list)
    skipped: list[PlannedRun] = field(default_factory=list)
    data: list = field(default_factory=list)  # fedcli.data.preflight.DataCheck of the runs to go
    submitted: list[PlannedRun] = field(default_factory=list)  # --executor slurm: submitted now
    queued: list[PlannedRun] = field(default_factory=list)  # --executor slurm: their job is pending or running
    resources: object = None  # --executor slurm: fedcli.sweep.slurm.Resources
    placement: object = None  # local runs: their GPUs (fedcli.sweep.placement.Placement)
    replaces: str | None = None  # --overwrite: the other sweep the folder held (another_sweep)

    @property
    def failed(self) -> list[PlannedRun]:
        return [p for p in self.runs if p.status in (FAILED, INTERRUPTED, RUNNING, MISSING, CORRUPT, STALE)]


@dataclass
class SweepOptions:
    """The options of a sweep (``fedcli sweep``'s flags, docs/sweeps.md), as :func:`run_sweep` and
    :func:`prepare_sweep` take them by keyword.

    ``seeds``, ``out``, ``jobs``, ``mpi``, ``in_process``, ``dry_run``, ``download``, ``tracker``, ``overwrite``: the
    flags of those names. ``on_start(result, todo)`` / ``on_done(run)``: called when the runs start / as each ends;
    ``notify(msg)`` prints a one-line notice (what a signal does, said at once). ``executor``: ``local`` or ``slurm``
    (fedcli/sweep/slurm.py; ``slurm``: the resource flags). ``runs_per_gpu``: at most this many local runs at a time on
    one GPU, or ``auto`` (fedcli/sweep/placement.py; ``gpu_free``: the devices' free bytes, asked of the driver when
    None). ``tuned``: {run name: values} set over the recipe's (``fedcli sweep --tuned DIR``), ``tuned_record``: what
    ``sweep.json`` keeps of the tuning, as ``tuned`` (read by ``fedcli report --paper``)."""

    seeds: int | str | None = None
    out: str | Path | None = None
    jobs: int = 1
    mpi: int = 0
    in_process: bool = False
    dry_run: bool = False
    on_start: Callable | None = None
    on_done: Callable | None = None
    notify: Callable | None = None
    download: bool = False
    executor: str = "local"
    slurm: dict | None = None
    tracker: str = ""
    runs_per_gpu: int | str | None = "auto"
    gpu_free: list[int] | None = None
    overwrite: bool = False
    tuned: dict | None = None
    tuned_record: dict | None = None


def prepare_sweep(
    recipe_path: str | Path,
    scale: str | None = None,
    seeds: int | str | None = None,
    out: str | Path | None = None,
    *,
    cpus: int | None = None,
    **options,
) -> tuple[SweepRecipe, Path, list[int], list[PlannedRun], dict]:
    """The sweep's recipe, folder, seeds, planned runs and products. ``options``: :class:`SweepOptions` by keyword (of
    which ``jobs``, ``mpi``, ``tracker`` and ``tuned`` count here). ``cpus``: CPUs each run gets (a Slurm job's);
    default this machine's cores / (jobs x MPI ranks); ``tracker``: replaces every run's ``tracker`` key (``fedcli
    sweep --tracker``); ``tuned``: {run name: values} set over each run's own (``fedcli sweep --tuned DIR``: its
    study's confirmed best, fedcli/tune/confirm.py; the default folder is then ``results/<recipe
    name>-<scale>-tuned``)."""
    o = SweepOptions(seeds=seeds, out=out, **options)
    jobs, mpi, tracker, tuned = o.jobs, o.mpi, o.tracker, o.tuned
    from fedcli.recipes import read_sweep

    recipe = read_sweep(recipe_path, scale)
    for run in recipe.runs:
        run.values = {**run.values, **(tuned or {}).get(run.name, {})}
    products = products_of(recipe)
    root = Path(out) if out else default_out(recipe.path, recipe.scale)
    if tuned is not None and not out:
        root = root.with_name(root.name + "-tuned")
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--out {root} is a file; expected a folder for the sweep")
    seed_ids = seed_list(recipe, seeds)
    procs = max(1, jobs) * max(1, mpi)
    threads = max(1, (os.cpu_count() or 1) // procs) if procs > 1 else None
    if cpus:
        threads = max(1, cpus // max(1, mpi))
    runs = plan(recipe, root, seed_ids, threads, tracker)
    return recipe, root, seed_ids, runs, products


def _at_scale(scale: str | None) -> str:
    return f"--scale {scale}" if scale else "its base scale (no --scale)"


def another_sweep(root: Path, recipe: SweepRecipe, products: dict, runs: list[PlannedRun] | None = None) -> str | None:
    """Why the sweep folder ``root`` holds another sweep than this one (one clause naming both, and what a sweep there
    would do to its runs: :func:`_fate`), or None. A sweep is what defines its runs: its recipe's text
    (``recipe_sha256``) and its scale, not the recipe's file name or path (kept as hints). So the folder holds another
    sweep when its ``sweep.json`` has another recipe text, unless that recipe was edited in place (:func:`same_recipe`);
    the same recipe at another ``--scale`` (its runs, stale at this scale, would be trained again over the others);
    or a table or figure this recipe does not make. A sweep there would replace it: ``sweep.json`` would describe this
    recipe, and no report could be made of the other's runs. ``runs``: this sweep's planned runs (their states)."""
    if not root.is_dir():
        return None
    refuse_link(root / MANIFEST)  # a link there is refused (exit 2) before it is read, as before it is written
    old = load_manifest(root, missing_ok=True)
    if not old:
        return None
    mine = path_ref(recipe.path)
    if not same_recipe(old, root, recipe):
        return f"--out {root} holds the sweep of {recipe_shown(old, root)}, not of {mine} ({_fate(old, root, runs)})"
    if (old.get("scale") or None) != (recipe.scale or None):  # its runs would be stale here and trained again
        return (
            f"--out {root} holds the sweep of {recipe_shown(old, root)} at {_at_scale(old.get('scale'))}, not at "
            f"{_at_scale(recipe.scale)} ({_fate(old, root, runs, 'at this scale')})"
        )
    made = {(kind, d.get("name")) for kind in ("tables", "figures") for d in products.get(kind, [])}
    lost = [
        f"{kind[:-1]} '{d.get('name')}'"
        for kind in ("tables", "figures")
        for d in old.get(kind, []) or []
        if (kind, d.get("name")) not in made
    ]
    if lost:
        return (
            f"--out {root} holds a sweep of {recipe_shown(old, root)} with {', '.join(lost)}, which {mine} does not "
            f"make (no report could be made of them any more)"
        )
    return None


def same_recipe(old: dict, root: Path, recipe: SweepRecipe) -> bool:
    """Whether the sweep whose ``sweep.json`` is ``old`` was run from ``recipe``: the same text, wherever either file
    is (a copy, a checkout moved); or ``recipe`` is the file it was run from, edited in place: it is where
    ``sweep.json`` says (:func:`~fedcli.results.sweepdir.recipe_hints`) and the old text is in no file there or
    beside it (a recipe renamed away and another written under its name is another recipe). A ``sweep.json`` without
    the hash (none is known) is decided by the path alone."""
    sha = old.get("recipe_sha256")
    if sha == text_sha256(recipe.text):
        return True
    if sha and recipe_by_text(old, root) is not None:  # the recorded text lives on in another file: that is its recipe
        return False
    mine = path_ref(recipe.path)
    return any(path_ref(c) == mine for c in recipe_hints(old, root) if c.exists())


def _fate(old: dict, root: Path, runs: list[PlannedRun] | None, why: str = "with this recipe's settings") -> str:
    """What a sweep of ``runs`` into ``root`` does to the runs there, in words: those in a folder this sweep trains
    (another config: trained over, named), those it keeps (the config it asks for: done), and the other sweep's runs
    outside its folders (left on disk, but no report could be made of them)."""
    ours = {p.dir.resolve() for p in runs or []}
    over = [p for p in runs or [] if p.status in (STALE, CORRUPT, FAILED, INTERRUPTED) and not p.resume]
    kept = [p for p in runs or [] if p.status == DONE]
    left = [e for e in old.get("runs", []) or [] if (root / str(e.get("dir", ""))).resolve() not in ours]
    said = []
    if over:
        said.append(f"this sweep would train over its {_runs_named([(p.name, p.seed) for p in over])} {why}")
    if kept:
        said.append(f"it would keep {len(kept)} run(s) whose config is the one asked for")
    if left:
        said.append(f"its other {len(left)} run(s) would stay on disk, but no report could be made of them")
    return "; ".join(said) or "none of its runs would be trained over"


def _runs_named(runs: list[tuple[str, int]], most: int = 6) -> str:
    """``run 'avg' seeds 0, 1 and run 'prox' seed 0``: the runs of a list, by name, with their seeds."""
    by: dict[str, list[int]] = {}
    for name, seed in runs:
        by.setdefault(name, []).append(seed)
    parts = [f"run '{n}' seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}" for n, s in list(by.items())[:most]]
    more = f" and {len(by) - most} more run(s)" if len(by) > most else ""
    return ", ".join(parts) + more


def check_data(todo: list[PlannedRun], download: bool = False, dry_run: bool = False, notify=None) -> list:
    """Every dataset the runs to go need, looked at before anything starts (fedcli/data/preflight.py): downloaded once
    here when asked (``--download`` or a run's ``download = true``), else a missing one ends the sweep with exit 3."""
    from fedcli.data import preflight

    checks = preflight.check_datasets([(p.label, p.config) for p in todo])
    if dry_run:
        return checks
    wanted = [c for c in checks if not c.ok and (download or c.config.get("download"))]
    preflight.fetch_missing(wanted, notify)
    preflight.refuse(checks)
    return checks


def failed_error(result: SweepResult) -> SweepFailed | None:
    """The error for the runs of a sweep that did not complete (exit code of the first failure), or None."""
    runs, recipe = result.runs, result.recipe
    bad = [p for p in runs if p.status not in (COMPLETED, PRUNED)]  # a pruned run was stopped on request: kept
    if not bad:
        return None
    first = bad[0]
    code = first.exit_code if first.exit_code in (2, 3, 4) else 1
    detail = "; ".join(
        f"{p.label} ({'exit ' + str(p.exit_code) + ': ' if p.exit_code else ''}{p.error or p.status}; log {p.log})"
        for p in bad[:3]
    )
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    err = SweepFailed(f"{len(bad)} of {len(runs)} runs of {recipe.path} failed: {detail}{more}; {rerun_advice(bad)}")
    err.exit_code = code
    err.result = result
    return err


def rerun_advice(bad: list[PlannedRun]) -> str:
    """What running the same sweep command again does with the runs ``bad`` that did not complete: it retries them,
    but a run that diverged (exit 4) is a result: it is resumed from its last checkpoint, which holds no round that
    diverged (fedcli/fl/engine.py), and diverges again, so it takes a change in the recipe."""
    from fedcli.results.runstate import read_manifest
    from fedcli.results.validate import diverged

    div = sum(1 for p in bad if diverged(read_manifest(p.dir)[1]))
    if not div:
        return "run the same command again to retry them"
    one = div == 1
    said = (
        f"{'the diverged run' if one else f'the {div} diverged runs'} (a result: reports show "
        f"{'it' if one else 'them'} "
        f"as diverged) would diverge again if run again as {'it is' if one else 'they are'}; to train "
        f"{'it' if one else 'them'} on, change {'its' if one else 'their'} settings in the recipe (a smaller lr, or "
        f"diverge_factor = 0 to let a finite blow-up go on)"
    )
    return said if div == len(bad) else f"run the same command again to retry the others; {said}"


def run_sweep(
    recipe_path: str | Path, scale: str | None = None, options: SweepOptions | None = None, **kwargs
) -> SweepResult:
    """Expand, check the data, run what is not done yet, and keep ``sweep.json`` current. Raises SweepFailed if runs
    failed. ``options``: a :class:`SweepOptions`, or its fields by keyword (``kwargs``, over ``options`` when both are
    given). ``executor="slurm"``: submit the runs to go as Slurm jobs instead (fedcli/sweep/slurm.py; ``slurm``: the
    resource flags) and return without waiting.

    A folder that holds another sweep (:func:`another_sweep`) is refused (exit 2, also with ``dry_run``) unless
    ``overwrite``: then this sweep replaces it (``result.replaces`` says which it was and which of its runs are trained
    over). ``tuned`` (:func:`prepare_sweep`): local runs only."""
    o = replace(options, **kwargs) if options is not None else SweepOptions(**kwargs)
    per_gpu = _check_options(o)
    res = None
    if o.executor == "slurm":
        from fedcli.recipes import read_sweep
        from fedcli.sweep.slurm import resources

        res = resources(read_sweep(recipe_path, scale), o.slurm or {})
    recipe, root, seed_ids, runs, products = prepare_sweep(
        recipe_path,
        scale,
        o.seeds,
        o.out,
        cpus=res.cpus if res else None,
        jobs=o.jobs,
        mpi=o.mpi,
        tracker=o.tracker,
        tuned=o.tuned,
    )
    result = SweepResult(root, recipe, runs, resources=res, replaces=another_sweep(root, recipe, products, runs))
    if result.replaces and not o.overwrite:
        raise ConfigError(
            f"{result.replaces}: a sweep there would replace it; choose another --out, or pass --overwrite "
            f"to replace it"
        )
    todo = [p for p in runs if p.status not in (DONE, PRUNED)]  # a pruned run is kept as it stands, never resumed by
    result.skipped = [
        p for p in runs if p.status == DONE
    ]  # accident (`fedcli train --resume RUN --promote` finishes it)
    for p in result.skipped:
        p.status = COMPLETED
    result.data = check_data(todo, o.download, o.dry_run, o.notify)
    if o.executor == "local" and not o.in_process and todo:
        from fedcli.sweep.placement import placement_for

        result.placement = placement_for(todo, result.skipped, o.jobs, per_gpu, o.gpu_free, o.mpi)
    if o.dry_run:
        return result
    if o.executor == "slurm":
        return submit_sweep(result, todo, seed_ids, products, o.mpi, o.on_start)
    _run_local(
        result,
        todo,
        SweepManifest(root, recipe, seed_ids, runs, products, {"tuned": o.tuned_record} if o.tuned_record else None),
        o,
    )
    err = failed_error(result)
    if err:
        raise err
    return result


def _check_options(o: SweepOptions):
    """The combinations of options a sweep refuses (exit 2); returns the parsed ``runs_per_gpu``."""
    from fedcli.sweep.placement import parse_runs_per_gpu

    per_gpu = parse_runs_per_gpu(o.runs_per_gpu if o.runs_per_gpu is not None else "auto")
    if o.mpi < 0:
        raise ConfigError(f"--mpi must be >= 1 (processes per run), got {o.mpi}")
    if o.mpi and o.in_process:
        raise ConfigError("--mpi and --in-process cannot be combined")
    if o.executor not in ("local", "slurm"):
        raise ConfigError(f"--executor must be local or slurm, got {o.executor!r}")
    if o.executor == "slurm" and o.in_process:
        raise ConfigError("--executor slurm and --in-process cannot be combined")
    if o.tuned is not None and o.executor != "local":
        raise ConfigError("--tuned runs the tuned table locally (--jobs, --mpi); --executor slurm does not take it yet")
    return per_gpu


def _run_local(result: SweepResult, todo: list[PlannedRun], manifest: SweepManifest, o: SweepOptions) -> None:
    """Run ``todo`` here under the sweep's lock (fedcli/sweep/executors.py), ``manifest`` (``sweep.json``) written as
    each run ends; a signal stops the sweep like Ctrl-C (:func:`_interrupted`)."""
    root = result.root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from fedcli.errors import os_error

        raise os_error(e, root, "create the sweep folder") from None
    refuse_link(root / MANIFEST)
    with SweepLock(root) as lock:
        # re-read states under the lock (another sweep may have finished runs meanwhile)
        for p in todo:
            p.status, p.error = run_state(p)
        todo = [p for p in todo if p.status not in (DONE, PRUNED)]
        manifest.write()
        if o.on_start:
            o.on_start(result, todo)
        ex = Executor(
            o.jobs, o.mpi, o.in_process, workers_lock=lock.workers_path, notify=o.notify, placement=result.placement
        )

        def done(p: PlannedRun) -> None:
            manifest.write()
            result.ran.append(p)
            if o.on_done:
                o.on_done(p)

        old_handlers = _stop_on_signals(ex)
        try:
            ex.run_all(todo, result.recipe, done)
        except KeyboardInterrupt:
            raise _interrupted(result, todo, ex.signum) from None
        finally:
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
            for p in todo:
                if not p.ran:
                    p.status, p.error = run_state(p)
                    if p.status == DONE:
                        p.status = COMPLETED
            manifest.write()


def _stop_on_signals(ex: Executor) -> dict:
    """Handlers that stop the sweep like Ctrl-C on a scheduler's pre-emption notice (SIGTERM), the terminal closing
    (SIGHUP) or a time-limit warning (SIGUSR1), ``ex.signum`` set to the signal; in the main thread only. A signal
    ignored by the parent stays ignored (SIGINT, SIGHUP: ``nohup``). Returns the handlers they replace."""

    def on_term(signum, frame):
        ex.signum = signum
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: on_term,
        signal.SIGHUP: on_term,
        signal.SIGUSR1: on_term,
    }
    return {
        s: signal.signal(s, h)
        for s, h in handlers.items()
        if s in (signal.SIGTERM, signal.SIGUSR1) or signal.getsignal(s) is not signal.SIG_IGN
    }


def _interrupted(result: SweepResult, todo: list[PlannedRun], signum: int) -> SweepInterrupted:
    """The error of a sweep stopped by ``signum`` (exit 128 + signum): the runs of ``todo`` finished, and those stopped
    with a checkpoint (resumable), their states read again."""
    left = [p for p in todo if not p.ran or (p.exit_code or 0) > 128]  # not run, or stopped by the signal
    for p in left:
        p.status, p.error = run_state(p)
    stopped = [p for p in left if p.status != DONE]
    resumable = sum(p.resume for p in stopped)
    err = SweepInterrupted(
        f"interrupted by {signal.Signals(signum).name}: {len(todo) - len(stopped)} of {len(todo)} runs "
        f"finished, {resumable} stopped with a checkpoint (resumable); run the same command again to continue"
    )
    err.exit_code = 128 + int(signum)
    err.result = result
    return err


def submit_sweep(
    result: SweepResult, todo: list[PlannedRun], seed_ids: list[int], products: dict, mpi: int, on_start=None
) -> SweepResult:
    """``--executor slurm``: submit every run to go whose job is not pending or running (asked of Slurm) and whose
    run lock is free; ``sweep.json`` records the job ids. Returns at once (``fedcli sweep --wait`` follows them)."""
    from fedcli.sweep import slurm

    why = slurm.have_slurm()
    if why:
        raise ConfigError(f"--executor slurm: {why}; run it where sbatch works (a cluster's login node)")
    root = result.root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from fedcli.errors import os_error

        raise os_error(e, root, "create the sweep folder") from None
    with SweepLock(root):
        for p in todo:
            p.status, p.error = run_state(p)
        todo = [p for p in todo if p.status not in (DONE, PRUNED)]
        busy = {id(s.run): s for s in slurm.statuses(todo) if s.active}
        result.queued = [p for p in todo if id(p) in busy]
        for p in result.queued:
            p.job_id = busy[id(p)].job_id
        go = [p for p in todo if id(p) not in busy]
        manifest = SweepManifest(root, result.recipe, seed_ids, result.runs, products)
        if on_start:
            on_start(result, go)
        if go:
            ex = Executor(mpi=mpi)
            for p in go:
                ex.prepare(p, result.recipe)
            for p, jid in zip(go, slurm.submit(go, result.recipe, result.resources, mpi, Executor)):
                p.job_id, p.status, p.error = jid, "submitted", None
        result.submitted = go
        for p in result.skipped:
            p.job_id = slurm.read_job(p).get("job_id")
        manifest.write()
    return result
