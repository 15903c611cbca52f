"""FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic Regularization", Algorithm 1).

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/feddyn.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Method, part, register_method


@register_params(section="feddyn")
class FedDynParams:
    """FedDyn's coefficient alpha (Acar et al., ICLR 2021, Algorithm 1)."""

    feddyn_alpha: float = opt(
        0.1,
        "FedDyn: coefficient alpha of the dynamic regularizer (alpha/2)||theta - theta^{t-1}||^2 and of "
        "the server state h (Acar et al. 2021 report 0.1, 0.01, 0.001).",
        lo=Open(0.0),
        group="method",
    )


STEP = part("local_step", "feddyn", "fedcli.fl.algorithms.feddyn:FedDynStep", base="sgd", Params=FedDynParams)
SERVER = part("server", "feddyn", "fedcli.fl.algorithms.feddyn:FedDynServer", base="average", Params=FedDynParams)


register_method(
    Method(
        "feddyn",
        "local SGD with dynamic regularization, server state h (Acar et al. 2021); --feddyn-alpha",
        local_step="feddyn",
        server="feddyn",
        label="FedDyn",
        style=("#1F77B4", "H"),
    )
)
