"""The simulator: rounds of local training on a stacked cohort, layer-wise synchronization.

One round lasts ``schedule.round_length`` local iterations (tau for FedAvg, phi*tau' for FedLAMA, the last round cut at
the ``--iterations`` budget). At its start the cohort is sampled (keyed by (seed, round)), split over the processes by
sample count, and initialized by the ``init`` part. After every local step the schedule names the layers due; each due
layer is encoded by the codec, averaged over the cohort (local weighted sum + one all-reduce for all layers due
together), turned into the new global layer by the server part, copied back into every client, and counted in the
ledger. Layer-wise schedules also get the cohort discrepancy sum_i p_i ||u_l - x_l^i||^2 (Eq. 2). At round ends the
schedule may re-adjust its intervals (FedLAMA Alg. 1) and the global model is evaluated when an evaluation point has
been reached. The helpers of each job (``fedcli.fl.build``, ``state``, ``sync``, ``evaluation``, ``system``) get a
declared context of this engine (``fedcli.fl.context``), never the engine (docs/architecture.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcli.comm.communicator import Communicator, assign_clients
from fedcli.comm.ledger import Ledger
from fedcli.data.augment import cifar_augment
from fedcli.fl import build, chunked, clientstate, evaluation, guard, slots, sync, system, timing
from fedcli.fl.budget import RunPlan, plan_run
from fedcli.fl.build import build_run_model, resolve_device  # noqa: F401 (re-exported)
from fedcli.fl.cohort import BatchSource, Cohort, StepContext, sample_cohort
from fedcli.fl.context import (
    Context,
    EvalContext,
    GuardContext,
    LogContext,
    ManifestContext,
    StoreContext,
    SyncContext,
    SystemContext,
)
from fedcli.fl.hooks import RoundHook
from fedcli.fl.state import (
    RoundRecord,
    Summary,
    TrainState,
    eval_interval,
    evaluation_points,  # noqa: F401
    lr_at,
    planned_evaluations,
)
from fedcli.fl.store import MemoryStore, build_store
from fedcli.fl.trainers import choose_trainer
from fedcli.fl.view import PartView

if TYPE_CHECKING:
    from fedcli.config import TrainConfig


class Simulation:
    """One ``fedcli train`` experiment. ``setup`` loads everything; ``run`` trains and logs."""

    def __init__(self, cfg: TrainConfig, comm: Communicator | None = None, progress=None):
        self.cfg = cfg
        self.comm = comm or Communicator()
        self.progress = progress
        self.round_hooks: list[RoundHook] = []  # after every round, with their contexts (``run``, ``add_round_hook``)
        self.local_layers: list[int] = []  # layers the method never synchronizes (FedRep's head), set by ``setup``
        self.step_hooks: list = []  # after every local step, on every process (``add_step_hook``)
        self.store = MemoryStore()  # per-client state across rounds (``setup`` chooses memory or disk)
        self.chunk_blocker: str | None = "not set up"  # why rounds are not taken chunk by chunk (``setup``)
        self.record = RoundRecord()  # what the last round produced (``run_round``, ``evaluate_and_log``)
        self.run_dir = None  # the run directory (the root process's; None elsewhere): see ``attach``
        self.writers = None  # the round hook writing its CSVs (``attach``)
        self.system = None  # the system model (--system; fedcli.fl.system), built by ``setup``
        self.system_round = None  # its plan of the round being run (participants, their steps), or None
        self.timing = None  # the records a run keeps to be re-timed (fedcli.fl.timing), built by ``setup``
        self.view = PartView(self)  # what every part hook gets, never the simulation (fedcli.fl.view)
        self._contexts: dict = {}  # the helpers' declared contexts, built once (``context``)

    def attach(self, run_dir, writers: RoundHook | None = None) -> None:
        """Write this run's CSVs into ``run_dir`` (None: none) with ``writers``, the caller's round hook
        (``fedcli.results.runlog.RunLog``): the first round hook, so a checkpoint records the rows of the round it
        closes. Attaching another run directory replaces the writers of the last one."""
        self.round_hooks = [h for h in self.round_hooks if h is not self.writers]
        self.run_dir, self.writers = run_dir, (writers if run_dir is not None else None)
        if self.writers is not None:
            self.round_hooks.insert(0, self.writers)

    def add_round_hook(self, hook) -> None:
        """Call ``hook`` after every round: a :class:`RoundHook`, or a function ``hook(sim, state)``."""
        self.round_hooks.append(hook if isinstance(hook, RoundHook) else CallRoundHook(hook, self))

    def add_step_hook(self, hook) -> None:
        """Call ``hook(ctx, state)`` after every local step (ctx: this run's :class:`LogContext`)."""
        self.step_hooks.append(hook)

    def context(self, cls: type) -> object:
        """This run's context ``cls`` (``fedcli.fl.context``): what a helper module may read of it, built once."""
        if not (isinstance(cls, type) and issubclass(cls, Context)) or cls is Context:
            raise TypeError(f"{cls!r} is not a context of the engine")
        if cls not in self._contexts:
            self._contexts[cls] = cls(self)
        return self._contexts[cls]

    # ------------------------------------------------------------------ setup
    def setup(self, dataset=None, partition=None) -> "Simulation":
        """Everything a run needs before its first round, in order: the device, the data and its partition, the model,
        the parts, the data on the device, the parts' own set-up, the budget. ``dataset``/``partition``: already
        loaded (a sweep worker's memo); else loaded here (once per node under MPI)."""
        cfg = self.cfg
        self.device = build.place(cfg, self.comm.local_rank)
        data = build.load(cfg, self.comm, dataset, partition)
        self.dataset, self.partition = data.dataset, data.partition
        self.client_indices, self.sizes = data.client_indices, data.sizes
        self.batch_size, self.notes, self.n_active = data.batch_size, data.notes, data.n_active
        self.model, self.layers, self.global_params, self.global_buffers, self.sync_buffers = build.global_model(
            cfg, self.dataset, self.device
        )
        self._build_parts()
        (self.train_x, self.train_y, self.test_x, self.test_y, self.val_x, self.val_y, self.pad_fill) = (
            build.device_data(self.dataset, self.device)
        )
        self._set_up_parts()
        self.plan = self.run_plan()  # the rounds and local steps of the run
        self.eval_every = eval_interval(cfg, self.plan)  # about 20 evaluations by default
        # a run whose training does not depend on the system model records what re-timing it needs (fedcli.fl.timing)
        retimable = timing.refusal(vars(self.cfg)) is None
        shape = system.measure(self.context(SystemContext)) if self.cfg.system or retimable else None
        self.timing = timing.Recorder(shape) if retimable else None
        self.system = system.build(self.context(SystemContext), shape)  # None without --system; checks the deadline
        return self

    def _build_parts(self) -> None:
        """The method's five parts (``fedcli.fl.build.method_parts``), the ledger, the trainer, the client store and
        the personalization."""
        from fedcli.fl.personal import build_personalization, local_layers

        cfg = self.cfg
        self.method, self.part_names, made = build.method_parts(cfg, self.layers)
        self.local_step, self.codec, self.init, self.server, self.schedule = (made[f] for f in build.FAMILIES)
        self.ledger = Ledger([li.numel for li in self.layers])
        self.trainer = choose_trainer(cfg.trainer, self.model, self.device, cfg.cohort_chunk, cfg.precision)
        # per-client state: in memory while small, on disk beyond --client-state-limit-mb
        self.store = build_store(self.context(StoreContext))
        build.check_custom_model(cfg, self.model, self.dataset, self.trainer.name)
        self.local_layers = local_layers(self.context(StoreContext))  # layers never synchronized (FedRep's head)
        # per-client local models + personal_acc (None: not personalized)
        self.personal = build_personalization(self.context(StoreContext))
        build.check_client_val(cfg, self.personal)

    def _set_up_parts(self) -> None:
        """Each part's ``setup`` (a part may hold back training data), then the mini-batch source over what is left
        and whether ``--cohort-chunk`` may take whole rounds."""
        for part in self.parts.values():
            part.setup(self.view)
            own = part.training_indices(self.view)
            if own is not None:  # the part holds back some of each client's training data
                self.client_indices = own
                self.sizes = np.array([t.numel() for t in own])
        # every part's mini-batches, by purpose, over the training splits the parts left
        self.batches = BatchSource(
            self.cfg.seed, self.client_indices, self.batch_size, self.cfg.drop_last, self.dataset.augment, self.device
        )
        # why --cohort-chunk cannot take whole rounds chunk by chunk (None: it can; fedcli.fl.chunked)
        self.chunk_blocker = chunked.blocker(self.context(SyncContext))

    def run_plan(self) -> RunPlan:
        """The rounds and local steps of this run (``fedcli.fl.budget.plan_run`` over the schedule's round length and
        the clients' training data as the parts left it)."""
        return plan_run(
            self.cfg, self.schedule.round_length, [int(n) for n in self.sizes], self.n_active, self.batch_size
        )

    def manifest(self) -> dict:
        """The run directory's manifest of this run (``fedcli.fl.build.manifest``)."""
        return build.manifest(self.context(ManifestContext))

    def personal_tables(self) -> tuple[str, ...]:
        """The store prefixes of each client's personal model (the model a personalized method evaluates,
        ``fedcli.fl.personal``): what a completed run keeps of its client state (``--client-state-keep personal``)."""
        return () if self.personal is None else (f"{self.personal.prefix}.p:", f"{self.personal.prefix}.b:")

    def choices(self) -> dict:
        """What the run chose once it ran, for the manifest's closing update: ``cohort_chunk_chosen``, the clients per
        vectorized call the trainer chose at the first local step (``--cohort-chunk 0`` on CUDA; 0: the whole cohort
        fit; None: no local step ran)."""
        return {"cohort_chunk_chosen": self.trainer.chunk} if self.trainer.chooses_chunk else {}

    # ------------------------------------------------------------------ training
    def cohort_weights(self, cohort_ids: list[int], mine: list[int]) -> torch.Tensor:
        if self.cfg.weighting == "samples":
            total = float(self.sizes[cohort_ids].sum())
            return torch.tensor([self.sizes[c] / total for c in mine], dtype=torch.float64)
        return torch.full((len(mine),), 1.0 / len(cohort_ids), dtype=torch.float64)

    @property
    def parts(self) -> dict:
        """The run's parts by family, in the order the engine calls their hooks (the schedule last)."""
        return {family: getattr(self, family) for family in build.FAMILIES}

    @property
    def full_participation(self) -> bool:
        """Every client takes part in every round: all are sampled, and the system model (if on) leaves none out
        (availability, deadline). A client then trains and is evaluated on the same process every round, which the
        per-client stores rely on (``fedcli.fl.store.publish``)."""
        everyone = self.n_active >= len(self.client_indices)
        return everyone and (self.system is None or not self.system.may_leave_out)

    # ------------------------------------------------------------------ the rounds, top to bottom
    def run(self, state: TrainState | None = None, progress=None) -> Summary:
        """Train until the iteration budget is spent; ``state`` continues an interrupted run; ``progress``: called
        with each metrics row (else the one given to the constructor)."""
        if progress is not None:
            self.progress = progress
        state = state or TrainState(next_eval=self.eval_every)
        t0 = time.perf_counter() - state.wall_s
        for hook in self.round_hooks:
            hook.begin(self.context(hook.context), state)
        while not self.done(state):
            self.run_round(state)
            state.wall_s = time.perf_counter() - t0
            if self.progress_point(state) >= state.next_eval or self.done(state):  # an evaluation point, or the end
                self.evaluate_and_log(state)
            self._end_round(state)
        if self.system is not None:
            self.system.check_trained(self.ledger.params, state.round_idx)  # nobody trained: an error, not a completion
        state.summary.close(state, self.ledger, sum(li.numel for li in self.layers), self.cfg)
        state.summary.wall_s = time.perf_counter() - t0
        return state.summary

    def _end_round(self, state: TrainState) -> None:
        """The round hooks at a round's end: those that record it (the CSV rows, the trackers: a report shows a
        blow-up), then the divergence guard's check (``--diverge-factor``: a finite blow-up stops the run, exit 4), then
        those that keep it (``RoundHook.keeps``: the checkpointer), so no checkpoint holds a round that diverged."""
        for keeps in (False, True):
            for hook in [h for h in self.round_hooks if h.keeps is keeps]:
                hook(self.context(hook.context), state)
            if not keeps:
                guard.check_blowup(self.context(GuardContext), state)

    def planned_evaluations(self) -> int | None:
        """How many metrics.csv rows a complete run writes (``fedcli.fl.state.planned_evaluations``)."""
        return planned_evaluations(self.cfg, self.plan, self.eval_every)

    def done(self, state: TrainState) -> bool:
        return self.plan.done(state.round_idx, state.iteration)

    def progress_point(self, state: TrainState) -> int:
        """Where evaluation points are counted: rounds under a round budget, else iterations."""
        return self.plan.progress(state.round_idx, state.iteration)

    def due_layers(self, step: int, steps: int) -> list[int]:
        """The layers synchronized after local step ``step`` of a round of ``steps`` (``fedcli.fl.sync.due_layers``)."""
        return sync.due_layers(self.schedule, self.local_layers, bool(self.cfg.local_epochs), step, steps)

    def sync_plan(self, steps: int) -> list[tuple[int, list[int]]]:
        """The synchronizations of a round of ``steps`` local steps: (step, layers), in order (``due_layers``)."""
        return [(j, due) for j in range(1, steps + 1) if (due := self.due_layers(j, steps))]

    def _train_cohort(self, state: TrainState, cohort_ids: list, mine: list, steps: int):
        """This process's clients ``mine`` of the round's cohort opened, trained and closed, at once or
        ``--cohort-chunk`` K at a time (see ``run_round``). Returns (cohort, each client's mean local loss, rows that
        went non-finite)."""
        round_idx, start = state.round_idx, state.iteration
        pieces = chunked.round_chunks(self.context(SyncContext), cohort_ids, mine)
        if pieces is None:
            cohort = self.open_cohort(mine, cohort_ids, round_idx, steps)
            round_losses = self.local_phase(state, cohort, start, steps, self.synchronize)
            mean_losses = self.close_cohort(state, cohort, round_losses)
            dead = guard.dead_rows(self.device, cohort) if cohort.skipped else None
        else:
            total = chunked.RoundSum(self.context(SyncContext), cohort_ids)
            means = []
            for clients in pieces:
                cohort = self.open_cohort(clients, cohort_ids, round_idx, steps)
                round_losses = self.local_phase(state, cohort, start, steps, total.add)
                means.append(self.close_cohort(state, cohort, round_losses))
                cohort = round_losses = None  # this chunk's stacked tensors go before the next chunk's are made
            total.finish(round_idx)
            weights = self.cohort_weights(cohort_ids, mine)  # this process's clients as one cohort again
            cohort = Cohort(mine, weights, {}, {}, round_idx=round_idx, cohort_ids=cohort_ids)
            mean_losses, dead = torch.cat(means), None
        return cohort, mean_losses, dead

    def run_round(self, state: TrainState) -> None:
        """One round: sample and initialize the cohort, local steps with layer syncs, schedule adjustment.

        With ``--cohort-chunk K`` and a round whose parts treat every client on its own (``fedcli.fl.chunked``), the
        cohort of this process is taken K clients at a time end to end (initialized, trained, its state stored, its
        uploads added to the round's sum), so the memory a round holds is bounded by K, not by the cohort."""
        cfg, comm = self.cfg, self.comm
        round_idx = state.round_idx
        self.record = RoundRecord(round_idx, state.iteration)
        cohort_ids = sampled = sample_cohort(cfg.seed, round_idx, len(self.client_indices), self.n_active)
        if self.system is not None:
            self.system_round = system.plan_system_round(
                self.system, self.plan, state, sampled, self.n_active, self.sync_plan
            )
            cohort_ids = self.system_round.participants
            if not cohort_ids:  # nobody available, or nobody meets the deadline: the round passes with no training
                self.close_system_round(state, self.plan.round_steps(state.iteration, sampled))
                return
        mine = assign_clients(cohort_ids, self.sizes, comm.rank, comm.size)
        steps = self.plan.round_steps(state.iteration, cohort_ids)
        timed = None  # without the system model, the round as timing.csv records it (its syncs taken before it runs)
        if self.system is None and self.timing is not None:
            each = dict(zip(cohort_ids, self.plan.client_round_steps(cohort_ids, steps)))
            timed = system.RoundPlan(cohort_ids, cohort_ids, each, syncs=self.sync_plan(steps), round_idx=round_idx)
        cohort, mean_losses, dead = self._train_cohort(state, cohort_ids, mine, steps)
        self.store.end_round(comm)  # a disk store may compact its files here (collective, before any checkpoint)
        # each client's mean local loss, summed over the cohort (``cohort_sum``); kept by the root only, so the
        # all-reduce at the next evaluation adds zeros to it (nothing but the cohort sum's own rounding)
        total = sync.cohort_sum(comm, cohort, [mean_losses], None, dead)
        if comm.is_root:
            state.loss_sum += float(total[0])
            state.loss_count += len(cohort_ids) - len(cohort.skipped)
        self.record.skips = list(cohort.skips)
        self.record.adjustment = self.schedule.adjustment  # made by its end_round (close_cohort)
        if self.system is not None:
            self.close_system_round(state)
            return
        if timed is not None:
            timed.extra_up, timed.extra_down = self.ledger.take_round()  # the copies its parts moved beyond the syncs
            self.record.timing = self.timing.row(timed, state.iteration)
        state.round_idx += 1

    def close_system_round(self, state: TrainState, idle_steps: int = 0) -> None:
        """The round's simulated time and system.csv row (``fedcli.fl.system.close_system_round``), and the round
        counted; ``idle_steps``: a round with no participant, whose steps pass with no training."""
        plan, n_layers = self.system_round, len(self.layers)
        self.record.system = system.close_system_round(self.system, plan, state, self.ledger, n_layers, idle_steps)
        if self.timing is not None:
            self.record.timing = self.timing.row(plan, state.iteration)
        self.system_round = None
        state.round_idx += 1

    def open_cohort(self, clients: list[int], cohort_ids: list[int], round_idx: int, steps: int) -> Cohort:
        """``clients`` of the round's cohort stacked from the global model, initialized, the parts' round begun."""
        cohort = Cohort.from_global(
            clients, self.cohort_weights(cohort_ids, clients), self.global_params, self.global_buffers
        )
        cohort.round_idx, cohort.cohort_ids = round_idx, cohort_ids
        each = system.client_steps(self.system_round, self.plan, clients, steps)  # --local-epochs, keep-partial
        cohort.steps = torch.tensor(each, device=self.device)
        self.init.download(self.view, cohort)  # the server's side of sending the models (collective under MPI)
        self.init.initialize(self.view, cohort)
        if self.cfg.bn_buffers == "never":
            slots.restore_buffers(self.view, cohort)  # the author code's FedLAMA: each slot keeps its own statistics
        if self.personal is not None:  # --personal-eval after-init: the models before local training
            self.personal.initialized(self.view, cohort, "init")
        for part in self.parts.values():
            clientstate.open_round(part, self.view, cohort)  # its declared client state loaded, its begin_round
        if self.personal is not None:
            self.personal.initialized(self.view, cohort, "begin")
        return cohort

    def local_phase(self, state: TrainState, cohort: Cohort, start: int, steps: int, sync) -> torch.Tensor:
        """The cohort's ``steps`` local steps from iteration ``start``, ``sync(cohort, layers, step, last_sync,
        round_end, losses)`` wherever the schedule says (``synchronize``, or a chunked round's sum); returns each
        client's summed local loss [K] (float64)."""
        cfg, round_idx, mine = self.cfg, cohort.round_idx, cohort.clients
        state.iteration = start
        plan = self.batches.plan("train", mine, round_idx, steps) if mine else None
        last_sync = [0] * len(self.layers)
        round_losses = torch.zeros(len(mine), dtype=torch.float64, device=self.device)
        # with --local-epochs or the system model's keep-partial, clients whose steps are done are frozen (active mask)
        uneven = bool(cfg.local_epochs) or (self.system_round is not None and self.system_round.uneven)
        for j in range(1, steps + 1):
            lr = lr_at(cfg, state.iteration, round_idx)
            if mine:
                idx = plan.idx[j - 1]
                x = self.train_x[idx]
                if plan.shifts is not None:
                    x = cifar_augment(x, plan.shifts[j - 1], plan.flips[j - 1], fill=self.pad_fill)
                active = None if not uneven else (cohort.steps >= j)
                if active is not None and bool(active.all()):
                    active = None  # every client still training: no [K, ...] masks to build
                cohort.ctx = StepContext(
                    round_idx, j, state.iteration, lr, active, x, self.train_y[idx], plan.mask[j - 1]
                )
                fused = self.local_step.fused_lr(lr, active) if self.trainer.fuses_sgd else None
                if fused is not None:  # plain SGD applied client by client inside the loop trainer
                    _, losses = self.trainer.grads(cohort, x, self.train_y[idx], plan.mask[j - 1], lr=fused)
                else:
                    grads, losses = self.local_step.gradients(self.view, cohort, x, self.train_y[idx], plan.mask[j - 1])
                    self.local_step.step(cohort, grads, lr, active)
                grads = None  # the loop trainer reuses its gradient buffers once nobody holds them
                round_losses += losses.double() if active is None else losses.double() * active
            state.iteration += 1
            due = self.due_layers(j, steps)  # with --local-epochs, the whole model at the round's end only
            if j == steps and self.personal is not None:  # each client's trained model, before the round-end sync
                self.personal.capture(self.view, cohort)
            if due:
                sync(cohort, due, j, last_sync, round_end=(j == steps), losses=round_losses)
            for hook in self.step_hooks:
                hook(self.context(LogContext), state)
        cohort.end_iteration = state.iteration
        return round_losses

    # ------------------------------------------------------------------ synchronization
    @torch.no_grad()
    def synchronize(
        self,
        cohort: Cohort,
        layers: list[int],
        step: int,
        last_sync: list[int],
        round_end: bool,
        losses: torch.Tensor | None = None,
    ) -> None:
        """Average the given layers over the cohort (one flat all-reduce) and push them back (``fedcli.fl.sync``).

        ``losses`` (the clients' running round losses) are checked with the uploads by the divergence guard."""
        ctx, guarded = self.context(SyncContext), self.context(GuardContext)
        names = sync.sync_names(ctx, layers, round_end)
        flat = guard.guarded_average(guarded, cohort, names, sync.uploads(ctx, cohort, names, step), step, losses)
        sync.apply_average(ctx, names, flat)
        guard.reset_skipped_rows(guarded, cohort)
        self.schedule.synchronized(self.view, cohort, layers, step, last_sync)  # FedLAMA's discrepancy, pre copy-back
        sync.copy_back(cohort, names, self.global_params, self.global_buffers)
        sync.count_sync(ctx, layers, cohort.total)
        for l in layers:
            last_sync[l] = step

    def close_cohort(self, state: TrainState, cohort: Cohort, round_losses: torch.Tensor) -> torch.Tensor:
        """The parts' round ends for ``cohort``; each client's mean local loss [K, 1] (float64)."""
        round_losses = guard.settle_skipped(self.context(GuardContext), state, cohort, round_losses)
        if self.cfg.bn_buffers == "never":
            slots.keep_buffers(self.view, cohort)
        for part in self.parts.values():
            clientstate.close_round(part, self.view, cohort)  # its end_round, its declared client state kept
        guard.forget_nonfinite(self.store, cohort)
        if not cohort.clients:
            return torch.zeros(0, 1, dtype=torch.float64, device=self.device)
        return (round_losses / cohort.steps.double()).view(-1, 1)

    def evaluate_and_log(self, state: TrainState) -> dict:
        """Evaluate the global model: the metrics row, the summary, the progress (``fedcli.fl.evaluation``)."""
        return evaluation.evaluate_and_log(self.context(EvalContext), state)


class CallRoundHook(RoundHook):
    """A plain function ``fn(sim, state)`` as a round hook (``Simulation.add_round_hook``): it gets the engine."""

    def __init__(self, fn, sim: Simulation):
        self.fn, self.sim = fn, sim

    def __call__(self, ctx, state) -> None:
        self.fn(self.sim, state)
