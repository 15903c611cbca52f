"""FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic Regularization", Algorithm 1).

Client i, in a round t that it takes part in, starts from the server model theta^{t-1} and minimizes

    L_i(theta) - <grad L_i(theta_i^{t-1}), theta> + (alpha / 2) ||theta - theta^{t-1}||^2

so each local step follows  g - grad_i + alpha * (theta - theta^{t-1})  (g the mini-batch gradient, grad_i the
client's stored gradient state, zeros before its first round). At the round's end it updates that state by the
first-order condition of its local problem (Algorithm 1):

    grad_i <- grad_i - alpha * (theta_i^t - theta^{t-1}).

The server keeps h (zeros at first) and, with P_t the cohort and m the number of clients,

    h^t     = h^{t-1} - (alpha / m) * sum_{i in P_t} (theta_i^t - theta^{t-1})
    theta^t = (1 / |P_t|) sum_{i in P_t} theta_i^t - h^t / alpha.

Generalizations, exact where the paper's setting applies (a whole-model synchronization at each round's end):

- theta_i^t - theta^{t-1} is accumulated from the local steps themselves (minus the sum of lr * the applied
  direction, momentum and weight decay included), because the engine replaces the client's model by the new global
  one before a round-end hook runs.
- Under a layer-wise schedule (``--schedule lama``) a layer may be synchronized inside a round: the server's update
  above runs at each synchronization of that layer (the mean being the cohort's weighted average of that layer,
  ``--weighting``), the regularizer anchors each layer at its last synchronized global value (as FedProx here), and
  the client's state takes the sum of its displacements over the round at the round's end.
- ``--init ala`` starts the client elsewhere; the regularizer still anchors at the server's model.
- A client dropped by ``--on-diverge skip-client`` keeps its state.

``--feddyn-alpha`` is alpha; its default 0.1 is one of the values the paper's experiments use (alpha in
{0.1, 0.01, 0.001}), the one of them that keeps the global model's test loss bounded on digits (docs/method-notes.md).
FedDyn's uplink and downlink are the model itself, as FedAvg's: no extra bytes.
"""

from __future__ import annotations

import torch

from fedcli.fl.clientstate import ClientState
from fedcli.fl.parts import AverageServer, SGDStep


class FedDynStep(SGDStep):
    """SGD along g - grad_i + alpha (theta - theta^{t-1}); grad_i <- grad_i - alpha (theta_i^t - theta^{t-1})."""

    #: each client's grad_i (Algorithm 1's gradient of the local objective at its last model), zeros at first:
    #: the cohort's rows [K, ...] from before ``begin_round`` to after ``end_round``
    grad_i = ClientState()

    def __init__(self, opts):
        super().__init__(opts)
        self.alpha = float(self.opts.feddyn_alpha)
        self.anchor: dict[str, torch.Tensor] = {}  # the server model, updated in place at each synchronization
        self.disp: dict[str, torch.Tensor] = {}  # sum_k lr_k v_k: theta^{t-1} - theta_i^t over the round, [K, ...]

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        self.anchor = view.global_params
        self.disp = {n: torch.zeros_like(t) for n, t in cohort.params.items()}

    def direction(self, cohort, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            n: torch.add(g - self.grad_i[n], cohort.params[n] - self.anchor[n], alpha=self.alpha)
            for n, g in grads.items()
        }

    def apply(self, cohort, names, params, g, lr, active) -> None:
        torch._foreach_add_([self.disp[n] for n in names], g, alpha=lr)
        super().apply(cohort, names, params, g, lr, active)

    @torch.no_grad()
    def end_round(self, view, cohort) -> None:
        super().end_round(view, cohort)
        # grad_i - alpha * (theta_i^t - theta^{t-1}), kept for the cohort (a skipped client keeps its old one)
        self.grad_i = {n: g + self.alpha * self.disp[n] for n, g in self.grad_i.items()}
        self.disp = {}


class FedDynServer(AverageServer):
    """h <- h - alpha (|P_t| / m) (mean_i theta_i - theta^{t-1});  theta^t = mean_i theta_i - h / alpha."""

    keeps = ("h",)  # checkpointed and resumed with the run

    def __init__(self, opts):
        super().__init__(opts)
        self.alpha = float(self.opts.feddyn_alpha)
        self.share = 1.0  # |P_t| / m
        self.h: dict[str, torch.Tensor] = {}

    def begin_round(self, view, cohort) -> None:
        self.share = view.share

    def update(self, name: str, previous: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        h = self.h.get(name)
        h = torch.zeros_like(previous) if h is None else h.to(previous.device)
        h = h - (self.alpha * self.share) * (average - previous)
        self.h[name] = h
        return average - h / self.alpha
