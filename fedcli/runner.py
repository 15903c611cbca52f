"""Running one experiment (``fedcli train``'s work below its command line): the run folder, the simulation, the
checkpoints and the run directory's life; ``fedcli train``, ``fedcli sweep``, ``fedcli bench`` and the worker processes
run experiments through :func:`run_train`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fedcli.errors import ConfigError, FedcliError, Pruned, ResourceError, memory_error
from fedcli.fl.budget import clients_per_round
from fedcli.fl.context import CheckpointContext, DriverContext, LogContext
from fedcli.runtime import early

if TYPE_CHECKING:  # the config assembles every method file (torch): imported where a run starts, not for --help
    from fedcli.comm.communicator import Communicator
    from fedcli.config import TrainConfig


def default_out(cfg: TrainConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{cfg.algo}-{cfg.dataset}-s{cfg.seed}-{stamp}"


def describe(cfg: TrainConfig, ctx: DriverContext) -> str:
    partition_cfg = ctx.partition.config
    extra = {
        "dirichlet": f" alpha={cfg.alpha}",
        "pathological": f" k={cfg.classes_per_client}",
        "natural": f" {cfg.writers_per_client} writers/client",
    }.get(partition_cfg.get("scheme"), "")
    sched = f"tau'={cfg.tau} phi={cfg.phi}" if ctx.schedule.needs_discrepancy else f"tau={cfg.tau}"
    if cfg.local_epochs:
        sched = f"{cfg.local_epochs:g} local epoch(s) per round"
    budget = f"{cfg.rounds} rounds" if cfg.rounds else f"{cfg.iterations} local iterations"
    return (
        f"{cfg.algo} ({sched}) on {cfg.dataset} with {cfg.model}: {len(ctx.client_indices)} clients "
        f"({ctx.n_active} active per round), {partition_cfg.get('scheme')}{extra} partition, {budget}, "
        f"batch {ctx.batch_size}, lr {cfg.lr}, device {ctx.device}, {ctx.comm.size} process(es)"
    )


def collective(comm, err: BaseException | None) -> None:
    """Every rank learns whether any rank failed a setup phase; all then raise the same error.

    So a bad config or a missing data file ends every rank with the same exit code and no hang.
    Errors raised here are marked ``collective`` (no MPI abort needed; only rank 0 prints).
    """
    if comm.size == 1:
        if err is not None:
            raise err
        return
    report = (
        None
        if err is None
        else (
            getattr(err, "exit_code", 1),
            f"{err}" if isinstance(err, FedcliError) else f"{type(err).__name__}: {err}",
        )
    )
    reports = comm.allgather(report)
    first = next((r for r in reports if r is not None), None)
    if first is not None:
        e = FedcliError(first[1])
        e.exit_code = first[0]
        e.collective = True
        raise e


def prepare_out(out: Path, *, overwrite: bool, resume: bool, promote: bool = False):
    """Rank 0, before anything is written: the run directory opened and locked
    (:meth:`fedcli.results.run_directory.RunDirectory.open`; the trackers' own files do not make the folder another's).
    Returns the :class:`~fedcli.results.run_directory.RunDirectory`, held to its ``release``."""
    from fedcli.results.run_directory import RunDirectory
    from fedcli.trackers import state as trackers_state

    return RunDirectory.open(
        out,
        overwrite=overwrite,
        resume=resume,
        promote=promote,
        own=(trackers_state.LOCK_FILE, trackers_state.PENDING_FILE),
    )


class NoProgress:
    """A run's progress that shows nothing (:meth:`RunPrinter.progress`)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, row: dict) -> None:
        pass

    def advance_to(self, iteration: int, round_idx: int) -> None:
        pass


class RunPrinter:
    """What a run says while it runs. This one (``fedcli sweep``, ``fedcli bench``, the worker processes, programs that
    import fedcli) says notes and warnings as plain ``fedcli: ...`` lines on stderr and shows no header, progress or
    summary table; ``fedcli train`` passes its terminal printer (``fedcli/cli/train.py``)."""

    def notice(self, msg: str) -> None:
        print(f"fedcli: {msg}", file=sys.stderr, flush=True)

    def header(self, text: str, progress: str) -> None:
        """The run's one-line description (``describe``), before the rounds; ``progress``: the ``--progress`` mode."""

    def progress(self, cfg, ctx: LogContext, *, enabled: bool, mode: str):
        """A context manager called with each metrics row (the engine's ``progress``), ``advance_to`` on a resume."""
        return NoProgress()

    def loaded(self) -> None:
        """The run is set up (the data and the model are loaded)."""

    def summary(self, cfg, summary, out: Path) -> None:
        """The closing summary of a completed run (not with ``as_json``: a JSON line instead)."""


@dataclass(frozen=True)
class RunFlags:
    """How :func:`run_train` runs (its keywords of these names): ``quiet``, ``as_json`` (a JSON line instead of the
    summary), ``overwrite``, ``resume``, ``progress`` and ``promote``, as they travel to :func:`_train`."""

    quiet: bool = False
    as_json: bool = False
    overwrite: bool = False
    resume: bool = False
    progress: str = "auto"
    promote: bool = False


def run_train(
    cfg: TrainConfig, *, comm=None, data=None, printer: RunPrinter | None = None, flags: RunFlags | None = None, **kw
):
    """Set up, train and summarize one run. Only rank 0 writes the run directory and draws progress.

    ``resume``: continue the run in ``cfg.out`` from its latest checkpoint (fedcli/results/resume.py).
    Rank 0 holds the run directory's lock (fedcli/results/lock.py) from before the first write to the end.
    ``data``: (dataset, partition) already loaded for this config (the worker pool shares them).
    ``progress``: ``--progress`` (fedcli.cli.console.progress_mode); ``printer``: what the run says
    (:class:`RunPrinter`).
    ``promote``: with ``resume``, a pruned run's stop request and pruned mark go and it runs to completion
    (fedcli/results/stopfile.py). These and ``quiet``, ``as_json``, ``overwrite``: a :class:`RunFlags` (``flags``),
    or its fields by keyword (``kw``, over ``flags`` when both are given)."""
    from fedcli.comm.communicator import Communicator

    flags = replace(flags, **kw) if flags is not None else RunFlags(**kw)
    comm = comm or Communicator()
    out = Path(cfg.out) if cfg.out else default_out(cfg)
    run_dir, err = None, None
    if comm.is_root:
        try:
            run_dir = prepare_out(out, overwrite=flags.overwrite, resume=flags.resume, promote=flags.promote)
        except FedcliError as e:
            err = e
    try:
        collective(comm, err)
        cfg.out = str(comm.bcast(str(out)))
        return _train(cfg, comm, run_dir, flags, data=data, printer=printer or RunPrinter())
    finally:
        if run_dir is not None:
            run_dir.release()


def _short(e: BaseException) -> str:
    return getattr(e, "why", None) or getattr(e, "strerror", None) or str(e).split(";")[0]


def _midrun_error(e: BaseException, out: Path, comm) -> BaseException:
    """What an error during a run that has its manifest is reported as: a place that stopped being writable is an I/O
    failure (StorageError, exit 3), out of memory a ResourceError (exit 3); both with the command that continues."""
    from fedcli.errors import PlaceError, StorageError
    from fedcli.results.runstate import resume_command

    if isinstance(e, PlaceError):
        err = StorageError(
            f"cannot {e.doing} {e.path} ({e.why}): the run folder stopped being writable during the run; "
            f"the files written before are intact"
        )
        err.remedy = "once it is writable again, "
        e = err
    elif (oom := memory_error(e)) is not None:
        e = oom
    if isinstance(e, (StorageError, ResourceError)):
        e = type(e)(f"{e}; {e.remedy}continue with: {resume_command(out, comm.size, comm.launcher)}")
    return e


def _train(cfg: TrainConfig, comm, run_dir, flags: RunFlags, *, data=None, printer: RunPrinter):
    """One run on every rank, as its jobs in order: set up (and restore), begin the run directory (rank 0: ``run_dir``,
    the :class:`~fedcli.results.run_directory.RunDirectory` :func:`prepare_out` opened), hook the trackers and the
    checkpointer, run the rounds, close the run directory, say the result."""
    quiet, as_json, overwrite, resume = flags.quiet, flags.as_json, flags.overwrite, flags.resume
    progress, promote = flags.progress, flags.promote
    out, root = Path(cfg.out), comm.is_root
    early.run_closed(False)
    ctx, state, ckpt = _set_up(cfg, comm, out, resume=resume, data=data, printer=printer)
    procs = _processes(comm, ctx)
    mark_interrupted = None
    if root:
        if overwrite and out.exists():
            _clean_overwritten(run_dir)
        _begin(run_dir, ctx, procs, (ckpt, state) if resume else None, quiet=quiet, printer=printer, promote=promote)
        mark_interrupted = run_dir.guard(ctx, procs["pids"], world_size=comm.size, launcher=comm.launcher)
        _announce(cfg, ctx, printer, quiet=quiet, progress=progress)
    if comm.size > 1:  # no process starts training before the manifest exists: a failure on any rank marks it failed
        comm.barrier()
    ACTIVE_RUN["dir"] = out
    progress = printer.progress(cfg, ctx.context(LogContext), enabled=root and not quiet and not as_json, mode=progress)
    saver = _checkpointer(cfg, comm, out, printer, state, ckpt)
    tracking = _hook_rounds(cfg, comm, ctx, saver, out, resume=resume, printer=printer)
    # The Checkpointer holds the stop signals until the manifest says how the run ended: a second SIGTERM (Slurm sends
    # one to every process of the job, so a time limit can deliver two) arriving after the rounds stopped waits
    # instead of ending the process with the manifest still 'running' (which the watchdog would then call failed).
    with saver.signals():
        try:
            summary = _run_rounds(ctx, saver, progress, state, mark_interrupted)
        except BaseException as e:
            ended, closing = _close_stopped(e, ctx, saver, run_dir, mark_interrupted, out, comm)
        else:
            ended, closing = None, "completed"
            extra, saved = _close_completed(cfg, comm, ctx, saver, run_dir, summary, out)
    early.run_closed()  # the manifest says how the run ended: signals act at once again (the trackers may take a while)
    if tracking is not None:
        tracking.close(closing)
    if run_dir is not None:
        run_dir.stop_watching()
    if ended is not None:
        raise ended  # raised outside the handler above: no other exception is chained to it
    if run_dir is not None:
        _say_result(cfg, summary, extra, saver, out, quiet=quiet, as_json=as_json, printer=printer)
    if saved:  # what the completed run no longer needs goes (fedcli/fl/store.py); kept for a resume if the end failed
        ctx.store.finish_run()
    ACTIVE_RUN.pop("dir", None)
    return summary


def _set_up(cfg: TrainConfig, comm, out: Path, *, resume: bool, data, printer: RunPrinter):
    """The simulation on every rank and, with ``resume``, the latest checkpoint (CSVs cut back to it) restored on every
    rank; an error on any rank is raised on all (:func:`collective`). Returns (simulation, restored state,
    checkpoint)."""
    from fedcli.fl.engine import Simulation
    from fedcli.results import checkpoint
    from fedcli.results.resume import load_for_resume

    sim = ctx = err = None
    try:
        sim = Simulation(cfg, comm).setup(*(data or ()))
        ctx = sim.context(DriverContext)
    except Exception as e:
        err = e
    collective(comm, err)
    state = ckpt = None
    if resume:
        try:
            ckpt = load_for_resume(
                out,
                comm,
                warn=(lambda m: printer.notice(f"warning: {m}")) if comm.is_root else None,
                config=cfg.to_dict(),
            )  # said with --quiet too
            state = checkpoint.restore(ctx.context(CheckpointContext), ckpt) if ckpt is not None else None
        except Exception as e:
            err = e
        collective(comm, err)
    return ctx, state, ckpt


def _processes(comm, ctx: DriverContext) -> dict:
    """Every process's pid and device, for the manifest (collective: every rank calls it)."""
    pids = comm.allgather(os.getpid())
    visible = os.environ.get(
        "CUDA_VISIBLE_DEVICES"
    )  # set by a sweep that packs runs on GPUs (fedcli/sweep/placement.py)
    devices = comm.allgather(
        {
            "device": str(ctx.device),
            "local_rank": comm.local_rank,  # every process's device
            **({"cuda_visible_devices": visible} if visible is not None else {}),
        }
    )
    return {"pids": pids, "devices": devices}


def _clean_overwritten(run_dir) -> None:
    """``--overwrite``: the previous run's files go: first its tracker files (TensorBoard events, W&B offline runs,
    trackers.json; it waits for that run's trackers' process, and when it refuses, still finishing, the run is left
    whole, manifest included), then the run's own (:meth:`~fedcli.results.run_directory.RunDirectory.clean`)."""
    from fedcli.trackers.state import remove_files

    remove_files(run_dir.path)
    run_dir.clean()


#: set by ``fedcli tune`` for a trial's training: its manifest's ``tune`` entry (JSON; docs/tuning.md)
TUNE_ENV = "FEDCLI_TUNE_TRIAL"


def tune_entry() -> dict:
    """``{"tune": {"study", "number", "params", "baseline"}}`` when this run is a trial of ``fedcli tune`` (the contract
    in docs/tuning.md: its manifest says which), else nothing. A resumed run keeps the entry of its manifest."""
    raw = os.environ.get(TUNE_ENV)
    if not raw:
        return {}
    try:
        entry = json.loads(raw)
    except ValueError:
        return {}
    return {"tune": entry} if isinstance(entry, dict) else {}


def _begin(
    run_dir, ctx: DriverContext, procs: dict, restored, *, quiet: bool, printer: RunPrinter, promote: bool
) -> None:
    """Rank 0: the run directory's manifest 'running', started anew (with this run's ``tune`` entry) or, on a resume
    (``restored``: the checkpoint and the state restored from it, both None without one), reopened at the checkpoint,
    saying how the previous attempt ended, a promotion (``promote``) and the versions changed since
    (:class:`~fedcli.results.run_directory.RunDirectory`)."""
    ckpt, state = restored or (None, None)
    if restored is not None:
        for line in run_dir.resume_notes(ckpt, promote=promote):  # before the folder is touched further
            printer.notice(line)
    for line in run_dir.begin(
        ctx, procs, resume=restored is not None, ckpt=ckpt, state=state, manifest=tune_entry(), quiet=quiet
    ):
        printer.notice(line)


def _announce(cfg: TrainConfig, ctx: DriverContext, printer: RunPrinter, *, quiet: bool, progress: str) -> None:
    """Rank 0: the run loaded; its header and where the client state goes (not with ``quiet``), its notes (always)."""
    from fedcli.fl.store import describe as store_line

    printer.loaded()
    if not quiet:  # a terminal wraps it between words; a log keeps it on one line
        printer.header(describe(cfg, ctx), progress)
        if (state_line := store_line(ctx.store.info)) is not None:
            printer.notice(state_line)  # where the client state goes and how big it may grow
    for note in ctx.notes:  # said once, also with --quiet (the manifest records it too)
        printer.notice(f"note: {note}")


def _checkpointer(cfg: TrainConfig, comm, out: Path, printer: RunPrinter, state, ckpt):
    """The Checkpointer (fedcli/results/signals.py), continuing from the restored checkpoint on a resume."""
    from fedcli.results import signals

    saver = signals.Checkpointer(
        out,
        cfg.checkpoint_every,
        cfg.keep_checkpoints,
        world_size=comm.size,
        notify=printer.notice if comm.is_root else None,
        launcher=comm.launcher,
    )
    if state is not None:
        saver.rounds_done = saver.last_round = state.round_idx
        saver.last = Path(ckpt["path"])
    return saver


def _hook_rounds(cfg: TrainConfig, comm, ctx: DriverContext, saver, out: Path, *, resume: bool, printer: RunPrinter):
    """The round hooks: the trackers (rank 0, ``--tracker``) then the checkpointer; with several processes the
    checkpointer also hears every step. Returns the trackers' hook or None."""
    tracking = None
    if (
        comm.is_root and cfg.tracker
    ):  # ahead of the checkpointer: a round a checkpoint holds has reached the trackers too
        from fedcli.trackers.hook import TrackerHook

        tracking = TrackerHook(cfg, out, resume=resume, warn=lambda m: printer.notice(f"warning: {m}"))
        ctx.add_round_hook(tracking)
    ctx.add_round_hook(saver)
    if comm.size > 1:
        ctx.add_step_hook(saver.step)
    return tracking


def _run_rounds(ctx: DriverContext, saver, progress, state, mark_interrupted):
    """The rounds under the progress display, the Checkpointer taking the signals over from ``mark_interrupted``; a
    stop signal that must act now writes the last round boundary and raises. Returns the run's summary."""
    from fedcli.results import signals

    with progress:
        if state is not None:
            progress.advance_to(state.iteration, state.round_idx)
        saver.armed = True
        if early.usr1_pending():  # SIGUSR1 during the setup: a checkpoint at the first round boundary
            saver.pending = signal.SIGUSR1
        if mark_interrupted is not None:
            early.forget(mark_interrupted)  # from here the Checkpointer handles signals
        try:
            return ctx.run(state, progress)
        except signals.Interrupted as e:
            if not (e.now and saver.armed):
                raise
            saver.stopping = True
            # the last round boundary, unless a checkpoint already holds it
            saver.write_snapshot(ctx.context(CheckpointContext))
            raise saver.stopped_now(e.signum) from None


def stop_reason(e: BaseException) -> dict:
    """The manifest's ``reason`` beside a ``failed`` status: ``diverged`` for a run the divergence guard stopped (exit
    4;
    reports show it as diverged, :func:`fedcli.results.validate.status_label`), nothing for another failure; beside
    ``interrupted``, ``pruned`` and where (``pruned: {iteration, round, why, ...}``) for a run stopped on request (exit
    5,
    fedcli/results/stopfile.py)."""
    from fedcli.errors import DivergenceError

    if isinstance(e, Pruned):
        return {"reason": "pruned", "pruned": e.where}
    return {"reason": "diverged"} if isinstance(e, DivergenceError) else {}


def _close_stopped(e: BaseException, ctx: DriverContext, saver, run_dir, mark_interrupted, out: Path, comm):
    """A run that did not complete: the error it is reported as (:func:`_midrun_error`) and the manifest closed
    'interrupted' (a stop signal) or 'failed', with the last checkpoint. Returns (the error to raise, the status)."""
    from fedcli.results import signals

    saver.stopping = True
    ctx.store.close()  # the client-state files a disk store holds open
    if run_dir is not None:
        early.forget(mark_interrupted)
    e = _midrun_error(e, out, comm) if run_dir is not None else (memory_error(e) or e)
    stopped = isinstance(e, (signals.Interrupted, Pruned, KeyboardInterrupt))
    closing = "interrupted" if stopped else "failed"
    if run_dir is not None:
        on_disk = run_dir.status
        try:
            run_dir.close(
                closing,
                error=f"{type(e).__name__}: {e}",
                **ctx.choices(),
                **stop_reason(e),
                **({"checkpoint": str(saver.last)} if stopped and saver.last else {}),
            )
        except (FedcliError, OSError) as why:  # e.g. the disk is still full or the folder unwritable: said, in the line
            if isinstance(e, FedcliError):
                e.args = (
                    f"{e}; {out / 'manifest.json'} could not be updated either ({_short(why)}): it still says "
                    f"'{on_disk}'",
                )
    return e, closing


def _close_completed(
    cfg: TrainConfig, comm, ctx: DriverContext, saver, run_dir, summary, out: Path
) -> tuple[dict, bool]:
    """A completed run: the final model, the index of the client state kept at the end and, last, once every file of
    the run is whole, the manifest closed 'completed' (rank 0); a failure to save them is a StorageError that says how
    to continue, and leaves every file the last checkpoint refers to (nothing of the run goes before the manifest says
    completed). Returns (the summary's extras, whether the end was saved: told to every process)."""
    saver.stopping = True
    at_end = ctx.store.end_plan(ctx.personal_tables() if cfg.client_state_keep == "personal" else ())
    mpi_s = getattr(comm, "reduce_seconds", None)
    extra = {"mpi_allreduce_s": mpi_s} if mpi_s is not None else {}
    if (
        ctx.device.type == "cuda"
    ):  # what a sweep packs runs on a GPU by (fedcli/sweep/placement.py, --runs-per-gpu auto)
        import torch

        extra["cuda_peak_bytes"] = int(torch.cuda.max_memory_reserved(ctx.device))
    saved = False
    try:
        if run_dir is None:
            ctx.store.write_end()  # this process's client-state files on the disk (the root writes their index)
        else:
            _save_end(ctx, run_dir, summary, out, comm, at_end, extra)
        saved = True
    finally:
        if comm.size > 1:  # every process learns whether the end was saved: only then may its client-state files go
            saved = comm.bcast(saved)
    return extra, saved


def _save_end(ctx: DriverContext, run_dir, summary, out: Path, comm, at_end: dict, extra: dict) -> None:
    """Rank 0 of :func:`_close_completed`: model.pt, client-state/index.pt, then the manifest 'completed'."""
    from fedcli.errors import PlaceError, StorageError
    from fedcli.results import checkpoint
    from fedcli.results.runstate import resume_command

    try:
        checkpoint.save_model(ctx.context(CheckpointContext), out / "model.pt")
        ctx.store.write_end()  # client-state/index.pt: whole before the manifest says completed
        run_dir.close(
            "completed",
            summary=summary.as_dict(),
            **extra,
            **ctx.choices(),
            **({"client_state_at_end": at_end} if at_end else {}),
        )
    except (StorageError, PlaceError) as e:
        run_dir.stop_watching()
        remedy = "once the folder is writable again, " if isinstance(e, PlaceError) else e.remedy
        msg = f"cannot {e.doing} {e.path} ({e.why})" if isinstance(e, PlaceError) else str(e)
        said = ""
        try:
            run_dir.close("failed", error=f"StorageError: {msg}")
        except (FedcliError, OSError) as why:
            said = f"; {out / 'manifest.json'} could not be updated either ({_short(why)})"
        raise StorageError(
            f"{msg}; the training finished but its results could not be saved{said}; {remedy}"
            f"continue with: {resume_command(out, comm.size, comm.launcher)} (from the "
            f"last checkpoint)"
        ) from None


def _say_result(
    cfg: TrainConfig, summary, extra: dict, saver, out: Path, *, quiet: bool, as_json: bool, printer: RunPrinter
) -> None:
    """Rank 0, a completed run: a stop signal that came during the last round, then the JSON line (``as_json``) or
    the closing summary (not with ``quiet``)."""
    if saver.late:
        printer.notice(
            f"{signal.Signals(saver.late).name} arrived during the last round: the run finished it and completed "
            f"(nothing to resume)"
        )
    if saver.late_request is not None:
        printer.notice(f"a stop request ({out / 'stop.json'}) was met at the last round boundary: the run completed")
    if as_json:
        print(json.dumps({"run_dir": str(out), **summary.as_dict(), **extra}))
    elif not quiet:
        printer.summary(cfg, summary, out)


ACTIVE_RUN: dict = {}  # the run directory of the run in progress (for marking it failed on an MPI abort)


# --------------------------------------------------------------------------------------------- a run's work, --workers
# auto
#: ... from these rough single-core rates (femnist_cnn and cnn4 at batch 10-32 on this CPU: 25-55 GFLOP/s)
FLOPS_PER_S = 2e10
STEP_OVERHEAD_S = 2e-4


@dataclass
class WorkEstimate:
    client_steps: int  # local steps summed over clients and rounds
    flops_per_step: float  # forward + backward of one client's mini-batch
    seconds: float  # single-core estimate

    def describe(self) -> str:
        return f"about {self.seconds:.0f} s of single-core training ({self.client_steps:,} client steps)"


def estimate_work(cfg, dataset, partition) -> WorkEstimate:
    """Rough single-core training time of a run: client steps x (3 x forward FLOPs x batch / rate + overhead)."""
    import torch

    from fedcli.fl.budget import plan_run, schedule_round_length
    from fedcli.fl.engine import build_run_model
    from fedcli.models.flops import TRAIN_FLOPS_PER_FORWARD, forward_flops

    steps = plan_run(cfg, schedule_round_length(cfg), [len(ix) for ix in partition.train]).expected_client_steps
    try:
        with torch.random.fork_rng(devices=[]):
            model = build_run_model(cfg, dataset)
        model.eval()
        fwd = forward_flops(model, dataset.train_x[:1])
    except Exception:
        fwd = 2.0 * sum(p.numel() for p in build_run_model(cfg, dataset).parameters())
    per_step = TRAIN_FLOPS_PER_FORWARD * fwd * cfg.batch_size
    secs = steps * (per_step / FLOPS_PER_S + STEP_OVERHEAD_S)
    return WorkEstimate(int(steps), per_step, secs)


# --------------------------------------------------------------------------------------------- how many processes
#: --workers auto: estimated single-core seconds of training above which the pool is worth starting
AUTO_MIN_SECONDS = 10.0


def auto_workers(cfg, dataset, partition, cores: int | None = None, gpus: int | None = None) -> tuple[int, str]:
    """``--workers 0``: the physical cores (at most the clients per round) when the run is big enough to pay
    for starting the workers (about 1-2 s each), else 1; on CUDA one worker per visible device (``gpus``: their
    count, asked of torch when None; a CPU test states it). Results do not depend on the choice."""
    import torch

    from fedcli.comm.workers import physical_cores

    cores = cores or physical_cores()
    active = clients_per_round(cfg.active_ratio, len(partition.train))
    if gpus is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.device == "cuda" or (cfg.device == "auto" and gpus):  # worker k takes GPU k mod gpus (engine.resolve_device)
        n = max(1, min(gpus, active))
        return n, f"auto: {n} (one per CUDA device: {gpus} visible, {active} client(s) per round)"
    if cfg.device.startswith("cuda:"):
        return 1, f"auto: 1 (--device {cfg.device}: one GPU)"
    if cores < 2 or active < 2:
        return 1, f"auto: 1 ({cores} physical core(s), {active} client(s) per round)"
    est = estimate_work(cfg, dataset, partition)
    if est.seconds < AUTO_MIN_SECONDS:
        return 1, f"auto: 1 ({est.describe()}, below {AUTO_MIN_SECONDS:.0f} s)"
    n = min(cores, active)
    return n, f"auto: {n} ({cores} physical cores, {est.describe()})"


@contextlib.contextmanager
def launch(cfg, comm: Communicator, *, resume: str | None = None, overwrite: bool = False, data=None):
    """Yield (communicator, data) for ``run_train``: rank 0 of a new worker pool, or ``comm`` itself.

    ``data`` is (dataset, partition) when they were loaded here (to choose the number of workers, and to hand
    them to the workers in shared memory) or given, else None (``run_train`` loads them)."""
    from fedcli.comm.communicator import Communicator
    from fedcli.comm.workers import WorkerPool

    if comm.size > 1:  # under mpiexec every rank is one worker
        if cfg.workers > 1:
            raise ConfigError(
                f"--workers {cfg.workers} cannot be combined with mpiexec (each MPI rank is one worker); "
                f"drop one of them"
            )
        yield comm, data
        return
    n, note = cfg.workers, f"--workers {cfg.workers}"
    if resume and not n:
        from fedcli.results.resume import read_manifest

        n = int(read_manifest(resume).get("world_size", 1))  # a checkpoint is resumed by as many processes
        note = f"auto: {n} (as the run being resumed)"
    if not n:
        if data is None:
            from fedcli.data.setup import load_data_and_partition

            data = load_data_and_partition(cfg)
        n, note = auto_workers(cfg, *data)
    if n <= 1:
        single = Communicator()
        single.workers_note = note
        yield single, data
        return
    if data is None:
        from fedcli.data.setup import load_data_and_partition

        data = load_data_and_partition(cfg)
    pool = WorkerPool(
        n, run_in_worker, (cfg.to_dict(), data, {"resume": bool(resume), "overwrite": overwrite}), clients=cfg.clients
    )
    pool.comm.workers_note = note
    ok = False
    try:
        yield pool.comm, data
        ok = True
    finally:
        pool.close(ok)


def run_in_worker(comm, cfg: dict, data, run_kwargs: dict) -> None:
    """A worker process's share of the run rank 0 started (``launch``'s target for ``comm.workers.WorkerPool``)."""
    from fedcli.config import TrainConfig

    run_train(TrainConfig(**cfg), comm=comm, quiet=True, data=data, **run_kwargs)
