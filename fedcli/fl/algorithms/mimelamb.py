"""Mime-LAMB (Karimi, Li, Li, Algorithm 1, red boxes): Fed-LAMB's local step (``fedcli.fl.algorithms.fedlamb``)
with a server whose v_hat comes from the cohort's full-batch gradients (helpers: ``fedcli.fl.adaptive``):

``vhat-fullgrad``  Mime-LAMB (lines 17, 21-23): each cohort client computes its full-batch gradient at the
                   global model at the round's start; v <- b2 v + (1 - b2) mean^2 (v = 0 at first),
                   v_hat <- max(v_hat, v) (v_hat = v_hat_0 before the first time).
"""

from __future__ import annotations

import torch

from fedcli.fl.adaptive import VhatServer, cohort_mean, count_transfer, full_batch_grads, sync_due, to_device


class VhatFullGradServer(VhatServer):
    """Mime-LAMB: full-batch gradients at the global model, then AMSGrad's v and max (Alg. 1, lines 17, 21-23)."""

    keeps = VhatServer.keeps + ("v",)

    def __init__(self, opts):
        super().__init__(opts)
        self.v: dict[str, torch.Tensor] | None = None
        self.grad: dict[str, torch.Tensor] | None = None

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        self.v = to_device(self.v, view.device)
        self.grad = (
            cohort_mean(view, cohort, full_batch_grads(view, cohort)) if sync_due(self.opts, cohort.round_idx) else None
        )

    def end_round(self, view, cohort) -> None:
        if self.grad is None:
            return
        b2 = self.opts.beta2
        sq = {n: g * g for n, g in self.grad.items()}
        self.v = (
            {n: (1 - b2) * s for n, s in sq.items()}
            if self.v is None
            else {n: b2 * self.v[n] + (1 - b2) * sq[n] for n in sq}
        )
        self.raise_vhat(self.v)
        self.grad = None
        count_transfer(view, up=1, down=1)  # full-batch gradient up, v_hat down
