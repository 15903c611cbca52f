"""pFedMe (T Dinh, Tran, Nguyen, NeurIPS 2020, Algorithm 1): personalized models theta_i tied to local copies
w_i of the global model by a Moreau envelope, f_i(theta) + (lambda / 2) ||theta - w_i||^2.

Local work of client i in a round (Alg. 1 lines 5-9), for every local mini-batch D (the engine's local steps):

1. K inner steps (``--pfedme-k``; FedALA appendix: 5) on the *same* batch, each an approximate solution step of
   the personalized problem (PFLlib ``pFedMeOptimizer.step``)::

       theta <- theta - personal_lr * (grad f_i(theta; D) + lambda * (theta - w) + 0.001 * theta)

   (``--pfedme-lr`` personal_lr, FedALA: 0.01; ``--pfedme-lambda`` lambda, FedALA: 15; 0.001 is the
   optimizer's fixed ``mu``, an L2 term of the reference code that the paper does not have);
2. the local model moves toward theta (Alg. 1 line 8)::

       w <- w - lambda * lr * (w - theta)            (lr = --lr, with its warm-up / decay schedule)

theta carries over from batch to batch; it starts each round at the model the client starts from (the
global model; with ``--init ala`` the ALA-initialized one), as the reference's ``set_parameters`` sets both
the model (theta) and ``local_params`` (w) to the global model. w is uploaded and averaged; the server mixes
(Alg. 1 line 12, the ``pfedme`` server part)::

    global <- (1 - beta) * previous + beta * sum_i p_i w_i        (--pfedme-beta; FedALA: 1.0, the plain average)

Clients are evaluated on theta (``personal_acc``), kept in ``view.store`` under ``pfedme`` after the round's
local work (with its BatchNorm statistics, which theta's forward passes update as the reference's model does).

Implementation: ``gradients`` runs the K inner steps on theta (so no gradient is taken at w) and returns the
loss of theta on the batch *before* its inner steps; ``step`` moves w. Clients whose local work is done
(``--local-epochs`` gives clients different step counts) are frozen in both. ``train_loss`` is theta's CE loss.

Deviations from the reference (PFLlib ``clientpFedMe.py`` / ``serverpFedMe.py``), all deliberate:

- Evaluated model: PFLlib's ``personalized_params`` is the list of the model's own parameters, which
  ``update_parameters(self.model, self.local_params)`` overwrites with w at the end of ``train``, so PFLlib in
  fact evaluates w. We evaluate theta, the paper's personalized model (and what the reference means to do).
- The reference decays the personal lr each round with ``--learning_rate_decay`` (off by default) and keeps
  w's lr fixed; here w uses the engine's ``--lr`` schedule and personal_lr is fixed.
- ``--momentum`` and ``--weight-decay`` are not used (both steps are the reference's plain updates).
"""

from __future__ import annotations

import warnings

import torch

from fedcli.fl.cohort import Cohort
from fedcli.fl.parts import SGDStep, expand
from fedcli.fl.parts_servers import ServerLR
from fedcli.fl.personal import save_models

PREFIX = "pfedme"
THETA_L2 = 0.001  # pFedMeOptimizer's ``mu`` (PFLlib and the pFedMe authors' code), never set by their clients


def theta_step(
    theta: torch.Tensor, grad: torch.Tensor, w: torch.Tensor, personal_lr: float, lam: float, l2: float = THETA_L2
) -> torch.Tensor:
    """One inner step: theta - personal_lr * (grad + lam * (theta - w) + l2 * theta)."""
    return theta - personal_lr * (grad + lam * (theta - w) + l2 * theta)


def w_step(w: torch.Tensor, theta: torch.Tensor, lr: float, lam: float) -> torch.Tensor:
    """The local model update after the inner steps: w - lam * lr * (w - theta)."""
    return w - lam * lr * (w - theta)


class PFedMeStep(SGDStep):
    """K inner steps on the personalized models theta (``gradients``), then the w update (``step``)."""

    personal_prefix = PREFIX  # the evaluated model of each client (fedcli.fl.personal)

    def __init__(self, opts):
        super().__init__(opts)
        self.lam = float(self.opts.pfedme_lambda)
        self.personal_lr = float(self.opts.pfedme_lr)
        self.k = int(self.opts.pfedme_k)
        self.theta: dict[str, torch.Tensor] = {}
        self.theta_buffers: dict[str, torch.Tensor] = {}

    def setup(self, view) -> None:
        if self.lam * self.opts.lr > 2.0:
            warnings.warn(
                f"pFedMe: --pfedme-lambda x --lr = {self.lam * self.opts.lr:g} > 2: the local-model update "
                "w <- w - lambda * lr * (w - theta) overshoots theta and diverges (FedALA: 15 x 0.005)",
                stacklevel=2,
            )

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        self.theta = {n: p.clone() for n, p in cohort.params.items()}  # theta starts where w does
        self.theta_buffers = {n: b.clone() for n, b in cohort.buffers.items()}

    def gradients(self, view, cohort, x, y, mask):
        """The K inner steps of this local step's mini-batches; returns ({}, theta's loss before them)."""
        active = cohort.steps.to(y.device) >= cohort.ctx.step
        tmp = Cohort(cohort.clients, cohort.weights, self.theta, cohort.buffers)
        first = None
        for _ in range(self.k):
            grads, losses = view.trainer.grads(tmp, x, y, mask)
            first = losses.detach() if first is None else first
            with torch.no_grad():
                for n, t in self.theta.items():
                    t.copy_(
                        torch.where(
                            expand(active, t), theta_step(t, grads[n], cohort.params[n], self.personal_lr, self.lam), t
                        )
                    )
        with torch.no_grad():
            for n, b in cohort.buffers.items():  # theta's BatchNorm statistics as of each client's last local step
                self.theta_buffers[n].copy_(torch.where(expand(active, b), b, self.theta_buffers[n]))
        return {}, first

    @torch.no_grad()
    def step(self, cohort, grads, lr, active=None) -> None:
        for n, w in cohort.params.items():
            new = w_step(w, self.theta[n], lr, self.lam)
            w.copy_(new if active is None else torch.where(expand(active, w), new, w))

    def end_round(self, view, cohort) -> None:
        save_models(view, cohort.clients, self.theta, self.theta_buffers, PREFIX)  # every rank (collective)
        self.theta, self.theta_buffers = {}, {}


class PFedMeServer(ServerLR):
    """global <- (1 - beta) * previous + beta * average (pFedMe Alg. 1 line 12; beta = 1: the average itself)."""

    def __init__(self, opts):
        super().__init__(opts)
        self.lr = float(self.opts.pfedme_beta)
