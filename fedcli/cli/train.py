"""``fedcli train``: one experiment, written to a run directory as it goes."""

from __future__ import annotations

import json
import os
import signal
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
            f"batch {sim.batch_size}, lr {cfg.lr}, device {sim.device}, {sim.comm.size} process(es)")


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


def prepare_out(out: Path, *, overwrite: bool, resume: bool):
    """Rank 0, before anything is written: ``out`` must be a folder this process can write, nobody else may be
    writing it (its lock is taken here and held to the end of the run), and without ``--overwrite`` or
    ``--resume`` it must not hold another run. Returns the held :class:`~fedcli.results.lock.RunLock`."""
    from fedcli.errors import os_error
    from fedcli.results.lock import RUN_LOCK, RunLock

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; expected a folder for the run directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(e, out, "create the run directory") from None
    why = " (--overwrite would delete its results)" if overwrite else " (--resume would write beside it)" if resume else ""
    lock = RunLock(out).take(why)
    if not resume and not overwrite and any(p.name != RUN_LOCK for p in out.iterdir()):
        lock.release()
        raise ConfigError(f"--out {out} already holds files; choose another folder or pass --overwrite")
    return lock


def run_train(cfg: TrainConfig, *, comm=None, quiet: bool = False, as_json: bool = False, overwrite: bool = False,
              resume: bool = False, data=None):
    """Set up, train and summarize one run. Only rank 0 writes the run directory and draws progress.

    ``resume``: continue the run in ``cfg.out`` from its latest checkpoint (fedcli/results/checkpoint.py).
    Rank 0 holds the run directory's lock (fedcli/results/lock.py) from before the first write to the end.
    ``data``: (dataset, partition) already loaded for this config (the worker pool shares them)."""
    from fedcli.comm.communicator import Communicator

    comm = comm or Communicator()
    out = Path(cfg.out) if cfg.out else default_out(cfg)
    lock, err = None, None
    if comm.is_root:
        try:
            lock = prepare_out(out, overwrite=overwrite, resume=resume)
        except FedcliError as e:
            err = e
    try:
        collective(comm, err)
        cfg.out = str(comm.bcast(str(out)))
        return _train(cfg, comm, Path(cfg.out), quiet=quiet, as_json=as_json, overwrite=overwrite, resume=resume, data=data)
    finally:
        if lock is not None:
            lock.release()


def _notice(msg: str) -> None:
    err_console.print(f"fedcli: {msg}", markup=False, highlight=False, soft_wrap=True)


def _train(cfg: TrainConfig, comm, out: Path, *, quiet: bool, as_json: bool, overwrite: bool, resume: bool, data=None):
    from fedcli.errors import StorageError
    from fedcli.fl.engine import Simulation
    from fedcli.results import checkpoint, sentinel
    from fedcli.results.rundir import RunDir

    root = comm.is_root
    sim, err = None, None
    try:
        sim = Simulation(cfg, comm).setup(*(data or ()))
    except Exception as e:  # noqa: BLE001 - reported collectively below
        err = e
    collective(comm, err)
    state = ckpt = None
    if resume:  # the latest checkpoint (CSVs cut back to it), restored on every rank
        try:
            ckpt = checkpoint.load_for_resume(out, comm, warn=(lambda m: err_console.print(f"fedcli: warning: {m}", markup=False, soft_wrap=True))
                                              if root and not quiet else None, config=cfg.to_dict())
            state = checkpoint.restore(sim, ckpt) if ckpt is not None else None
        except Exception as e:  # noqa: BLE001 - reported collectively below
            err = e
        collective(comm, err)
    pids = comm.allgather(os.getpid())
    devices = comm.allgather({"device": str(sim.device), "local_rank": comm.local_rank})  # every process's device
    run_dir = watchdog = None
    if root:
        if overwrite and out.exists():
            for name in ("metrics.csv", "layers.csv", "intervals.csv", "skipped.csv", "model.pt", "manifest.json"):
                (out / name).unlink(missing_ok=True)
            for _, old in checkpoint.list_checkpoints(out):
                old.unlink()
            import shutil

            from fedcli.fl.store import FOLDER

            shutil.rmtree(out / FOLDER, ignore_errors=True)  # another run's client state (this run writes after here)
        if resume:
            run_dir = checkpoint.reopen_run_dir(out, ckpt, sim, {"pids": pids, "devices": devices})
            drift = checkpoint.version_drift(run_dir.manifest)
            if drift and not quiet:
                err_console.print(f"fedcli: warning: resuming with other versions ({'; '.join(drift)}): "
                                  "the result need not be bitwise identical to an uninterrupted run", markup=False, soft_wrap=True)
        else:
            run_dir = RunDir(out)
            run_dir.start({**sim.manifest(), "pids": pids, "devices": devices})
        sim.attach(run_dir)
        watchdog = sentinel.start(out, pids)
        if not quiet:
            err_console.print(f"[bold]fedcli train[/]: {describe(cfg, sim)}", soft_wrap=True)
        for note in sim.notes:  # said once, also with --quiet (the manifest records it too)
            _notice(f"note: {note}")
    ACTIVE_RUN["dir"] = out
    progress = TrainProgress(cfg.rounds or cfg.iterations, sum(li.numel for li in sim.layers), cfg.tau, rounds=bool(cfg.rounds),
                             per_round=bool(cfg.local_epochs), enabled=root and not quiet and not as_json)
    saver = checkpoint.Checkpointer(out, cfg.checkpoint_every, cfg.keep_checkpoints, world_size=comm.size,
                                    notify=_notice if root else None, launcher=comm.launcher)
    if state is not None:
        saver.rounds_done = saver.last_round = state.round_idx
        saver.last = Path(ckpt["path"])
    sim.add_round_hook(saver)
    if comm.size > 1:
        sim.step_hooks.append(saver.step)
    try:
        with progress, saver.signals():
            sim.progress = progress
            if state is not None:
                progress.advance_to(state.iteration, state.round_idx)
            saver.armed = True
            try:
                summary = sim.run(state)
            except checkpoint.Interrupted as e:
                if not (e.now and saver.armed):
                    raise
                saver.stopping = True
                saver.write_snapshot(sim)  # the last round boundary, unless a checkpoint already holds it
                raise saver.stopped_now(e.signum) from None
    except BaseException as e:
        sim.store.close()  # the client-state files a disk store holds open
        if isinstance(e, StorageError) and run_dir is not None:
            e = StorageError(f"{e}; {e.remedy}continue with: {checkpoint.resume_command(out, comm.size, comm.launcher)}")
        if run_dir is not None:
            stopped = isinstance(e, (checkpoint.Interrupted, KeyboardInterrupt))
            try:
                run_dir.finish("interrupted" if stopped else "failed", error=f"{type(e).__name__}: {e}",
                               **({"checkpoint": str(saver.last)} if stopped and saver.last else {}))
            except (FedcliError, OSError):
                pass  # e.g. the disk is still full: the manifest keeps its last state, the original error is reported
        sentinel.stop(watchdog)
        if isinstance(e, StorageError):
            raise e from None
        raise
    mpi_s = getattr(comm, "reduce_seconds", None)
    if run_dir is not None:
        extra = {"mpi_allreduce_s": mpi_s} if mpi_s is not None else {}
        try:
            checkpoint.save_model(sim, out / "model.pt")
            run_dir.finish("completed", summary=summary.as_dict(), **extra)
        except StorageError as e:
            sentinel.stop(watchdog)
            try:
                run_dir.finish("failed", error=f"StorageError: {e}")
            except (FedcliError, OSError):
                pass
            raise StorageError(f"{e}; the training finished but its results could not be saved; {e.remedy}continue with: "
                               f"{checkpoint.resume_command(out, comm.size, comm.launcher)} (from the last checkpoint)") from None
        sentinel.stop(watchdog)
        if saver.late:
            _notice(f"{signal.Signals(saver.late).name} arrived during the last round: the run finished it and completed "
                    f"(nothing to resume)")
        if as_json:
            print(json.dumps({"run_dir": str(out), **summary.as_dict(), **extra}))
        elif not quiet:
            out_console.print(summary_table(cfg, summary, out))
    sim.store.close()
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
    from fedcli.results import checkpoint, lock

    # started by `fedcli sweep --mpi`: hold the sweep folder while alive, stop when the sweep is gone (one process:
    # at once, writing the last round boundary; under MPI: at the end of the round, agreed by all processes)
    lock.join_sweep_from_env(lambda: checkpoint.request_stop(now=comm.size == 1))
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
    from fedcli.comm.workers import launch

    with launch(cfg, comm, resume=resume, overwrite=overwrite) as (comm, data):  # --workers: rank 0 of a process pool
        run_train(cfg, comm=comm, quiet=quiet, as_json=as_json, overwrite=overwrite, resume=bool(resume), data=data)


import inspect  # noqa: E402

_extra = [
    inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--recipe", help="TOML recipe with config keys (flags override it). \\[default: none]"), annotation=str | None),
    inspect.Parameter("scale", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--scale", help="Recipe scale to apply (e.g. smoke, paper). \\[default: none: the recipe's \\[base] alone]"), annotation=str | None),
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--quiet", "-q", help="No progress bar or summary."), annotation=bool),
    inspect.Parameter("json", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--json", help="Print the closing summary as one JSON line."), annotation=bool),
    inspect.Parameter("overwrite", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--overwrite", help="Replace the files of an existing --out folder."), annotation=bool),
    inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--resume", metavar="RUN_DIR", help="Continue an interrupted run from its latest checkpoint (its config comes from RUN_DIR/manifest.json).", rich_help_panel="crash safety"), annotation=str | None),
    inspect.Parameter("list_algos", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--list-algos", help="List the method presets and exit."), annotation=bool),
]
with_parameters(train, config_parameters(TrainConfig) + _extra)
