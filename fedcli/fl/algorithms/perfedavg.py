"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020), first-order version (Per-FedAvg (FO), Algorithm 1).

Local work: the round's local steps are taken in pairs of mini-batches (D, D') -- two consecutive local
steps of the engine, so ``--local-epochs 1`` gives ceil(n_i / B) / 2 meta-steps, each on 2B samples, as
PFLlib's loader of 2B samples split in halves (with ``--drop-last`` floor(floor(n_i / B) / 2) = floor(n_i / 2B),
the reference loader's count) -- and each pair is one MAML step:

    theta' = theta - alpha * grad f_i(theta; D)              (inner step, alpha = --lr)
    theta <- theta - beta * grad f_i(theta'; D')             (outer step, the first-order approximation)

(``--perfedavg-beta`` beta; 0 means beta = --lr, PFLlib's default; FedALA's appendix sets alpha to the local
learning rate). A client's unpaired last step (an odd number of local steps) is dropped. The steps are plain
SGD (no momentum or weight decay). Models are averaged and counted as in FedAvg.

Evaluation (``personal_acc``): each client adapts the current global model with one step
theta - alpha * grad f_i(theta; B samples of its training split) -- the personalized model of Per-FedAvg,
as PFLlib's ``evaluate_one_step`` (which restores the global model afterwards) -- and is evaluated on its
local test split. The batch is the batch source's purpose "perfedavg.eval" (``fedcli.fl.cohort``: the first batch of
a reshuffled epoch, from ``torch_gen(seed, "perfedavg.eval", round, client)``, not augmented; a client with fewer
than B samples uses all of them).

With ``--init ala`` (FedALA Table 4, applicability) the one step starts from the model the client started its
latest round from, the ALA-initialized one (kept in ``view.store`` under ``perfedavg.start``): in the reference,
``evaluate_one_step`` adapts ``self.model`` right after ``set_parameters``, which ALA replaces. A client that has
not trained yet adapts the global model.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad

from fedcli.fl.cohort import Stream, register_purpose
from fedcli.fl.parts import SGDStep, expand
from fedcli.fl.personal import client_model, save_models
from fedcli.fl.trainers import masked_loss

# the one-step adaptation before evaluation: one shuffled batch, not augmented
EVAL_BATCH = register_purpose("perfedavg.eval", Stream("perfedavg.eval"))


START = "perfedavg.start"  # store prefix of each client's round-start model (only when it is not the global one)


class PerFedAvgStep(SGDStep):
    """First-order MAML steps on pairs of local mini-batches; one-step adaptation for evaluation."""

    personal_prefix = "perfedavg"  # nothing is stored: the evaluated model is computed by personalize()

    def __init__(self, opts):
        super().__init__(opts)
        self.beta = float(self.opts.perfedavg_beta)
        self.saved: dict[str, torch.Tensor] = {}
        self.round = 0

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        self.saved, self.round = {}, cohort.round_idx
        if not view.starts_from_global():  # the round's start model is not the global one (ALA): keep it
            save_models(view, cohort.clients, cohort.params, cohort.buffers, START)

    @torch.no_grad()
    def step(self, cohort, grads, lr, active=None) -> None:
        j = cohort.ctx.step
        steps = cohort.steps.to(next(iter(cohort.params.values())).device)
        on = torch.ones_like(steps, dtype=torch.bool) if active is None else active
        if j % 2 == 1:  # inner step, for the clients that have a partner step j + 1
            inner = on & (steps > j)
            self.saved = {n: p.clone() for n, p in cohort.params.items()}
            for n, p in cohort.params.items():
                p.sub_(grads[n] * expand(inner, p), alpha=lr)
        else:  # outer step from the saved theta with the gradient at theta'
            beta = self.beta or lr
            for n, p in cohort.params.items():
                p.copy_(torch.where(expand(on, p), self.saved[n] - beta * grads[n], p))
            self.saved = {}

    def personalize(self, view, client: int) -> tuple[dict, dict]:
        """The global model after one SGD step (alpha = --lr) on one mini-batch of the client's training split."""
        if not view.starts_from_global():
            params0, buffers0 = client_model(view, client, START)
        else:
            params0, buffers0 = view.global_params, view.global_buffers
        plan = view.batches.plan(EVAL_BATCH, [client], self.round, steps=1)
        ix = plan.idx[0, 0][plan.mask[0, 0] > 0]  # min(B, n) samples: a smaller client's padding left out
        x, y = view.train_x[ix], view.train_y[ix]
        buffers = {n: t.clone() for n, t in buffers0.items()}
        view.model.train()

        def loss_fn(params, buffers):  # buffers an input: BatchNorm's train-mode update mutates them (torch.func
            return masked_loss(
                functional_call(view.model, (params, buffers), (x,)),
                y,  # refuses a captured one)
                torch.ones_like(y, dtype=torch.float32),
            )

        g = grad(loss_fn)(params0, buffers)
        return {n: p - self.opts.lr * g[n] for n, p in params0.items()}, dict(buffers0)
