"""The global model's evaluation (``Simulation.evaluate_and_log``): its mean loss and accuracy on the test set (or the
validation set), each process evaluating whole fixed chunks and the sums added in chunk order, so the numbers are the
same bits for any number of processes (docs/architecture.md, "The engine")."""

from __future__ import annotations

import math

import torch
from torch.func import functional_call

EVAL_BATCH = 1024  # test samples per forward pass of the global model
PIECE = 128        # samples per forward pass within a chunk (activations that stay in cache; docs/method-notes.md)


@torch.no_grad()
def evaluate(model, global_params: dict, global_buffers: dict, trainer, comm, x: torch.Tensor,
             y: torch.Tensor) -> tuple[float, float]:
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
            out = torch.cat([functional_call(model, (global_params, global_buffers),
                                             (trainer.eval_input(x[a: min(e, a + PIECE)]),))
                             for a in range(s, e, PIECE)])
            sums[row, 0] = torch.nn.functional.cross_entropy(out.float(), y[s:e], reduction="sum").item()
            sums[row, 1] = (out.argmax(1) == y[s:e]).sum().item()
    tot = comm.client_sum([sums], None, mine, chunks)
    return float(tot[0]) / n, float(tot[1]) / n
