"""fedcli.reports.paired: the paired t-test, sign test and exact Wilcoxon test of a seed comparison, on numbers worked
out by hand."""

from __future__ import annotations

import math

import pytest

from fedcli.reports.paired import paired, sign_test_p, signed_ranks, t_critical, t_two_sided_p, wilcoxon_p


def test_t_p_values_by_hand():
    # nu = 1 (Cauchy): theta = atan(1) = pi/4, A = 2 theta / pi = 1/2
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5, abs=1e-15)
    # nu = 2: A = sin(theta) = t / sqrt(2 + t^2); t = sqrt(2): A = 1/sqrt(2)
    assert t_two_sided_p(math.sqrt(2), 2) == pytest.approx(1 - 1 / math.sqrt(2), abs=1e-15)
    # nu = 4, t = 2: theta = 45 degrees, A = sin (1 + cos^2 / 2) = (sqrt(2)/2)(5/4)
    assert t_two_sided_p(2.0, 4) == pytest.approx(1 - 5 * math.sqrt(2) / 8, abs=1e-15)
    assert t_two_sided_p(-2.0, 4) == t_two_sided_p(2.0, 4)
    # nu = 3, t = sqrt(3): theta = atan(1) = pi/4, A = 2/pi (pi/4 + sin cos) = 1/2 + 1/pi
    assert t_two_sided_p(math.sqrt(3), 3) == pytest.approx(1 / 2 - 1 / math.pi, abs=1e-15)
    # nu = 5, t = sqrt(5): theta = pi/4, A = 2/pi (pi/4 + 1/2 (1 + 2/3 * 1/2)) = 1/2 + 4/(3 pi)
    assert t_two_sided_p(math.sqrt(5), 5) == pytest.approx(1 - 0.5 - 4 / (3 * math.pi), abs=1e-15)
    assert t_two_sided_p(0.0, 4) == 1.0 and t_two_sided_p(float("inf"), 4) == 0.0
    with pytest.raises(ValueError):
        t_two_sided_p(1.0, 0)


def test_t_critical_matches_the_printed_tables():
    # the two-sided 5% points of every t table: 12.706 (1), 4.303 (2), 2.776 (4), 2.571 (5), 2.228 (10)
    for df, t in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (5, 2.5706), (10, 2.2281)):
        assert t_critical(df) == pytest.approx(t, abs=1e-4)


def test_paired_t_by_hand():
    # d = 1..5: mean 3, std sqrt(10/4), t = 3 / (sqrt(2.5)/sqrt(5)) = 3 sqrt(2) = sqrt(18), nu = 4:
    # cos^2 = 4/22 = 2/11, sin = 3/sqrt(11), A = 3/sqrt(11) (1 + 1/11) = 36 / (11 sqrt(11))
    r = paired([11, 12, 13, 14, 15], [10, 10, 10, 10, 10])
    assert r.diffs == (1, 2, 3, 4, 5) and r.n == 5 and r.df == 4
    assert r.mean == 3 and r.std == pytest.approx(math.sqrt(2.5), abs=1e-15)
    assert r.t == pytest.approx(math.sqrt(18), abs=1e-12)
    assert r.p == pytest.approx(1 - 36 / (11 * math.sqrt(11)), abs=1e-12)  # 0.013236
    half = t_critical(4) * math.sqrt(0.5)  # t_crit * std / sqrt(n) = t_crit * sqrt(2.5 / 5)
    assert r.ci == pytest.approx((3 - half, 3 + half), abs=1e-12) and r.ci[0] == pytest.approx(1.0368, abs=1e-4)
    assert (r.positive, r.negative) == (5, 0)
    assert r.sign_p == r.wilcoxon_p == 2 / 32  # the smallest two-sided p of 5 pairs


def test_paired_mixed_signs_by_hand():
    # d = (1, -2, 3, 4, 5): ranks 1..5, W+ = 13; W+ >= 13 for the subsets whose complement sums to <= 2: {}, {1}, {2}
    r = paired([1, -2, 3, 4, 5], [0, 0, 0, 0, 0])
    assert r.wilcoxon_p == pytest.approx(2 * 3 / 32)
    assert r.sign_p == pytest.approx(2 * (1 + 5) / 32)  # 4 positive, 1 negative
    # mean 11/5 = 2.2, sum of squares about it 1.44 + 17.64 + 0.64 + 3.24 + 7.84 = 30.8, std sqrt(7.7)
    assert r.mean == pytest.approx(2.2) and r.std == pytest.approx(math.sqrt(7.7))
    assert r.t == pytest.approx(2.2 / math.sqrt(7.7 / 5))
    assert r.p == pytest.approx(t_two_sided_p(2.2 / math.sqrt(7.7 / 5), 4)) and 0.05 < r.p < 0.2
    assert paired([1, 2], [2, 1]).p == 1.0  # d = (-1, 1): mean 0, t = 0


def test_degenerate_pairs():
    same = paired([1, 1, 1], [1, 1, 1])
    assert same.mean == 0 and same.p == 1.0 and same.sign_p == 1.0 and same.wilcoxon_p == 1.0
    shift = paired([2, 3, 4], [1, 2, 3])  # every difference 1: no spread, t infinite
    assert shift.t == math.inf and shift.p == 0.0
    with pytest.raises(ValueError):
        paired([1, 2, 3], [1, 2])


def test_ranks_and_rank_tests_with_ties_and_zeros():
    assert signed_ranks([0.3, 0.1, 0.3, 0.2]) == [3.5, 1.0, 3.5, 2.0]
    # zeros dropped: (0.5, -0.5, 1): |d| ranks 1.5, 1.5, 3; W+ = 4.5 of {1.5, 1.5, 3} sums (0, 1.5, 1.5, 3, 3, 4.5, 4.5,
    # 6):
    # P(W >= 4.5) = 3/8, P(W <= 4.5) = 7/8: p = 6/8
    assert wilcoxon_p([0.5, -0.5, 0.0, 1.0]) == pytest.approx(0.75)
    assert sign_test_p([0.5, -0.5, 0.0, 1.0]) == pytest.approx(2 * (1 + 3) / 8) == 1.0
    assert sign_test_p([0, 0]) == 1.0 and wilcoxon_p([0, 0]) == 1.0


def test_against_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    a, b = [99.1, 99.3, 98.9, 99.5, 99.0], [99.0, 99.4, 98.6, 99.1, 98.95]
    r = paired(a, b)
    ref = stats.ttest_rel(a, b)
    assert r.t == pytest.approx(ref.statistic, rel=1e-9) and r.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert r.wilcoxon_p == pytest.approx(stats.wilcoxon(a, b, method="exact").pvalue, rel=1e-9)
