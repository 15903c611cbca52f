"""The narrow services parts use instead of the simulation: the cohort's weighted sum of named tensors."""

import torch

from fedcli.config import TrainConfig
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation


def _cohort(weights) -> Cohort:
    c = Cohort([2, 5, 9], torch.tensor(weights, dtype=torch.float64), {}, {})
    c.cohort_ids = [2, 5, 9]
    return c


def test_cohort_sums_weighs_names_and_skips_rows():
    """Worked by hand: a = [[1, 2], [3, 4], [5, 6]], b = [10, 20, 30] (one scalar per client)."""
    sim = Simulation(TrainConfig())
    stacked = {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), "b": torch.tensor([10.0, 20.0, 30.0])}
    cohort = _cohort([0.5, 0.25, 0.25])
    out = sim.cohort_sums(cohort, stacked, cohort.weights)
    assert list(out) == ["a", "b"] and out["a"].shape == (2,) and out["b"].shape == ()
    assert out["a"].tolist() == [2.5, 3.5] and out["b"].item() == 17.5     # 0.5*1 + 0.25*3 + 0.25*5, ...
    skip = torch.tensor([False, True, False])                                  # client 5 dropped: its row adds nothing
    out = sim.cohort_sums(cohort, stacked, cohort.weights, skip)
    assert out["a"].tolist() == [1.75, 2.5] and out["b"].item() == 12.5
    out = sim.cohort_sums(cohort, stacked, None)                               # no weights: the plain sum
    assert out["a"].tolist() == [9.0, 12.0] and out["b"].item() == 60.0


def test_cohort_sums_of_a_process_without_clients_is_zero():
    """A process holding no client of the cohort adds zeros of the right shapes (the others' rows come by all-reduce)."""
    sim = Simulation(TrainConfig())
    cohort = Cohort([], torch.zeros(0, dtype=torch.float64), {}, {})
    cohort.cohort_ids = [2, 5]
    out = sim.cohort_sums(cohort, {"w": torch.zeros(0, 2, 3)}, cohort.weights)
    assert out["w"].shape == (2, 3) and not out["w"].any()
