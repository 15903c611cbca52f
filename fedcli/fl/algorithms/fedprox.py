"""FedProx's local step (Li et al., MLSys 2020): SGD on the local loss plus the proximal term
(mu / 2) ||x - u||^2, i.e. the gradient gets mu * (x - u).

The anchor u: in FedProx it is the global model the client received when the round started. Under
a layer-wise schedule (FedProx + FedLAMA) a layer can be synchronized in the middle of a round; from
then on the client holds the new global value of that layer, so we anchor each layer at the global
value it had at its *last synchronization* (the model the client last received for that layer).
Under the periodic schedule no layer is synchronized before the round ends, so this is exactly
FedProx's round-start anchor, and FedProx + FedLAMA with phi = 1 is FedProx (tested).
The engine updates ``view.global_params`` in place at each synchronization, so the anchor is simply
a reference to it (no copy).
"""

from __future__ import annotations

import torch

from fedcli.fl.parts import SGDStep


class ProxStep(SGDStep):
    """SGD (with the configured momentum and weight decay) on f_i(x) + (mu / 2) ||x - u||^2."""

    def __init__(self, opts):
        super().__init__(opts)
        self.mu = float(self.opts.mu)
        self.anchor: dict[str, torch.Tensor] = {}

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        self.anchor = view.global_params

    def direction(self, cohort, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: torch.add(g, cohort.params[n] - self.anchor[n], alpha=self.mu) for n, g in grads.items()}
