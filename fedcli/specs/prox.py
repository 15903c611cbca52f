"""FedProx's proximal local step (Li et al., MLSys 2020; ``fedcli/fl/parts_prox.py``): its option mu."""

from fedcli.params import opt, register_params
from fedcli.specs import part
from fedcli.specs.parts import SGD


@register_params(section="fedprox")
class ProxParams:
    """FedProx's proximal coefficient mu (Li et al., MLSys 2020)."""

    mu: float = opt(0.01, "FedProx proximal coefficient mu: the local gradient gets mu * (x - u), u the layer's last synchronized global value (AAAI Table 4 uses 0.001; 0 is FedAvg).", lo=0.0, group="method")


PROX = part("local_step", "prox", "fedcli.fl.parts_prox:ProxStep", base=SGD, Params=ProxParams)
