"""``fedcli train``: one experiment, written to a run directory as it goes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fedcli.cli import early
from fedcli.cli import spec as cli_spec
from fedcli.cli.console import PROGRESS_MODES, TrainProgress, err_console, out_console, progress_mode, summary_table
from fedcli.cli.options import config_parameters, given, with_parameters
from fedcli.errors import ConfigError, FedcliError, ResourceError, memory_error

if TYPE_CHECKING:  # the config assembles every method file (torch): imported where a run starts, not for --help
    from fedcli.config import TrainConfig

SPEC = cli_spec.load()


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
    from fedcli.results.rundir import refuse_links

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; expected a folder for the run directory")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(e, out, "create the run directory") from None
    discard = early.on_interrupt(_discarder(out, created))  # a signal before the manifest exists leaves no folder behind
    why = " (--overwrite would delete its results)" if overwrite else " (--resume would write beside it)" if resume else ""
    try:
        lock = RunLock(out).take(why)  # the lock file is opened with O_NOFOLLOW (a planted link is refused)
    except FedcliError:
        early.forget(discard)  # another process's lock (or a link) is never removed
        raise
    discard.locked = True  # from now on the lock file is ours to remove
    try:
        refuse_links(out)  # no contract path is a symbolic link: refused before anything is written or deleted
    except FedcliError:
        lock.release()
        raise
    if not resume and not overwrite and any(p.name != RUN_LOCK for p in out.iterdir()):
        lock.release()
        raise ConfigError(f"--out {out} already holds files; choose another folder or pass --overwrite")
    return lock


def discard_unstarted(out: Path, created: bool, locked: bool = True) -> bool:
    """A run folder that never got its manifest (a signal or an error during the setup) keeps nothing of it: its lock
    file goes (``locked``: only while this process holds it), and the folder too when this run created it and it is
    empty then. True if the folder is gone."""
    if (out / "manifest.json").exists() or (out / "manifest.json").is_symlink():
        return False
    from fedcli.results.lock import RUN_LOCK
    from fedcli.results.safefs import is_link

    lock = out / RUN_LOCK
    if locked and lock.exists() and not is_link(lock):
        lock.unlink(missing_ok=True)
    if created:
        try:
            out.rmdir()
            return True
        except OSError:
            return False
    return False


def _discarder(out: Path, created: bool):
    def discard(signum):
        if discard_unstarted(out, created, discard.locked):
            return f"; nothing was written ({out} removed)"
        return None
    discard.out, discard.created, discard.locked = out, created, False
    return discard


def run_train(cfg: TrainConfig, *, comm=None, quiet: bool = False, as_json: bool = False, overwrite: bool = False,
              resume: bool = False, data=None, progress: str = "auto"):
    """Set up, train and summarize one run. Only rank 0 writes the run directory and draws progress.

    ``resume``: continue the run in ``cfg.out`` from its latest checkpoint (fedcli/results/checkpoint.py).
    Rank 0 holds the run directory's lock (fedcli/results/lock.py) from before the first write to the end.
    ``data``: (dataset, partition) already loaded for this config (the worker pool shares them).
    ``progress``: ``--progress`` (fedcli.cli.console.progress_mode)."""
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
        return _train(cfg, comm, Path(cfg.out), quiet=quiet, as_json=as_json, overwrite=overwrite, resume=resume, data=data,
                      progress=progress)
    finally:
        for fn in [f for f in early.registered() if getattr(f, "out", None) == out]:
            early.forget(fn)
            discard_unstarted(out, fn.created, fn.locked and lock is not None)  # an error in the setup: no bare lock
        if lock is not None:
            lock.release()


def _short(e: BaseException) -> str:
    return getattr(e, "why", None) or getattr(e, "strerror", None) or str(e).split(";")[0]


def _midrun_error(e: BaseException, out: Path, comm) -> BaseException:
    """What an error during a run that has its manifest is reported as: a place that stopped being writable is an I/O
    failure (StorageError, exit 3), out of memory a ResourceError (exit 3); both with the command that continues."""
    from fedcli.errors import PlaceError, StorageError
    from fedcli.results import checkpoint

    if isinstance(e, PlaceError):
        err = StorageError(f"cannot {e.doing} {e.path} ({e.why}): the run folder stopped being writable during the run; "
                           f"the files written before are intact")
        err.remedy = "once it is writable again, "
        e = err
    elif (oom := memory_error(e)) is not None:
        e = oom
    if isinstance(e, (StorageError, ResourceError)):
        e = type(e)(f"{e}; {e.remedy}continue with: {checkpoint.resume_command(out, comm.size, comm.launcher)}")
    return e


def _notice(msg: str) -> None:
    err_console.print(f"fedcli: {msg}", markup=False, highlight=False, soft_wrap=True)


def _train(cfg: TrainConfig, comm, out: Path, *, quiet: bool, as_json: bool, overwrite: bool, resume: bool, data=None,
           progress: str = "auto"):
    from fedcli.errors import PlaceError, StorageError
    from fedcli.fl.engine import Simulation
    from fedcli.results import checkpoint, sentinel
    from fedcli.results.rundir import RunDir

    root = comm.is_root
    early.run_closed(False)
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
                                              if root else None, config=cfg.to_dict())  # said with --quiet too
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
                (out / name).unlink(missing_ok=True)  # prepare_out refused links here, so nothing outside the folder goes
            for _, old in checkpoint.list_checkpoints(out):
                old.unlink()
            import shutil

            from fedcli.fl.store import FOLDER

            shutil.rmtree(out / FOLDER, ignore_errors=True)  # another run's client state (this run writes after here)
            from fedcli.trackers.state import remove_files

            remove_files(out)  # the previous run's tracker files (TensorBoard events, W&B offline runs, trackers.json)
        if resume:
            run_dir = checkpoint.reopen_run_dir(out, ckpt, sim, {"pids": pids, "devices": devices})
            drift = checkpoint.version_drift(run_dir.manifest)
            if drift and not quiet:
                err_console.print(f"fedcli: warning: resuming with other versions ({'; '.join(drift)}): "
                                  "the result need not be bitwise identical to an uninterrupted run", markup=False, soft_wrap=True)
        else:
            run_dir = RunDir(out)
            run_dir.start({**sim.manifest(), "pids": pids, "devices": devices})
        resume_cmd = checkpoint.resume_command(out, comm.size, comm.launcher)

        def mark_interrupted(signum, run_dir=run_dir):  # a signal before the rounds run (fedcli/cli/early.py)
            run_dir.finish("interrupted", error=f"Interrupted: {signal.Signals(signum).name} before training started")
            sentinel.stop(watchdog)
            return f"; the run is marked interrupted; continue with: {resume_cmd}"
        early.on_interrupt(mark_interrupted)
        sim.attach(run_dir)
        watchdog = sentinel.start(out, pids)
        loaded()
        if not quiet:  # a terminal wraps it between words; a log keeps it on one line
            err_console.print(f"[bold]fedcli train[/]: {describe(cfg, sim)}", soft_wrap=progress_mode(progress) != "bar")
        for note in sim.notes:  # said once, also with --quiet (the manifest records it too)
            _notice(f"note: {note}")
    if comm.size > 1:  # no process starts training before the manifest exists: a failure on any rank marks it failed
        comm.barrier()
    ACTIVE_RUN["dir"] = out
    progress = TrainProgress(cfg.rounds or cfg.iterations, sum(li.numel for li in sim.layers), cfg.tau, rounds=bool(cfg.rounds),
                             per_round=bool(cfg.local_epochs), enabled=root and not quiet and not as_json,
                             mode=progress_mode(progress))
    saver = checkpoint.Checkpointer(out, cfg.checkpoint_every, cfg.keep_checkpoints, world_size=comm.size,
                                    notify=_notice if root else None, launcher=comm.launcher)
    if state is not None:
        saver.rounds_done = saver.last_round = state.round_idx
        saver.last = Path(ckpt["path"])
    tracking = None
    if root and cfg.tracker:  # ahead of the checkpointer: a round a checkpoint holds has reached the trackers too
        from fedcli.trackers.hook import TrackerHook

        tracking = TrackerHook(cfg, out, resume=resume, warn=lambda m: _notice(f"warning: {m}"))
        sim.add_round_hook(tracking)
    sim.add_round_hook(saver)
    if comm.size > 1:
        sim.step_hooks.append(saver.step)
    # The Checkpointer holds the stop signals until the manifest says how the run ended: a second SIGTERM (Slurm sends
    # one to every process of the job, so a time limit can deliver two) arriving after the rounds stopped waits
    # instead of ending the process with the manifest still 'running' (which the watchdog would then call failed).
    with saver.signals():
        try:
            with progress:
                sim.progress = progress
                if state is not None:
                    progress.advance_to(state.iteration, state.round_idx)
                saver.armed = True
                if early.usr1_pending():  # SIGUSR1 during the setup: a checkpoint at the first round boundary
                    saver.pending = signal.SIGUSR1
                if run_dir is not None:
                    early.forget(mark_interrupted)  # from here the Checkpointer handles signals
                try:
                    summary = sim.run(state)
                except checkpoint.Interrupted as e:
                    if not (e.now and saver.armed):
                        raise
                    saver.stopping = True
                    saver.write_snapshot(sim)  # the last round boundary, unless a checkpoint already holds it
                    raise saver.stopped_now(e.signum) from None
        except BaseException as e:
            saver.stopping = True
            sim.store.close()  # the client-state files a disk store holds open
            if run_dir is not None:
                early.forget(mark_interrupted)
            e = _midrun_error(e, out, comm) if run_dir is not None else (memory_error(e) or e)
            if run_dir is not None:
                stopped = isinstance(e, (checkpoint.Interrupted, KeyboardInterrupt))
                on_disk = run_dir.manifest.get("status")
                try:
                    run_dir.finish("interrupted" if stopped else "failed", error=f"{type(e).__name__}: {e}",
                                   **({"checkpoint": str(saver.last)} if stopped and saver.last else {}))
                except (FedcliError, OSError) as why:  # e.g. the disk is still full or the folder unwritable: said, in the line
                    if isinstance(e, FedcliError):
                        e.args = (f"{e}; {out / 'manifest.json'} could not be updated either ({_short(why)}): it still says "
                                  f"'{on_disk}'",)
            ended, closing = e, ("interrupted" if isinstance(e, (checkpoint.Interrupted, KeyboardInterrupt)) else "failed")
        else:
            ended, closing = None, "completed"
            saver.stopping = True
            mpi_s = getattr(comm, "reduce_seconds", None)
            extra = {"mpi_allreduce_s": mpi_s} if mpi_s is not None else {}
            if run_dir is not None:
                try:
                    checkpoint.save_model(sim, out / "model.pt")
                    run_dir.finish("completed", summary=summary.as_dict(), **extra)
                except (StorageError, PlaceError) as e:
                    sentinel.stop(watchdog)
                    remedy = "once the folder is writable again, " if isinstance(e, PlaceError) else e.remedy
                    msg = f"cannot {e.doing} {e.path} ({e.why})" if isinstance(e, PlaceError) else str(e)
                    said = ""
                    try:
                        run_dir.finish("failed", error=f"StorageError: {msg}")
                    except (FedcliError, OSError) as why:
                        said = f"; {out / 'manifest.json'} could not be updated either ({_short(why)})"
                    raise StorageError(f"{msg}; the training finished but its results could not be saved{said}; {remedy}"
                                       f"continue with: {checkpoint.resume_command(out, comm.size, comm.launcher)} (from the "
                                       f"last checkpoint)") from None
    early.run_closed()  # the manifest says how the run ended: signals act at once again (the trackers may take a while)
    if tracking is not None:
        tracking.close(closing)
    sentinel.stop(watchdog)
    if ended is not None:
        if isinstance(ended, (StorageError, ResourceError)):
            raise ended from None
        raise ended
    if run_dir is not None:
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
_LOADING: dict = {}  # the "loading ..." status shown from the first second until the run's header


def _rank0() -> bool:
    """Whether this process is rank 0 of an MPI launch (or not under MPI), from the launcher's environment."""
    return all(os.environ.get(v, "0") == "0" for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))


def loading(mode: str) -> None:
    """Say at once on a terminal that the run is loading (torch, the data, the model: seconds before the header): a
    transient status line, gone when the header (or a one-line error) comes. A log gets nothing: its first line is
    the header, or the error alone."""
    if _rank0() and mode == "bar":
        _LOADING["status"] = err_console.status("fedcli train: loading torch, the data and the model ...")
        _LOADING["status"].start()


def loaded() -> None:
    status = _LOADING.pop("status", None)
    if status is not None:
        status.stop()


def train(**kwargs):
    """Run one federated-learning experiment (defaults: a small FedLAMA run on scikit-learn digits, offline)."""
    if kwargs.pop("list_algos"):
        out_console.print(methods_table())
        return
    recipe, scale, resume = kwargs.pop("recipe"), kwargs.pop("scale"), kwargs.pop("resume")
    quiet, as_json, overwrite = kwargs.pop("quiet"), kwargs.pop("json"), kwargs.pop("overwrite")
    progress = kwargs.pop("progress")
    if progress not in PROGRESS_MODES:
        raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)}, got '{progress}'", key="progress")
    flags = given(kwargs, SPEC)
    if "algo" in flags:  # a typo is answered before torch loads: did-you-mean, FedLAMA -> fedlama
        from fedcli.names import resolve_method

        flags["algo"] = resolve_method(flags["algo"], {n: m["label"] for n, m in SPEC["methods"].items()})
    if not quiet and not as_json:
        loading(progress_mode(progress))
    try:
        _start(flags, recipe=recipe, scale=scale, resume=resume, quiet=quiet, as_json=as_json, overwrite=overwrite,
               progress=progress)
    finally:
        loaded()


def _start(flags: dict, *, recipe, scale, resume, quiet: bool, as_json: bool, overwrite: bool, progress: str) -> None:
    """``fedcli train`` after its arguments are read: the config (rank 0, broadcast), the worker pool, the run."""
    from fedcli.comm.mpi import get_communicator
    from fedcli.config import TrainConfig
    from fedcli.recipes import build_config

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

                cfg = resume_config(resume, flags, recipe=recipe, scale=scale, overwrite=overwrite)
            else:
                cfg = build_config(recipe, flags, scale)
        except FedcliError as e:
            err = e
    collective(comm, err)
    cfg = TrainConfig(**comm.bcast(cfg.to_dict() if cfg is not None else None))
    from fedcli.comm.workers import launch

    with launch(cfg, comm, resume=resume, overwrite=overwrite) as (comm, data):  # --workers: rank 0 of a process pool
        run_train(cfg, comm=comm, quiet=quiet, as_json=as_json, overwrite=overwrite, resume=bool(resume), data=data,
                  progress=progress)


import inspect  # noqa: E402

_extra = [
    inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--recipe", help="TOML recipe with config keys (flags override it). \\[default: none]"), annotation=str | None),
    inspect.Parameter("scale", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--scale", help="Recipe scale to apply (e.g. smoke, paper). \\[default: none: the recipe's \\[base] alone]"), annotation=str | None),
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--quiet", "-q", help="No progress bar or summary."), annotation=bool),
    inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=typer.Option("auto", "--progress", metavar="<choice>", help="Progress on stderr: a live bar (bar), one plain line per evaluation for job logs (lines), none, or auto (bar on a terminal, else lines). \\[choices: auto, bar, lines, none] \\[default: auto]"), annotation=str),
    inspect.Parameter("json", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--json", help="Print the closing summary as one JSON line."), annotation=bool),
    inspect.Parameter("overwrite", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--overwrite", help="Replace the files of an existing --out folder."), annotation=bool),
    inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--resume", metavar="RUN_DIR", help="Continue an interrupted run from its latest checkpoint (its config comes from RUN_DIR/manifest.json).", rich_help_panel="crash safety"), annotation=str | None),
    inspect.Parameter("list_algos", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(False, "--list-algos", help="List the method presets and exit."), annotation=bool),
]
with_parameters(train, config_parameters(SPEC) + _extra)
