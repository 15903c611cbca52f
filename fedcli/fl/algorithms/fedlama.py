"""FedLAMA (Lee et al., AAAI 2023, Algorithms 1 and 2): its interval rules and the layer-wise schedules ``lama`` and
``lama-accelerate`` that follow them.

- :func:`lama_intervals` is Algorithm 1: the layers sorted by their unit model discrepancy d_l (Eq. 2), walked with
  their discrepancy and size shares delta_l, lambda_l (Eqs. 3, 4: ``fedcli.fl.layerwise.delta_lambda``), each given
  tau' or phi*tau'. Its defaults follow the authors' code where it differs from the text (the interval rule, kernels
  only, the delayed first adjustment); docs/fidelity-fedlama.md lists each difference and the option that gives the
  text's version.
- :func:`lama_accelerate_intervals` is its "accelerate" variant (arXiv version's remark): tau'//phi for the critical
  layers and tau' for the others.

Both are pure functions of the discrepancies (no torch in them). The schedules are the layer-wise base
(``fedcli.fl.schedules.LayerwiseSchedule``: Eq. 2 measured at each synchronization, the adjustment at a round's end,
d and the intervals checkpointed) with one of them; the options (``--phi``, ``--lama-rule``, ...) and the round lengths
(phi*tau', tau') are declared in ``fedcli/specs/fedlama.py``.
"""

from __future__ import annotations

from typing import Sequence

from fedcli.fl.layerwise import delta_lambda
from fedcli.fl.schedules import LayerwiseSchedule


def lama_intervals(
    d: Sequence[float],
    numel: Sequence[int],
    tau: int,
    phi: int,
    *,
    rule: str = "reference",
    eligible: Sequence[bool] | None = None,
) -> list[int]:
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


def lama_accelerate_intervals(
    d: Sequence[float],
    numel: Sequence[int],
    tau: int,
    phi: int,
    *,
    rule: str = "reference",
    eligible: Sequence[bool] | None = None,
) -> list[int]:
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


class Lama(LayerwiseSchedule):
    """FedLAMA (Algorithm 2 of the AAAI version, Algorithm 1 of the arXiv/ICLR ones): per-layer intervals in
    {tau', phi*tau'}, re-adjusted by Algorithm 1 (:func:`lama_intervals`) at the end of a round of phi*tau'
    iterations. All layers start at tau'."""

    intervals_of = staticmethod(lama_intervals)


class LamaAccelerate(Lama):
    """FedLAMA's accelerate variant: critical layers (largest d) every tau'//phi, the rest every tau'; a round lasts
    tau' and the intervals are re-adjusted at its end by :func:`lama_accelerate_intervals`. Communicates *more* than
    FedAvg(tau')."""

    intervals_of = staticmethod(lama_accelerate_intervals)
