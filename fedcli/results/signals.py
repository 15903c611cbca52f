"""Stopping a training on signals, with a checkpoint: the round hook :class:`Checkpointer` and :class:`Interrupted`.

A checkpoint (:mod:`fedcli.results.checkpoint`) is taken at a round boundary, after the round's evaluation and CSV
rows, every ``--checkpoint-every`` rounds and when SIGINT/SIGTERM/SIGHUP (or SIGUSR1) arrives; a second signal stops
the round in progress and writes the last round boundary, kept in memory for that (:class:`Checkpointer`). Before
training runs, the process's first handlers (``fedcli.runtime.early``) answer the same signals.

Imports no torch (nor :mod:`fedcli.results.checkpoint`) at its top: ``fedcli train`` sets up :func:`request_stop` for
``fedcli sweep --mpi`` before it checks its config, which is answered before torch loads. A :class:`Checkpointer` loads
them when it is made, before rounds run, and its methods import them from there: no module is first imported while a
signal may land.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

from fedcli.errors import FedcliError, Pruned
from fedcli.fl.context import CheckpointContext, LogContext
from fedcli.fl.hooks import RoundHook
from fedcli.results import stopfile
from fedcli.results.runstate import resume_command

#: the signals a training handles (see :meth:`Checkpointer.signals`): SIGHUP (the terminal closed) is a stop like
#: SIGTERM; SIGUSR1 (a scheduler's time-limit warning) a checkpoint at the next round boundary, then the same stop
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


class Interrupted(FedcliError):
    """SIGINT/SIGTERM/SIGHUP/SIGUSR1: a checkpoint was written at a round boundary; exit 128 + signal (130, 143, 129,
    138)."""

    collective = True  # decided together by every process (see Checkpointer)

    def __init__(self, signum: int, message: str, now: bool = False):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + int(signum)
        self.now = now  # stopped mid-round (a second signal): the last round boundary is still to be written


class Checkpointer(RoundHook):
    """Round hook (``Simulation.round_hooks``): a checkpoint every ``every`` rounds, and stopping on signals.

    - The first SIGINT/SIGTERM/SIGHUP (or SIGUSR1, which never escalates) is announced at once (``notify``) and acted
    upon at the next round boundary: a
      checkpoint, then :class:`Interrupted`. Under MPI the processes agree on "a signal arrived" with one small
      all-reduce per round, so all stop at the same boundary.
    - A second signal stops the round in progress (one process: at once; under MPI: after the current local
      step, agreed by a one-number all-reduce per step, :meth:`step`). At every round boundary that is not
      written to disk the hook keeps a snapshot of that boundary in memory (model, parts, client-store tables,
      loop state: one model copy), and a stop mid-round writes it: at most the round in progress is lost, also
      when no periodic checkpoint exists yet.
    - A signal during the last round lets the run complete; :attr:`late` records it for the closing message.
    - A stop request (``RUN/stop.json``, :mod:`fedcli.results.stopfile`: ``fedcli tune``'s pruning) found at a round
      boundary by rank 0 rides in the same all-reduce: a checkpoint, then :class:`~fedcli.errors.Pruned` (exit 5);
      met at the last boundary it changes nothing (:attr:`late_request`).
    """

    active: "Checkpointer | None" = None  # the Checkpointer of the training running in this process
    keeps = (
        True  # called after the divergence guard's check of the round (RoundHook.keeps): a diverged round is never kept
    )
    context = CheckpointContext  # what it reads of the run: the global model, the parts' and the store's state

    def __init__(
        self, run_dir: str | Path, every: int, keep: int, world_size: int = 1, notify=None, launcher: str = "mpi"
    ):
        import fedcli.results.checkpoint  # noqa: F401 (and torch): loaded now, not first at a round boundary

        self.run_dir, self.every, self.keep = Path(run_dir), int(every), int(keep)
        self.world_size, self.launcher = int(world_size), launcher
        self.notify = notify  # prints a one-line notice (root only), or None
        self.pending: int | None = None  # signal number received, not acted upon yet
        self.now = False  # a second signal: stop the round in progress
        self.stopping = False  # writing the last checkpoint on the way out: further signals wait
        self.armed = False  # True while rounds run (a signal before that stops at once)
        self.last: Path | None = None
        self.last_round = 0  # rounds done in the checkpoint ``last``
        self.rounds_done = 0  # rounds done at the last boundary
        self.snapshot: tuple | None = None  # (rounds done, global part or None, local part) of the last boundary
        self.late: int | None = None  # a signal that arrived during the last round
        self.late_request: dict | None = None  # a stop request met at the last round boundary (the run completed)

    def __call__(self, ctx: CheckpointContext, state) -> None:
        import torch

        from fedcli.results.checkpoint import global_state, local_state

        stop = self.pending is not None
        asked = self.stop_request(ctx, state)  # RUN/stop.json (rank 0 looks: one lstat per round)
        if ctx.comm.size > 1:  # one all-reduce per round carries both answers: a signal, a stop request
            flags = ctx.comm.allreduce_(
                torch.tensor([1.0 if stop else 0.0, 1.0 if asked is not None else 0.0], dtype=torch.float64)
            )
            stop = float(flags[0]) > 0
            if float(flags[1]) > 0 and asked is None:
                asked = {}  # another process's (rank 0's) request: rank 0 says what it was
        if ctx.done(state):
            if stop:
                self.late = self.pending or signal.SIGTERM
            if asked is not None:
                self.late_request = asked
            self.rounds_done = state.round_idx
            return  # the run ends now anyway; the final model is written instead
        snapshot = None
        if stop or asked is not None:  # the boundary a stop waited for: a further signal (Slurm's srun passes the time
            self.stopping = True  # limit's SIGTERM on as well) waits for this checkpoint instead of cutting it short
        if stop or asked is not None or (self.every and state.round_idx % self.every == 0):
            self.write(ctx, state)
        else:
            snapshot = (
                state.round_idx,
                global_state(ctx, state) if ctx.comm.is_root else None,
                local_state(ctx, state, copy=True),
            )
        # only now (a signal may interrupt the lines above): this boundary is the one a stop mid-round falls back to
        self.snapshot, self.rounds_done = snapshot, state.round_idx
        if asked is not None:  # a request and a signal at the same boundary: the request says more (kept as pruned)
            raise self.pruned(asked, state)
        if stop:
            signum = self.pending or signal.SIGTERM
            raise Interrupted(
                signum,
                f"interrupted by {signal.Signals(signum).name} after round {state.round_idx} "
                f"(iteration {state.iteration}); {self.holds()}; continue with: "
                f"{resume_command(self.run_dir, self.world_size, self.launcher)}",
            )

    def stop_request(self, ctx: CheckpointContext, state) -> dict | None:
        """Rank 0: the stop request (``RUN/stop.json``, :mod:`fedcli.results.stopfile`) that acts at this round
        boundary,
        or None; the other processes learn of it in the round's all-reduce (:meth:`__call__`)."""
        if not ctx.comm.is_root or not stopfile.stop_requested(self.run_dir):
            return None
        req = stopfile.read_stop(self.run_dir)
        return req if req is not None and stopfile.due(req, state.iteration) else None

    def pruned(self, request: dict, state) -> Pruned:
        """The error of a run stopped on request at this boundary, its checkpoint written (exit 5)."""
        where = {
            "iteration": state.iteration,
            "round": state.round_idx,
            "why": request.get("why", ""),
            "requested_iteration": request.get("iteration"),
            "requested_at": request.get("at"),
        }
        why = f": {where['why']}" if where["why"] else ""
        return Pruned(
            f"pruned after round {state.round_idx} (iteration {state.iteration}) on the request in "
            f"{stopfile.stop_path(self.run_dir)}{why}; {self.holds()}; the run is kept as it stands; finish it "
            f"with: {resume_command(self.run_dir, self.world_size, self.launcher)} --promote",
            where,
        )

    def step(self, ctx: LogContext, state) -> None:
        """Step hook under MPI: every process learns, after each local step, whether a second signal arrived."""
        import torch

        now = float(ctx.comm.allreduce_(torch.tensor([1.0 if self.now else 0.0], dtype=torch.float64))[0]) > 0
        if now:
            self.stopping = True
            raise Interrupted(self.pending or signal.SIGTERM, "stopped mid-round", now=True)

    def write(self, ctx: CheckpointContext, state) -> None:
        from fedcli.results.checkpoint import capture, save

        ckpt = capture(ctx, state)
        if ckpt is not None:
            self.last = save(self.run_dir, ckpt, self.keep)
        ctx.store.pin(state.round_idx, self.keep)  # a disk store keeps the files this checkpoint refers to
        self.last_round = state.round_idx

    def write_snapshot(self, ctx: CheckpointContext) -> None:
        """After a stop mid-round (collective): write the last round boundary if no checkpoint holds it yet."""
        from fedcli.results.checkpoint import run_facts, save

        snap = self.snapshot
        if snap is None or snap[0] <= self.last_round:
            return
        ranks = ctx.comm.allgather(snap[2])
        if snap[1] is not None:
            self.last = save(self.run_dir, {**run_facts(ctx), **snap[1], "ranks": ranks}, self.keep)
        ctx.store.pin(snap[0], self.keep)
        self.last_round, self.snapshot = snap[0], None

    def holds(self) -> str:
        if self.last is None:
            return "no checkpoint yet (a resume starts over)"
        return (
            f"checkpoint {self.last} holds rounds 1-{self.last_round}"
            if self.last_round > 1
            else f"checkpoint {self.last} holds round 1"
        )

    def stopped_now(self, signum: int) -> "Interrupted":
        """The error of a stop mid-round, once :meth:`write_snapshot` ran."""
        name = signal.Signals(signum).name
        lost = f"round {self.rounds_done + 1} is lost"
        return Interrupted(
            signum,
            f"interrupted by {name} during round {self.rounds_done + 1} (stopped at once, {lost}); "
            f"{self.holds()}; continue with: {resume_command(self.run_dir, self.world_size, self.launcher)}",
        )

    def _act(self, signum) -> None:
        """One signal acted upon (see ``signals``): a stop at the next round boundary, or now on the second."""
        name = signal.Signals(signum).name
        again = "Ctrl-C again" if signum == signal.SIGINT else f"{name} again"
        if (
            self.world_size > 1 and self.launcher == "mpi"
        ):  # mpiexec forwards SIGTERM, aborts the job on a second Ctrl-C
            again = "SIGTERM to mpiexec (not a second Ctrl-C: mpiexec would abort the job)"
        if self.stopping:  # already stopping, or closing the run: the manifest is written first
            self.late = self.late or signum
            return
        if signum == signal.SIGUSR1:  # a scheduler's warning (Slurm --signal=USR1@N): checkpoint at the next boundary
            if self.pending is None:
                self.pending = signum
                if self.notify and self.armed:
                    self.notify(
                        f"SIGUSR1 (time-limit warning): stopping after round {self.rounds_done + 1} (the one in "
                        f"progress), with a checkpoint; SIGTERM to stop now"
                    )
            return  # never escalates: a later SIGTERM (the time limit itself) stops the round in progress
        if not self.armed:
            err = Interrupted(
                signum,
                f"interrupted by {name} before training started"
                + (f"; the last checkpoint is {self.last}" if self.last else ""),
                now=True,
            )
            err.collective = False  # processes may be anywhere in the setup: under MPI the job is aborted
            raise err
        if self.pending is None:
            self.pending = signum
            if self.notify:
                self.notify(
                    f"{name}: stopping after round {self.rounds_done + 1} (the one in progress), with "
                    f"a checkpoint; "
                    f"{again} to stop now (losing at most that round)"
                )
            return
        self.now = True
        if self.notify:
            self.notify(f"{name} again: stopping now; round {self.rounds_done + 1} is lost")
        if self.world_size == 1:
            self.stopping = True
            raise Interrupted(signum, "stopped mid-round", now=True)
        # under MPI the processes stop together after the current local step (Checkpointer.step)

    @contextlib.contextmanager
    def signals(self):
        """SIGINT/SIGTERM/SIGHUP/SIGUSR1: the first is announced and acted upon at the next round boundary, a second
        one stops the round in progress (see the class); one before training started stops at once. Only in the
        main thread (signal handlers live there)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        queued: list[int] = []  # signals that arrived while the handler was still at work

        def handler(signum, frame):
            # Python runs a handler between any two bytecodes, also inside this handler while it prints its notice
            # (which may import a module lazily: a signal landing mid-import left that module half-initialized and
            # the run failed on an ImportError). A signal arriving meanwhile (Slurm's time limit sends SIGTERM twice:
            # slurmd and srun) is queued and acted upon, in order, once the one before it is done.
            queued.append(signum)
            if len(queued) > 1:
                return
            try:
                while queued:
                    self._act(queued[0])
                    queued.pop(0)
            finally:
                queued.clear()

        old = {
            s: signal.signal(s, handler)
            for s in HANDLED
            if signal.getsignal(s) is not signal.SIG_IGN or s == signal.SIGUSR1
        }
        Checkpointer.active = self
        try:
            yield self
        finally:
            Checkpointer.active = None
            for s, h in old.items():
                signal.signal(s, h)


def request_stop(now: bool) -> None:
    """From any thread: ask this process's training to stop as on SIGTERM (``now``: as on a second one, waiting
    for the first to be seen). With no training under way, SIGTERM's default action ends the process."""
    import time

    os.kill(os.getpid(), signal.SIGTERM)
    cp = Checkpointer.active
    if not now or cp is None:
        return
    for _ in range(100):  # two signals sent at once would be seen as one
        if cp.pending is not None or Checkpointer.active is not cp:
            break
        time.sleep(0.05)
    if Checkpointer.active is cp and not cp.now:
        os.kill(os.getpid(), signal.SIGTERM)
