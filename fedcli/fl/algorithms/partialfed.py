"""PartialFed-Adaptive (Sun, Huo, Yang, Bai, NeurIPS 2021, "PartialFed: Cross-Domain Personalized Federated
Learning via Partial Initialization", the adaptive variant), as FedALA (Zhang et al., AAAI 2023) ran it as a
baseline: per client and per layer (parameter tensor) a learned choice between the global and the local
parameter, relaxed with Gumbel-softmax, re-applied at every training batch, with alternating updates of the
model weights and of the strategy.

The algorithm implemented, for client c in round t (tensors l = 1..T, theta_g the global model received at the
round's start, theta_0 the model the client starts local training from -- its old local model, the one it held
after its last round, or theta_g if it has none; the ALA-initialized model under ``--init ala`` -- and alpha_l in
R^2 the client's strategy logits, kept across rounds, init 0):

    tau_t = tau_0 * d^t                              (--partialfed-tau tau_0 = 5.0, --partialfed-decay d = 0.965)
    the partial initialization   init_l(y) = y_l0 * theta_g,l + y_l1 * theta_0,l   (y_l0 + y_l1 = 1)
    the trained model            theta = init(y) + Delta   (Delta: what the model steps of the round added)
    for each local batch b = 1, 2, ...:
        y_l   = softmax((alpha_l + G_bl) / tau_t)    (G_bl: two Gumbel(0, 1) draws; y_l = (y_l0, y_l1))
        theta_l <- theta_l + (y_l0 - y'_l0) * (theta_g,l - theta_0,l)   (y': the previous batch's; 0 before the first)
                 (the initialization re-aggregated with this batch's strategy, the training so far kept)
        g_l   = dL/dtheta_l on batch b
        model batch    (the first f_m of every f_m + f_s batches):  theta <- SGD step with g   (Delta grows)
        strategy batch (the next f_s):  alpha_l0 <- alpha_l0 - lr * dL/dalpha_l0,  alpha_l1 <- alpha_l1 + lr *
        dL/dalpha_l0,
                        dL/dalpha_l0 = y_l0 * y_l1 / tau_t * <g_l, theta_g,l - theta_0,l>   (exact chain rule through
                        init)

(--partialfed-fm f_m = 8, --partialfed-fs f_s = 2: FedALA's appendix). Model and strategy batches are different
batches of the round's reshuffled epochs, so within an epoch their samples do not overlap. The client uploads
theta (averaged as FedAvg; communication is FedAvg's, 2 Sigma per client per round) and is judged by theta on its
local test split (``personal_acc``). As tau_t decays the soft selection y_l becomes binary (one-hot): each layer
is then initialized either from the global model or from the client's own.

What this rests on, and what could not be checked. The paper text was not available here; its abstract and
FedALA describe PartialFed-Adaptive as a learned, binary, layer-level choice of global or local parameters per
client (FedALA: "selects the parameters in the global model or the local model to construct the new local model
in each batch", learned on samples not used for the model, with Gumbel temperature 5.0 annealed by 0.965 and
f_m = 8, f_s = 2). PFLlib, FedALA's code base, only holds an unfinished draft (``clientpartial.py`` /
``serverpartial.py`` at commit c79e660: the server sets ``client.policy`` while the client tests
``self.strategy``, so the strategy is never enabled and the draft runs FedAvg). From the draft we take: the
selection written as theta + (theta_g - theta) * y_l0 (equivalent to the paper's alpha[l, 0] theta_g +
alpha[l, 1] theta, as its comment says), re-applied before every batch, model and strategy batches, tau
multiplied by the decay once per round. We differ from the draft in two places: the re-aggregation moves
only the initialization part of theta (the draft, as a first version here, reset theta to the mix of theta_g and
the *current* theta at every batch, which pulls the model halfway back to theta_g at each batch at tau ~ 5 and
barely learned: personal accuracy 0.34-0.61 over 10 rounds on digits, below the global model), and where it is not
Gumbel-softmax over learned
logits (it clamps a scalar after an ALA-like step, then feeds [s, 1 - s] to ``gumbel_softmax``): here the logits
alpha are the learned parameters and their gradient is the exact one through the relaxed sample (soft, not
straight-through: the draft uses ``hard=False``). Not checked against the paper: the strategy's learning rate
(here the local ``--lr`` at that step; plain SGD), the initial logits (0: both choices equally likely), whether
the first round uses the strategy (here every round; in round 0 theta starts at theta_g), and how f_m / f_s
interleave (here cycles over the round's local steps, counted across epochs). BatchNorm statistics are not
selected: the client keeps its own (stored with its local model). ALA (``--init ala``) replaces the round-start
initialization (the old local model) and the per-batch selection is then applied to the ALA-initialized model
(FedALA: the strategy re-aggregates it, so ALA has little effect); ``--ala-layers 0`` is PartialFed itself
(tested). Gumbel noise is drawn from ``torch_gen(seed, "partialfed", round, client)``.
"""

from __future__ import annotations

import torch

from fedcli.errors import ConfigError
from fedcli.fl.clientstate import ClientState
from fedcli.fl.parts import OverwriteInit, SGDStep, expand
from fedcli.fl.personal import LOCAL, load_models
from fedcli.fl.rng import torch_gen

ALPHA = "partialfed.alpha"  # store table of the strategy logits [T, 2] per client


def gumbel(shape, gen: torch.Generator) -> torch.Tensor:
    """Standard Gumbel(0, 1) draws: -log(-log(U)), U uniform in (0, 1) (clamped off the ends)."""
    u = torch.rand(shape, generator=gen).clamp_(1e-10, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))


def strategy_grad(g: torch.Tensor, delta: torch.Tensor, y0: torch.Tensor, tau: float) -> torch.Tensor:
    """dL/dalpha_l0 for every cohort row of one tensor: y0 * (1 - y0) / tau * <g, theta_g - theta> ([K])."""
    k = g.shape[0]
    return y0 * (1.0 - y0) / tau * (g.reshape(k, -1) * delta.reshape(k, -1)).sum(1)


class PartialFedInit(OverwriteInit):
    """A client starts the round from its old local model (the global model if it has none); the global
    parameters enter through the per-batch selection of the local step."""

    def initialize(self, view, cohort) -> None:
        if not cohort.clients:
            return
        params, buffers = load_models(view, cohort.clients, LOCAL)
        with torch.no_grad():
            for n, p in cohort.params.items():
                p.copy_(params[n])
            for n, b in cohort.buffers.items():
                b.copy_(buffers[n])


class PartialFedStep(SGDStep):
    """Per batch: select global or local per layer (Gumbel-softmax over learned logits), then a model step
    (f_m of every f_m + f_s batches) or a strategy step (the other f_s)."""

    def __init__(self, opts):
        super().__init__(opts)
        self.tau0 = float(self.opts.partialfed_tau)
        self.decay = float(self.opts.partialfed_decay)
        self.fm = int(self.opts.partialfed_fm)
        self.fs = int(self.opts.partialfed_fs)
        if self.fm + self.fs < 1:
            raise ConfigError("--partialfed-fm + --partialfed-fs must be at least 1 (batches per model/strategy cycle)")

    def setup(self, view) -> None:
        self.names = list(view.global_params)
        self.logits = ClientState(ALPHA, (len(self.names), 2))  # each client's strategy logits, zeros at first

    def temperature(self, round_idx: int) -> float:
        return self.tau0 * self.decay**round_idx

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        dev = view.device
        t = len(self.names)
        self.anchor = {n: g.detach().clone() for n, g in view.global_params.items()}
        self.alpha = self.logits.load(view, cohort, dev)
        self.tau = self.temperature(cohort.round_idx)
        steps = [int(s) for s in cohort.steps.tolist()] if cohort.clients else []
        top = max(steps, default=0)
        noise = []
        for c, s in zip(cohort.clients, steps):  # each client's own draws (independent of the process count)
            g = gumbel((s, t, 2), torch_gen(self.opts.seed, "partialfed", cohort.round_idx, c))
            noise.append(torch.cat([g, g.new_zeros(top - s, t, 2)]))
        self.noise = torch.stack(noise, 1).to(dev) if noise else torch.zeros(0, 0, t, 2, device=dev)  # [steps, K, T, 2]
        self.start: dict[str, torch.Tensor] = {}  # theta_0: the model local training started from
        self.y_prev = None  # y_0 of the previous batch [K, T] (0: all local)

    def selection(self, j: int) -> torch.Tensor:
        """y [K, T, 2]: the relaxed global/local choice of every layer at local step ``j`` (1-based).

        The engine runs the whole cohort's steps on every process, so ``j`` may pass the longest client of this
        process (unequal client sizes with --local-epochs); every client here has then finished and keeps its model
        (``gradients``), and its draws past its own steps are zeros, as in the padding of ``begin_round``."""
        noise = self.noise[j - 1] if j <= self.noise.shape[0] else self.noise.new_zeros(self.alpha.shape)
        return torch.softmax((self.alpha + noise) / self.tau, dim=-1)

    def is_model_step(self, j: int) -> bool:
        return (j - 1) % (self.fm + self.fs) < self.fm

    def gradients(self, view, cohort, x, y, mask):
        j = cohort.ctx.step
        active = (cohort.steps >= j).to(self.alpha.device)
        self.y = self.selection(j)
        with torch.no_grad():
            if j == 1:  # theta_0 and theta_g - theta_0, fixed for the round
                self.start = {n: p.clone() for n, p in cohort.params.items()}
                self.delta = {n: self.anchor[n].unsqueeze(0) - p for n, p in self.start.items()}
                self.y_prev = torch.zeros_like(self.y[..., 0])
            y0 = torch.where(
                active.view(-1, 1).bool(), self.y[..., 0], self.y_prev
            )  # finished clients keep their model
            for i, n in enumerate(self.names):
                p = cohort.params[n]
                p.add_(expand(y0[:, i] - self.y_prev[:, i], p) * self.delta[n])
            self.y_prev = y0
        return view.trainer.grads(cohort, x, y, mask)

    @torch.no_grad()
    def step(self, cohort, grads, lr, active=None) -> None:
        if self.is_model_step(cohort.ctx.step):
            super().step(cohort, grads, lr, active)
            return
        on = (
            torch.ones(cohort.size, dtype=torch.bool, device=self.alpha.device)
            if active is None
            else active.to(self.alpha.device)
        )
        for i, n in enumerate(self.names):
            ga = strategy_grad(grads[n], self.delta[n], self.y[:, i, 0], self.tau) * on.to(self.alpha.dtype)
            self.alpha[:, i, 0] -= lr * ga
            self.alpha[:, i, 1] += lr * ga

    def end_round(self, view, cohort) -> None:
        self.logits.save(view, cohort, self.alpha)
        self.delta, self.noise, self.start, self.y_prev = {}, None, {}, None
