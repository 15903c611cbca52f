"""Adp-Fed / FedAdam (Reddi et al., ICLR 2021, "Adaptive federated optimization"): local SGD, and the server
applies Adam to the averaged update Delta = average - x: x <- x + eta m / (sqrt(v) + tau), ``--server-lr`` eta,
``--server-eps`` tau, ``--beta1``/``--beta2`` (its server, ``adam``, is in ``fedcli/fl/algorithms/fedadam.py``;
FedYogi and FedAdagrad build on it). Alias ``adp-fed`` (the name in Fed-LAMB's experiments).

Defaults: the best FedAdam setting Reddi et al. report for EMNIST CR (handwritten characters with a CNN, the
task nearest to digits; their best values lie on half-decade grids, tau over 10^-5 ... 10^-1 across tasks):
client lr 10^-1.5 = 0.0316, server lr eta = 10^-2.5 = 0.00316, tau = 10^-4. beta1 = 0.9, beta2 = 0.999 are
fedcli's defaults (Fed-LAMB, Section 5, runs Adp-Fed with them). With fedcli's former defaults (lr 0.1,
eta = 1) the server moves every coordinate by about 1 per round and the run ended at chance (10%); with
these it reaches 97.2% on digits at fedcli's defaults (600 local iterations).
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.adaptive import AdaptiveParams
from fedcli.specs.parts import AVERAGE

ADAM = part(
    "server",
    "adam",
    "fedcli.fl.algorithms.fedadam:AdamServer",
    base=AVERAGE,
    Params=AdaptiveParams,
    uses=("server_lr",),
)


register_method(
    Method(
        "fedadam",
        "local SGD + server Adam on the averaged update (Reddi et al. 2021)",
        server="adam",
        aliases=("adp-fed",),
        defaults={"lr": 0.0316, "server_lr": 0.00316, "server_eps": 1e-4},
        label="Adp-Fed",
        style=("#8C564B", "*"),
    )
)
