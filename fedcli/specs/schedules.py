"""The aggregation schedules' base and FedAvg's periodic schedule (``fedcli/fl/schedules.py``); the layer-wise
schedules and their options are FedLAMA's (``fedcli/specs/fedlama.py``)."""

from fedcli.specs import part


def one_interval(params) -> int:
    """A round of one interval tau: every layer is synchronized at its end (FedAvg's round)."""
    return params.tau


#: every schedule's base: one interval tau for every layer, a round of tau local iterations
SCHEDULE = part("schedule", "", "fedcli.fl.schedules:Schedule", uses=("tau",), round_length=one_interval)
PERIODIC = part("schedule", "periodic", "fedcli.fl.schedules:Periodic", base=SCHEDULE)
