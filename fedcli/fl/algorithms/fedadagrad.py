"""FedAdagrad (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): local SGD, and the
server applies Adagrad to the averaged update Delta_t = average - x_t. FedAdam's server (``adam``,
``fedcli.fl.adaptive``) with a second moment that only accumulates:

    m_t = b1 m_{t-1} + (1 - b1) Delta_t          (m_{-1} = 0; b1 = 0: m_t = Delta_t)
    v_t = v_{t-1} + Delta_t^2                      (v_{-1} = tau^2)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

``--server-lr`` eta, ``--server-eps`` tau, ``--beta1`` (``--beta2`` is not used). v_{-1} = tau^2: Algorithm 2 asks
for v_{-1} >= tau^2 and this is the least it allows.

Defaults: Reddi et al.'s best FedAdagrad setting for EMNIST CR (handwritten characters with a CNN, the task
nearest to digits; their table of best hyper-parameters, half-decade grids): client lr 10^-1.5 = 0.0316, server
lr eta = 10^-1 = 0.1, tau = 10^-2. b1 = 0: Adagrad has no momentum; the paper's analysis of FedAdagrad
(Theorem 1) takes b1 = 0, and its experiments ran the server's plain Adagrad.
"""

import torch

from fedcli.fl.adaptive import AdamServer
from fedcli.fl.methods import Method, register_method
from fedcli.fl.parts import register_server


@register_server("adagrad")
class AdagradServer(AdamServer):
    """FedAdagrad's server: Adam's (``AdamServer``) with Adagrad's second moment (Algorithm 2, FedAdagrad's line)."""

    def second_moment(self, v: torch.Tensor | None, delta: torch.Tensor) -> torch.Tensor:
        return (self.v_start(delta) if v is None else v) + delta * delta


register_method(Method("fedadagrad", "local SGD + server Adagrad on the averaged update (Reddi et al. 2021)",
                       server="adagrad", defaults={"lr": 0.0316, "server_lr": 0.1, "server_eps": 0.01, "beta1": 0.0},
                       label="FedAdagrad", style=("#393B79", ">")))
