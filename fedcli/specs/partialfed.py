"""PartialFed-Adaptive (Sun, Huo, Yang, Bai, NeurIPS 2021, "PartialFed: Cross-Domain Personalized Federated
Learning via Partial Initialization", the adaptive variant), as FedALA (Zhang et al., AAAI 2023) ran it as a
baseline: per client and per layer (parameter tensor) a learned choice between the global and the local
parameter, relaxed with Gumbel-softmax, re-applied at every training batch, with alternating updates of the
model weights and of the strategy.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/partialfed.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import OVERWRITE, SGD


@register_params(section="partialfed")
class PartialFedParams:
    """PartialFed-Adaptive's Gumbel-softmax layer choice (Sun et al., NeurIPS 2021)."""

    partialfed_tau: float = opt(
        5.0,
        "PartialFed: initial Gumbel-softmax temperature tau of the per-layer global/local choice (FedALA "
        "appendix: 5.0).",
        lo=Open(0.0),
        group="personalized",
    )
    partialfed_decay: float = opt(
        0.965,
        "PartialFed: the temperature is multiplied by this each round (FedALA appendix: 0.965).",
        lo=Open(0.0),
        hi=1.0,
        group="personalized",
    )
    partialfed_fm: int = opt(
        8,
        "PartialFed: of every f_m + f_s local batches, the first f_m update the model weights (FedALA appendix: 8).",
        lo=0,
        group="personalized",
    )
    partialfed_fs: int = opt(
        2,
        "PartialFed: ... and the next f_s update the selection strategy (FedALA appendix: 2).",
        lo=0,
        group="personalized",
    )


INIT = part("init", "partialfed", "fedcli.fl.algorithms.partialfed:PartialFedInit", base=OVERWRITE)
STEP = part(
    "local_step",
    "partialfed",
    "fedcli.fl.algorithms.partialfed:PartialFedStep",
    base=SGD,
    Params=PartialFedParams,
    uses=("seed",),
)


register_method(
    Method(
        "partialfed",
        "per-layer learned Gumbel-softmax choice of global or local parameters at every batch (Sun et al. 2021); "
        "--partialfed-tau, --partialfed-decay, --partialfed-fm, --partialfed-fs",
        local_step="partialfed",
        init="partialfed",
        personalized=True,
        label="PartialFed",
        style=("#DBDB8D", "s"),
    )
)
