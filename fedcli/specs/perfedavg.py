"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020), first-order version (Per-FedAvg (FO), Algorithm 1).

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/perfedavg.py``.
"""

from fedcli.params import opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import SGD


@register_params(section="perfedavg")
class PerFedAvgParams:
    """Per-FedAvg (FO)'s outer step size beta (Fallah et al., NeurIPS 2020, Algorithm 1)."""

    perfedavg_beta: float = opt(
        0.0,
        "Per-FedAvg: outer (meta) step size beta; the inner step size alpha is --lr (FedALA appendix); 0: "
        "beta = --lr (PFLlib's default).",
        lo=0.0,
        group="personalized",
    )


STEP = part(
    "local_step",
    "perfedavg",
    "fedcli.fl.algorithms.perfedavg:PerFedAvgStep",
    base=SGD,
    Params=PerFedAvgParams,
    uses=("lr",),
)


register_method(
    Method(
        "perfedavg",
        "Per-FedAvg (FO): MAML steps on pairs of local batches, one-step adaptation to evaluate (Fallah et "
        "al. 2020); --perfedavg-beta",
        local_step="perfedavg",
        personalized=True,
        label="Per-FedAvg",
        style=("#FF7F0E", "v"),
    )
)
