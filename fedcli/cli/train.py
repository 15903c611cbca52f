"""``fedcli train``: one experiment, written to a run directory as it goes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import typer

from fedcli.cli.console import TrainProgress, err_console, out_console, summary_table
from fedcli.cli.options import config_parameters, given, with_parameters
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError, FedcliError


def default_out(cfg: TrainConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{cfg.algo}-{cfg.dataset}-s{cfg.seed}-{stamp}"


def describe(cfg: TrainConfig, sim) -> str:
    part = sim.partition.config
    extra = {"dirichlet": f" alpha={cfg.alpha}", "pathological": f" k={cfg.classes_per_client}",
             "natural": f" {cfg.writers_per_client} writers/client"}.get(part.get("scheme"), "")
    sched = f"tau'={cfg.tau} phi={cfg.phi}" if sim.schedule.needs_discrepancy else f"tau={cfg.tau}"
    if cfg.local_epochs:
        sched = f"{cfg.local_epochs:g} local epoch(s) per round"
    budget = f"{cfg.rounds} rounds" if cfg.rounds else f"{cfg.iterations} local iterations"
    return (f"{cfg.algo} ({sched}) on {cfg.dataset} with {cfg.model}: {len(sim.client_indices)} clients "
            f"({sim.active} active per round), {part.get('scheme')}{extra} partition, {budget}, "
            f"batch {cfg.batch_size}, lr {cfg.lr}, device {sim.device}, {sim.comm.size} process(es)")


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

    from fedcli.fl.methods import METHODS, Method

    plain = Method("", "").parts()
    t = Table(title="fedcli methods (--algo NAME)", title_justify="left", show_lines=True, expand=False)
    t.add_column("method", no_wrap=True, style="bold")
    t.add_column("parts (where not FedAvg's)", ratio=2, overflow="fold")
    t.add_column("defaults", ratio=2, overflow="fold")
    t.add_column("what it is", ratio=4, overflow="fold")
    for m in sorted({id(m): m for m in METHODS.values()}.values(), key=lambda m: m.name):
        name = m.name + "".join(f"\n= {a}" for a in m.aliases) + ("\n[cyan]personalized[/]" if m.personalized else "")
        parts = "\n".join(f"{k.replace('_', ' ')}: {v}" for k, v in m.parts().items() if v != plain[k]) or "-"
        defaults = "\n".join(default_flag(k, v) for k, v in m.effective_defaults().items()) or "-"
        t.add_row(name, parts, defaults, m.summary)
    t.caption = ("parts: local step / schedule / codec / init / server (FedAvg: sgd / periodic / identity / overwrite / "
                 "average). A flag or recipe key overrides a method's defaults; `fedcli train --help` shows the general "
                 "ones. Personalized methods are judged by personal_acc: each client's model on its local test split.")
    return t


def collective(comm, err: BaseException | None) -> None:
    """Every rank learns whether any rank failed a setup phase; all then raise the same error.

    So a bad config or a missing data file ends every rank with the same exit code and no hang.
    Errors raised here are marked ``collective`` (no MPI abort needed; only rank 0 prints).
    """
    if comm.size == 1:
        if err is not None:
            raise err
        return
    report = None if err is None else (getattr(err, "exit_code", 1), f"{err}" if isinstance(err, FedcliError) else f"{type(err).__name__}: {err}")
    reports = comm.allgather(report)
    first = next((r for r in reports if r is not None), None)
    if first is not None:
        e = FedcliError(first[1])
        e.exit_code = first[0]
        e.collective = True
        raise e


def run_train(cfg: TrainConfig, *, comm=None, quiet: bool = False, as_json: bool = False, overwrite: bool = False,
              resume: bool = False):
    """Set up, train and summarize one run. Only rank 0 writes the run directory and draws progress.

    ``resume``: continue the run in ``cfg.out`` from its latest checkpoint (fedcli/results/checkpoint.py)."""
    from fedcli.results import checkpoint
    from fedcli.comm.communicator import Communicator
    from fedcli.fl.engine import Simulation
    from fedcli.results import sentinel
    from fedcli.results.rundir import RunDir

    comm = comm or Communicator()
    root = comm.is_root
    out = Path(cfg.out) if cfg.out else default_out(cfg)
    err = None
    if root and not resume and out.exists() and any(out.iterdir()) and not overwrite:
        err = ConfigError(f"--out {out} already holds files; choose another folder or pass --overwrite")
    collective(comm, err)
    cfg.out = str(comm.bcast(str(out)))
    out = Path(cfg.out)
    sim, err = None, None
    try:
        sim = Simulation(cfg, comm).setup()
    except Exception as e:  # noqa: BLE001 - reported collectively below
        err = e
    collective(comm, err)
    state = ckpt = None
    if resume:  # the latest checkpoint (CSVs cut back to it), restored on every rank
        try:
            ckpt = checkpoint.load_for_resume(out, comm, warn=(lambda m: err_console.print(f"fedcli: warning: {m}", markup=False, soft_wrap=True))
                                              if root and not quiet else None)
            state = checkpoint.restore(sim, ckpt) if ckpt is not None else None
        except Exception as e:  # noqa: BLE001 - reported collectively below
            err = e
        collective(comm, err)
    pids = comm.allgather(os.getpid())
    run_dir = watchdog = None
    if root:
        if overwrite and out.exists():
            for name in ("metrics.csv", "layers.csv", "intervals.csv", "skipped.csv", "model.pt", "manifest.json"):
                (out / name).unlink(missing_ok=True)
            for _, old in checkpoint.list_checkpoints(out):
                old.unlink()
        if resume:
            run_dir = checkpoint.reopen_run_dir(out, ckpt, sim, {"pids": pids})
            drift = checkpoint.version_drift(run_dir.manifest)
            if drift and not quiet:
                err_console.print(f"fedcli: warning: resuming with other versions ({'; '.join(drift)}): "
                                  "the result need not be bitwise identical to an uninterrupted run", markup=False, soft_wrap=True)
        else:
            run_dir = RunDir(out)
            run_dir.start({**sim.manifest(), "pids": pids})
        sim.run_dir = run_dir
        watchdog = sentinel.start(out, pids)
        if not quiet:
            err_console.print(f"[bold]fedcli train[/]: {describe(cfg, sim)}", soft_wrap=True)
    ACTIVE_RUN["dir"] = out
    progress = TrainProgress(cfg.rounds or cfg.iterations, sum(li.numel for li in sim.layers), cfg.tau, rounds=bool(cfg.rounds),
                             per_round=bool(cfg.local_epochs), enabled=root and not quiet and not as_json)
    saver = checkpoint.Checkpointer(out, cfg.checkpoint_every, cfg.keep_checkpoints)
    sim.round_hooks.append(saver)
    try:
        with progress, saver.signals():
            sim.progress = progress
            if state is not None:
                progress.advance_to(state.iteration, state.round_idx)
            saver.armed = True
            summary = sim.run(state)
    except BaseException as e:
        if run_dir is not None:
            stopped = isinstance(e, (checkpoint.Interrupted, KeyboardInterrupt))
            run_dir.finish("interrupted" if stopped else "failed", error=f"{type(e).__name__}: {e}",
                           **({"checkpoint": str(saver.last)} if stopped and saver.last else {}))
        sentinel.stop(watchdog)
        raise
    mpi_s = getattr(comm, "reduce_seconds", None)
    if run_dir is not None:
        extra = {"mpi_allreduce_s": mpi_s} if mpi_s is not None else {}
        checkpoint.save_model(sim, out / "model.pt")
        run_dir.finish("completed", summary=summary.as_dict(), **extra)
        sentinel.stop(watchdog)
        if as_json:
            print(json.dumps({"run_dir": str(out), **summary.as_dict(), **extra}))
        elif not quiet:
            out_console.print(summary_table(cfg, summary, out))
    ACTIVE_RUN.pop("dir", None)
    return summary


ACTIVE_RUN: dict = {}  # the run directory of the run in progress (for marking it failed on an MPI abort)


def train(**kwargs):
    """Run one federated-learning experiment (defaults: a small FedLAMA run on scikit-learn digits, offline)."""
    from fedcli.comm.mpi import get_communicator
    from fedcli.recipes import build_config

    if kwargs.pop("list_algos"):
        out_console.print(methods_table())
        return
    recipe, scale, resume = kwargs.pop("recipe"), kwargs.pop("scale"), kwargs.pop("resume")
    quiet, as_json, overwrite = kwargs.pop("quiet"), kwargs.pop("json"), kwargs.pop("overwrite")
    comm = get_communicator()
    cfg, err = None, None
    if comm.is_root:  # rank 0 validates the config and broadcasts it
        try:
            if resume:
                from fedcli.results.checkpoint import resume_config

                cfg = resume_config(resume, given(kwargs, TrainConfig), recipe=recipe, scale=scale, overwrite=overwrite)
            else:
                cfg = build_config(recipe, given(kwargs, TrainConfig), scale)
        except FedcliError as e:
            err = e
    collective(comm, err)
    cfg = TrainConfig(**comm.bcast(cfg.to_dict() if cfg is not None else None))
    run_train(cfg, comm=comm, quiet=quiet, as_json=as_json, overwrite=overwrite, resume=bool(resume))


import inspect  # noqa: E402

_extra = [
    inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--recipe", help="TOML recipe with config keys (flags override it)."), annotation=str | None),
    inspect.Parameter("scale", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--scale", help="Recipe scale to apply (e.g. smoke, paper)."), annotation=str | None),
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--quiet", "-q", help="No progress bar or summary."), annotation=bool),
    inspect.Parameter("json", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--json", help="Print the closing summary as one JSON line."), annotation=bool),
    inspect.Parameter("overwrite", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--overwrite", help="Replace the files of an existing --out folder."), annotation=bool),
    inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--resume", metavar="RUN_DIR", help="Continue an interrupted run from its latest checkpoint (its config comes from RUN_DIR/manifest.json).", rich_help_panel="crash safety"), annotation=str | None),
    inspect.Parameter("list_algos", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--list-algos", help="List the method presets and exit."), annotation=bool),
]
with_parameters(train, config_parameters(TrainConfig) + _extra)
