"""FedYogi (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): local SGD, and the server
applies Yogi to the averaged update Delta_t = average - x_t. FedAdam's server (``adam``,
``fedcli.fl.algorithms.fedadam``)
with another second moment, which grows or shrinks additively instead of decaying multiplicatively:

    m_t = b1 m_{t-1} + (1 - b1) Delta_t                         (m_{-1} = 0)
    v_t = v_{t-1} - (1 - b2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  (v_{-1} = tau^2)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)                   (no bias correction)

``--server-lr`` eta, ``--server-eps`` tau, ``--beta1``/``--beta2``. v_{-1} = tau^2: Algorithm 2 asks for
v_{-1} >= tau^2 and this is the least it allows (fedadam keeps v_{-1} = 0, its older record).
"""

import torch

from fedcli.fl.algorithms.fedadam import AdamServer


class YogiServer(AdamServer):
    """FedYogi's server: Adam's (``AdamServer``) with Yogi's second moment (Algorithm 2, FedYogi's line)."""

    def second_moment(self, v: torch.Tensor | None, delta: torch.Tensor) -> torch.Tensor:
        sq = delta * delta
        v = self.v_start(delta) if v is None else v
        return v - (1 - self.opts.beta2) * sq * torch.sign(v - sq)
