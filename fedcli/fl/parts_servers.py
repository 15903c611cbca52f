"""A server update beyond the plain average that several methods use: a server learning rate (FedCOM, SCAFFOLD).
It only needs the weighted sum over the cohort, so under MPI the engine's one all-reduce of the local weighted
sums is all it uses. (FedNova's normalized averaging is FedNova's alone: ``fedcli.fl.algorithms.fednova``.)
"""

from __future__ import annotations

import torch

from fedcli.fl.parts import AverageServer


class ServerLR(AverageServer):
    """u <- u + eta * (sum_i p_i x_i - u) = u + eta * (weighted mean client update), eta = ``--server-lr``.

    FedCOM (Haddadpour et al., AISTATS 2021, Algorithm 1) applies it to the mean of the *quantized*
    updates (with the ``qsgd`` codec the engine averages u + Q(x_i - u)); SCAFFOLD calls it the global
    step size eta_g (Karimireddy et al., ICML 2020). eta = 1 returns the average itself (bit-for-bit
    the plain average).
    """

    def __init__(self, opts):
        super().__init__(opts)
        self.lr = float(self.opts.server_lr)

    def update(self, name: str, previous: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        if self.lr == 1.0:
            return average
        return torch.lerp(previous, average, self.lr)
