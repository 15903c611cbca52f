"""The aggregation schedules' base and FedAvg's periodic schedule (``fedcli/fl/schedules.py``); the layer-wise
schedules and their options are FedLAMA's (``fedcli/specs/fedlama.py``)."""

from fedcli.specs import part


#: every schedule's base: one interval tau for every layer
SCHEDULE = part("schedule", "", "fedcli.fl.schedules:Schedule", uses=("tau",))
PERIODIC = part("schedule", "periodic", "fedcli.fl.schedules:Periodic", base=SCHEDULE)
