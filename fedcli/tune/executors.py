"""Where ``fedcli tune``'s trials train (issue 59, "the default coordinator mode on Slurm"; docs/tuning.md, Executors).

The coordinator (:class:`fedcli.tune.coordinator.Coordinator`) asks, watches and tells; an executor here only runs a
trial's training and says when it ended:

- ``start(a)``: the trial ``a`` (its recipe file written) starts training (resuming its run directory if it has one);
- ``flush()``: what ``start`` queued goes (Slurm submits the trials asked in one pass together, so ``--runs-per-job K``
  packs them);
- ``poll(active)`` -> ``[(a, code)]``: the trials whose training ended, with the training's exit code; ``code`` None:
  the training did not end by itself (its Slurm job was cancelled, hit its limit, lost its node) and the coordinator
  resumes it under the same number (``requeues``);
- ``alive(a)``: whether the trial's training still runs without this coordinator (a Slurm job left by a killed
  coordinator: adopted, never submitted twice);
- ``stop(active)``: this coordinator stops (a signal).

:class:`LocalTrials` runs trainings as processes of this machine with the sweep's executor
(:class:`fedcli.sweep.executors.Executor`: ``--jobs``, ``--mpi``); they watch the coordinator and stop with it.
:class:`SlurmTrials` submits each trial as an ordinary ``fedcli sweep --executor slurm`` job
(:func:`fedcli.sweep.slurm.submit`: the job file beside the trial's log records its job id and exit code); the jobs
run on without the coordinator. Either way the run directory is the truth the coordinator tells from.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor


class LocalTrials:
    """Trials as local processes, ``jobs`` at a time (one thread each waits for its training)."""

    requeues = False

    def __init__(self, co):
        self.co = co
        self.pool = ThreadPoolExecutor(max_workers=co.jobs)

    def start(self, a) -> None:
        a.future = self.pool.submit(self.co.execute, a)

    def flush(self) -> None:
        pass

    def poll(self, active: list) -> list[tuple]:
        return [(a, a.future.result()) for a in active if a.future.done()]

    def alive(self, a) -> bool:
        return False  # a local training watches its coordinator and stops with it: nothing is left to adopt

    def stop(self, active: list) -> None:
        ex = self.co.ex
        ex.stopping = True
        with ex.lock:
            pids = [p.pid for p in ex.procs.values()]
        ex.stop_trainings(pids, lambda: self.pool.shutdown(wait=True))

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class SlurmTrials:
    """Trials as Slurm jobs (``res``: :class:`fedcli.sweep.slurm.Resources`). A trial's end is read from its job file
    (the exit code the job records when its training ends), checked every ``POLL_S`` of the coordinator; Slurm itself
    is asked every ``SLURM_POLL_S`` whether a job is still pending or running (a job gone without an exit code, or
    ended by a signal, is requeued by the coordinator)."""

    requeues = True
    SLURM_POLL_S = 5.0
    #: polls of Slurm in a row that must miss a job before it counts as gone (squeue can lag a submission)
    MISSES = 2

    def __init__(self, co, res):
        from fedcli.sweep import slurm

        why = slurm.have_slurm()
        if why:
            from fedcli.errors import ConfigError

            raise ConfigError(f"--executor slurm: {why}; run fedcli tune where sbatch works (a cluster's login node)")
        self.co, self.res, self.queue = co, res, []
        self.asked_at = -1e9
        self.misses: dict[int, int] = {}

    def start(self, a) -> None:
        a.run.env = self.co.trial_env(a)
        self.queue.append(a)

    def flush(self) -> None:
        from fedcli.sweep import slurm
        from fedcli.sweep.executors import Executor

        go, self.queue = self.queue, []
        if not go:
            return
        ids = slurm.submit([a.run for a in go], self.co.plan.recipe, self.res, self.co.mpi, Executor)
        for a, jid in zip(go, ids):
            a.job_id = jid
            self.misses.pop(id(a), None)
            self.co.on_event("submit", a.run.slug, a.number, f"Slurm job {jid}")

    def ended(self, a) -> int | None:
        """The exit code the job of ``a`` recorded for its training (None: not ended, or not recorded)."""
        from fedcli.sweep import slurm

        j = slurm.read_job(a.run)
        if str(j.get("job_id")) != str(a.job_id) or j.get("exit_code") is None or not j.get("ended"):
            return None
        return int(j["exit_code"])

    def poll(self, active: list) -> list[tuple]:
        from fedcli.sweep import slurm

        out, rest = [], []
        for a in active:
            code = self.ended(a)
            (rest.append(a) if code is None else out.append((a, code)))
        if not rest or time.monotonic() - self.asked_at < self.SLURM_POLL_S:
            return out
        self.asked_at = time.monotonic()
        states = slurm.job_states([a.job_id for a in rest if a.job_id])
        for a in rest:
            st = states.get(str(a.job_id))
            if st and st["state"] in slurm.ACTIVE:
                self.misses.pop(id(a), None)
                continue
            if st is None:  # not (or no longer) known to Slurm: gone after MISSES looks in a row
                self.misses[id(a)] = self.misses.get(id(a), 0) + 1
                if self.misses[id(a)] < self.MISSES:
                    continue
            if slurm.run_locked(a.run):  # a training still holds the run (its job id lost): watched by its lock
                continue
            code = self.ended(a)  # it may have recorded its exit code since the first look
            out.append((a, code))
        return out

    def alive(self, a) -> bool:
        """Whether the trial's job (from its job file) is pending or running, or a training holds its run's lock."""
        from fedcli.sweep import slurm

        jid = slurm.read_job(a.run).get("job_id")
        if jid:
            st = slurm.job_states([str(jid)]).get(str(jid))
            if st and st["state"] in slurm.ACTIVE:
                a.job_id = str(jid)
                return True
        if slurm.run_locked(a.run):
            a.job_id = str(jid) if jid else None
            return True
        return False

    def stop(self, active: list) -> None:
        ids = sorted({str(a.job_id) for a in active if a.job_id})
        if ids:
            self.co.notify(
                f"the {len(ids)} Slurm job(s) of the running trials keep running ({', '.join(ids)}); the same "
                f"fedcli tune command adopts them (scancel them to stop them: each checkpoints at its round "
                f"boundary and the next call resumes it)"
            )

    def close(self) -> None:
        pass
