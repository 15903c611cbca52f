"""The global model's evaluation (``Simulation.evaluate_and_log``): its mean loss and accuracy on the test set (or the
validation set), each process evaluating whole fixed chunks and the sums added in chunk order, so the numbers are the
same bits for any number of processes (docs/architecture.md, "The engine")."""

from __future__ import annotations

import math

import torch
from torch.func import functional_call

from fedcli.fl.context import EvalContext
from fedcli.fl.state import lr_at

EVAL_BATCH = 1024  # test samples per forward pass of the global model
PIECE = 128  # samples per forward pass within a chunk (activations that stay in cache; docs/method-notes.md)


@torch.no_grad()
def evaluate(
    model, global_params: dict, global_buffers: dict, trainer, comm, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of the global model (``model`` called with ``global_params`` and
    ``global_buffers``, the input laid out by ``trainer.eval_input``) on samples ``x``, labels ``y``. Each rank of
    ``comm`` evaluates a slice of the fixed chunks."""
    model.eval()
    n = y.numel()
    chunks = math.ceil(n / EVAL_BATCH)  # fixed chunks, whole ones per process, summed in order: exact for any split
    mine = list(range(chunks * comm.rank // comm.size, chunks * (comm.rank + 1) // comm.size))
    sums = torch.zeros(len(mine), 2, dtype=torch.float64)
    with torch.inference_mode():
        for row, c in enumerate(mine):
            s, e = c * EVAL_BATCH, min(n, (c + 1) * EVAL_BATCH)
            # every model of the zoo gives a sample the same logits bits in a piece as in the whole chunk, in
            # either layout (tests/engine/test_trainers.py), so the sums are those of one forward pass per chunk
            out = torch.cat(
                [
                    functional_call(
                        model, (global_params, global_buffers), (trainer.eval_input(x[a : min(e, a + PIECE)]),)
                    )
                    for a in range(s, e, PIECE)
                ]
            )
            sums[row, 0] = torch.nn.functional.cross_entropy(out.float(), y[s:e], reduction="sum").item()
            sums[row, 1] = (out.argmax(1) == y[s:e]).sum().item()
    tot = comm.client_sum([sums], None, mine, chunks)
    return float(tot[0]) / n, float(tot[1]) / n


def evaluate_global(ctx: EvalContext, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """The run's global model on samples ``x``, labels ``y`` (the test set, or the validation set): (mean loss,
    accuracy), each rank evaluating a slice (:func:`evaluate`)."""
    return evaluate(ctx.model, ctx.global_params, ctx.global_buffers, ctx.trainer, ctx.comm, x, y)


def evaluate_and_log(ctx: EvalContext, state) -> dict:
    """An evaluation point (``Simulation.run``): the clients' mean train loss since the last one (all-reduced), the
    global model on the test set (and the validation set, ``--val-fraction``), the clients' own models
    (``personal_acc``, personalized methods): the metrics row, kept as ``record.metrics`` for the round hooks, added
    to the summary and shown by the progress display. Returns the row."""
    while state.next_eval <= ctx.progress_point(state):
        state.next_eval += ctx.eval_every
    tot = ctx.comm.allreduce_(torch.tensor([state.loss_sum, float(state.loss_count)], dtype=torch.float64))
    train_loss = float(tot[0] / tot[1]) if float(tot[1]) > 0 else float("nan")
    state.loss_sum, state.loss_count = 0.0, 0
    test_loss, acc = evaluate_global(ctx, ctx.test_x, ctx.test_y)
    row = {
        "round": state.round_idx,
        "iteration": state.iteration,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_acc": acc,
        "comm_params": ctx.ledger.params,
        "comm_bytes": ctx.ledger.bytes,
        "wall_s": round(state.wall_s, 3),
        "lr": lr_at(ctx.cfg, state.iteration - 1, state.round_idx - 1),
        "skipped_clients": state.skipped,
    }
    if ctx.system is not None:
        row["sim_time_s"] = state.sim_time_s
    if ctx.val_y is not None:  # --val-fraction: the global model on the held-out validation set
        row["val_loss"], row["val_acc"] = evaluate_global(ctx, ctx.val_x, ctx.val_y)
    personal = ctx.personal.evaluate(ctx.view, state.round_idx) if ctx.personal is not None else None
    row["personal_acc"] = "" if personal is None else personal  # each client's model on its local test split
    if ctx.cfg.client_val_fraction > 0:  # the same models on each client's own validation samples
        row["personal_val_acc"] = ctx.personal.val_acc
    state.summary.add(row, personal)
    ctx.record.metrics = row
    if ctx.progress is not None:
        ctx.progress(row)
    return row
