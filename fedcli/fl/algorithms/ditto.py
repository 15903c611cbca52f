"""Ditto (Li, Hu, Beirami, Smith, ICML 2021, Algorithm 1): FedAvg plus a personalized model per client.

Each round, every cohort client k first updates its personalized model v_k (kept in ``view.store`` under
``ditto``; a client's first v_k is the global model it receives) by ``--ditto-epochs`` s local epochs of
SGD on

    f_k(v) + (lambda / 2) ||v - w^t||^2,   i.e.   v <- v - lr * (grad f_k(v) + lambda * (v - w^t)),

w^t the global model received at the round's start (``--ditto-lambda``; FedALA's appendix: lambda = 0.1,
s = 2), and then trains its copy of the global model exactly as FedAvg does; only the latter is uploaded
and averaged. Clients are judged by v_k on their local test splits (``personal_acc``). The order (v first,
then w) and the plain SGD of v at ``--lr`` follow the reference implementation in PFLlib
(``clientditto.py``: ``ptrain`` then ``train``; the personal steps use no momentum, weight decay or lr
schedule). v's mini-batches come from their own keyed stream ("ditto", round, client), so the global model,
``test_acc`` and the communication are exactly FedAvg's (tested). With ``--init ala`` the anchor w^t is the
client's ALA-initialized model (what ``set_parameters`` gives in the reference, and what v is pulled toward).
"""

from __future__ import annotations

from fedcli.fl.parts import SGDStep
from fedcli.fl.personal import LocalEpochs, load_models, local_sgd, save_models


class DittoStep(SGDStep):
    """FedAvg's SGD for the global model; the personalized models are trained when a round begins."""

    personal_prefix = "ditto"  # the evaluated model of each client (fedcli.fl.personal)
    separable = True  # v_k is the client's own, anchored at the global model (or its own ALA start)

    def __init__(self, opts):
        super().__init__(opts)
        self.lam = float(self.opts.ditto_lambda)
        self.epochs = float(self.opts.ditto_epochs)

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        v, vb = load_models(view, cohort.clients, self.personal_prefix)
        # w^t: the model the client starts its round from -- the global model (an alias: the engine changes it
        # only at synchronizations, after this), or with --init ala the ALA-initialized one (PFLlib's ptrain
        # anchors at self.model after set_parameters, which ALA replaces)
        anchor = view.global_params if view.starts_from_global() else {n: p.clone() for n, p in cohort.params.items()}
        lam = self.lam

        def prox(grads, params):  # g + lam * (v - w^t), in place: one [K, ...] temporary, not three (same bits)
            for n, g in grads.items():
                g.add_((params[n] - anchor[n]).mul_(lam))
            return grads

        work = LocalEpochs(self.epochs, self.opts.lr, "ditto")
        local_sgd(view, cohort.clients, v, vb, work, cohort.round_idx, direction=prox)
        save_models(view, cohort.clients, v, vb, self.personal_prefix)
