"""FedAMP (Huang, Chu, Zhou, Wang, Liu, Pei, Zhang, AAAI 2021, "Personalized Cross-Silo Federated Learning on
Non-IID Data", Algorithm 1): attentive message passing between the clients' models.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedamp.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import OVERWRITE, SGD


@register_params(section="fedamp")
class FedAMPParams:
    """FedAMP's attentive message passing and proximal term (Huang et al., AAAI 2021, Algorithm 1)."""

    amp_alpha: float = opt(
        1000.0,
        "FedAMP: server step size alpha_k of the attention-inducing update and of the proximal coefficient "
        "lambda / alpha_k (FedALA appendix: 1000).",
        lo=Open(0.0),
        group="personalized",
    )
    amp_lambda: float = opt(
        1.0,
        "FedAMP: regularization lambda of the local proximal term lambda / (2 alpha_k) ||w - u_i||^2 "
        "(FedALA appendix: 1; 0: no proximal gradient, as in PFLlib's clientamp.py).",
        lo=0.0,
        group="personalized",
    )
    amp_sigma: float = opt(
        0.1,
        "FedAMP: sigma of the attention-inducing function A(x) = 1 - exp(-x / sigma) (FedALA appendix: 0.1).",
        lo=Open(0.0),
        group="personalized",
    )


#: the capability of FedAMP's init: the round's u_i (name -> [K, *shape]), for its local step
CLOUDS = "amp.clouds"
#: FedAMP needs every client every round (its clouds mix every client's model): checked with the config
INIT = part(
    "init",
    "fedamp",
    "fedcli.fl.algorithms.fedamp:AMPInit",
    base=OVERWRITE,
    Params=FedAMPParams,
    full_participation=True,
    provides=frozenset({CLOUDS}),
)
STEP = part(
    "local_step",
    "fedamp",
    "fedcli.fl.algorithms.fedamp:AMPStep",
    base=SGD,
    Params=FedAMPParams,
    full_participation=True,
)


register_method(
    Method(
        "fedamp",
        "personalized cloud models by attentive message passing, local proximal term (Huang et al. 2021); "
        "--amp-alpha, --amp-lambda, --amp-sigma; every client every round",
        local_step="fedamp",
        init="fedamp",
        personalized=True,
        defaults={"active_ratio": 1.0},
        label="FedAMP",
        style=("#FF9896", "h"),
    )
)  # cross-silo: "FedAMP and APPLE ... require all clients to join each iteration" (FedALA, Related Work)
