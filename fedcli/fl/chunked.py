"""A round's cohort taken ``--cohort-chunk K`` clients at a time, end to end, so its memory is bounded by K.

At 1% of 10,000 clients a round trains 100 clients; held stacked ``[K, ...]`` at once they cost the cohort's
parameters, gradients, optimizer and per-client state (Ditto: its personalized model, that model's gradients and
the proximal term) for all of them, about six model copies per client. When every part of the method treats a
client on its own -- its round reads only its own state and the global model, and the layers are averaged only at
the round's end -- the engine (``Simulation.run_round``) runs the cohort of each process chunk by chunk instead:
each chunk is stacked from the global model, initialized, trained for the whole round, its per-client state written
back to the client store, and its uploads added into one running weighted sum (:class:`RoundSum`); after the last
chunk that sum is all-reduced once and the server part makes the new global model. The sum adds the clients in
cohort order with one rounding per client (``fedcli.comm.communicator.ordered_sum``), and each client's local
arithmetic does not depend on the clients beside it on the CPU (models without BatchNorm: the chunked-trainer
tests), so a chunked round gives the bits of the whole-cohort round (tested on the golden runs).

Where a part needs the whole cohort (SCAFFOLD's control variates, FedAMP's and FedFomo's downloads, FedLAMA's
mid-round layer syncs and discrepancies, ``--on-diverge skip-client``'s renormalized redo, the worker pool's shared
arena), :func:`blocker` says why, and ``--cohort-chunk`` chunks the stacked trainer's vectorized call only
(``fedcli.fl.trainers.VmapTrainer``).
"""

from __future__ import annotations

import math

import torch

from fedcli.comm.communicator import Communicator, assign_clients, ordered_sum
from fedcli.fl import guard, sync
from fedcli.fl.context import SyncContext


def blocker(ctx: SyncContext) -> str | None:
    """Why this run's rounds cannot be taken chunk by chunk (None: they can). The same on every process."""
    cfg = ctx.cfg
    for family, part in ctx.parts.items():
        if not vars(type(part)).get("separable", False) or not part.separable_now():
            return f"its {family.replace('_', ' ')} ({type(part).__name__}) needs the whole cohort"
    if cfg.on_diverge != "stop":
        return f"--on-diverge {cfg.on_diverge} redoes a synchronization over the whole cohort"
    if cfg.bn_buffers == "never":
        return "--bn-buffers never keeps statistics by cohort slot"
    if type(ctx.comm).client_sum is not Communicator.client_sum:
        return "worker processes sum the cohort in one shared arena"
    return None


def round_chunks(ctx: SyncContext, cohort_ids: list[int], mine: list[int]) -> list[list[int]] | None:
    """This process's cohort clients ``mine`` in chunks of at most ``--cohort-chunk`` (None: the round is not
    chunked). Every process takes as many chunks as the process with the most clients (the chunks' client-store
    writes are collective under MPI), a process with fewer ends with empty chunks."""
    k = ctx.cfg.cohort_chunk
    if not k or ctx.chunk_blocker is not None:
        return None
    size = ctx.comm.size
    counts = [len(mine)] if size == 1 else [len(assign_clients(cohort_ids, ctx.sizes, r, size)) for r in range(size)]
    n = max(math.ceil(c / k) for c in counts)
    if n <= 1:
        return None
    return [mine[i * k : (i + 1) * k] for i in range(n)]


class RoundSum:
    """The round-end synchronization of a chunked round, chunk by chunk.

    ``add`` has the signature of ``Simulation.synchronize`` (the engine's local phase calls it at the round's end):
    it adds the chunk's uploads and its clients' running losses (the divergence guard's check, as in
    ``guard.guarded_average``) to the running ordered sum. ``finish`` all-reduces the sum once, checks it for
    divergence (``--on-diverge stop``: the first non-finite client, named as the whole-cohort round names it), and
    sets the new global model."""

    def __init__(self, ctx: SyncContext, cohort_ids: list[int]):
        self.ctx, self.cohort_ids = ctx, cohort_ids
        self.acc: torch.Tensor | None = None
        self.codes: list[tuple[int, int]] = []  # (cohort position, code) of this process's non-finite clients
        self.names, self.layers, self.step = [], [], 0

    @torch.no_grad()
    def add(
        self,
        cohort,
        layers: list[int],
        step: int,
        last_sync: list[int],
        round_end: bool,
        losses: torch.Tensor | None = None,
    ) -> None:
        ctx = self.ctx
        names = sync.sync_names(ctx, layers, round_end)
        uploads = sync.uploads(ctx, cohort, names, step)
        dtype = uploads[0].dtype if uploads else torch.float32
        extra = [] if losses is None else [losses.reshape(-1, 1).to(dtype)]
        self.acc = ordered_sum(uploads + extra, cohort.weights, cohort.positions, out=self.acc)
        # a non-finite sum stays non-finite: the chunk that made it so, and every later one, names its clients
        if not bool(torch.isfinite(self.acc.sum(dtype=torch.float64))):
            codes = guard.nonfinite_codes(uploads, losses, None).tolist()
            self.codes.extend((p, c) for p, c in zip(cohort.positions, codes) if c)
        self.names, self.layers, self.step, self.has_losses = names, layers, step, bool(extra)

    @torch.no_grad()
    def finish(self, round_idx: int) -> None:
        ctx = self.ctx
        flat = ctx.comm.allreduce_(self.acc)
        flat, loss_total = (flat[:-1], flat[-1]) if self.has_losses else (flat, 0.0)
        if not bool(torch.isfinite(flat.sum(dtype=torch.float64) + loss_total)):
            code = torch.zeros(len(self.cohort_ids), 1, dtype=torch.float64)
            for p, c in self.codes:
                code[p, 0] = c
            code = ctx.comm.allreduce_(code).view(-1)  # each position has one contributor
            new = [(self.cohort_ids[i], int(c)) for i, c in enumerate(code.tolist()) if c]
            if new:
                guard.stop_if_asked(ctx.cfg.on_diverge, new, self.names, round_idx, self.step)
        sync.apply_average(ctx, self.names, flat)
        sync.count_sync(ctx, self.layers, len(self.cohort_ids))
