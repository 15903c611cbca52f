"""Paired comparisons across seeds: two methods run with the same seeds (same partition, same initial model), one
difference per seed, ``d_s = a_s - b_s``.

- **Paired t-test** (Student, 1908; e.g. Montgomery, *Design and Analysis of Experiments*, Section 2.5.1):
  ``t = mean(d) / (std(d) / sqrt(n))`` with the sample standard deviation (``n - 1``), ``n - 1`` degrees of freedom,
  two-sided p-value ``P(|T| >= |t|)``. The distribution function of Student's t for an integer number of degrees of
  freedom ``nu`` is the finite series of Abramowitz & Stegun 26.7.3 (odd ``nu``) and 26.7.4 (even ``nu``), with
  ``theta = atan(|t| / sqrt(nu))``:

  - ``nu = 1``: ``A = 2 theta / pi``;
  - odd ``nu > 1``: ``A = 2/pi [theta + sin(theta) cos(theta) (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...
    + 2*4*...*(nu-3) / (3*5*...*(nu-2)) cos^(nu-3))]``;
  - even ``nu``: ``A = sin(theta) [1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... + 1*3*...*(nu-3) / (2*4*...*(nu-2))
  cos^(nu-2)]``;

  ``A = P(|T| < |t|)`` and the two-sided p-value is ``1 - A``. The 95% interval of the mean difference is
  ``mean +- t_crit * std / sqrt(n)``, ``t_crit`` the two-sided 5% point (found by bisection on the same series).
- **Sign test**: the zero differences dropped, ``m`` left, ``k`` the smaller of the counts of positive and negative
  ones; exact two-sided ``p = min(1, 2 * sum_{i <= k} C(m, i) / 2^m)``.
- **Wilcoxon signed-rank test** (exact): zero differences dropped, ``|d|`` ranked (ties get their average rank),
  ``W+`` = the sum of the ranks of the positive ones; its null distribution by enumerating all ``2^m`` sign
  assignments; two-sided ``p = min(1, 2 * min(P(W >= W+), P(W <= W+)))``.

With 5 pairs neither rank test can go below ``2 / 2^5 = 0.0625`` two-sided (all five differences of one sign): they
can show that the direction is the same for every seed, never significance at 5%.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence


def t_two_sided_p(t: float, df: int) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` (a positive integer) degrees of freedom (A&S 26.7.3/26.7.4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, not {df}")
    if math.isnan(t):
        return float("nan")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df == 1:
        a = 2 * theta / math.pi
    elif df % 2:
        term, total = 1.0, 1.0
        for k in range(1, (df - 3) // 2 + 1):  # 2*4*..*(2k) / (3*5*..*(2k+1)) cos^(2k)
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = 2 / math.pi * (theta + s * math.cos(theta) * total)
    else:
        term, total = 1.0, 1.0
        for k in range(1, (df - 2) // 2 + 1):  # 1*3*..*(2k-1) / (2*4*..*(2k)) cos^(2k)
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = s * total
    return min(1.0, max(0.0, 1.0 - a))


def t_critical(df: int, alpha: float = 0.05) -> float:
    """The ``t`` with ``P(|T| >= t) = alpha`` (two-sided), by bisection on :func:`t_two_sided_p`."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > alpha:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_p(mid, df) > alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sign_test_p(diffs: Sequence[float]) -> float:
    """Exact two-sided sign test on the non-zero differences (1.0 when none is non-zero)."""
    pos = sum(1 for d in diffs if d > 0)
    neg = sum(1 for d in diffs if d < 0)
    m = pos + neg
    if m == 0:
        return 1.0
    k = min(pos, neg)
    return min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2**m)


def signed_ranks(values: Sequence[float]) -> list[float]:
    """The ranks (1-based) of ``values`` by size, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_p(diffs: Sequence[float]) -> float:
    """Exact two-sided Wilcoxon signed-rank test on the non-zero differences (1.0 when none is non-zero); exact by
    enumeration, so meant for the few pairs of a seed comparison (at most 20)."""
    nz = [d for d in diffs if d != 0]
    m = len(nz)
    if m == 0:
        return 1.0
    if m > 20:
        raise ValueError(f"the exact Wilcoxon test enumerates 2^{m} sign patterns: at most 20 pairs")
    ranks = signed_ranks([abs(d) for d in nz])
    w = sum(r for r, d in zip(ranks, nz) if d > 0)
    eps = 1e-9
    ge = le = 0
    for signs in itertools.product((0, 1), repeat=m):
        s = sum(r for r, on in zip(ranks, signs) if on)
        ge += s >= w - eps
        le += s <= w + eps
    return min(1.0, 2 * min(ge, le) / 2**m)


@dataclass(frozen=True)
class Paired:
    """A paired comparison of ``n`` seed differences (see the module docstring)."""

    diffs: tuple[float, ...]
    mean: float
    std: float
    t: float
    df: int
    p: float
    ci: tuple[float, float]  # 95% interval of the mean difference
    sign_p: float
    wilcoxon_p: float

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def positive(self) -> int:
        return sum(1 for d in self.diffs if d > 0)

    @property
    def negative(self) -> int:
        return sum(1 for d in self.diffs if d < 0)


def paired(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> Paired:
    """The paired t-test, sign test and Wilcoxon test of ``a_s - b_s`` (the two sequences in seed order)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(
            f"a paired test needs two sequences of the same length, at least 2 (got {len(a)} and {len(b)})"
        )
    diffs = tuple(float(x) - float(y) for x, y in zip(a, b))
    n = len(diffs)
    mean = math.fsum(diffs) / n
    std = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    se = std / math.sqrt(n)
    if se > 0:
        t = mean / se
    else:  # every difference equal: no spread
        t = float("nan") if mean == 0 else math.copysign(float("inf"), mean)
    p = 1.0 if (se == 0 and mean == 0) else t_two_sided_p(t, n - 1)
    half = t_critical(n - 1, alpha) * se
    return Paired(diffs, mean, std, t, n - 1, p, (mean - half, mean + half), sign_test_p(diffs), wilcoxon_p(diffs))
