"""``fedcli train``: one experiment, written to a run directory as it goes."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import typer

from fedcli.cli import catalog
from fedcli.cli.console import PROGRESS_MODES, TrainProgress, err_console, out_console, progress_mode, summary_table
from fedcli.cli.options import config_parameters, flag, given, with_parameters
from fedcli.errors import ConfigError, FedcliError
from fedcli.fl.context import LogContext
from fedcli.runner import RunPrinter, collective, run_train

CATALOG = catalog.load()


def default_flag(key: str, value) -> str:
    """A method default as the flag that sets it: ``--lr 0.1``, ``--drop-last`` / ``--no-drop-last``."""
    name = key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name} {value}"


def methods_table():
    """``--list-algos``: one row per method (aliases folded), the parts where it differs from FedAvg, whether it
    is personalized, and the defaults it runs with unless a flag or recipe key says otherwise."""
    from rich.table import Table

    from fedcli.specs import METHODS, Method

    plain = Method("", "").parts()
    # the table fills the terminal, the defaults column wide enough for its longest flag: at 80 columns no flag is cut
    # mid-word ("--client-test-frac" / "tion 0.25" before)
    t = Table(title="fedcli methods (--algo NAME)", title_justify="left", show_lines=True, expand=True)
    t.add_column("method", no_wrap=True, style="bold")
    t.add_column("parts (where not FedAvg's)", ratio=2, overflow="fold")
    widest = max(
        (
            len(w)
            for m in METHODS.values()
            for k, v in m.effective_defaults().items()
            for w in default_flag(k, v).split()
        ),
        default=10,
    )
    t.add_column("defaults", ratio=4, overflow="fold", min_width=widest)
    t.add_column("what it is", ratio=3, overflow="fold")
    for m in sorted({id(m): m for m in METHODS.values()}.values(), key=lambda m: m.name):
        name = m.name + "".join(f"\n= {a}" for a in m.aliases) + ("\n[cyan]personalized[/]" if m.personalized else "")
        parts = "\n".join(f"{k.replace('_', ' ')}: {v}" for k, v in m.parts().items() if v != plain[k]) or "-"
        defaults = "\n".join(default_flag(k, v) for k, v in m.effective_defaults().items()) or "-"
        t.add_row(name, parts, defaults, m.summary)
    t.caption = (
        "parts: local step / schedule / codec / init / server (FedAvg: sgd / periodic / identity / overwrite / "
        "average). A flag or recipe key overrides a method's defaults; `fedcli train --help` shows the general "
        "ones. Personalized methods are judged by personal_acc: each client's model on its local test split."
    )
    return t


_LOADING: dict = {}  # the "loading ..." status shown from the first second until the run's header


def _rank0() -> bool:
    """Whether this process is rank 0 of an MPI launch (or not under MPI), from the launcher's environment."""
    return all(os.environ.get(v, "0") == "0" for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))


#: the first line of a job log (and the terminal's transient status) while torch, the data and the model load
LOADING_LINE = "fedcli train: loading torch, the data and the model ..."


def loading(mode: str) -> None:
    """Say at once that the run is loading (torch, the data, the model: seconds before the header). On a terminal a
    transient status line, gone when the header (or a one-line error) comes; in a job log (``--progress lines``: nohup,
    Slurm, ``2>log``) this one plain line, so the log shows the job alive from its first second; an error then follows
    it as its one line. The config's errors (and ``--resume``'s refusals that read the run folder) are answered before
    it, and before torch loads (``_start``)."""
    if not _rank0():
        return
    if mode == "bar":
        _LOADING["status"] = err_console.status(LOADING_LINE)
        _LOADING["status"].start()
    elif mode == "lines":
        err_console.print(LOADING_LINE, markup=False, highlight=False, emoji=False, soft_wrap=True)


def loaded() -> None:
    status = _LOADING.pop("status", None)
    if status is not None:
        status.stop()


def progress_total(cfg, plan) -> tuple[int, str | None]:
    """The progress's total (rounds under --rounds, else local iterations) and, where the run's iterations are not the
    --iterations asked for, the one line that says so: rounds of --local-epochs are never cut (fedcli/fl/budget.py), so
    the budget is rounded up to whole rounds, to a count known in advance under full participation, else reached at
    the end of the round that passes it."""
    if cfg.rounds:
        return cfg.rounds, None
    if plan.iterations is not None and plan.iterations > cfg.iterations:
        return plan.iterations, (
            f"--iterations {cfg.iterations} rounded up to {plan.iterations}: {plan.rounds} whole "
            f"rounds of --local-epochs {cfg.local_epochs:g} ({plan.iterations // plan.rounds} local "
            f"iterations each; a round is not cut)"
        )
    if plan.iterations is None:
        return cfg.iterations, (
            f"--iterations {cfg.iterations} ends at the end of the round that reaches it: rounds of "
            f"--local-epochs {cfg.local_epochs:g} are not cut and last as long as their cohort's "
            f"longest client, so the run may end a few iterations past {cfg.iterations}"
        )
    return cfg.iterations, None


class TerminalPrinter(RunPrinter):
    """``fedcli train`` on a terminal or into a log: the header, the progress (``--progress``), the summary table and
    the
    notes through rich (fedcli/cli/console.py)."""

    def notice(self, msg: str) -> None:
        err_console.print(f"fedcli: {msg}", markup=False, highlight=False, emoji=False, soft_wrap=True)

    def header(self, text: str, progress: str) -> None:  # a terminal wraps it between words; a log keeps it on one line
        err_console.print(f"[bold]fedcli train[/]: {text}", soft_wrap=progress_mode(progress) != "bar")

    def progress(self, cfg, ctx: LogContext, *, enabled: bool, mode: str):
        total, note = progress_total(cfg, ctx.plan)
        if enabled and note:  # enabled: rank 0, not --quiet, not --json
            self.notice(note)
        return TrainProgress(
            total,
            sum(li.numel for li in ctx.layers),
            cfg.tau,
            rounds=bool(cfg.rounds),
            per_round=bool(cfg.local_epochs),
            enabled=enabled,
            mode=progress_mode(mode),
        )

    def loaded(self) -> None:
        loaded()

    def summary(self, cfg, summary, out) -> None:
        out_console.print(summary_table(cfg, summary, out))


def train(**kwargs):
    """Run one federated-learning experiment (defaults: a small FedLAMA run on scikit-learn digits, offline)."""
    if kwargs.pop("list_algos"):
        out_console.print(methods_table())
        return
    recipe, scale, resume, promote = (
        kwargs.pop("recipe"),
        kwargs.pop("scale"),
        kwargs.pop("resume"),
        kwargs.pop("promote"),
    )
    if promote and not resume:
        raise ConfigError("--promote finishes a pruned run: give it with --resume RUN_DIR", key="promote")
    quiet, as_json, overwrite = kwargs.pop("quiet"), kwargs.pop("json"), kwargs.pop("overwrite")
    progress = kwargs.pop("progress")
    if progress not in PROGRESS_MODES:
        raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)}, got '{progress}'", key="progress")
    flags = given(kwargs, CATALOG)
    if "algo" in flags:  # a typo is answered before torch loads: did-you-mean, FedLAMA -> fedlama
        from fedcli.method_names import resolve_method

        flags["algo"] = resolve_method(flags["algo"], {n: m["label"] for n, m in CATALOG["methods"].items()})
    if (
        "dataset" in flags and CATALOG.get("datasets") and flags["dataset"] not in CATALOG["datasets"]
    ):  # the same, for --dataset
        from fedcli.method_names import suggest

        raise ConfigError(
            f"--dataset: unknown dataset '{flags['dataset']}'; {suggest(str(flags['dataset']), CATALOG['datasets'])}"
            f"choose one of: {', '.join(CATALOG['datasets'])}",
            key="dataset",
        )
    try:
        _start(
            flags,
            _Asked(
                recipe=recipe,
                scale=scale,
                resume=resume,
                quiet=quiet,
                as_json=as_json,
                overwrite=overwrite,
                progress=progress,
                promote=promote,
            ),
        )
    finally:
        loaded()


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What ``fedcli train`` was asked besides the config flags: where the config comes from (``recipe`` at
    ``scale``, or the run folder to ``resume``), how the run reports (``quiet``, ``as_json``, ``progress``), and
    ``overwrite`` / ``promote``."""

    recipe: str | None
    scale: str | None
    resume: str | None
    quiet: bool
    as_json: bool
    overwrite: bool
    progress: str
    promote: bool = False


def _start(flags: dict, asked: _Asked) -> None:
    """``fedcli train`` after its arguments are read: the config (rank 0, broadcast), the worker pool, the run.

    Torch is first imported by ``launch``: the communicator (MPI's start included), the sweep's lock and the config's
    checks import none, so a bad value is answered in a fraction of a second by each process (under ``mpiexec``: said
    once by rank 0, every rank exiting with its code)."""
    recipe, scale, resume, overwrite, promote = asked.recipe, asked.scale, asked.resume, asked.overwrite, asked.promote
    quiet, as_json, progress = asked.quiet, asked.as_json, asked.progress
    from fedcli.comm.mpi import get_communicator
    from fedcli.config import TrainConfig
    from fedcli.recipes import build_config

    comm = get_communicator()
    from fedcli.results import lock, signals

    # started by `fedcli sweep --mpi`: hold the sweep folder while alive, stop when the sweep is gone (one process:
    # at once, writing the last round boundary; under MPI: at the end of the round, agreed by all processes)
    lock.join_sweep_from_env(lambda: signals.request_stop(now=comm.size == 1))
    cfg, err, caught_up = None, None, None
    if comm.is_root:  # rank 0 validates the config and broadcasts it
        try:
            if resume:
                from fedcli.results.resume import resume_config

                caught_up = _trackers_only(resume, flags, recipe=recipe, scale=scale, overwrite=overwrite)
                if caught_up is None:
                    cfg = resume_config(resume, flags, recipe=recipe, scale=scale, overwrite=overwrite, promote=promote)
            else:
                cfg = build_config(recipe, flags, scale)
            if cfg is not None:
                _processes_fit(cfg, comm.size)
        except FedcliError as e:
            err = e
    collective(comm, err)
    if comm.bcast(caught_up is not None):  # a completed run's trackers were sent the rest: nothing to train
        if comm.is_root and not quiet:
            print(json.dumps({"run_dir": str(resume), "trackers": caught_up}) if as_json else caught_up)
        return
    if not quiet and not as_json:  # the config holds: now torch, the data and the model load
        loading(progress_mode(progress))
    cfg = TrainConfig(**comm.bcast(cfg.to_dict() if cfg is not None else None))
    from fedcli.runner import launch

    with launch(cfg, comm, resume=resume, overwrite=overwrite) as (comm, data):  # --workers: rank 0 of a process pool
        run_train(
            cfg,
            comm=comm,
            quiet=quiet,
            as_json=as_json,
            overwrite=overwrite,
            resume=bool(resume),
            data=data,
            progress=progress,
            printer=TerminalPrinter(),
            promote=promote,
        )


def _processes_fit(cfg, size: int) -> None:
    """More processes than clients per round (MPI's ranks, or ``--workers N``), refused before torch loads
    (``fedcli.fl.budget.check_processes``): the clients are ``--clients``, unless a partition file decides them (then
    the check waits for the data, in ``fedcli.fl.build.load``, as it does for the workers a resume reads off its
    manifest)."""
    from fedcli.fl.budget import check_processes

    n = size if size > 1 else cfg.workers
    if n > 1 and not cfg.partition_file:
        check_processes(cfg.active_ratio, cfg.clients, n, "mpi" if size > 1 else "fedcli")


def _trackers_only(resume: str, flags: dict, **given) -> str | None:
    """``--resume`` of a completed run whose trackers' process was cut off (``fedcli report`` says so): send the
    trackers the rest and nothing else (``fedcli.trackers.catchup``); what was done, or None for any other run."""
    from pathlib import Path

    from fedcli.results.lock import RunLock
    from fedcli.results.resume import read_manifest
    from fedcli.results.rundir import refuse_links
    from fedcli.trackers import catchup

    run_dir = Path(resume)
    if not run_dir.is_dir():
        return None
    refuse_links(run_dir)
    man = read_manifest(run_dir)
    if not catchup.cut_off(run_dir, man):
        return None
    extra = sorted(k for k in flags if k != "out") + sorted(k for k, v in given.items() if v)
    if extra:
        raise ConfigError(
            f"--resume {run_dir}: the run completed; only its trackers get the rest, so "
            f"{', '.join(flag(k) for k in extra)} cannot be given"
        )
    with RunLock(run_dir).take(" (sending its trackers the rest)"):
        return catchup.send_rest(
            run_dir, man, warn=lambda m: print(f"fedcli: warning: {m}", file=sys.stderr, flush=True)
        )


import inspect  # noqa: E402

_extra = [
    inspect.Parameter(
        "recipe",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None, "--recipe", help="TOML recipe with config keys (flags override it). \\[default: none]"
        ),
        annotation=str | None,
    ),
    inspect.Parameter(
        "scale",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--scale",
            help="Recipe scale to apply (e.g. smoke, paper). \\[default: none: the recipe's \\[base] alone]",
        ),
        annotation=str | None,
    ),
    inspect.Parameter(
        "quiet",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
        annotation=bool,
    ),
    inspect.Parameter(
        "progress",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            "auto",
            "--progress",
            metavar="<choice>",
            show_default=False,
            help="Progress on stderr: a live bar (bar), one plain line per evaluation for job logs (lines), "
            "none, or auto (bar on a terminal, else lines). \\[choices: auto, bar, lines, none] "
            "\\[default: auto]",
        ),
        annotation=str,
    ),
    inspect.Parameter(
        "json",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(False, "--json", help="Print the closing summary as one JSON line."),
        annotation=bool,
    ),
    inspect.Parameter(
        "overwrite",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            False,
            "--overwrite",
            help="Replace the run in an existing --out run directory (only the files a run writes; a folder "
            "that holds no run is refused).",
        ),
        annotation=bool,
    ),
    inspect.Parameter(
        "resume",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--resume",
            metavar="RUN_DIR",
            help="Continue an interrupted run from its latest checkpoint (its config comes from "
            "RUN_DIR/manifest.json).",
            rich_help_panel="crash safety",
        ),
        annotation=str | None,
    ),
    inspect.Parameter(
        "promote",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            False,
            "--promote",
            help="With --resume: finish a pruned run (stopped on request, exit 5): its stop file and pruned "
            "mark go and it runs to completion.",
            rich_help_panel="crash safety",
        ),
        annotation=bool,
    ),
    inspect.Parameter(
        "list_algos",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(False, "--list-algos", help="List the method presets and exit."),
        annotation=bool,
    ),
]
with_parameters(train, config_parameters(CATALOG) + _extra)
