"""FedFomo (Zhang, Sapra, Fidler, Yeung, Alvarez, ICLR 2021, "Personalized Federated Learning with First Order
Model Optimization", Eqs. 5-7, Algorithm 1): each client aggregates other clients' models with weights from
a first-order approximation of how much each one lowers its validation loss.

Each client holds out ``--fomo-val-ratio`` (0.2) of its training split as a validation part and trains on the
rest (``training_indices``: the engine sets ``view.client_indices`` / ``view.sizes`` to the training part). The server
keeps an affinity matrix P
(N x N, initially the identity; row i lives in ``view.store`` under ``fomo.P`` as client i's state) and every
client's last uploaded model theta_j. At the start of round t > 0 client i

1. downloads the M models theta_j with the largest P[i, j] (``--fomo-m``, 0: all clients, FedALA appendix;
   at most the cohort size; ties go to the lower client id; its own last upload is one of them when it ranks),
2. weighs them (Eq. 6) against its old model theta_old (see below) on its validation part:

       w_j = (L(theta_old) - L(theta_j)) / (||theta_j - theta_old|| + 1e-5),

   L the mean over validation batches (``--batch-size``, in order, the last one partial) of the batch mean
   cross-entropy, the norm over all parameters flattened,
3. adds the raw w_j to its P row (Eq. 7), keeps max(w_j, 0), and if any is positive sets its model to
   sum_j w_j theta_j / sum_j w_j (Eq. 5); otherwise it keeps its own model (its last upload),
4. remembers the model it now holds as theta_old for the next round, trains it for the round's local steps and
   uploads it. In round 0 nothing has been uploaded yet: clients start from the initial model.

Clients are judged by their trained models (``personal_acc``). Communication (FedALA Table 3): a client uploads
one model and downloads M, (1 + M) * Sigma parameters per round: the engine counts the upload and one
download, the other M - 1 downloads are recorded per layer with ``view.ledger.record_transfer`` (32 bits per
element), from round 1 on (round 0 downloads only the initial model). The engine still averages the uploads
into a global model (the reference keeps none); ``test_acc`` evaluates that average.

Reference: PFLlib ``clientfomo.py`` / ``serverfomo.py``. "Old" follows the reference: the client's model right
after the aggregation of its last round (``clone_model(self.model, self.old_model)`` before training), not its
trained model; the model it starts from when no weight is positive is its trained model (``self.model``, never
overwritten by the server). Deviations:

- Validation part: the reference takes the last 20% of the client's training file (files PFLlib shuffled when
  it generated them); our client indices are sorted by dataset position, so the held-out part is a seeded random
  int(ratio * n) of them (``torch_gen(seed, "fomo.val", 0, client)``), the same in distribution. A client with
  int(ratio * n) = 0 holds nothing out and validates on its training split (the reference would train on
  nothing); ``--fomo-val-ratio 0`` does that for all.
- Validation losses run in eval mode with each model's own buffers (the reference runs the forward passes in
  train mode: BatchNorm batch statistics, updating the server's copies' running statistics, and drops the last
  partial batch for BatchNorm models); identical for models without BatchNorm. Weights are computed in float64.
- Training mini-batches are the engine's reshuffled epochs (the reference's train loader: shuffle=False,
  drop_last=True).
- Partial participation: a client that never trained holds the current global model (``fedcli.fl.personal``)
  and its theta_old is that model too (the reference: the initial model).

``--init ala`` runs (FedALA excludes FedFomo from its applicability study, since it downloads several models):
ALA mixes the client's old model with the FedFomo aggregate it would start from (``received``, one per
client, made by the init's ``download`` hook); ``--ala-layers 0`` is FedFomo (tested).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from fedcli.fl.clientstate import GLOBAL, ClientState
from fedcli.fl.cohort import Stream, register_purpose
from fedcli.fl.parts import OverwriteInit, expand
from fedcli.fl.personal import all_client_models, load_models
from fedcli.fl.rng import torch_gen

VAL_BATCHES = register_purpose("fomo-val", Stream(shuffled=False))  # the validation losses (Eq. 6), in order


EPS = 1e-5  # in the norm's denominator (reference)
#: theta_old, the model each client starts training from (the global model's at first)
OLD = ClientState("fomo.old", default=GLOBAL)


def own_affinity(client: int, zeros: torch.Tensor) -> torch.Tensor:
    """A client's row of P before it has one: affinity 1 to itself, 0 to the others (the reference's initial P)."""
    return F.one_hot(torch.tensor(client), zeros.numel()).double()


# ---------------------------------------------------------------------------- the pieces, as functions
def fomo_weights(loss_old: torch.Tensor, loss_recv: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    """Eq. 6: (L(old) - L(theta_j)) / (||theta_j - theta_old|| + 1e-5); ``loss_old`` [K], the others [K, M]."""
    return (loss_old.unsqueeze(1) - loss_recv) / (dist + EPS)


def fomo_scale(w: torch.Tensor) -> torch.Tensor:
    """max(w, 0) normalized per row; a row with no positive weight is all zeros (keep the own model)."""
    pos = w.clamp(min=0.0)
    s = pos.sum(1, keepdim=True)
    return torch.where(s > 0, pos / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(pos))


def split_validation(indices: torch.Tensor, ratio: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) sorted index tensors: a random int(ratio * n) held out; none held out (validation = the
    whole split) when that is 0."""
    n = indices.numel()
    m = min(int(ratio * n), max(n - 1, 0))
    if m <= 0:
        return indices, indices
    perm = torch.randperm(n, generator=gen)
    return indices[perm[m:]].sort().values, indices[perm[:m]].sort().values


@torch.no_grad()
def validation_losses(view, params: dict, buffers: dict, val: list[torch.Tensor]) -> torch.Tensor:
    """[K] float64: client k's model (params/buffers [K, ...]) on its validation indices ``val[k]``: the mean over
    batches of ``--batch-size`` consecutive samples (the last one partial) of the batch mean cross-entropy."""
    k_all = len(val)
    if k_all == 0:
        return torch.zeros(0, dtype=torch.float64)
    plan = view.batches.plan(VAL_BATCHES, indices=val)  # consecutive batches, padded with mask 0
    dev = plan.idx.device
    nb = (plan.real > 0).sum(0)  # each client's batch count
    model = view.model
    model.eval()
    fwd = vmap(lambda p, bu, x: functional_call(model, (p, bu), (x,)))
    total = torch.zeros(k_all, dtype=torch.float64, device=dev)
    for j in range(plan.idx.shape[0]):
        x, y, m = view.train_x[plan.idx[j]], view.train_y[plan.idx[j]], plan.mask[j]
        logits = fwd(params, buffers, x)
        ce = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none").view_as(m)
        cnt = m.sum(1)
        total += torch.where(cnt > 0, (ce * m).sum(1) / cnt.clamp(min=1.0), torch.zeros_like(cnt)).double()
    counts = nb.to(torch.float64).clamp(min=1.0)
    return (total / counts).cpu()


# ---------------------------------------------------------------------------- the part
class FomoInit(OverwriteInit):
    """Splits off the validation parts; each round aggregates the received models with the FedFomo weights."""

    def __init__(self, opts):
        super().__init__(opts)
        self.ratio = float(self.opts.fomo_val_ratio)
        self.val: list[torch.Tensor] = []
        self.train: list[torch.Tensor] = []
        self.aggregates: dict[str, torch.Tensor] = {}  # this round's aggregated models (``download``)
        self.weights: tuple | None = None  # this round's (model ids [K, M], weights [K, M])

    def setup(self, view) -> None:
        self.train, self.val = [], []
        for c, ix in enumerate(view.client_indices):  # the partition's training indices (no part split them before)
            t, v = split_validation(
                torch.as_tensor(ix, dtype=torch.long), self.ratio, torch_gen(self.opts.seed, "fomo.val", 0, c)
            )
            self.train.append(t)
            self.val.append(v)

    def training_indices(self, view) -> list[torch.Tensor]:
        """The training part of each client's split; the engine trains on it (``view.client_indices``)."""
        return self.train

    def m(self, view) -> int:
        """M: how many models each client downloads (at most the cohort size, as the reference's min(M,
        join_clients))."""
        n = len(view.client_indices)
        return min(int(self.opts.fomo_m) or n, view.n_active)

    @torch.no_grad()
    def initialize(self, view, cohort) -> None:
        rec = self.received(view, cohort)
        _, buffers = load_models(view, cohort.clients)
        for n, t in rec.items():
            cohort.params[n].copy_(t)
        for n, t in buffers.items():
            cohort.buffers[n].copy_(t)

    def begin_round(self, view, cohort) -> None:
        """theta_old: the model each client starts training from (after the aggregation, or ALA)."""
        OLD.save(view, cohort, cohort.params)

    def received(self, view, cohort) -> dict:
        """Each cohort client's aggregate (``download``), name -> ``[K, *shape]``."""
        return self.aggregates

    @torch.no_grad()
    def download(self, view, cohort) -> None:
        """Each cohort client's aggregate of the M models it downloads (its own model if no weight is positive), kept
        for ``received``; updates the P rows and counts the extra downloads. Collective under MPI."""
        own, own_b = load_models(view, cohort.clients)
        self.aggregates, self.weights = own, None
        if cohort.round_idx == 0:  # nothing uploaded yet (the reference sends min(M, 0) models)
            return
        models, model_b = all_client_models(view, cohort, buffers=True)
        m = self.m(view)
        view.ledger.record_transfer(view.n_active, down=m - 1)  # M downloads per client: the engine counts one
        clients = cohort.clients
        k_all = len(clients)
        affinity = ClientState("fomo.P", (len(view.client_indices),), default=own_affinity, dtype=torch.float64)
        if k_all == 0:
            affinity.save(view, [], affinity.load(view, []))  # collective under MPI
            return
        rows = affinity.load(view, clients, "cpu")
        ids = torch.argsort(-rows, dim=1, stable=True)[:, :m]  # [K, M]: top-M affinities, ties to the lower id
        old = OLD.load(view, clients, view.device)
        val = [self.val[c] for c in clients]
        loss_old = validation_losses(view, old, own_b, val)
        loss_recv = torch.zeros(k_all, m, dtype=torch.float64)
        dist = torch.zeros(k_all, m, dtype=torch.float64)
        dev_ids = ids.to(view.device)
        for s in range(m):
            pick = {n: w[dev_ids[:, s]] for n, w in models.items()}
            pick_b = {n: b[dev_ids[:, s]] for n, b in model_b.items()}
            loss_recv[:, s] = validation_losses(view, pick, pick_b, val)
            dist[:, s] = (
                sum((pick[n] - old[n]).reshape(k_all, -1).pow(2).sum(1, dtype=torch.float64) for n in pick).sqrt().cpu()
            )
        w = fomo_weights(loss_old, loss_recv, dist)
        rows.scatter_add_(1, ids, w)
        affinity.save(view, clients, rows)
        scale = fomo_scale(w)
        keep = (scale.sum(1) == 0).to(view.device)
        out = {}
        for n, t in models.items():
            agg = sum(expand(scale[:, s].to(view.device), t) * t[dev_ids[:, s]] for s in range(m))
            out[n] = torch.where(expand(keep, t), own[n], agg)
        self.aggregates, self.weights = out, (ids, w)
