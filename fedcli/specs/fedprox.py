"""FedProx (Li et al., MLSys 2020): FedAvg whose local step adds the proximal term mu * (x - u).

``--mu`` is mu, default 0.001 for this preset: FedALA's appendix (chosen from 0.1, 0.01, 0.001, 0.0001) and
FedLAMA AAAI Table 4 both use it (FedProx's own paper tunes mu per dataset among 0.001, 0.01, 0.1, 1); ``--mu 0`` is
FedAvg (tested). Other settings are fedcli's general defaults (FedLAMA's setting, as FedAvg). FedProx + FedLAMA is
``--algo fedprox --schedule lama`` (each layer anchored at its last synchronized value:
``fedcli.fl.algorithms.fedprox``). FedProx-C (``fedcli/specs/fedprox_c.py``) takes the same local step.

Its option, its part and the preset (no torch); the part is in ``fedcli/fl/algorithms/fedprox.py``.
"""

from fedcli.params import opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import SGD


@register_params(section="fedprox")
class ProxParams:
    """FedProx's proximal coefficient mu (Li et al., MLSys 2020)."""

    mu: float = opt(
        0.01,
        "FedProx proximal coefficient mu: the local gradient gets mu * (x - u), u the layer's last "
        "synchronized global value (AAAI Table 4 uses 0.001; 0 is FedAvg).",
        lo=0.0,
        group="method",
        search={"choices": [0.0001, 0.001, 0.01, 0.1]},
    )


PROX = part("local_step", "prox", "fedcli.fl.algorithms.fedprox:ProxStep", base=SGD, Params=ProxParams)


register_method(
    Method(
        "fedprox",
        "local SGD + proximal term mu (Li et al. 2020); --mu",
        local_step="prox",
        defaults={"mu": 0.001},
        label="FedProx",
        style=("#9467BD", "<"),
        search=("lr", "mu"),
    )
)  # FedALA appendix; FedLAMA AAAI Table 4
