"""FedFomo (Zhang, Sapra, Fidler, Yeung, Alvarez, ICLR 2021, "Personalized Federated Learning with First Order
Model Optimization", Eqs. 5-7, Algorithm 1): each client aggregates other clients' models with weights from
a first-order approximation of how much each one lowers its validation loss.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedfomo.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import FORWARD_ONLY, Cost, Method, part, register_method
from fedcli.specs.parts import OVERWRITE


@register_params(section="fedfomo")
class FedFomoParams:
    """FedFomo's downloaded models and validation split (Zhang et al., ICLR 2021, Algorithm 1)."""

    fomo_m: int = opt(
        0,
        "FedFomo: number M of client models each client downloads (top-M of the server's affinity row); 0: "
        "all clients (FedALA appendix: M = number of clients).",
        lo=0,
        group="personalized",
    )
    fomo_val_ratio: float = opt(
        0.2,
        "FedFomo: fraction of each client's training split held out to weigh the received models (PFLlib: "
        "0.2); it trains on the rest.",
        lo=0.0,
        hi=Open(1.0),
        group="personalized",
    )


def validation_passes(g) -> float:
    """From round 1 on, each client's loss of its old model and of the M models it downloads (M = --fomo-m, 0: all,
    at most the round's clients) on its validation part (int(ratio n_i), at most n_i - 1; its whole split when that is
    0): forward passes only (``fedcli.fl.algorithms.fedfomo.validation_losses``)."""
    if g.round_idx == 0:
        return 0.0
    m = min(int(g.params.fomo_m) or g.clients, g.clients)
    held = min(int(g.params.fomo_val_ratio * g.split), max(g.split - 1, 0))
    return (m + 1) * (held if held > 0 else g.split) * FORWARD_ONLY


#: its cost: the first-order weights of Eq. 6 need each downloaded model's validation loss (Algorithm 1, "compute
#: w_ij"); the bytes of the M - 1 extra downloads are its ledger records
INIT = part(
    "init",
    "fedfomo",
    "fedcli.fl.algorithms.fedfomo:FomoInit",
    base=OVERWRITE,
    Params=FedFomoParams,
    uses=("seed",),
    cost=Cost(
        round=validation_passes,
        source="FedFomo (Zhang et al., ICLR 2021), Algorithm 1 and Eq. 6: M models down, each one's "
        "validation loss (forward passes)",
    ),
)


register_method(
    Method(
        "fedfomo",
        "each client aggregates M downloaded client models with first-order validation weights (Zhang et al. 2021); "
        "--fomo-m, --fomo-val-ratio",
        init="fedfomo",
        personalized=True,
        label="FedFomo",
        style=("#C49C94", "*"),
    )
)
