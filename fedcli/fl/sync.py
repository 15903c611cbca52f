"""A synchronization's averaging: what it averages, each client's upload, the new global tensors, the ledger's count.

The engine's ``Simulation.synchronize`` (and a chunked round's ``fedcli.fl.chunked.RoundSum``) calls these with its
:class:`fedcli.fl.context.SyncContext`: the layers due are encoded by the codec (FedPAQ/QSGD), averaged over the
cohort, turned into the new global layer by the server part (FedAvg: the average itself; FedOpt's servers an
optimizer step on it) and counted in the ledger (Eq. 8 of the FedLAMA paper: parameters moved per synchronization).
"""

from __future__ import annotations

import torch

from fedcli.comm.communicator import unflatten
from fedcli.fl import parts
from fedcli.fl.cohort import Cohort
from fedcli.fl.context import SyncContext
from fedcli.fl.rng import torch_gen


def sync_names(ctx: SyncContext, layers: list[int], round_end: bool) -> list[tuple[str, str, int]]:
    """What a synchronization of ``layers`` averages: ("p", parameter, layer), and ("b", buffer, layer) for the
    float buffers that travel with the layer (``--bn-buffers``)."""
    names = []
    bn = ctx.cfg.bn_buffers
    for l in layers:
        names.append(("p", ctx.layers[l].name, l))
        if bn == "with-layer" or (round_end and bn == "round-end"):
            names.extend(("b", b, l) for b in ctx.sync_buffers[l])
    return names


def uploads(ctx: SyncContext, cohort: Cohort, names: list, step: int) -> list[torch.Tensor]:
    """Each cohort client's decoded upload [K, ...] of every tensor in ``names``."""
    out = []
    server, codec = ctx.server, ctx.codec
    scale = server.upload_scale(cohort)  # FedNova: each client uploads s_i * (x_i - u)
    for kind, n, l in names:
        if kind == "p":
            x = cohort.params[n]
            if scale is not None or not codec.lossless:
                prev = ctx.global_params[n]
                delta = x - prev
                if scale is not None:
                    delta = delta * parts.expand(scale.to(delta.device), delta)
                if not codec.lossless:
                    gens = [torch_gen(ctx.cfg.seed, "codec", cohort.round_idx, c, step, l) for c in cohort.clients]
                    delta = codec.encode_decode(delta, gens)
                x = prev + delta
        else:
            x = cohort.buffers[n]
        out.append(x)
    return out


@torch.no_grad()
def apply_average(ctx: SyncContext, names: list, flat: torch.Tensor) -> None:
    """The new global tensors from the cohort's flat weighted sum of the uploads (the server part's update)."""
    params, buffers = ctx.global_params, ctx.global_buffers
    targets = [params[n] if kind == "p" else buffers[n] for kind, n, _ in names]
    for (kind, n, _), target, avg in zip(names, targets, unflatten(flat, [t.shape for t in targets])):
        target.copy_(ctx.server.update(n, target, avg) if kind == "p" else avg)


def count_sync(ctx: SyncContext, layers: list[int], clients: int) -> None:
    """The ledger counts one synchronization of ``layers`` by each of the round's ``clients`` (its whole cohort, all
    processes: with the system model, the clients that took part)."""
    for l in layers:
        ctx.ledger.record_sync(l, clients, ctx.codec.bits(ctx.layers[l].numel))


@torch.no_grad()
def copy_back(cohort: Cohort, names: list, global_params: dict, global_buffers: dict) -> None:
    """Every cohort client's copy of the averaged tensors replaced by the new global ones."""
    for kind, n, _ in names:
        src = global_params[n] if kind == "p" else global_buffers[n]
        dst = cohort.params[n] if kind == "p" else cohort.buffers[n]
        dst.copy_(src.expand_as(dst))


def due_layers(schedule, local_layers, local_epochs: bool, step: int, steps: int) -> list[int]:
    """The layers synchronized after local step ``step`` of a round of ``steps``: the ``schedule``'s (with
    ``--local-epochs`` the whole model at the round's end only), less the ``local_layers`` the method keeps."""
    due = schedule.due(step, steps) if not local_epochs else schedule.due(steps, steps) if step == steps else []
    if due and local_layers:
        due = [l for l in due if l not in local_layers]
    return due


def cohort_sum(
    comm, cohort: Cohort, tensors: list[torch.Tensor], weights: torch.Tensor | None, skip: torch.Tensor | None = None
) -> torch.Tensor:
    """sum_i w_i x_i over the whole cohort (all processes), flat, the clients added in cohort order
    (``Communicator.client_sum``: the same bits for any number of worker processes); rows of ``skip`` add
    nothing, by default those of the clients dropped by --on-diverge skip-client (``cohort.skipped``), so no
    part has to leave them out itself."""
    if skip is None and cohort.skipped:
        skip = torch.tensor([c in cohort.skipped for c in cohort.clients], dtype=torch.bool)
    return comm.client_sum(tensors, weights, cohort.positions, cohort.total, skip)


def cohort_sums(
    comm,
    cohort: Cohort,
    stacked: dict[str, torch.Tensor],
    weights: torch.Tensor | None,
    skip: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`cohort_sum` of named per-client tensors [K, *shape]: name -> sum_i w_i x_i [*shape] (views of one flat
    sum: all the tensors travel in one all-reduce)."""
    flat = cohort_sum(comm, cohort, list(stacked.values()), weights, skip)
    return dict(zip(stacked, unflatten(flat, [t.shape[1:] for t in stacked.values()])))
