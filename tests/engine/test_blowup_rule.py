"""The finite blow-up rule (fedcli/fl/guard.py, ``--diverge-factor``), with thresholds worked out by hand: factor 100
and 10 classes give 100 x ln(10) = 230.26. A train loss above it stops at once; a test loss only at two evaluations in
a row (one spike of the global model's test loss, as a BatchNorm net shows early at a high lr, is not divergence)."""

from types import SimpleNamespace

import pytest

from fedcli.errors import DivergenceError
from fedcli.fl.guard import check_blowup


def evaluate(history: list, train: float, test: float, factor: float = 100.0) -> None:
    """One evaluation's row appended to the history, as evaluate_and_log does, then the rule."""
    row = {"train_loss": train, "test_loss": test}
    history.append(row)
    sim = SimpleNamespace(
        record=SimpleNamespace(metrics=row),
        cfg=SimpleNamespace(diverge_factor=factor),
        dataset=SimpleNamespace(num_classes=10),
    )
    check_blowup(sim, SimpleNamespace(summary=SimpleNamespace(history=history), round_idx=len(history), iteration=5))


def test_train_loss_above_stops_at_once():
    with pytest.raises(
        DivergenceError, match=r"train loss 231 is more than --diverge-factor 100 times ln\(10\) = 2.303"
    ):
        evaluate([], train=231.0, test=1.0)


def test_one_test_loss_spike_goes_on_two_in_a_row_stop():
    history: list = []
    evaluate(history, train=2.0, test=9353.0)  # the first evaluation: a spike, not divergence
    evaluate(history, train=1.9, test=230.0)  # 230 < 230.26: recovered
    evaluate(history, train=1.8, test=231.0)  # above again, but the previous was not
    with pytest.raises(DivergenceError, match=r"round 4 .*test loss 500, as at the previous evaluation,"):
        evaluate(history, train=1.7, test=500.0)


def test_off_and_non_finite_are_left_to_the_other_checks():
    history: list = []
    evaluate(history, train=1e9, test=1e9, factor=0.0)  # --diverge-factor 0: off
    evaluate(history, train=float("inf"), test=float("nan"))  # non-finite: the guard at synchronization catches those
