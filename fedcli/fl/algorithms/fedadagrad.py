"""FedAdagrad (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): local SGD, and the
server applies Adagrad to the averaged update Delta_t = average - x_t. FedAdam's server (``adam``,
``fedcli.fl.algorithms.fedadam``) with a second moment that only accumulates:

    m_t = b1 m_{t-1} + (1 - b1) Delta_t          (m_{-1} = 0; b1 = 0: m_t = Delta_t)
    v_t = v_{t-1} + Delta_t^2                      (v_{-1} = tau^2)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

``--server-lr`` eta, ``--server-eps`` tau, ``--beta1`` (``--beta2`` is not used). v_{-1} = tau^2: Algorithm 2 asks
for v_{-1} >= tau^2 and this is the least it allows.
"""

import torch

from fedcli.fl.algorithms.fedadam import AdamServer


class AdagradServer(AdamServer):
    """FedAdagrad's server: Adam's (``AdamServer``) with Adagrad's second moment (Algorithm 2, FedAdagrad's line)."""

    def second_moment(self, v: torch.Tensor | None, delta: torch.Tensor) -> torch.Tensor:
        return (self.v_start(delta) if v is None else v) + delta * delta
