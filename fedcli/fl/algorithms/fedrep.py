"""FedRep (Collins, Hassani, Mokhtari, Shakkottai, ICML 2021, Algorithm 1): a shared body (representation)
and a local head per client.

The head is the last ``--head-layers`` parameter tensors (2: the final Linear weight and bias). Each round,
every cohort client k

1. takes its own head (kept in ``view.store``; a client's first head is the global model's initial head),
   and trains it for ``--head-epochs`` local epochs with the body frozen (FedALA's appendix: tau = 5 local
   updates, at the local learning rate), then
2. trains the body for the round's local steps (``--local-epochs`` / ``--tau``) with the head frozen.

Only the body is uploaded and averaged: the head layers are never synchronized (``layers.csv`` shows 0
syncs for them, and ``comm_params`` counts only the body: 2 * alpha_f * Sigma per client and round, FedALA
Table 3). Clients are judged by their body + head after the round's training (``personal_acc``); the global
model's ``test_acc`` uses the untrained initial head, so it means little for FedRep. The head steps are
plain SGD at ``--lr`` (PFLlib ``clientrep.py``) with their own keyed mini-batch stream ("fedrep.head",
round, client). ``--head-layers 0`` is FedAvg-C (tested).
"""

from __future__ import annotations

from fedcli.fl.clientstate import GLOBAL, ClientState
from fedcli.fl.parts import SGDStep
from fedcli.fl.personal import LocalEpochs, local_sgd

#: each client's head (its own top layers), the global model's at first
HEAD = ClientState("fedrep.head", default=GLOBAL)


class FedRepStep(SGDStep):
    """SGD on the body only; the head is trained (body frozen) when a round begins and never leaves the client."""

    def __init__(self, opts):
        super().__init__(opts)
        self.n_head = int(self.opts.head_layers)
        self.epochs = float(self.opts.head_epochs)
        self.head: set[str] = set()

    def local_layers(self, view) -> list[int]:
        """The head's layer indices: the engine never synchronizes them."""
        n = min(self.n_head, len(view.layers))
        idx = [li.index for li in view.layers[len(view.layers) - n :]] if n > 0 else []
        self.head = {view.layers[i].name for i in idx}
        return idx

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        if not self.head:
            return
        names = [n for n in cohort.params if n in self.head]
        if cohort.clients:
            for n, head in HEAD.load(view, cohort, names=names).items():
                cohort.params[n].copy_(head)
            local_sgd(
                view,
                cohort.clients,
                cohort.params,
                cohort.buffers,
                LocalEpochs(self.epochs, self.opts.lr, "fedrep.head"),
                cohort.round_idx,
                trainable=names,
            )
        HEAD.save(view, cohort, {n: cohort.params[n] for n in names})  # every rank (collective)

    def apply(self, cohort, names, params, g, lr, active) -> None:
        keep = [i for i, n in enumerate(names) if n not in self.head]  # the head is frozen while the body trains
        super().apply(cohort, [names[i] for i in keep], [params[i] for i in keep], [g[i] for i in keep], lr, active)
