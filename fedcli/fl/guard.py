"""The divergence guard (``--on-diverge``): a client whose upload or running loss is non-finite is caught at a
synchronization, before anything reaches the global model; ``stop`` ends the run (exit 4), ``skip-client`` drops the
client for the rest of the round (weight 0, the others renormalized over the whole cohort) and records it
(``skipped.csv``). The engine calls these functions with its :class:`fedcli.fl.context.GuardContext`."""

from __future__ import annotations

import torch

from fedcli.errors import DivergenceError
from fedcli.fl.cohort import Cohort
from fedcli.fl.context import GuardContext
from fedcli.fl.sync import cohort_sum


def collective(err: Exception) -> Exception:
    """Mark an error that every process raises at the same point (the MPI entry then needs no abort)."""
    err.collective = True
    return err


def check_blowup(ctx: GuardContext, state) -> None:
    """``--diverge-factor F``: an evaluation whose train or test loss is finite but above F x ln(C) -- F times the
    cross-entropy of a uniform guess over the C classes, where every run starts -- is divergence too (exit 4),
    checked after the round's rows are written (so the report shows the blow-up). Not from a paper: fedcli's rule
    for a run that ended "completed" at a loss of 70,000 and chance accuracy (issue 29); a scale-free reference, so a
    blow-up before the first evaluation is caught as well. A train loss (the clients' own mini-batches) above it stops
    at once; the global model's test loss only when it was above it at the previous evaluation too: one spike of it
    is not divergence (a BatchNorm net at a high lr, evaluated with running statistics that a few steps have barely
    moved, scored a test loss of 9,353 after 2 iterations and then recovers; issue 37), a lasting one is. Every
    process computes the same all-reduced losses, so every process decides the same."""
    import math

    row, factor = ctx.record.metrics, ctx.cfg.diverge_factor
    if not factor or row is None:
        return
    chance = math.log(max(2, int(ctx.dataset.num_classes)))
    blown = lambda r, what: math.isfinite(float(r[what])) and float(r[what]) > factor * chance  # noqa: E731
    history = state.summary.history
    previous = history[-2] if len(history) >= 2 and history[-1] is row else None
    for what in ("train_loss", "test_loss"):
        loss = float(row[what])
        if blown(row, what) and (what == "train_loss" or (previous is not None and blown(previous, what))):
            raise collective(
                DivergenceError(
                    f"training diverged in round {state.round_idx} (iteration {state.iteration}): the "
                    f"{what.replace('_', ' ')} "
                    f"{loss:.6g}{'' if what == 'train_loss' else ', as at the previous evaluation,'} is "
                    f"more than --diverge-factor {factor:g} times ln({ctx.dataset.num_classes}) = "
                    f"{chance:.4g}, the "
                    f"loss of a uniform guess (finite, but blown up; try a smaller --lr, or "
                    f"--diverge-factor 0 to let it go on)"
                )
            )


def scrub_rows(obj, dead: torch.Tensor) -> None:
    """Replace non-finite values in the ``dead`` rows of every stacked per-client tensor [K, ...] in ``obj``."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.dim() >= 1 and obj.shape[0] == dead.numel():
            obj[dead] = torch.nan_to_num(obj[dead], nan=0.0, posinf=0.0, neginf=0.0)
    elif isinstance(obj, dict):
        for v in obj.values():
            scrub_rows(v, dead)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            scrub_rows(v, dead)


def guarded_average(
    ctx: GuardContext, cohort: Cohort, names: list, uploads: list[torch.Tensor], step: int, losses: torch.Tensor | None
) -> torch.Tensor:
    """The cohort's weighted sum of every upload (one flat all-reduce), with the divergence guard.

    A client whose upload or running loss is non-finite is caught here, before anything reaches the
    global model. The check costs one sum over the local sums (a non-finite row makes them non-finite);
    only when it is not finite are rows inspected. Flags (one per cohort member: 1 loss, 2+i upload i)
    travel in the same all-reduce, so every process takes the same decision. ``--on-diverge stop``
    raises DivergenceError (exit 4); ``skip-client`` drops the client for the rest of the round (weight 0,
    the others renormalized over the whole cohort), resets it to the global model, and the sync is redone.
    """
    ids = list(cohort.cohort_ids) or list(cohort.clients)
    dead = dead_rows(ctx.device, cohort)
    dtype = uploads[0].dtype if uploads else torch.float32
    extra = [] if losses is None else [losses.reshape(-1, 1).to(dtype)]  # the losses ride along: p_i * loss_i
    flat = cohort_sum(ctx.comm, cohort, uploads + extra, cohort.weights, dead)
    flat, loss_total = (flat[:-1], flat[-1]) if extra else (flat, 0.0)
    # one pass, one host sync; a NaN/inf in any client's upload or loss makes the cohort's sum non-finite
    if bool(torch.isfinite(flat.sum(dtype=torch.float64) + loss_total)):
        return flat
    code = nonfinite_codes(uploads, losses, dead).to(torch.float64).view(-1, 1)
    codes = ctx.comm.client_gather(code, cohort.positions, cohort.total).view(-1)
    new = [(ids[i], int(c)) for i, c in enumerate(codes.cpu().tolist()) if c]
    if not new:
        return flat
    what, where = stop_if_asked(ctx.cfg.on_diverge, new, names, cohort.round_idx, step)
    skipped, skips = cohort.skipped, cohort.skips
    for c, code in new:
        skipped.add(c)
        skips.append({"round": cohort.round_idx, "step": step, "client": c, "reason": what(code)})
    full = ctx.cohort_weights(ids, ids)
    kept = float(sum(float(full[i]) for i, c in enumerate(ids) if c not in skipped))
    if kept <= 0.0:
        raise collective(DivergenceError(f"{where}: every client of the cohort has a non-finite loss or update"))
    keep = torch.tensor([c not in skipped for c in cohort.clients], dtype=torch.float64)
    cohort.weights = ctx.cohort_weights(ids, cohort.clients) * keep / kept
    return cohort_sum(ctx.comm, cohort, uploads, cohort.weights, dead_rows(ctx.device, cohort))


def stop_if_asked(on_diverge: str, new: list[tuple[int, int]], names: list, round_idx: int, step: int):
    """``--on-diverge stop``: DivergenceError (exit 4) naming the first client of ``new`` ((client, code) with the codes
    of :func:`nonfinite_codes`) and what of it is non-finite. Otherwise (what, where): the words for the records."""
    what = lambda code: "loss" if code == 1 else f"update of {names[code - 2][1]}"  # noqa: E731
    where = f"training diverged in round {round_idx + 1}, local step {step}"  # rounds counted from 1
    if on_diverge == "stop":
        c, code = new[0]
        raise collective(
            DivergenceError(
                f"{where}: client {c} has a non-finite {what(code)}; --on-diverge skip-client drops such "
                f"updates instead"
            )
        )
    return what, where


def nonfinite_codes(
    uploads: list[torch.Tensor], losses: torch.Tensor | None, dead: torch.Tensor | None
) -> torch.Tensor:
    """Per local client: 0 fine, 1 non-finite loss, 2+i non-finite upload i (the first one)."""
    code = None
    for i, x in enumerate(uploads):
        fin = torch.isfinite(x)
        bad = ~(fin.flatten(1).all(1) if fin.dim() > 1 else fin)
        code = torch.zeros(bad.shape[0], dtype=torch.long) if code is None else code
        code = torch.where(bad.cpu() & (code == 0), torch.full_like(code, i + 2), code)
    if losses is not None:
        code = torch.zeros(losses.shape[0], dtype=torch.long) if code is None else code
        code = torch.where((~torch.isfinite(losses)).cpu(), torch.ones_like(code), code)
    if code is not None and dead is not None:
        code[dead.cpu()] = 0
    return code if code is not None else torch.zeros(0, dtype=torch.long)


def dead_rows(device, cohort: Cohort) -> torch.Tensor | None:
    """Bool [K]: this process's clients skipped this round (``--on-diverge skip-client``), or None."""
    skipped = cohort.skipped
    if not skipped or not any(c in skipped for c in cohort.clients):
        return None
    return torch.tensor([c in skipped for c in cohort.clients], device=device)


@torch.no_grad()
def reset_skipped_rows(ctx: GuardContext, cohort: Cohort) -> None:
    """A skipped client goes back to the global model (its own progress this round is dropped)."""
    dead = dead_rows(ctx.device, cohort)
    if dead is None:
        return
    for n, p in cohort.params.items():
        p[dead] = ctx.global_params[n].to(p.dtype)
    for n, b in cohort.buffers.items():
        b[dead] = ctx.global_buffers[n].to(b.dtype)


@torch.no_grad()
def settle_skipped(ctx: GuardContext, state, cohort: Cohort, round_losses: torch.Tensor) -> torch.Tensor:
    """At a round's end: leave skipped clients out of the train loss, scrub their non-finite per-client
    state (so no part stores it), and count them (TrainState.skipped; the round hooks write skipped.csv)."""
    skips = cohort.skips
    if not skips:
        return round_losses
    dead = dead_rows(ctx.device, cohort)
    if dead is not None:
        round_losses = torch.where(dead, torch.zeros_like(round_losses), round_losses)
        reset_skipped_rows(ctx, cohort)
        scrub_rows([cohort.state, cohort.opt_state], dead)
    state.skipped += len(skips)
    return round_losses


def forget_nonfinite(store, cohort: Cohort) -> None:
    """Drop a skipped client's non-finite entries from the client ``store`` (they start afresh next time)."""
    for c in cohort.skipped:
        for name in store.names():
            t = store.get(name, c)
            if isinstance(t, torch.Tensor) and not bool(torch.isfinite(t).all()):
                store.forget(name, c)
