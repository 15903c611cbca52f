"""scripts/fedala_claim.py: the verdicts by the criteria fixed before the runs, on seed values worked out by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fedcli.reports.paired import paired

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fedala_claim", ROOT / "scripts/fedala_claim.py")
claim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(claim)


def test_criterion_one_three_ways():
    # d = 0.1, 0.2, 0.3, 0.4, 0.5: mean 0.3, t = sqrt(18) (as d = 1..5), p = 1 - 36/(11 sqrt 11) = 0.0132 < 0.05
    above = paired([99.1, 99.2, 99.3, 99.4, 99.5], [99.0] * 5)
    assert above.p == pytest.approx(0.013236, abs=1e-6) and claim.at_least(above) == "holds"
    below = paired([99.0] * 5, [99.1, 99.2, 99.3, 99.4, 99.5])
    assert claim.at_least(below) == "contradicted"
    # d = (0.1, -0.2, 0.3, 0.4, 0.5): mean 0.22, t = 0.22 / sqrt(0.077 / 5) = 1.773, p = 0.151: within the noise
    mixed = paired([99.1, 98.8, 99.3, 99.4, 99.5], [99.0] * 5)
    assert mixed.p == pytest.approx(0.151, abs=1e-3) and claim.at_least(mixed) == "not separated from the seed noise"


def test_criterion_two_needs_the_gap_and_the_test():
    assert claim.GAP == pytest.approx(1.95)
    big = paired([99.0] * 5, [96.0, 96.1, 96.2, 96.3, 96.4])  # d 3.0 .. 2.6: mean 2.8 >= 1.95, p tiny
    assert claim.far_above(big) == "holds"
    small = paired([99.0] * 5, [97.5, 97.6, 97.7, 97.8, 97.9])  # mean 1.3 < 1.95 although p tiny
    assert small.p < 0.01 and claim.far_above(small) == "does not hold"
    noisy = paired([99.0] * 5, [94.0, 99.0, 97.0, 99.5, 95.0])  # mean 2.1 >= 1.95 but p = 0.096
    assert noisy.mean == pytest.approx(2.1) and noisy.p > 0.05 and claim.far_above(noisy) == "does not hold"


def test_render_reports_the_numbers_and_the_verdicts():
    seeds = [0, 1, 2, 3, 4]
    acc = {("FedAvg", w): [96.0, 96.1, 96.2, 96.3, 96.4] for w in claim.WHICH}
    acc |= {("FedAvg-C", w): [99.0] * 5 for w in claim.WHICH}
    acc |= {("FedALA", w): [99.1, 99.2, 99.3, 99.4, 99.5] for w in claim.WHICH}
    text = claim.render(acc, seeds, "cpu")
    assert (
        "| FedALA | `personal_acc`, after ALA, before training | 99.30 ± 0.16 | 99.10, 99.20, 99.30, 99.40, 99.50 |"
        in text
    )
    assert (
        "| FedAvg-C | best | +0.30 ± 0.16 | +0.10, +0.20, +0.30, +0.40, +0.50 | [+0.10, +0.50] | 4.24 | "
        "0.0132 | 5 / 0 | 0.0625 | 0.0625 |" in text
    )
    assert "4 degrees of freedom" in text and "cannot go below p = 0.0625" in text
    assert "1. FedALA at least FedAvg-C: mean d +0.30 points, p = 0.0132: **holds**" in text
    assert "2. FedALA far above FedAvg's global model: mean d +3.10 points" in text and "**holds**." in text
