"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

Local direction g - c_i + c; c_i and c updated at the round's end; global step size eta_g =
``--server-lr`` (1: the plain average). The ledger counts c's download and c_i's upload per layer.

No per-method defaults: the paper's experiments use the global step size eta_g = 1 (``--server-lr`` 1, the general
default) and tune the local learning rate per task; it learns on fedcli's general defaults
(tests/test_presets_learn.py).

The local step and its control variates (below). Each client i keeps a control variate c_i (in ``view.store``, zeros at
first) and the server keeps c
(zeros at first). In a round, client i steps along g - c_i + c (the configured momentum and weight
decay act on that direction, as on SGD's gradient). At the round's end

    c_i+ = c_i - c + (x - y_i) / (K_i * lr)                       (option II)
    c    <- c + (|S| / N) * mean_{i in S} (c_i+ - c_i)              (N clients in all, S the cohort)

and the model is averaged as usual (global step size eta_g: ``--server-lr`` with the ``server-lr``
server part). Two generalizations, both exact where the paper's formula applies:

- (x - y_i) / (K_i lr) is the mean of the directions the client stepped along: we accumulate the
  displacement D_i = sum_k lr_k v_k (v_k the step's direction after momentum) and divide it by
  A_i = sum_k lr_k w_k, w_k = rho w_(k-1) + 1, the displacement that directions all equal to 1 would
  give. With plain SGD, A_i = sum_k lr_k, so for a constant lr and no synchronization inside the
  round D_i / A_i *is* (x - y_i) / (K_i lr). It also handles warm-up and decay (the lr actually
  used), unequal local steps (``--local-epochs``), layer-wise schedules (a mid-round synchronization
  replaces a layer, so x - y_i would mix the average into it), and momentum rho, where dividing by
  K_i lr would inflate c_i by up to 1 / (1 - rho) every round (it diverges); A_i is then lr times
  FedNova's ||a_i||_1, and D_i / A_i stays a weighted mean of the corrected gradients.
- the c update is a sum over the cohort, so under MPI it is one all-reduce; each process then shares
  the new c_i of its clients (``fedcli.fl.store.publish``) so that a client's c_i does not depend on where it trained.

Communication (``comm_bytes``, per layer in ``layers.csv``): every cohort client downloads c at the
round's start and uploads c_i+ - c_i at its end, 32 bits per element each: 2 * m * numel * 4 bytes per
tensor per round on top of the model traffic. ``comm_params`` stays Eq. 8 over the model layers.
"""

from __future__ import annotations

import torch

from fedcli.fl.clientstate import ClientState
from fedcli.fl.parts import SGDStep


class ScaffoldStep(SGDStep):
    """SGD along g - c_i + c; control variates updated by option II at the round's end."""

    fresh_momentum_needed = (
        "SCAFFOLD's c_i update divides the round's displacement by sum_k lr_k w_k, w_k counted from a zero "
        "momentum buffer"
    )
    #: each client's control variate c_i, zeros at first: the cohort's rows [K, ...] during a round
    c_i = ClientState()
    keeps = ("c",)  # the server control variate, checkpointed and resumed with the run

    def __init__(self, opts):
        super().__init__(opts)
        self.c: dict[str, torch.Tensor] | None = None  # the server control variate
        self.correction: dict[str, torch.Tensor] = {}  # c - c_i, [K, ...]
        self.disp: dict[str, torch.Tensor] = {}  # D_i = sum_k lr_k v_k (the applied directions), [K, ...]
        self.lr_sum: torch.Tensor | None = None  # A_i = sum_k lr_k w_k over each client's own steps, [K]
        self.w: torch.Tensor | None = None  # w_k = rho w_(k-1) + 1 (1 without momentum), [K]

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        if self.c is None:
            self.c = {n: torch.zeros_like(p) for n, p in view.global_params.items()}
        self.c = {n: self.c[n].to(p.device) for n, p in view.global_params.items()}  # after a checkpoint load
        self.correction = {n: self.c[n] - ci for n, ci in self.c_i.items()}
        self.disp = {n: torch.zeros_like(t) for n, t in cohort.params.items()}
        dev = next(iter(view.global_params.values())).device
        self.lr_sum = torch.zeros(len(cohort.clients), dtype=torch.float64, device=dev)
        self.w = torch.zeros_like(self.lr_sum)

    def direction(self, cohort, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: g + self.correction[n] for n, g in grads.items()}

    def apply(self, cohort, names, params, g, lr, active) -> None:
        torch._foreach_add_([self.disp[n] for n in names], g, alpha=lr)
        on = torch.ones_like(self.w) if active is None else active.to(self.w.dtype)
        self.w = torch.where(on > 0, self.w * self.momentum + 1.0, self.w)
        self.lr_sum += lr * self.w * on
        super().apply(cohort, names, params, g, lr, active)

    @torch.no_grad()
    def end_round(self, view, cohort) -> None:
        n_clients = len(view.client_indices)
        names = list(view.global_params)
        new_ci, chunks = {}, {}
        for n in names:
            d = self.disp[n]
            rows = [-1] + [1] * (d.dim() - 1)  # a per-client [K] against the stacked [K, ...]
            step_mean = d / self.lr_sum.clamp(min=1e-300).to(d.dtype).view(rows) if d.shape[0] else d
            new_ci[n] = self.c_i[n] - self.c[n] + step_mean
        # a client with a non-finite c_i+ keeps its c_i and adds nothing to c (one dropped by --on-diverge skip-client
        # keeps its c_i too, and the cohort sum leaves it out)
        alive = torch.ones_like(self.lr_sum, dtype=torch.bool)
        for n in names:
            alive &= torch.isfinite(new_ci[n]).all(dim=tuple(range(1, new_ci[n].dim())))
        for n in names:
            new_ci[n] = torch.where(alive.view([-1] + [1] * (new_ci[n].dim() - 1)), new_ci[n], self.c_i[n])
            chunks[n] = new_ci[n] - self.c_i[n]
        total = view.cohort_sums(cohort, chunks, None)  # sum over the whole cohort of c_i+ - c_i
        for n in names:
            self.c[n].add_(total[n], alpha=1.0 / n_clients)  # (|S|/N) * (1/|S|) * sum
        self.c_i = new_ci  # kept for the cohort's clients after this hook (c_i+ - c_i up, c down: the spec's cost)
        self.correction, self.disp = {}, {}
