"""Mime with AMSGrad (Karimireddy et al. 2020), its local step and its server (helpers: ``fedcli.fl.adaptive``).

``mime``  Mime with AMSGrad (Karimireddy et al. 2020, "Mime: Mimicking centralized stochastic algorithms in
          FL", Algorithm 1, the full Mime variant, not MimeLite): each local step applies the base optimizer's
          update U(g~; s) with the server's state s = (m_s, v_s, v_hat_s) frozen for the round (U computes
          the step a centralized AMSGrad would take with g~ as its next gradient and does not write s back)::

              g~ = g_i(y; batch) - g_i(x; same batch) + c      x: the round's global model,
                                                               c: cohort mean of the full-batch gradients at x
              m' = b1 m_s + (1 - b1) g~,  v' = b2 v_s + (1 - b2) g~^2,  v_hat' = max(v_hat_s, v')
              y <- y - lr * (m' / sqrt(v_hat') + lambda y)      (--vhat-eps outside: sqrt(v_hat') + eps)

          Before the first state synchronization s is AMSGrad's initial state (m = v = 0, v_hat = v_hat_0).
          Because v' includes g~^2, |m' / sqrt(v_hat')| stays bounded as in centralized AMSGrad (the g~ part
          by (1 - b1) / sqrt(1 - b2)) even where c, and so v_hat_s, is 0: inputs that are 0 in all of the
          cohort's data, ReLUs dead on it at x (15% of the first layer of the default MLP on digits).
          The clients keep no state across rounds. g_i(x; batch) is a second gradient evaluation on the
          same mini-batch (its dropout masks are drawn independently).

Server (averages the models as FedAvg does, then):

``mime``           Mime: c (the cohort's mean full-batch gradient at x) every round, for the clients'
                   correction; at the round's end the server's AMSGrad state is updated with c, V(c, s):
                   m_s <- b1 m_s + (1 - b1) c, v_s <- b2 v_s + (1 - b2) c^2, v_hat_s <- max(v_hat_s, v_s).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from fedcli.fl.adaptive import (
    check_eps,
    cohort_mean,
    count_transfer,
    denominator,
    full_batch_grads,
    sync_due,
    to_device,
    vhat_zero,
)
from fedcli.fl.cohort import Cohort
from fedcli.fl.parts import AverageServer, LocalStep, expand


class MimeStep(LocalStep):
    """Mime with AMSGrad: the base optimizer's update U(g~; s) with the server's state s = (m, v, v_hat) frozen.

    U is the step a centralized AMSGrad would take with g~ as its next gradient, without writing the state
    back: m' = b1 m + (1 - b1) g~, v' = b2 v + (1 - b2) g~^2, v_hat' = max(v_hat, v'),
    y <- y - lr (m' / sqrt(v_hat') + lambda y) (``--vhat-eps outside``: sqrt(v_hat') + eps).
    Before the first state synchronization s is AMSGrad's initial state (m = v = 0, v_hat = v_hat_0).
    """

    def __init__(self, opts):
        super().__init__(opts)
        p = self.opts
        check_eps(p)
        self.b1, self.b2, self.wd = p.beta1, p.beta2, p.weight_decay

    def begin_round(self, view, cohort) -> None:
        self.view = view  # the server's state is read at each step (its begin_round, after this one, computes c)
        self.anchor = Cohort.from_global(cohort.clients, cohort.weights, view.global_params, view.global_buffers)

    def step(self, cohort, grads: dict[str, torch.Tensor], lr: float, active: torch.Tensor | None = None) -> None:
        x, y, w = cohort.ctx.x, cohort.ctx.y, cohort.ctx.mask  # this step's mini-batches
        at_anchor, _ = self.view.trainer.grads(self.anchor, x, y, w)  # g_i(x; same batch), outside no_grad
        with torch.no_grad():
            srv, b1, b2, v0 = self.view.offered("mime", cohort), self.b1, self.b2, vhat_zero(self.opts)
            for n, p in cohort.params.items():
                g = grads[n] - at_anchor[n].detach() + srv.control[n]  # g~ = g_i(y) - g_i(x) + c
                m = (1 - b1) * g if srv.m is None else b1 * srv.m[n] + (1 - b1) * g
                v = (1 - b2) * g * g if srv.v is None else b2 * srv.v[n] + (1 - b2) * g * g
                vhat = v.clamp(min=v0) if srv.vhat is None else torch.maximum(srv.vhat[n], v)
                u = m / denominator(self.opts, vhat)
                if self.wd:
                    u = u + self.wd * p
                if active is not None:
                    u = u * expand(active, u)
                p.sub_(u, alpha=lr)


class MimeState(NamedTuple):
    """What the Mime server offers its clients ("mime"): c, and the AMSGrad state s = (m, v, v_hat) (None at first)."""

    control: dict
    m: dict | None
    v: dict | None
    vhat: dict | None


class MimeServer(AverageServer):
    """Mime: the cohort's mean full-batch gradient c every round; AMSGrad state (m, v, v_hat) updated with c."""

    keeps = ("m", "v", "vhat")  # the AMSGrad state s, checkpointed and resumed with the run

    def __init__(self, opts):
        super().__init__(opts)
        self.m = self.v = self.vhat = None
        self.control: dict[str, torch.Tensor] | None = None

    def offer(self, capability: str, view, cohort) -> "MimeState":
        """ "mime": the control variate c of this round and the AMSGrad state (m, v, v_hat) the clients follow."""
        if capability != "mime":
            return super().offer(capability, view, cohort)
        return MimeState(self.control, self.m, self.v, self.vhat)

    def begin_round(self, view, cohort) -> None:
        self.m, self.v, self.vhat = (to_device(t, view.device) for t in (self.m, self.v, self.vhat))
        self.control = cohort_mean(view, cohort, full_batch_grads(view, cohort))
        count_transfer(view, up=1, down=1)  # full-batch gradient up, c down

    def end_round(self, view, cohort) -> None:
        if not sync_due(self.opts, cohort.round_idx):
            return
        b1, b2, c = self.opts.beta1, self.opts.beta2, self.control
        if self.m is None:  # from AMSGrad's initial state m = v = 0, v_hat = v_hat_0
            self.m = {n: (1 - b1) * g for n, g in c.items()}
            self.v = {n: (1 - b2) * g * g for n, g in c.items()}
            self.vhat = {n: t.clamp(min=vhat_zero(self.opts)) for n, t in self.v.items()}
        else:
            self.m = {n: b1 * self.m[n] + (1 - b1) * c[n] for n in c}
            self.v = {n: b2 * self.v[n] + (1 - b2) * c[n] * c[n] for n in c}
            self.vhat = {n: torch.maximum(self.vhat[n], self.v[n]) for n in c}
        count_transfer(view, up=0, down=2)  # m_s and v_hat down
