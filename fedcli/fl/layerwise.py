"""The layer-wise shares in plain Python (no torch): FedLAMA's Eqs. 3 and 4, the discrepancy and size shares along
layers sorted by their unit discrepancy. FedLAMA's Algorithm 1 walks them (``fedcli/fl/algorithms/fedlama.py``), and
``fedcli report`` draws them (the delta-lambda figure) from ``intervals.csv`` without importing torch (about 1 s of a
process's start); the unit discrepancy itself (Eq. 2) is the layer-wise schedules' base's
(``fedcli.fl.schedules.LayerwiseSchedule``).
"""

from __future__ import annotations

import math
from typing import Sequence


def delta_lambda(
    d: Sequence[float], numel: Sequence[int], order: Sequence[int], eligible: Sequence[bool] | None = None
):
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
