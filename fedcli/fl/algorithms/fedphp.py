"""FedPHP (Li, Zhan, Shao, Li, Song, ECML PKDD 2021): personalized models that inherit from themselves and are
pulled toward the global model's representation.

**Local initialization** (the paper's rule-based moving average; ``fedphp`` init part). In round t (0-based)
a client starts from

    theta_i <- (1 - mu_t) * theta_g + mu_t * theta_i,     mu_t = mu * t / T,

theta_g the received global model, theta_i the client's own local model (the one it held after its last local
training, ``fedcli.fl.personal``; the global model if it has none yet), ``--php-mu`` mu (FedALA appendix: 0.9)
and T the number of global rounds (``--rounds``; with an ``--iterations`` budget, T = ceil(iterations / round
length), which needs a fixed round length: ``--local-epochs`` with partial participation is a ConfigError).
The first round is the plain overwrite (mu_0 = 0). ``--init ala`` replaces this part (ALA's received model is
the global one), as FedALA's applicability study does.

**Local loss** (``fedphp`` local step), per mini-batch D:

    (1 - lambda) * CE(theta_i; D) + lambda * MMD^2(h(theta_i; D), h(theta_g; D))

with ``--php-lambda`` lambda (FedALA appendix: 0.01); h is the representation, the input of the model's last
Linear layer (PFLlib's ``model.base``; read with a forward pre-hook on that layer under ``functional_call``),
and theta_g the global model received at the round's start (frozen; its forward pass in train mode, as the
reference's ``model_s``). MMD is the reference's empirical estimate with an RBF kernel summed over the
bandwidths a in (10, 15, 20, 50): k(u, v) = sum_a exp(-||u - v||^2 / (2 a)), MMD = mean_ij [k(x_i, x_j) +
k(y_i, y_j) - 2 k(x_i, y_j)] (:func:`mmd`). The local model is uploaded and averaged as in FedAvg, and is the
client's evaluated model (``personal_acc``); ``train_loss`` is the whole local loss, as the reference's
``train_metrics``.

Deviations from the reference (PFLlib ``clientphp.py`` / ``serverphp.py``):

- Rounds: the reference runs rounds R = 0..global_rounds (global_rounds + 1 of them) with mu_R = mu * R /
  global_rounds; we run t = 0..T-1 with mu_t = mu * t / T, so our last round has mu * (T - 1) / T.
- Padded batches (a client with fewer samples than a batch): the MMD weighs the padding samples 0
  (sum_ij w_i w_j k_ij / (sum w)^2); with full batches it is the reference's plain mean.
- The initialized model's BatchNorm buffers are the global ones (the engine synchronizes them, as for ALA);
  the reference mixes only parameters and keeps the client's buffers.
- Evaluation: the model after local training (our convention for every method, ``fedcli.fl.personal``);
  PFLlib's server evaluates right after ``send_models``, i.e. the initialized model.
- ``lambda = 0`` skips the MMD term entirely, so ``--php-mu 0 --php-lambda 0`` is FedAvg-C bit for bit (tested).
"""

from __future__ import annotations

import torch
from torch.func import functional_call

from fedcli.errors import ConfigError
from fedcli.fl.parts import OverwriteInit, SGDStep
from fedcli.fl.personal import load_models
from fedcli.fl.trainers import masked_loss

BANDWIDTHS = (10.0, 15.0, 20.0, 50.0)  # the reference's "rbf" bandwidth range


def mmd(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    """Squared MMD of feature sets x, y [B, d] (paired samples, weights w [B]) with the reference's RBF kernel
    sum_a exp(-0.5 d / a) over a in BANDWIDTHS; d the squared distance (expanded as |u|^2 + |v|^2 - 2 u.v)."""
    xx, yy, xy = x @ x.t(), y @ y.t(), x @ y.t()
    rx, ry = xx.diagonal().unsqueeze(0).expand_as(xx), yy.diagonal().unsqueeze(0).expand_as(yy)
    dxx, dyy, dxy = rx.t() + rx - 2.0 * xx, ry.t() + ry - 2.0 * yy, rx.t() + ry - 2.0 * xy
    kxx, kyy, kxy = torch.zeros_like(xx), torch.zeros_like(xx), torch.zeros_like(xx)
    for a in BANDWIDTHS:
        kxx = kxx + torch.exp(-0.5 * dxx / a)
        kyy = kyy + torch.exp(-0.5 * dyy / a)
        kxy = kxy + torch.exp(-0.5 * dxy / a)
    m = kxx + kyy - 2.0 * kxy
    if w is None:
        return m.mean()
    ww = w.unsqueeze(1) * w.unsqueeze(0)
    return (m * ww).sum() / ww.sum()


def total_rounds(view) -> int:
    """T for mu_t = mu * t / T: the rounds of the run's budget (``fedcli.fl.budget.plan_run``)."""
    rounds = view.run_plan().rounds
    if rounds is None:
        raise ConfigError(
            "--algo fedphp scales mu by round / rounds: give --rounds (with --local-epochs and partial "
            "participation an --iterations budget has no fixed number of rounds)"
        )
    return rounds


class PHPInit(OverwriteInit):
    """(1 - mu_t) * global + mu_t * own local model, mu_t = mu * round / T (the first round: the global model)."""

    keeps_local_models = True  # the engine keeps each client's trained model (what the next round mixes)

    def __init__(self, opts):
        super().__init__(opts)
        self.mu = float(self.opts.php_mu)
        self.rounds = 0

    def setup(self, view) -> None:
        self.rounds = total_rounds(view)

    def mu_at(self, round_idx: int) -> float:
        return self.mu * round_idx / self.rounds

    @torch.no_grad()
    def initialize(self, view, cohort) -> None:
        mu = self.mu_at(cohort.round_idx)
        cohort.load_global(view.global_params, view.global_buffers)
        if mu == 0.0 or not cohort.clients:
            return
        local, _ = load_models(view, cohort.clients)
        for n, p in cohort.params.items():
            p.copy_(view.global_params[n] * (1.0 - mu) + local[n] * mu)


def head_module(model: torch.nn.Module) -> torch.nn.Module:
    """The layer whose input is the representation: the module of the model's last parameter (a Linear)."""
    name = list(model.named_parameters())[-1][0]
    mod = model.get_submodule(name.rpartition(".")[0])
    if not isinstance(mod, torch.nn.Linear):
        raise ConfigError(
            f"--algo fedphp needs a model whose last layer is Linear (its input is the representation); "
            f"{type(model).__name__} ends with {type(mod).__name__}"
        )
    return mod


class PHPStep(SGDStep):
    """SGD on (1 - lambda) * CE + lambda * MMD(local representation, global representation)."""

    def __init__(self, opts):
        super().__init__(opts)
        self.lam = float(self.opts.php_lambda)
        self.anchor: tuple[dict, dict] = ({}, {})
        self._grab: list | None = None  # the forward pre-hook records the head's input here while set
        self._hooked = False
        self._loss = None

    def setup(self, view) -> None:
        if self.lam == 0.0:
            return
        head = head_module(view.model)
        if not self._hooked:
            head.register_forward_pre_hook(self._hook)
            self._hooked = True
        model, lam = view.model, self.lam

        def features(params, buffers, x):
            self._grab = []
            try:
                out = functional_call(model, (params, buffers), (x,))
                feat = self._grab[-1]
            finally:
                self._grab = None
            return out, feat.flatten(1)

        def loss_fn(params, buffers, x, y, w, g_params, g_buffers):
            out, h = features(params, buffers, x)
            _, h_g = features(g_params, g_buffers, x)
            return (1.0 - lam) * masked_loss(out, y, w) + lam * mmd(h, h_g.detach(), w)

        self._loss = loss_fn  # differentiated by the run's trainer (vmap or loop), like the plain loss

    def _hook(self, module, args):
        if self._grab is not None:
            self._grab.append(args[0])

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        # theta_g: the global model received at the round's start (frozen while the clients train)
        self.anchor = (
            {n: p.clone() for n, p in view.global_params.items()},
            {n: b.clone() for n, b in view.global_buffers.items()},
        )

    def gradients(self, view, cohort, x, y, mask):
        if self.lam == 0.0:
            return view.trainer.grads(cohort, x, y, mask)
        g_params, g_buffers = self.anchor
        k = cohort.size
        # the global model's forward pass in train mode updates a throwaway copy of its BatchNorm statistics
        g_bufs = {n: b.unsqueeze(0).repeat(k, *([1] * b.dim())) for n, b in g_buffers.items()}
        return view.trainer.grads(cohort, x, y, mask, loss=self._loss, extra=(g_params, g_bufs), extra_dims=(None, 0))
