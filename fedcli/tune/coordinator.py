"""``fedcli tune``'s coordinator (issue 58, section 2; the contract in docs/tuning.md): one Optuna study per
``[[runs]]`` row, every trial an ordinary ``fedcli train`` run in ``DIR/<study>/trial-NNNN`` run by the sweep's
executor (:class:`fedcli.sweep.executors.Executor`: ``--jobs`` processes, ``--mpi``) or, with ``--executor slurm``, as
an ordinary sweep job (issue 59: :mod:`fedcli.tune.executors`), pruned through the run's stop file
(``fedcli.results.stopfile``, read by the training at each round boundary, over the shared file system on a node).

Crash safety ("no trial lost, none duplicated"): Optuna's storage holds the search state, the run directories the
results. A trial is asked once (its parameters stored in the storage before its recipe file is written), and then only
resumed, told or pruned: a coordinator killed at any moment and started again finds every RUNNING trial of the storage
and resumes its run directory (``train --resume``), runs its stored parameters under the same number when it has no
run directory yet (killed between the ask and the run's first write), or tells what the run directory says when the
run ended while no coordinator watched. Under Slurm a trial whose job still runs is adopted (watched, never submitted
again), and a trial whose job is gone before its training ended (scancel, a time limit, a lost node) is resumed in a
new job under the same number. Where the storage and a run directory disagree, the run directory wins.

Optuna is imported inside the functions that run a study, never at import (``--help`` and recipe errors go without it).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedcli.errors import ConfigError, FedcliError
from fedcli.results.sweepdir import PlannedRun
from fedcli.safefs import make_dir, refuse_link
from fedcli.tune import objectives as obj
from fedcli.tune import pruning
from fedcli.tune import study as folder
from fedcli.tune.space import Param, TuneTable, check_space, parse_tune

#: exit codes of a trial's training (docs/reliability.md): diverged, stopped on request (pruned)
DIVERGED, PRUNED_EXIT = 4, 5
POLL_S = 0.5


class TuneFailed(FedcliError):
    """The coordinator could not go on (exit 1)."""


@dataclass(eq=False)
class TrialRun(PlannedRun):
    """A trial's run, for the sweep's executor: its folder is ``<study>/trial-NNNN``, its recipe and log beside it."""

    number: int = 0

    @property
    def rel(self) -> str:
        return folder.trial_rel(self.slug, self.number)

    @property
    def label(self) -> str:
        return f"{self.slug} trial {self.number}"


@dataclass
class StudyPlan:
    name: str  # the slug of the row: the folder and the study's name
    row: object  # fedcli.recipes.SweepRun
    base: dict  # the row's resolved train values
    config: dict  # its TrainConfig as a dict (seed 0)
    space: dict[str, Param]
    budget: int
    floor: int
    floor_why: list[str]
    rungs: list[int]
    grid_size: int | None
    optuna_study: str
    baseline: dict | None  # the recipe's own values of the searched options (trial 0), None: outside the space
    baseline_why: str = ""
    trials: int = 0  # the study's trials: --trials, at most the full grid under --sampler grid
    unit: str = "iteration"  # what the budget, the rungs and the floor count: local iterations, or rounds

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "optuna_study": self.optuna_study,
            "base": _jsonable(self.base),
            "space": {k: p.to_json() for k, p in self.space.items()},
            "rungs": self.rungs,
            "floor": self.floor,
            "grid_size": self.grid_size,
            "budget_iterations": self.budget if self.unit == "iteration" else None,
            **({"budget_rounds": self.budget} if self.unit == "round" else {}),
        }


@dataclass
class TunePlan:
    root: Path
    recipe: object  # fedcli.recipes.SweepRecipe
    table: TuneTable
    storage: tuple[str, str]
    select_on: str
    studies: list[StudyPlan]
    threads: int | None = None  # torch threads of a trial under --jobs J (cores / J), as a sweep's runs
    record: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return self.table.trials


def _jsonable(values: dict) -> dict:
    return json.loads(json.dumps(values, default=str))


def default_out(recipe_path, scale: str | None, default_scale: str | None) -> Path:
    """``results/tune/<recipe stem>``, ``-<scale>`` appended for a scale other than the recipe's default."""
    stem = Path(recipe_path).stem
    return Path("results") / "tune" / (stem if scale == default_scale or scale is None else f"{stem}-{scale}")


@dataclass
class SearchFlags:
    """The command-line values that override the recipe's [tune] table (None: the table's own): --trials,
    --sampler, --pruner, --seed."""

    trials: int | None = None
    sampler: str | None = None
    pruner: str | None = None
    seed: int | None = None

    @classmethod
    def of_record(cls, rec: dict) -> SearchFlags:
        """The flags a study's tune.json recorded."""
        return cls(rec.get("trials"), rec.get("sampler"), rec.get("pruner"), rec.get("seed"))


def trial_threads(jobs: int = 1, cpus: int | None = None, mpi: int = 0) -> int | None:
    """Torch threads of a trial: ``cpus`` / MPI ranks when a trial's Slurm job has ``cpus``, else this machine's
    cores / ``jobs`` when more than one trial runs at a time (None: torch's default)."""
    procs = max(1, jobs)
    threads = max(1, (os.cpu_count() or 1) // procs) if procs > 1 else None
    if cpus:
        threads = max(1, cpus // max(1, mpi))
    return threads


def make_plan(
    recipe_path,
    scale=None,
    out=None,
    search: SearchFlags | None = None,
    storage="journal",
    select_on="validation",
    threads: int | None = None,
) -> TunePlan:
    """Read and check everything (exit 2 on any error, nothing written, no optuna import). ``threads``: a trial's
    torch threads (``trial_threads``)."""
    from fedcli.recipes import default_scale, read_sweep

    if select_on not in ("validation", "test"):
        raise ConfigError(f"--select-on must be validation or test, got {select_on!r}")
    recipe = read_sweep(recipe_path, scale)
    table = parse_tune(recipe.path, recipe.text, recipe.data)
    _apply_flags(table, search or SearchFlags())
    root = Path(out) if out else default_out(recipe.path, recipe.scale, default_scale(recipe.data))
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--out {root} is a file; expected a folder for the study")
    kind, what = folder.resolve_storage(storage, root)
    studies = [
        _study_plan(recipe, row, slug, table, root, select_on) for row, slug in zip(recipe.runs, _slugs(recipe.runs))
    ]
    plan = TunePlan(root, recipe, table, (kind, what), select_on, studies, threads)
    plan.record = record_of(plan)
    return plan


def _apply_flags(table: TuneTable, search: SearchFlags) -> None:
    """Check the command-line flags and let them override the recipe's [tune] table."""
    from fedcli.tune.space import PRUNERS, SAMPLERS

    for flag, v, allowed in (("--sampler", search.sampler, SAMPLERS), ("--pruner", search.pruner, PRUNERS)):
        if v is not None and v not in allowed:
            raise ConfigError(f"{flag} must be one of {', '.join(allowed)}, got {v!r}")
    if search.trials is not None:
        if search.trials < 1:
            raise ConfigError(f"--trials must be >= 1, got {search.trials}")
        table.trials = search.trials
    table.sampler = search.sampler or table.sampler
    table.pruner = search.pruner or table.pruner
    table.seed = table.seed if search.seed is None else search.seed


def _slugs(rows) -> list[str]:
    """Each recipe row's study folder name: its slugified name, numbered from -2 where two rows share one."""
    from fedcli.sweep.run import slugify

    slugs: list[str] = []
    for row in rows:
        slug = slugify(row.name)
        k = 2
        while slug in slugs:
            slug, k = f"{slugify(row.name)}-{k}", k + 1
        slugs.append(slug)
    return slugs


def _study_plan(recipe, row, slug: str, table: TuneTable, root: Path, select_on: str) -> StudyPlan:
    """One recipe row's study: its space checked against the row, its budget, pruning rungs and grid size."""
    from fedcli.recipes import run_config

    cfg = run_config(row, 0, root / slug / "trial-0000").to_dict()
    space = table.space_for(cfg["algo"])
    loc = f"recipe {recipe.path}, line {row.line}: run '{row.name}'"
    if not space:
        raise ConfigError(f"{loc}: [tune.space] gives this row's method ({cfg['algo']}) nothing to search")
    check_space(space, cfg, loc)
    _check_split(table, cfg, select_on, loc)
    for p in space.values():  # every value of the space must make a valid run with the row (a rule between keys)
        for v in p.choices if p.kind == "choices" else (p.low, p.high):
            try:
                run_config(row, 0, root / slug / "trial-0000", {p.name: v})
            except ConfigError as e:
                raise ConfigError(f"{loc}: the space's {p.name} = {v!r} makes no valid run: {e}") from None
    unit = "round" if cfg.get("rounds") else "iteration"  # a budget in rounds: the grid counts rounds
    floor, why = pruning.floor_of(cfg, space) if unit == "iteration" else pruning.round_floor(cfg)
    budget = int(cfg["rounds"] or cfg["iterations"])
    rungs = pruning.rungs_of(budget, floor)
    sizes = [p.values() for p in space.values()]
    grid = None if any(v is None for v in sizes) else _product(len(v) for v in sizes)
    if table.sampler == "grid" and grid is None:
        raise ConfigError(
            f"{loc}: --sampler grid needs a finite space (choices, int ranges, stepped float ranges); "
            f"{', '.join(p.name for p in space.values() if p.values() is None)} is continuous"
        )
    baseline, bwhy = _baseline(space, cfg)
    trials = min(table.trials, grid) if table.sampler == "grid" else table.trials
    return StudyPlan(
        slug,
        row,
        dict(row.values),
        cfg,
        space,
        budget,
        floor,
        why,
        rungs,
        grid,
        f"{recipe.path.stem}/{slug}",
        baseline,
        bwhy,
        trials,
        unit,
    )


def _product(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _check_split(table: TuneTable, cfg: dict, select_on: str, loc: str) -> None:
    """Selection is honest: an accuracy objective reads a validation split the row must hold (issue 58)."""
    if select_on == "test":
        return
    for o in table.objectives:
        need = {"val_acc": "val_fraction", "personal_val_acc": "client_val_fraction"}.get(o.metric)
        if need and not cfg.get(need):
            raise ConfigError(
                f"{loc}: objective {o.metric} reads the validation split, but the row has {need} = 0; set "
                f"{need} (e.g. 0.1) in [base], or pass --select-on test to select on the test set (optimistic)"
            )


def _baseline(space: dict[str, Param], cfg: dict) -> tuple[dict | None, str]:
    """The recipe's own values of the searched options (enqueued as trial 0), or None with why when one lies outside
    its range."""
    out = {}
    for name, p in space.items():
        v = cfg.get(name)
        inside = v in p.choices if p.kind == "choices" else (v is not None and p.low <= v <= p.high)
        if not inside:
            return None, f"the recipe's {name} = {v!r} lies outside the space's {p.to_json()}"
        out[name] = v
    return out, ""


def record_of(plan: TunePlan) -> dict:
    from fedcli.results.sweepdir import text_sha256
    from fedcli.version import __version__

    return {
        "kind": "fedcli-tune",
        "version": 1,
        "recipe": str(plan.recipe.path),
        "recipe_sha256": text_sha256(plan.recipe.text),
        "scale": plan.recipe.scale,
        "storage": folder.storage_label(*plan.storage),
        "sampler": plan.table.sampler,
        "pruner": plan.table.pruner,
        "seed": plan.table.seed,
        "trials": plan.table.trials,
        "select_on": plan.select_on,
        "objectives": [o.to_json() for o in plan.table.objectives],
        "studies": [s.to_json() for s in plan.studies],
        "versions": {"fedcli": __version__, **{k: _version(k) for k in ("optuna", "torch")}},
    }


def _version(package: str) -> str | None:
    """An installed package's version, read from its metadata (nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------------------ the folder
class TuneLock:
    """One coordinator per study folder: ``tune.lock`` held by the coordinator, ``.tune.workers.lock`` held shared by
    every training it starts (as :class:`fedcli.sweep.run.SweepLock`): a new coordinator waits until the trainings
    of a killed one have stopped (they watch it and write their last round boundary)."""

    WAIT_S = 30.0

    def __init__(self, root: Path):
        from fedcli.results.lock import FileLock

        self.path, self.workers_path = root / folder.LOCK, root / folder.WORKERS_LOCK
        self.lock, self.workers = FileLock(self.path), FileLock(self.workers_path)

    def __enter__(self):
        from fedcli.results.lock import describe

        if not self.lock.acquire():
            raise ConfigError(
                f"another fedcli tune ({describe(self.lock.holder())}) is running in {self.path.parent}; "
                f"wait for it or stop it"
            )
        deadline = time.monotonic() + self.WAIT_S
        while not self.workers.acquire():
            if time.monotonic() > deadline:
                self.lock.release()
                raise ConfigError(
                    f"trainings or study workers of an earlier fedcli tune in {self.path.parent} are "
                    f"still running (a coordinator's trainings stop after their current local step; "
                    f"study workers end with the study); wait for them to end"
                )
            time.sleep(0.25)
        self.workers.release()
        return self

    def __exit__(self, *exc):
        self.lock.release()


def start_fresh(plan: TunePlan) -> None:
    """``--fresh``: the folder's study goes: its storage (the journal or sqlite file; a URL's studies of this recipe),
    tune.json, trials.csv and the studies' trial folders."""
    root = plan.root
    kind, what = plan.storage
    for name in (folder.RECORD, folder.TRIALS_CSV, folder.JOURNAL, folder.SQLITE, folder.JOURNAL + ".lock"):
        path = root / name
        refuse_link(path)
        path.unlink(missing_ok=True)
    old = folder.read_record(root) if (root / folder.RECORD).exists() else None
    names = {s.name for s in plan.studies} | {s.get("name") for s in (old or {}).get("studies", [])}
    for n in names:
        d = root / str(n)
        if n and d.is_dir() and not d.is_symlink():
            shutil.rmtree(d)
    if kind == "url":
        import optuna

        st = optuna.storages.RDBStorage(what)
        for s in plan.studies:
            try:
                optuna.delete_study(study_name=s.optuna_study, storage=st)
            except KeyError:
                pass


def open_storage(plan: TunePlan):
    import optuna

    kind, what = plan.storage
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(what))
    return optuna.storages.RDBStorage(what)


def make_sampler(plan: TunePlan, sp: StudyPlan):
    import warnings

    import optuna

    seed = plan.table.seed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if plan.table.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if plan.table.sampler == "grid":
            return optuna.samplers.GridSampler({k: p.values() for k, p in sp.space.items()}, seed=seed)
        if plan.table.sampler == "gp":
            return optuna.samplers.GPSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed)


def open_study(plan: TunePlan, sp: StudyPlan, storage):
    """The Optuna study of ``sp`` in ``storage`` (created on first use, with the plan's sampler and pruner). Trial 0 is
    the recipe's own configuration, enqueued into an empty study; Optuna's grid sampler does not count an enqueued
    trial as a point of its grid (it would propose it again): under --sampler grid the trial of the grid that is the
    recipe's configuration is marked instead (trials.csv's baseline column)."""
    import optuna

    objectives = plan.table.objectives
    pruner = (
        pruning.make_pruner(plan.table.pruner, sp.rungs)
        if pruning.intermediate_metric(objectives)
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        study_name=sp.optuna_study,
        storage=storage,
        sampler=make_sampler(plan, sp),
        pruner=pruner,
        directions=[o.direction for o in objectives],
        load_if_exists=True,
    )
    if not study.get_trials(deepcopy=False) and sp.baseline is not None and plan.table.sampler != "grid":
        study.enqueue_trial(dict(sp.baseline), user_attrs={"baseline": True})
    return study


def suggest(trial, p: Param):
    """Ask the trial for ``p`` (Optuna's suggest API; a stored value is returned as stored)."""
    if p.kind == "choices":
        return trial.suggest_categorical(p.name, list(p.choices))
    if p.kind == "int":
        return trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1))
    if p.kind == "log":
        return trial.suggest_float(p.name, float(p.low), float(p.high), log=True)
    return trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step)


# ------------------------------------------------------------------------------------------------ running
@dataclass(eq=False)
class Active:
    number: int
    trial_id: int
    run: TrialRun
    params: dict
    future: object = None
    job_id: str | None = None  # its Slurm job (--executor slurm)
    requeued: int = 0  # new jobs it got after its job ended before its training did
    reported: set = field(default_factory=set)
    stop: dict | None = None  # the stop asked (why, iteration)
    classes: int | None = None
    baseline: bool = False


class Coordinator:
    """Runs the studies of a plan to ``trials`` trials each (see the module's docstring)."""

    #: new jobs a trial gets, in one call, after its job ended before its training did; then it fails
    REQUEUES = 3

    def __init__(self, plan: TunePlan, jobs: int = 1, mpi: int = 0, notify=None, on_event=None, slurm=None):
        """``slurm``: :class:`fedcli.sweep.slurm.Resources` of a trial's job (``--executor slurm``), None: local."""
        from fedcli.sweep.executors import Executor

        self.plan, self.jobs, self.mpi, self.slurm = plan, max(1, jobs), mpi, slurm
        self.notify = notify or (lambda msg: None)
        self.on_event = on_event or (lambda kind, study, number, text: None)
        self.ex = Executor(jobs, mpi, workers_lock=plan.root / folder.WORKERS_LOCK, notify=self.notify)
        self.rows: dict[tuple[str, int], dict] = {}
        self.stopping = False

    # ---- the study
    def run(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = open_storage(self.plan)
        self.storage = storage
        studies = [(sp, open_study(self.plan, sp, storage)) for sp in self.plan.studies]
        for sp, study in studies:
            self.refresh(sp, study)
        self.write_csv()
        for sp, study in studies:
            self.run_study(sp, study)

    def executor(self):
        from fedcli.tune.executors import LocalTrials, SlurmTrials

        return SlurmTrials(self, self.slurm) if self.slurm is not None else LocalTrials(self)

    def run_study(self, sp: StudyPlan, study) -> None:
        """At most ``jobs`` trials in flight (trials adopted from a killed coordinator's jobs aside), each watched at
        the
        rungs until its training ends, then told."""
        import optuna

        RUNNING = optuna.trial.TrialState.RUNNING
        active: dict[int, Active] = {}
        self.trials = trials = self.executor()
        recover = [t for t in study.get_trials(deepcopy=False, states=(RUNNING,))]
        try:
            for ft in list(recover):  # trials whose training runs on without a coordinator (Slurm jobs): adopted
                a = self.adopt(sp, ft)
                if a is not None:
                    recover.remove(ft)
                    active[a.number] = a
            while True:
                while len(active) < self.jobs and not self.stopping:
                    if recover:
                        ft = recover.pop(0)
                        a = self.recover(sp, study, ft)
                    else:
                        trials_ = study.get_trials(deepcopy=False)
                        waiting = any(t.state == optuna.trial.TrialState.WAITING for t in trials_)
                        if len(trials_) >= sp.trials and not waiting:
                            break
                        a = self.ask(sp, study)
                    if a is not None:
                        trials.start(a)
                        active[a.number] = a
                trials.flush()
                if not active:
                    break
                time.sleep(POLL_S)
                ended = trials.poll(list(active.values()))
                for a, code in ended:
                    del active[a.number]
                    if self.requeue(a, code):
                        active[a.number] = a
                    else:
                        self.finish(sp, study, a, code)
                trials.flush()
                for a in list(active.values()):
                    self.watch(sp, study, a)
        except BaseException:
            self.stopping = True
            self.ex.stopping = True
            trials.stop(list(active.values()))
            raise
        finally:
            trials.close()
            self.refresh(sp, study)
            self.write_csv()

    def adopt(self, sp: StudyPlan, ft) -> Active | None:
        """A RUNNING trial whose training still runs without a coordinator (its Slurm job pending or running, or its run
        lock held): watched from now on, not started again."""
        params = dict(ft.params)
        if any(n not in params for n in sp.space):
            return None
        a = Active(ft.number, ft._trial_id, self.trial_run(sp, ft.number, params), params)
        a.baseline = bool(ft.user_attrs.get("baseline"))
        a.stop = ft.user_attrs.get("prune_requested")
        if not self.trials.alive(a):
            return None
        self.on_event("adopt", sp.name, ft.number, f"its training still runs (Slurm job {a.job_id or '?'})")
        return a

    def requeue(self, a: Active, code: int | None) -> bool:
        """Under Slurm: a trial whose job ended before its training did (no exit code recorded, or one of a signal:
        scancel, a time limit, a preemption, a lost node) and whose run directory is neither completed, failed nor
        pruned goes into a new job under the same number, resuming its checkpoint (at most ``REQUEUES`` times)."""
        from fedcli.results.sweepdir import run_state

        if not self.trials.requeues or self.stopping or (code is not None and code < 128):
            return False
        state, _ = run_state(a.run)  # sets a.run.resume from the checkpoint on disk
        if state in ("done", "pruned", "failed") or a.requeued >= self.REQUEUES:
            return False
        a.requeued += 1
        self.on_event(
            "requeue",
            a.run.slug,
            a.number,
            f"its job {a.job_id} ended with the run {state}"
            f"{f' (exit {code})' if code is not None else ''}; "
            f"{'resumed' if a.run.resume else 'started again'} in a new job",
        )
        self.trials.start(a)
        return True

    def ask(self, sp: StudyPlan, study) -> Active:
        """A new trial (the baseline when enqueued): asked, its parameters stored, then its recipe written."""
        trial = study.ask()
        params = {name: suggest(trial, p) for name, p in sp.space.items()}
        if self.plan.table.sampler == "grid" and params == sp.baseline:
            trial.set_user_attr("baseline", True)
        a = self.start(sp, study, trial.number, trial._trial_id, params, resume=False)
        a.baseline = bool(trial.user_attrs.get("baseline"))
        return a

    def recover(self, sp: StudyPlan, study, ft) -> Active | None:
        """A trial RUNNING in the storage when this coordinator started (its coordinator was killed): what its run
        directory says decides."""
        import optuna

        from fedcli.results.runstate import read_manifest

        params = dict(ft.params)
        missing = [p for n, p in sp.space.items() if n not in params]
        if missing:  # killed while the parameters were being stored: the rest is asked now, under the same number
            trial = optuna.Trial(study, ft._trial_id)
            params.update({p.name: suggest(trial, p) for p in missing})
        run = self.trial_run(sp, ft.number, params)
        status, manifest = read_manifest(run.dir) if (run.dir / "manifest.json").exists() else (None, None)
        if isinstance(manifest, dict) and manifest.get("status") in ("completed", "failed") or _pruned(manifest):
            a = Active(ft.number, ft._trial_id, run, params)
            self.finish(sp, study, a, None)
            return None
        a = self.start(sp, study, ft.number, ft._trial_id, params, resume=isinstance(manifest, dict))
        a.baseline = bool(ft.user_attrs.get("baseline"))
        return a

    def trial_run(self, sp: StudyPlan, number: int, params: dict) -> TrialRun:
        from fedcli.recipes import run_config
        from fedcli.results.runstate import config_hash

        values = {**sp.base, **params, "seed": 0}
        root = self.plan.root
        run = TrialRun(sp.row.name, sp.name, 0, root, values, {}, "", number=number)
        values["out"] = str(run.dir)
        extra = {"threads": self.plan.threads} if self.plan.threads and "threads" not in sp.base else {}
        values.update(extra)
        cfg = run_config(sp.row, 0, run.dir, {**params, **extra})
        run.config = cfg.to_dict()
        run.hash = config_hash(run.config)
        return run

    def start(self, sp: StudyPlan, study, number: int, trial_id: int, params: dict, resume: bool) -> Active:
        from fedcli.results.rundir import atomic_write
        from fedcli.sweep.executors import toml_flat

        run = self.trial_run(sp, number, params)
        run.resume = resume
        make_dir(run.recipe_file.parent)
        for path in (run.dir, run.log, run.recipe_file):
            refuse_link(path)
        header = (
            f"fedcli tune: study '{sp.name}' of {self.plan.recipe.path}"
            + (f" at scale {self.plan.recipe.scale}" if self.plan.recipe.scale else "")
            + f", trial {number} ({json.dumps(params)})\nreplay: fedcli train --recipe {run.recipe_file} --out DIR"
        )
        atomic_write(run.recipe_file, toml_flat(run.values, header))
        a = Active(number, trial_id, run, params)
        self.on_event("resume" if resume else "start", sp.name, number, json.dumps(params))
        return a

    @staticmethod
    def trial_env(a: Active) -> dict:
        """The environment that gives the trial's manifest its ``tune`` entry (fedcli.runner.TUNE_ENV)."""
        return {
            "FEDCLI_TUNE_TRIAL": json.dumps(
                {"study": a.run.slug, "number": a.number, "params": a.params, "baseline": a.baseline}
            )
        }

    def execute(self, a: Active) -> int:
        """The trial's training in its own process (``fedcli train``, or ``train --resume``); its exit code."""
        run = a.run
        run.env = self.trial_env(a)
        code = self.ex._spawn(run, self.ex.command(run, resume=run.resume), "a" if run.resume else "w")
        if run.resume and code == 2 and not self.stopping and not _pruned(_manifest(run.dir)):
            code = self.ex._spawn(run, self.ex.command(run), "a")  # resume refused: the run again from its start
        return code

    # ---- pruning
    def watch(self, sp: StudyPlan, study, a: Active) -> None:
        """Poll a running trial's metrics.csv at the rungs: report to the pruner, stop it when pruned or hopeless."""
        if a.stop is not None:
            return
        import optuna

        metric = pruning.intermediate_metric(self.plan.table.objectives)
        if metric is not None and self.plan.table.pruner != "none":
            maximize = self.plan.table.objectives[0].direction == "maximize"
            points = obj.column(a.run.dir, metric, self.plan.select_on, sp.unit)
            trial = optuna.Trial(study, a.trial_id)
            for r, v in sorted(pruning.rung_values(points, sp.rungs, maximize).items()):
                if r in a.reported:
                    continue
                trial.report(v, r)
                a.reported.add(r)
                if trial.should_prune():
                    self.request_stop(
                        study,
                        a,
                        f"{self.plan.table.pruner}: best-so-far {metric} {v:.4f} at rung {r} "
                        f"among the study's worse ones",
                        r,
                    )
                    return
        if a.classes is None:
            m = _manifest(a.run.dir)
            a.classes = ((m or {}).get("dataset") or {}).get("num_classes") if isinstance(m, dict) else None
        acc_metric = next((o.metric for o in self.plan.table.objectives if o.metric in obj.ACCURACY), "val_acc")
        pts = obj.column(a.run.dir, acc_metric, self.plan.select_on, sp.unit)
        said = pruning.hopeless(pts, a.classes, sp.budget, sp.floor)
        if said:
            self.request_stop(study, a, *said)

    def request_stop(self, study, a: Active, why: str, iteration: int) -> None:
        from fedcli.results import stopfile

        stopfile.request_stop(a.run.dir, reason="pruned", why=why, iteration=iteration)
        a.stop = {"why": why, "iteration": iteration}
        study._storage.set_trial_user_attr(a.trial_id, "prune_requested", a.stop)
        self.on_event("prune", a.run.slug, a.number, why)

    # ---- the end of a trial
    def finish(self, sp: StudyPlan, study, a: Active, code: int | None) -> None:
        """Tell the storage what the run directory says (exit code ``code``; None: the run ended unwatched)."""
        import optuna

        from fedcli.results.validate import diverged

        if self.stopping and code is not None and code not in (0, DIVERGED, PRUNED_EXIT):
            return  # stopped by the signal the coordinator got: RUNNING, resumed by the next call
        run = a.run
        manifest = _manifest(run.dir)
        self.copy_recipe(run)
        objs = self.plan.table.objectives
        if _pruned(manifest) or code == PRUNED_EXIT:
            where = (manifest or {}).get("pruned") or {}
            study._storage.set_trial_user_attr(a.trial_id, "pruned_iteration", where.get("iteration"))
            self.tell(study, a, state=optuna.trial.TrialState.PRUNED)
            self.on_event(
                "pruned",
                sp.name,
                a.number,
                f"stopped at iteration {where.get('iteration', '?')} (round "
                f"{where.get('round', '?')}), its checkpoint kept; fedcli tune {self.plan.root} --promote "
                f"{a.number}{f' --study {sp.name}' if len(self.plan.studies) > 1 else ''} finishes it",
            )
        elif diverged(manifest) or code == DIVERGED:
            study._storage.set_trial_user_attr(a.trial_id, "diverged", True)
            self.tell(study, a, values=[obj.worst(o) for o in objs])
            self.on_event("diverged", sp.name, a.number, "told the worst value")
        elif isinstance(manifest, dict) and manifest.get("status") == "completed":
            vals = [obj.value(run.dir, o, self.plan.select_on) for o in objs]
            missing = [o.metric for o, v in zip(objs, vals) if v is None]
            if missing:
                study._storage.set_trial_user_attr(a.trial_id, "no_value", missing)
            self.tell(study, a, values=[obj.worst(o) if v is None else v for o, v in zip(objs, vals)])
            self.on_event("done", sp.name, a.number, ", ".join(f"{o.metric} {v}" for o, v in zip(objs, vals)))
        else:
            study._storage.set_trial_user_attr(a.trial_id, "error", f"exit {code}; log {run.log}")
            self.tell(study, a, state=optuna.trial.TrialState.FAIL)
            self.on_event("failed", sp.name, a.number, f"exit {code}; log {run.log}")
        self.refresh(sp, study)
        self.write_csv()

    def tell(self, study, a: Active, values=None, state=None) -> None:
        ft = study._storage.get_trial(a.trial_id)
        if ft.state.is_finished():
            return
        try:
            if state is not None:
                study.tell(a.number, state=state)
            else:
                study.tell(a.number, values=values if len(values) > 1 else values[0])
        except (
            RuntimeError
        ) as e:  # the grid sampler stops an optimize loop when its grid is done (a trial told COMPLETE
            if "Study.stop" not in str(e):  # or PRUNED): the state is stored before (optuna/study/_tell.py), and this
                raise  # loop ends by count

    def copy_recipe(self, run: TrialRun) -> None:
        """The trial's replayable recipe also inside its run directory (``recipe.toml``), once the run has its
        manifest (a file there earlier would make ``train --overwrite`` refuse the folder)."""
        from fedcli.results.rundir import atomic_write

        if (run.dir / "manifest.json").is_file() and run.recipe_file.is_file():
            dest = run.dir / "recipe.toml"
            refuse_link(dest)
            atomic_write(dest, run.recipe_file.read_text())

    # ---- trials.csv
    def refresh(self, sp: StudyPlan, study) -> None:
        for ft in study.get_trials(deepcopy=False):
            rel = folder.trial_rel(sp.name, ft.number)
            has = (self.plan.root / rel).is_dir()
            self.rows[(sp.name, ft.number)] = {
                "study": sp.name,
                "number": ft.number,
                "state": ft.state.name,
                "params": ft.params,
                "values": ft.values,
                "run": rel if has else "",
                "pruned_iteration": ft.user_attrs.get("pruned_iteration") if ft.state.name == "PRUNED" else None,
                "baseline": bool(ft.user_attrs.get("baseline")),
            }
            if ft.state.name == "PRUNED" and has and _promoted(self.plan.root / rel):
                # fedcli tune --promote finished it: Optuna cannot re-tell a finished trial (the sampler still counts it
                # pruned); the run directory is the truth, and trials.csv shows the trial COMPLETE with its values
                vals = [obj.value(self.plan.root / rel, o, self.plan.select_on) for o in self.plan.table.objectives]
                vals = [obj.worst(o) if v is None else v for o, v in zip(self.plan.table.objectives, vals)]
                self.rows[(sp.name, ft.number)].update(state="COMPLETE", values=vals, pruned_iteration=None)

    def write_csv(self) -> None:
        params = list(dict.fromkeys(k for s in self.plan.studies for k in s.space))
        folder.write_trials_csv(self.plan.root, list(self.rows.values()), params, len(self.plan.table.objectives))


def study_of(plan: TunePlan, name: str) -> StudyPlan:
    return next(s for s in plan.studies if s.name == name)


def _manifest(run_dir: Path) -> dict | None:
    from fedcli.results.runstate import read_manifest

    if not (Path(run_dir) / "manifest.json").exists():
        return None
    _, m = read_manifest(run_dir)
    return m if isinstance(m, dict) else None


def _promoted(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` was pruned, then finished by ``--promote`` (its manifest completed, the last
    resume recording ``promoted``: docs/run-directory.md)."""
    m = _manifest(run_dir)
    if not isinstance(m, dict) or m.get("status") != "completed":
        return False
    resumes = m.get("resumes") if isinstance(m.get("resumes"), list) else []
    return any(isinstance(r, dict) and r.get("promoted") for r in resumes)


def _pruned(manifest) -> bool:
    return isinstance(manifest, dict) and manifest.get("status") == "interrupted" and manifest.get("reason") == "pruned"


def run_tune(
    plan: TunePlan, jobs: int = 1, mpi: int = 0, fresh: bool = False, notify=None, on_event=None, slurm=None
) -> Coordinator:
    """Take the folder (one coordinator), check or write its record, run the studies (``slurm``: the Resources of a
    trial's job under ``--executor slurm``)."""
    root = make_dir(plan.root, "create the study folder")
    with TuneLock(root):
        if fresh:
            start_fresh(plan)
        old = folder.read_record(root)
        if old is not None:
            why = folder.record_differs(old, plan.record)
            if why:
                raise ConfigError(
                    f"--out {root} holds another study: {why}; choose another --out, or pass --fresh to "
                    f"start this one over (its trials are deleted)"
                )
        folder.write_record(root, plan.record)
        if plan.storage[0] == "journal":
            dropped = folder.repair_journal(root)
            if dropped and notify:
                notify(
                    f"dropped the last {dropped} bytes of {root / folder.JOURNAL}: a record cut by a killed coordinator"
                )
        co = Coordinator(plan, jobs, mpi, notify, on_event, slurm)
        co.run()
        return co


def promote(root: Path, number: int, study: str | None = None, mpi: int = 0, notify=None) -> tuple[str, int]:
    """``fedcli tune DIR --promote T``: the pruned trial T finishes (``fedcli train --resume --promote``) and trials.csv
    shows it COMPLETE with its values (Optuna keeps it PRUNED: a finished trial cannot be told again); (its run
    directory, exit code)."""
    import subprocess
    import sys

    import optuna

    from fedcli.results import stopfile

    rec = folder.read_record(root)
    if rec is None:
        raise ConfigError(f"--promote: {root} holds no fedcli tune study (no {folder.RECORD})")
    names = [s["name"] for s in rec.get("studies", [])]
    if study is None:
        if len(names) != 1:
            raise ConfigError(f"--promote {number}: the folder holds studies {', '.join(names)}; name one with --study")
        study = names[0]
    if study not in names:
        raise ConfigError(f"--promote: no study {study!r} in {root} (its studies: {', '.join(names)})")
    run_dir = root / folder.trial_rel(study, number)
    m = _manifest(run_dir)
    if not _pruned(m):
        raise ConfigError(
            f"--promote {number}: trial {number} of study {study} ({run_dir}) was not pruned "
            f"(status {(m or {}).get('status', 'missing')})"
        )
    with TuneLock(root):
        plan = make_plan(
            rec["recipe"],
            rec.get("scale"),
            root,
            SearchFlags.of_record(rec),
            _storage_arg(rec),
            rec.get("select_on", "validation"),
        )
        study_of(plan, study)  # (refused in one line when the record no longer holds it)
        stopfile.clear_stop(run_dir)
        cmd = [sys.executable, "-m", "fedcli", "train", "--resume", str(run_dir), "--promote", "--quiet"]
        with open(root / f"{folder.trial_rel(study, number)}.log", "a") as log:
            code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # the trial stays PRUNED in Optuna (a finished trial cannot be told again): Coordinator.refresh reads the
        # promoted run's values from its folder
        co = Coordinator(plan, notify=notify)
        for s in plan.studies:
            co.refresh(s, optuna.load_study(study_name=s.optuna_study, storage=open_storage(plan)))
        co.write_csv()
        return str(run_dir), code


def _storage_arg(rec: dict) -> str:
    s = rec.get("storage", "journal")
    return s if s in ("journal", "sqlite") else "env:" + folder.STORAGE_ENV if "***" in s else s
