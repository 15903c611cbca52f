"""FedAdagrad (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): local SGD, and the
server applies Adagrad to the averaged update Delta_t = average - x_t. FedAdam's server (``adam``,
``fedcli.fl.algorithms.fedadam``) with a second moment that only accumulates.

Defaults: Reddi et al.'s best FedAdagrad setting for EMNIST CR (handwritten characters with a CNN, the task
nearest to digits; their table of best hyper-parameters, half-decade grids): client lr 10^-1.5 = 0.0316, server
lr eta = 10^-1 = 0.1, tau = 10^-2. b1 = 0: Adagrad has no momentum; the paper's analysis of FedAdagrad
(Theorem 1) takes b1 = 0, and its experiments ran the server's plain Adagrad.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedadagrad.py``.
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.fedadam import ADAM

SERVER = part("server", "adagrad", "fedcli.fl.algorithms.fedadagrad:AdagradServer", base=ADAM)


register_method(
    Method(
        "fedadagrad",
        "local SGD + server Adagrad on the averaged update (Reddi et al. 2021)",
        server="adagrad",
        defaults={"lr": 0.0316, "server_lr": 0.1, "server_eps": 0.01, "beta1": 0.0},
        label="FedAdagrad",
        style=("#393B79", ">"),
    )
)
