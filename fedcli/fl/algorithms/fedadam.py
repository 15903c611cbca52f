"""Adp-Fed / FedAdam (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): the server Adam on
the averaged update, which FedYogi and FedAdagrad (``fedcli.fl.algorithms.fedyogi``, ``fedadagrad``) build on.

``adam``           Adp-Fed / FedAdam (Reddi et al., ICLR 2021, Algorithm 2): with Delta = average - x,
                   m <- b1 m + (1 - b1) Delta, v <- b2 v + (1 - b2) Delta^2, x <- x + eta m / (sqrt(v) + tau)
                   (``--server-lr`` eta, ``--server-eps`` tau; no bias correction). ``yogi`` and ``adagrad``
                   (FedYogi, FedAdagrad: ``fedcli.fl.algorithms``) change only v's update (``second_moment``).
"""

from __future__ import annotations

import torch

from fedcli.fl.parts import AverageServer


class AdamServer(AverageServer):
    """Adp-Fed (FedAdam, Reddi et al. 2021, Algorithm 2): server Adam on the averaged update, per layer.

    FedAdagrad and FedYogi (``fedcli.fl.algorithms.fedadagrad``, ``fedyogi``) are the same server with another
    second-moment rule: they override :meth:`second_moment` only.
    """

    keeps = ("m", "v")  # per layer, checkpointed and resumed with the run

    def __init__(self, opts):
        super().__init__(opts)
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def second_moment(self, v: torch.Tensor | None, delta: torch.Tensor) -> torch.Tensor:
        """v_t from v_{t-1} (None in the first round) and this round's Delta_t. FedAdam (Algorithm 2):
        v_t = b2 v_{t-1} + (1 - b2) Delta_t^2, from v_{-1} = 0 (fedcli's FedAdam before this hook; its golden
        record)."""
        b2 = self.opts.beta2
        return (1 - b2) * delta * delta if v is None else b2 * v + (1 - b2) * delta * delta

    def v_start(self, delta: torch.Tensor) -> torch.Tensor:
        """v_{-1} = tau^2, the least Algorithm 2 allows ("v_{-1} >= tau^2"), for the rules that start from it."""
        return torch.full_like(delta, self.opts.server_eps**2)

    @torch.no_grad()
    def update(self, name: str, previous: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        b1 = self.opts.beta1
        delta = average - previous
        m = self.m.get(name)
        v = self.v.get(name)
        m = (1 - b1) * delta if m is None else b1 * m.to(delta.device) + (1 - b1) * delta
        v = self.second_moment(None if v is None else v.to(delta.device), delta)
        self.m[name], self.v[name] = m, v
        return previous + self.opts.server_lr * m / (v.sqrt() + self.opts.server_eps)
