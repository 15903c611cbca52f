"""FedYogi (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): local SGD, and the server
applies Yogi to the averaged update Delta_t = average - x_t. FedAdam's server (``adam``, ``fedcli.fl.adaptive``)
with another second moment, which grows or shrinks additively instead of decaying multiplicatively:

    m_t = b1 m_{t-1} + (1 - b1) Delta_t                         (m_{-1} = 0)
    v_t = v_{t-1} - (1 - b2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  (v_{-1} = tau^2)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)                   (no bias correction)

``--server-lr`` eta, ``--server-eps`` tau, ``--beta1``/``--beta2``. v_{-1} = tau^2: Algorithm 2 asks for
v_{-1} >= tau^2 and this is the least it allows (fedadam keeps v_{-1} = 0, its older record).

Defaults: Reddi et al.'s best FedYogi setting for EMNIST CR (handwritten characters with a CNN, the task nearest
to digits; their table of best hyper-parameters, half-decade grids): client lr 10^-1.5 = 0.0316, server lr
eta = 10^-2.5 = 0.00316, tau = 10^-4, the same as FedAdam's. b1 = 0.9 and b2 = 0.99 are the values Section 5
fixes for FedAdam and FedYogi (fedcli's general b2 is Fed-LAMB's 0.999).
"""

import torch

from fedcli.fl.adaptive import AdamServer
from fedcli.fl.methods import Method, register_method
from fedcli.fl.parts import register_server


@register_server("yogi")
class YogiServer(AdamServer):
    """FedYogi's server: Adam's (``AdamServer``) with Yogi's second moment (Algorithm 2, FedYogi's line)."""

    def second_moment(self, v: torch.Tensor | None, delta: torch.Tensor) -> torch.Tensor:
        sq = delta * delta
        v = self.v_start(delta) if v is None else v
        return v - (1 - self.params.beta2) * sq * torch.sign(v - sq)


register_method(Method("fedyogi", "local SGD + server Yogi on the averaged update (Reddi et al. 2021)", server="yogi",
                       defaults={"lr": 0.0316, "server_lr": 0.00316, "server_eps": 1e-4, "beta2": 0.99},
                       label="FedYogi", style=("#8C6D31", "8")))
