"""APPLE (Luo and Wu, IJCAI 2022, "Adapt to Adaptation: Learning Personalization for Cross-Silo Federated
Learning", Algorithm 1), as PFLlib implements it (``clientapple.py`` / ``serverapple.py``, the code FedALA's
Table 2 was produced with).

Every client i owns a *core model* c_i and a *directed-relationship* (DR) vector p_i over the N clients. Each
round every client downloads the N core models and trains its *personalized model*

    w_i = sum_j p_ij c_j                     (Eq. 1; one [K, N] x [N, numel] matmul per tensor)

per mini-batch: w_i is rebuilt from the current c_i and p_i, the loss gradient g = dL/dw_i is taken at w_i, and

    c_i  <- c_i - (lr * N) * p_ii * g                                        (own core only; lr scaled by N)
    p_ij <- p_ij - eta_2 * ( (1/T) sum_l mean(g_l * c_j,l) + lambda(t) * mu * (p_ij - p0_j) )   for all j

(T parameter tensors l; for j = i the freshly updated c_i). eta_2 = ``--apple-dr-lr`` (FedALA appendix: 0.01),
mu = ``--apple-mu`` (0.1), p0_j = n_j / n (the clients' shares of the training samples), p_i starts at 1/N.
lambda(t) is the 'cos' loss scheduler over the first L = int(``--apple-l`` * R) of the R rounds (0.2):
lambda = 1 in rounds 0 and 1, then lambda(t) = (cos(pi (t - 1) / L) + 1) / 2 while t - 1 < L, else 0 (the
reference updates lambda at the end of round t - 1 for round t, hence the one-round lag).

What a client uploads (``--apple-upload``):

- ``personal`` (default, the reference code): the personalized model of its *last* mini-batch (the model it
  held when the round ended: ``model_c = deepcopy(self.model)``); it is the core model c_j the others download
  next round, and the client's own c_i next round. The trained core itself is dropped at the round's end.
- ``core`` (the paper's Algorithm 1): the trained core c_i; the client's evaluated model is then the final
  personalized model sum_j p_ij c_j (with the updated c_i and p_i).

Clients are judged by their personalized models on their local test splits (``personal_acc``). The engine
still averages the clients' models into a "global model" (``test_acc``); APPLE has none, so it means little.

Communication (FedALA Table 3: (1 + M) * Sigma parameters per client per round): each client uploads its model
and downloads M core models, M = ``--apple-m`` (0: M = N, FedALA's setting). The engine counts the usual upload
+ download (2 Sigma); the other (M - 1) Sigma per client are recorded per tensor with ``ledger.record_transfer``, so
``comm_bytes`` grows by N (1 + M) Sigma * 4 bytes per round (tested). ``comm_params`` (Eq. 8) stays FedAvg's.

Restrictions (``ConfigError``): APPLE is cross-silo, every client trains every round (``--active-ratio 1``);
M must be N (or N - 1: every other client's core, the own one stays on the client) -- the official code's
bandwidth-limited download of M < N - 1 models, with stale copies of the others kept on each client and chosen
by |p_ij|, is not implemented. ``--init ala`` with ``--ala-layers`` > 0 is refused: the client receives N
models and rebuilds its model from them at every batch, so there is no single received model for ALA to mix
with (FedALA leaves APPLE out of its ALA table for the same reason); ``--ala-layers 0`` is APPLE itself (tested).

Default budget. The preset runs FedALA's setup (``fedcli.specs.PERSONALIZED_SETUP``) with every client every
round and 1200 local iterations instead of the general 600 (FedALA ran every method for 2000 rounds): APPLE's
personalized models rise later than the other methods' (docs/method-notes.md).

Deviations from the reference, all deliberate:

- The reference trains the clients one after another and they share the downloaded model objects, so client i
  sees the cores that clients 0..i-1 already trained this round (its attempt to restore them is a no-op).
  Here every client sees the cores as they were at the round's start (simultaneous clients, as the paper).
- The reference's p-gradient is accumulated in Python floats (float64); here in float32 matmuls.
- The reference runs R + 1 rounds with L = int(L * R); here R = the rounds of the budget (``--rounds``, or
  ceil(iterations / round length), the round length tau or, with ``--local-epochs``, the longest client's steps).
- The core step is plain SGD as the reference's manual update (no ``--momentum``, no ``--weight-decay``); it
  uses the engine's learning rate at that step (``--lr`` with warm-up/decay; the reference ignores its decay).
- BatchNorm statistics are not mixed: the cohort's buffers (the global ones at the round's start) are used.
"""

from __future__ import annotations

import math

import torch

from fedcli.errors import ConfigError
from fedcli.fl.clientstate import ClientState
from fedcli.fl.parts import SGDStep, expand
from fedcli.fl.personal import LOCAL, all_client_models, model_state

CORE = "apple.core"  # store prefix of the uploaded core models with --apple-upload core


def cos_lambda(round_idx: int, rounds: int, l_frac: float) -> float:
    """The reference's 'cos' loss scheduler as it is applied in round ``round_idx`` (0-based)."""
    L = int(l_frac * rounds)
    if round_idx == 0:
        return 1.0
    r = round_idx - 1  # the reference sets lambda at the end of round r for round r + 1
    return (math.cos(r * math.pi / L) + 1.0) / 2.0 if r < L else 0.0


def cohort_matmul(a: torch.Tensor, b: torch.Tensor, at: tuple[list[int], int] | None = None) -> torch.Tensor:
    """``a @ b`` for this process's cohort rows ``a`` [K, D], computed at the whole cohort's shape: with ``at`` =
    (each row's position in the cohort, the cohort's size) and K below it, ``a``'s rows go to their positions of a
    zero [total, D] matrix and the product's rows at those positions are returned. A matrix product's row may
    change in its last bits with the number of rows (BLAS picks its kernels by shape), so a client's result would
    depend on how many clients share its process (``--workers``, MPI); at the cohort's shape it does not, and on
    one process (K = total) this is ``a @ b`` itself."""
    if at is None or a.shape[0] == at[1]:
        return a @ b
    positions, total = at
    full = a.new_zeros(total, *a.shape[1:])
    full[positions] = a
    return (full @ b)[positions]


def personalized(
    p: torch.Tensor, cores: torch.Tensor, own: torch.Tensor, idx: torch.Tensor, at: tuple[list[int], int] | None = None
) -> torch.Tensor:
    """sum_j p_kj c_j for every cohort row k, with row k's own core (column ``idx[k]``) replaced by ``own[k]``.

    ``p`` [K, N], ``cores`` [N, *shape] (as downloaded), ``own`` [K, *shape], ``idx`` [K] client ids; ``at``: see
    :func:`cohort_matmul`."""
    k = p.shape[0]
    rows = torch.arange(k, device=p.device)
    others = p.to(cores.dtype).index_put((rows, idx), torch.zeros(k, dtype=cores.dtype, device=p.device))
    w = cohort_matmul(others, cores.reshape(cores.shape[0], -1), at).view(k, *cores.shape[1:])
    return w + expand(p[rows, idx].to(own.dtype), own) * own


def dr_gradient(
    grads: dict, cores: dict, own: dict, idx: torch.Tensor, at: tuple[list[int], int] | None = None
) -> torch.Tensor:
    """The reference's p-gradient of the loss: (1/T) sum_l mean(g_l * c_j,l) for every j, [K, N] (the own
    column uses ``own``, the updated core); ``at``: see :func:`cohort_matmul`."""
    out = None
    k = idx.numel()
    rows = torch.arange(k, device=idx.device)
    for n, g in grads.items():
        gf = g.reshape(k, -1)
        cf = cores[n].reshape(cores[n].shape[0], -1)
        d = gf.shape[1]
        term = cohort_matmul(gf, cf.T, at) / d
        own_fix = ((gf * own[n].reshape(k, -1)).sum(1) - (gf * cf[idx]).sum(1)) / d
        term = term.index_put((rows, idx), term[rows, idx] + own_fix)
        out = term if out is None else out + term
    return out / len(grads)


class AppleStep(SGDStep):
    """Per batch: rebuild the personalized model from the N cores and p_i, step the own core and p_i."""

    def __init__(self, opts):
        super().__init__(opts)
        self.dr_lr = float(self.opts.apple_dr_lr)
        self.mu = float(self.opts.apple_mu)
        self.l_frac = float(self.opts.apple_l)
        self.m_opt = int(self.opts.apple_m)
        self.upload = self.opts.apple_upload
        self.cores: dict[str, torch.Tensor] = {}
        self.own: dict[str, torch.Tensor] = {}
        self.p = torch.zeros(0)
        self.at: tuple[list[int], int] | None = None  # (positions, cohort size): see cohort_matmul

    def setup(self, view) -> None:
        n = len(view.client_indices)
        self.n = n
        # each client's directed-relationship vector p_i, uniform 1/N at first
        self.p_state = ClientState("apple.p", (n,), default=lambda _c, zeros: zeros.fill_(1.0 / n))
        self.m = n if self.m_opt == 0 else self.m_opt
        if self.m > n or self.m < n - 1:
            raise ConfigError(
                f"--apple-m {self.m_opt}: APPLE here downloads every client's core model; use 0 (M = N = {n}) "
                f"or {n - 1} (all but the own one); fewer downloads with stale copies are not implemented"
            )
        if view.mixes_received():
            raise ConfigError(
                "--init ala on --algo apple: APPLE receives N core models and rebuilds its model from them at every "
                "batch, so there is no received model for ALA to mix in (FedALA leaves APPLE out of ALA); "
                "--ala-layers 0 runs APPLE itself"
            )
        sizes = torch.tensor(view.sizes, dtype=torch.float64)
        self.p0 = (sizes / sizes.sum()).to(torch.float32).to(view.device)
        self.rounds = view.run_plan().rounds  # every client every round: the rounds are known (fedcli.fl.budget)

    # ------------------------------------------------------------------ round
    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        prefix = CORE if self.upload == "core" else LOCAL
        # every client needs all N cores (round 0: the initial model); collective under MPI
        self.cores, _ = all_client_models(view, cohort, prefix=prefix)
        dev = view.device
        self.idx = torch.tensor(cohort.clients, dtype=torch.long, device=dev)
        self.at = (cohort.positions, cohort.total)  # the products at the whole cohort's shape (``cohort_matmul``)
        self.own = {n: c[self.idx].clone() for n, c in self.cores.items()}
        self.p = self.p_state.load(view, cohort, dev)
        self.lam = cos_lambda(cohort.round_idx, self.rounds, self.l_frac)

    def refresh(self, cohort, active: torch.Tensor) -> None:
        """cohort.params <- the personalized models (only for the clients still training)."""
        with torch.no_grad():
            for n, w in cohort.params.items():
                new = personalized(self.p, self.cores[n], self.own[n], self.idx, self.at)
                w.copy_(torch.where(expand(active, w), new, w))

    def gradients(self, view, cohort, x, y, mask):
        j = cohort.ctx.step
        if j == 1 or self.upload == "personal":
            self.refresh(cohort, cohort.steps >= j)  # aggregate_parameters() before each batch
        return view.trainer.grads(cohort, x, y, mask)

    @torch.no_grad()
    def step(self, cohort, grads, lr, active=None) -> None:
        if active is None:
            active = torch.ones(cohort.size, dtype=torch.bool, device=self.p.device)
        active = active.to(self.p.device)
        k = torch.arange(cohort.size, device=self.p.device)
        p_own = self.p[k, self.idx]
        core_lr = lr * self.n
        for n, g in grads.items():
            self.own[n] = torch.where(expand(active, g), self.own[n] - core_lr * expand(p_own, g) * g, self.own[n])
        pg = dr_gradient(grads, self.cores, self.own, self.idx, self.at) + self.lam * self.mu * (self.p - self.p0)
        self.p = torch.where(active.view(-1, 1), self.p - self.dr_lr * pg, self.p)
        if self.upload == "core":  # the evaluated model: the personalized model of the updated core and p
            self.refresh(cohort, active)

    def end_round(self, view, cohort) -> None:
        self.p_state.save(view, cohort, self.p)
        if self.upload == "core":
            model_state(CORE)[0].save(view, cohort, self.own)  # the core models' parameters
        # each client downloaded M core models: the engine counted one download; record the other M - 1
        view.ledger.record_transfer(view.n_active, down=self.m - 1)
        self.cores, self.own = {}, {}
