"""FedLAMA's layer-wise arithmetic in plain Python (no torch): the unit model discrepancy (Eq. 2), the discrepancy
and size shares along the sorted layers (Eqs. 3, 4), the interval adjustment (Algorithm 1) and its accelerate variant.

The schedules (:mod:`fedcli.fl.schedules`) call these during training; ``fedcli report`` and the trackers' process
replay Algorithm 1 from ``intervals.csv`` with them, without importing torch (about 1 s of a process's start).
"""

from __future__ import annotations

import math
from typing import Sequence


def unit_discrepancy(mean_sq_dist: float, steps: int, numel: int) -> float:
    """FedLAMA Eq. 2: d_l = (1/m) sum_i ||u_l - x_l^i||^2 / (tau_l * dim(u_l)).

    ``mean_sq_dist`` is the cohort mean (or p_i-weighted mean) of the squared distances and
    ``steps`` the local iterations since the layer was last synchronized (tau_l in a full round).
    """
    return float(mean_sq_dist) / (steps * numel)


def delta_lambda(d: Sequence[float], numel: Sequence[int], order: Sequence[int], eligible: Sequence[bool] | None = None):
    """FedLAMA Eqs. 3 and 4 along ``order`` (layer indices sorted by increasing d).

    delta_l = sum_{k<=l} d_I[k] dim(u_I[k]) / sum_{k<=L} d_I[k] dim(u_I[k])   (Eq. 3)
    lambda_l = sum_{k<=l} dim(u_I[k]) / sum_{k<=L} dim(u_I[k])                  (Eq. 4)

    With ``eligible`` (author code's kernels-only mode) the lambda denominator sums over the eligible
    layers only while the delta denominator still sums over all layers. When every d is 0 the
    discrepancy ratio is taken as 0 (there is nothing to lose).
    Returns two lists aligned with ``order``.
    """
    L = len(d)
    eligible = [True] * L if eligible is None else list(eligible)
    total_disc = math.fsum(d[i] * numel[i] for i in range(L))
    total_size = sum(numel[i] for i in range(L) if eligible[i])
    deltas, lambdas = [], []
    acc_d, acc_n = [], 0
    for i in order:
        acc_d.append(d[i] * numel[i])
        acc_n += numel[i]
        deltas.append(math.fsum(acc_d) / total_disc if total_disc > 0 else 0.0)
        lambdas.append(acc_n / total_size)
    return deltas, lambdas


def lama_intervals(d: Sequence[float], numel: Sequence[int], tau: int, phi: int, *, rule: str = "reference",
                   eligible: Sequence[bool] | None = None) -> list[int]:
    """FedLAMA Algorithm 1 (layer-wise aggregation interval adjustment).

    I = argsort(d) (increasing, stable: ties keep layer order); delta_l, lambda_l are Eqs. 3, 4 along I.

    - ``rule="reference"`` (default): the author code's loop (``update_intervals`` of its FedLAMA solver).
      Layer I[l] is given phi*tau' *before* the test, and the loop stops after the first layer with
      1 - lambda_l < delta_l (strict: at an exact tie delta_l = 1 - lambda_l it goes on). So the layer that
      crosses the condition keeps the long interval too. On the FEMNIST CNN this is what lets fc1.weight
      (97% of the parameters) get phi*tau' at all: as the first layer of the walk its discrepancy share
      delta_1 exceeds 1 - lambda_1 = 0.03, so the text's rule gives it tau' every time.
    - ``rule="paper"``: the AAAI text and box: layer I[l] gets phi*tau' iff delta_l < 1 - lambda_l (strict),
      else tau'. The arXiv/ICLR box's ``delta_l < lambda_l`` is a typo (their text compares delta_l with
      1 - lambda_l). Since delta_l grows and 1 - lambda_l shrinks along I, the long layers are a prefix of I
      either way; ``reference`` adds the first layer past the cross point (and ties).

    Only ``eligible`` layers are walked (the author code: conv/dense kernels); the others keep tau'.
    """
    L = len(d)
    eligible = [True] * L if eligible is None else list(eligible)
    order = sorted((i for i in range(L) if eligible[i]), key=lambda i: (d[i], i))
    deltas, lambdas = delta_lambda(d, numel, order, eligible)
    out = [tau] * L
    for i, delta, lam in zip(order, deltas, lambdas):
        if rule == "paper":
            out[i] = phi * tau if delta < 1.0 - lam else tau
        elif rule == "reference":
            out[i] = phi * tau
            if 1.0 - lam < delta:
                break
        else:
            raise ValueError(f"unknown FedLAMA rule {rule!r}")
    return out


def lama_accelerate_intervals(d: Sequence[float], numel: Sequence[int], tau: int, phi: int, *, rule: str = "reference",
                              eligible: Sequence[bool] | None = None) -> list[int]:
    """FedLAMA's "accelerate" variant (arXiv version, remark after Algorithm 2): intervals in {tau'//phi, tau'}.

    The remark: where latency can be ignored, FedLAMA "can accelerate the convergence [...] at the cost of
    minor extra communications" by "adjusting the intervals based on the cross point of 1 - delta_l and
    lambda_l calculated using the list of d_l values sorted in a decreasing order". Our reading:

    - I = argsort(d) *decreasing* (ties keep layer order); delta_l, lambda_l are Eqs. 3, 4 along I, so
      they are the discrepancy and size shares of the l layers with the *largest* unit discrepancy.
    - Before the cross point (lambda_l < 1 - delta_l) these layers carry a larger share of the discrepancy
      than of the parameters: they are the critical layers. Layer I[l] gets the *shorter* interval
      max(1, tau' // phi) iff lambda_l < 1 - delta_l (``rule="paper"``; ``"reference"`` mirrors the author
      code's Algorithm 1 loop: the first layer to break the condition gets it too, then stop; a tie goes
      on). Every other layer keeps the base interval tau', and a round (full synchronization, cohort
      resampling, re-adjustment) lasts tau'.
    - Why {tau'//phi, tau'} and not {tau', phi*tau'}: the condition lambda_l < 1 - delta_l is
      delta_l + lambda_l < 1, Algorithm 1's own condition walked from the other end, so in the
      continuous picture it splits the layers at the same place as FedLAMA. Giving the critical side tau'
      and the rest phi*tau' would be FedLAMA again; what is new is acting on the critical side: they are
      synchronized phi times more often than FedAvg(tau') would, for "minor extra communications" because
      they hold a small share lambda of the parameters, and at a latency cost (more synchronization points),
      the trade-off the remark names. phi = 1 is FedAvg(tau') (tested).
    - Only ``eligible`` layers may be critical (kernels-only mode: lambda over kernels, delta over all).
      When no discrepancy was measured (all d_l dim(u_l) = 0) no layer is critical.
    """
    L = len(d)
    eligible = [True] * L if eligible is None else list(eligible)
    short = max(1, tau // phi)
    out = [tau] * L
    if not any(d[i] * numel[i] > 0 for i in range(L)):
        return out
    order = sorted((i for i in range(L) if eligible[i]), key=lambda i: (-d[i], i))
    deltas, lambdas = delta_lambda(d, numel, order, eligible)
    for i, delta, lam in zip(order, deltas, lambdas):
        if rule == "paper":
            out[i] = short if lam < 1.0 - delta else tau
        elif rule == "reference":
            out[i] = short
            if 1.0 - delta < lam:
                break
        else:
            raise ValueError(f"unknown FedLAMA rule {rule!r}")
    return out
