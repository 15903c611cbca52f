"""FedLAMA (Lee et al., AAAI 2023): FedAvg with the layer-wise adaptive schedule (Algorithms 1, 2).

Only the schedule differs from FedAvg: ``--tau`` is the base interval tau', ``--phi`` the interval
increase factor; with ``--phi 1`` it is FedAvg.
"""

from fedcli.specs import Method, register_method


register_method(Method("fedlama", "local SGD + layer-wise adaptive aggregation intervals (Lee et al. AAAI 2023)", schedule="lama", label="FedLAMA", style=("#0072B2", "s")))
