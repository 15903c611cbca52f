"""FedYogi (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): local SGD, and the server
applies Yogi to the averaged update Delta_t = average - x_t. FedAdam's server (``adam``,
``fedcli.fl.algorithms.fedadam``)
with another second moment, which grows or shrinks additively instead of decaying multiplicatively.

Defaults: Reddi et al.'s best FedYogi setting for EMNIST CR (handwritten characters with a CNN, the task nearest
to digits; their table of best hyper-parameters, half-decade grids): client lr 10^-1.5 = 0.0316, server lr
eta = 10^-2.5 = 0.00316, tau = 10^-4, the same as FedAdam's. b1 = 0.9 and b2 = 0.99 are the values Section 5
fixes for FedAdam and FedYogi (fedcli's general b2 is Fed-LAMB's 0.999).

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedyogi.py``.
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.fedadam import ADAM

SERVER = part("server", "yogi", "fedcli.fl.algorithms.fedyogi:YogiServer", base=ADAM)


register_method(
    Method(
        "fedyogi",
        "local SGD + server Yogi on the averaged update (Reddi et al. 2021)",
        server="yogi",
        defaults={"lr": 0.0316, "server_lr": 0.00316, "server_eps": 1e-4, "beta2": 0.99},
        label="FedYogi",
        style=("#8C6D31", "8"),
    )
)
