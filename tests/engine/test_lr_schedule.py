"""The local learning-rate schedule: linear warm-up (Goyal et al. 2017) then step decay by a factor at every decay
point (``--lr-decay-at``, in iterations or rounds), as tables worked out by hand at and around every boundary, and a
run whose per-step learning rates and ``metrics.csv`` ``lr`` column are asserted."""

import csv

import pytest

from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.fl import engine
from fedcli.fl.engine import lr_at


def cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"dataset": "digits", "model": "mlp", **kw}).validate()


# lr 0.8, warm-up over 4 iterations, halved at iterations 6 and 10: (iteration before the step, lr)
ITERATION_TABLE = [
    (0, 0.2),
    (1, 0.4),
    (2, 0.6),
    (3, 0.8),  # warm-up: 0.8 * (i + 1) / 4
    (4, 0.8),
    (5, 0.8),  # warm-up over, before the first decay point
    (6, 0.4),
    (7, 0.4),
    (9, 0.4),  # one decay: 0.8 * 0.5
    (10, 0.2),
    (11, 0.2),
    (1000, 0.2),
]  # two decays: 0.8 * 0.25


@pytest.mark.parametrize("it,lr", ITERATION_TABLE)
def test_warmup_then_step_decay_in_iterations(it, lr):
    c = cfg(lr=0.8, warmup_iterations=4, lr_decay_at="10,6", lr_decay_factor=0.5, lr_decay_unit="iteration")
    assert lr_at(c, it, round_idx=0) == pytest.approx(lr, rel=1e-12)
    assert lr_at(c, it, round_idx=99) == pytest.approx(lr, rel=1e-12)  # the round does not count in this unit


# lr 0.3, divided by 10 from round 2 on and again from round 5 on: (round, lr); the iteration does not count
ROUND_TABLE = [(0, 0.3), (1, 0.3), (2, 0.03), (3, 0.03), (4, 0.03), (5, 0.003), (6, 0.003), (50, 0.003)]


@pytest.mark.parametrize("r,lr", ROUND_TABLE)
def test_step_decay_in_rounds(r, lr):
    c = cfg(lr=0.3, lr_decay_at="2,5", lr_decay_factor=0.1, lr_decay_unit="round")
    for it in (0, 7, 10_000):
        assert lr_at(c, it, r) == pytest.approx(lr, rel=1e-12)


def test_warmup_and_decay_overlap_and_repeated_points():
    # a decay point inside the warm-up multiplies the warm-up's value: iteration 2 -> 1.0 * 3/4 * 0.5
    c = cfg(lr=1.0, warmup_iterations=4, lr_decay_at="2", lr_decay_factor=0.5)
    assert [lr_at(c, i, 0) for i in range(5)] == pytest.approx([0.25, 0.5, 0.375, 0.5, 0.5])
    # a point named twice decays twice (0.1 * 0.1)
    c = cfg(lr=1.0, lr_decay_at="3,3", lr_decay_factor=0.1)
    assert lr_at(c, 2, 0) == 1.0 and lr_at(c, 3, 0) == pytest.approx(0.01)
    # a decay at 0 applies from the first step; no schedule: the constant lr
    assert lr_at(cfg(lr=0.5, lr_decay_at="0", lr_decay_factor=0.2), 0, 0) == pytest.approx(0.1)
    assert [lr_at(cfg(lr=0.5), i, i) for i in (0, 1, 10**6)] == [0.5, 0.5, 0.5]


def test_a_run_trains_with_and_records_the_scheduled_lr(tmp_path, monkeypatch):
    """6 rounds of 2 steps, warm-up over 3 iterations, halved from round 2 and from round 4: every local step's lr (as
    the local step sees it) and the ``lr`` column (the last step's lr before the evaluation) as worked out by hand."""
    seen = []

    class Recording(engine.StepContext):
        def __init__(self, round_idx, step, iteration, lr, *a, **k):
            seen.append((round_idx, step, iteration, lr))
            super().__init__(round_idx, step, iteration, lr, *a, **k)

    monkeypatch.setattr(engine, "StepContext", Recording)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--algo",
                "fedavg",
                "--dataset",
                "digits",
                "--model",
                "mlp",
                "--mlp-hidden",
                "8",
                "--clients",
                "2",
                "--tau",
                "2",
                "--rounds",
                "6",
                "--batch-size",
                "8",
                "--lr",
                "0.6",
                "--warmup-iterations",
                "3",
                "--lr-decay-at",
                "2,4",
                "--lr-decay-factor",
                "0.5",
                "--lr-decay-unit",
                "round",
                "--momentum",
                "0.9",
                "--eval-every",
                "1",
                "--threads",
                "1",
                "--workers",
                "1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    # iterations 0, 1, 2 warm up (0.2, 0.4, 0.6); rounds 2-3 at 0.3; rounds 4-5 at 0.15
    want = [0.2, 0.4, 0.6, 0.6, 0.3, 0.3, 0.3, 0.3, 0.15, 0.15, 0.15, 0.15]
    assert [s[2] for s in seen] == list(range(12)) and [s[0] for s in seen] == [r for r in range(6) for _ in (1, 2)]
    assert [s[3] for s in seen] == pytest.approx(want, rel=1e-12)
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["lr"]) for r in rows] == pytest.approx(
        [0.4, 0.6, 0.3, 0.3, 0.15, 0.15], rel=1e-12
    )  # steps 1, 3, ...
