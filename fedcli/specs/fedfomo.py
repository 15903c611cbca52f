"""FedFomo (Zhang, Sapra, Fidler, Yeung, Alvarez, ICLR 2021, "Personalized Federated Learning with First Order
Model Optimization", Eqs. 5-7, Algorithm 1): each client aggregates other clients' models with weights from
a first-order approximation of how much each one lowers its validation loss.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedfomo.py``.
"""

from fedcli.params import opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import OVERWRITE


@register_params(section="fedfomo")
class FedFomoParams:
    """FedFomo's downloaded models and validation split (Zhang et al., ICLR 2021, Algorithm 1)."""

    fomo_m: int = opt(0, "FedFomo: number M of client models each client downloads (top-M of the server's affinity row); 0: all clients (FedALA appendix: M = number of clients).", lo=0, group="personalized")
    fomo_val_ratio: float = opt(0.2, "FedFomo: fraction of each client's training split held out to weigh the received models (PFLlib: 0.2); it trains on the rest.", lo=0.0, hi=1.0, hi_open=True, group="personalized")


INIT = part("init", "fedfomo", "fedcli.fl.algorithms.fedfomo:FomoInit", base=OVERWRITE, Params=FedFomoParams,
            uses=("seed",))


register_method(Method("fedfomo", "each client aggregates M downloaded client models with first-order validation weights (Zhang et al. 2021); "
                                  "--fomo-m, --fomo-val-ratio",
                       init="fedfomo", personalized=True, label="FedFomo", style=("#C49C94", "*")))
