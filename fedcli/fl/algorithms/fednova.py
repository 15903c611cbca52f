"""FedNova (Wang et al., NeurIPS 2020): normalized averaging of unequal local work.

u <- u - tau_eff * sum_i p_i (u - x_i) / a_i, a_i = tau_i for SGD (with momentum: FedNova's ||a_i||_1).
Local steps differ with ``--local-epochs``; with equal steps FedNova is FedAvg (tested). Details and
the MPI-friendly form: :class:`NovaServer`.

No per-method defaults: the paper's experiments tune the learning rate per model, and its distinguishing setting
(clients running different numbers of local steps) comes from the data with ``--local-epochs``; with fedcli's
general defaults (equal tau steps) it learns as FedAvg does (tests/test_presets_learn.py).
"""

from __future__ import annotations

import torch

from fedcli.fl.parts import AverageServer


def momentum_a_norm(steps: int, rho: float) -> float:
    """FedNova's ||a_i||_1 for ``steps`` local SGD steps with heavy-ball momentum rho (Wang et al. 2020,
    Appendix): x_i - u = -lr sum_j a_ij g_ij with a_ij = (1 - rho^(tau_i - j)) / (1 - rho), so
    ||a_i||_1 = (tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho); rho = 0 gives tau_i."""
    if rho == 0.0:
        return float(steps)
    return (steps - rho * (1.0 - rho**steps) / (1.0 - rho)) / (1.0 - rho)


class NovaServer(AverageServer):
    """FedNova (Wang et al., NeurIPS 2020): normalized averaging over unequal local work.

    With a_i = ||a_i||_1 (tau_i for vanilla SGD, :func:`momentum_a_norm` with momentum), the normalized
    update d_i = (u - x_i) / a_i and tau_eff = sum_i p_i a_i over the whole cohort:

        u <- u - tau_eff * sum_i p_i d_i = u + sum_i p_i * (tau_eff / a_i) * (x_i - u).

    So each client uploads its update scaled by s_i = tau_eff / a_i (``upload_scale``) and the engine's
    weighted sum (one all-reduce) does the rest. Every process computes tau_eff itself from the cohort's
    local steps (``view.client_steps`` of the whole cohort, deterministic). Local steps differ with
    ``--local-epochs`` (then the whole model is synchronized once, at the round's end) and with the system model's
    partial work (``--system --deadline D --on-deadline keep-partial``: stragglers run the steps that fit); with equal
    steps every s_i is 1 and FedNova *is* FedAvg (no scaling at all: bit-for-bit, tested).
    p_i follows ``--weighting`` (the paper's p_i = n_i / n is ``--weighting samples``).
    """

    fresh_momentum_needed = "FedNova's ||a_i||_1 assumes each client's momentum buffer starts at zero every round"

    def __init__(self, opts):
        super().__init__(opts)
        self.scale: torch.Tensor | None = None

    def begin_round(self, view, cohort) -> None:
        self.scale = None
        ids = list(cohort.cohort_ids)
        steps = view.client_steps(ids, 0)  # 0: every client runs the round's steps (no --local-epochs, no partial work)
        if not all(steps):
            return
        a = [momentum_a_norm(t, float(self.opts.momentum)) for t in steps]
        p = view.cohort_weights(ids, ids).tolist()
        tau_eff = sum(pi * ai for pi, ai in zip(p, a))
        pos = {c: k for k, c in enumerate(ids)}
        if any(tau_eff / ai != 1.0 for ai in a):  # decided over the whole cohort: the same on every process
            self.scale = torch.tensor([tau_eff / a[pos[c]] for c in cohort.clients], dtype=torch.float64)

    def upload_scale(self, cohort) -> torch.Tensor | None:
        return self.scale
