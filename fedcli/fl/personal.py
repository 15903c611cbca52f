"""Personalized federated learning: per-client local models and client-side evaluation.

A personalized method (``Method(personalized=True)``: fedala, fedavg-c, fedprox-c, ditto, fedrep) is
judged by the models its clients hold, not by the global model (pFedMe's convention, used by FedALA):

- **Local models.** The model a client holds after its local work of a round is captured just before the
  round-end synchronization replaces it (``Personalization.capture``) and kept in the client store (CPU)
  under ``local.p:<param>`` / ``local.b:<buffer>`` until the client trains again. ALA (``--init ala``)
  reads it as the client's old local model; fedavg-c, fedprox-c, fedala and fedrep are evaluated on it.
  A method whose evaluated model is another one (Ditto's personalized model v_i) names its store prefix
  in its part's ``personal_prefix``.
- **Evaluation** (``personal_acc`` in ``metrics.csv``): every client's model on its local test split
  (``partition.test``, ``--client-test-fraction``; FedALA: 0.25), accuracy over *all* local test samples
  of all clients (sum of correct predictions / sum of test samples, so larger clients weigh more).
  The summary reports the best evaluation and its round. Each client's own numbers (sample counts, loss and
  accuracy of its model and of the global model on its split) go to ``clients.csv`` (``client_table``). All clients are
  evaluated at every evaluation
  point, not only the cohort: with ``--active-ratio 1`` (FedALA's default) every client trained in the
  round; with partial participation a client keeps the model of the last round it trained in, and a
  client never sampled so far holds the current global model (it has received nothing else).
- **When** (``--personal-eval``). ``after-training`` (the default): the model after the round's local
  initialization *and* local training (for FedALA: ALA, then training), the model the client holds when the
  round ends. ``after-init``: the model right after the round's local initialization, before local training,
  where FedALA's reference code evaluates (``serverALA.py``, as PFLlib's servers, calls ``evaluate()`` at the
  start of round t, after ``send_models()`` ran ALA, before ``train()``): the row of round r (1-based) then
  holds the models initialized at the start of round r, i.e. the reference's evaluation of its round r - 1
  (its round 0 evaluates the initial global model: ALA is skipped while the local model equals the global
  one). The snapshot is taken after ``init.initialize``, before the parts' ``begin_round`` (Ditto trains v and
  FedRep its head there): for FedAvg-C the received global model (the reference's FedAvg evaluation); layers a
  method never synchronizes (FedRep's head) are the client's own from its last round; a method whose evaluated
  model the initialization does not set (Ditto's v, pFedMe's theta): the stored one as it stands before the
  round's training (the reference's too); Per-FedAvg: its one-step model from the model received this round,
  computed after its ``begin_round`` (which only notes the round). The default stays ``after-training``: it is
  fedcli's number since the start (every recorded result and the golden records use it) and it judges the model
  the round produced.
- **MPI.** Each rank evaluates a share of all clients (``assign_clients`` over every client: with full
  participation, exactly the clients it trains, so no model moves); correct counts and sample counts are
  summed with one ``allreduce_``. Per-client state written during a round is shared with every rank
  (allgather) only when clients can change ranks between rounds (partial participation).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch.func import functional_call

from fedcli.comm.communicator import assign_clients
from fedcli.data.augment import cifar_augment
from fedcli.errors import ConfigError
from fedcli.fl.budget import epoch_steps
from fedcli.fl.clientstate import BUFFERS, GLOBAL, PARAMS, ClientState
from fedcli.fl.cohort import Cohort, sample_cohort
from fedcli.fl.context import StoreContext
from fedcli.fl.parts import Part, expand

LOCAL = "local"  # store prefix of the captured local models
INITIALIZED = "init"  # store prefix of the models as initialized (--personal-eval after-init)


# ---------------------------------------------------------------------------- per-client state
@functools.cache
def model_state(prefix: str) -> tuple[ClientState, ClientState]:
    """The per-client state of a whole model stored under ``prefix``: its parameters and its buffers, each client's
    starting as the global model."""
    return (ClientState(f"{prefix}.p", PARAMS, default=GLOBAL), ClientState(f"{prefix}.b", BUFFERS, default=GLOBAL))


def load_models(view, clients: list[int], prefix: str = LOCAL, device=None) -> tuple[dict, dict]:
    """Stacked ``(params, buffers)`` of the clients' models stored under ``prefix``; a client without one
    gets the current global model."""
    device = device if device is not None else view.device
    return tuple(state.load(view, clients, device) for state in model_state(prefix))


def save_models(view, clients: list[int], params: dict, buffers: dict, prefix: str = LOCAL) -> None:
    """Keep the clients' models under ``prefix`` (collective under MPI)."""
    p, b = model_state(prefix)
    p.save(view, clients, params)
    b.save(view, clients, buffers)


def all_client_models(view, cohort, buffers: bool = False, prefix: str = LOCAL) -> tuple[dict, dict]:
    """Every client's model stored under ``prefix`` (default: its last uploaded one), stacked ``[N, *shape]`` in
    client order (a client without one holds the current global model): what FedAMP, FedFomo and APPLE download.
    Collective under MPI.

    One process, or partial participation under MPI (``fedcli.fl.store.publish`` gave every rank every client's
    model): the store. Full participation under MPI: each rank stores the models of its own clients (the
    same every round), so the ranks allgather them."""
    n = len(view.client_indices)
    if view.comm.size == 1 or not view.full_participation:
        p, b = load_models(view, list(range(n)), prefix)
        return p, (b if buffers else {})
    p, b = load_models(view, cohort.clients, prefix, device="cpu")
    gathered = view.comm.allgather((list(cohort.clients), p, b if buffers else {}))
    out_p = {k: v.new_zeros((n, *v.shape)) for k, v in view.global_params.items()}
    out_b = {k: v.new_zeros((n, *v.shape)) for k, v in view.global_buffers.items()} if buffers else {}
    seen = set()
    for clients, ps, bs in gathered:
        if clients:
            ix = torch.tensor(clients, dtype=torch.long)
            seen.update(clients)
            for k, t in ps.items():
                out_p[k][ix.to(out_p[k].device)] = t.to(out_p[k].device)
            for k, t in bs.items():
                out_b[k][ix.to(out_b[k].device)] = t.to(out_b[k].device)
    assert len(seen) == n, "full participation: every client is on some rank"
    return out_p, out_b


def client_model(view, client: int, prefix: str = LOCAL) -> tuple[dict, dict]:
    """One client's stored model (unstacked, on the device); the global model if it has none."""

    def get(state: ClientState, name: str, default: torch.Tensor) -> torch.Tensor:
        t = state.get(view, client, name)
        return default if t is None else t.to(default.device)

    p, b = model_state(prefix)
    return (
        {n: get(p, n, g) for n, g in view.global_params.items()},
        {n: get(b, n, t) for n, t in view.global_buffers.items()},
    )


# ---------------------------------------------------------------------------- local training helper
@dataclass(frozen=True)
class LocalEpochs:
    """The extra local training a method asks of ``local_sgd``: ``epochs`` local epochs at learning rate ``lr``,
    its batches drawn from the random stream of ``purpose``."""

    epochs: float
    lr: float
    purpose: str


def local_sgd(
    view,
    clients: list[int],
    params: dict,
    buffers: dict,
    work: LocalEpochs,
    round_idx: int,
    trainable: list[str] | None = None,
    direction=None,
) -> torch.Tensor:
    """Plain SGD (no momentum, no weight decay) for ``work.epochs`` local epochs at ``work.lr``, vectorized over
    ``clients``.

    ``params`` ``[K, ...]`` are updated in place (only the names in ``trainable``; all by default);
    ``buffers`` too (BatchNorm statistics, train mode). Client i runs ceil(epochs * n_i / B) steps (with
    ``--drop-last`` ceil(epochs * floor(n_i / B)): ``epoch_steps``) of mini-batches from its training split, asked of
    ``view.batches`` by ``work.purpose``: drawn from generators keyed by (seed, purpose, round, client) (so this extra
    local work has its own random stream, independent of the main local steps);
    ``direction(grads, params)`` may change the gradient (Ditto's proximal term). Returns the mean loss per
    client [K].
    """
    epochs, purpose, lr = work.epochs, work.purpose, work.lr
    k = len(clients)
    if k == 0:
        return torch.zeros(0, dtype=torch.float64)
    steps = [epoch_steps(int(view.sizes[c]), epochs, view.batch_size, view.drop_last) for c in clients]
    total = max(steps)
    plan = view.batches.plan(purpose, clients, round_idx, total)
    steps_t = torch.tensor(steps, device=view.device)
    names = list(params) if trainable is None else list(trainable)
    tmp = Cohort(list(clients), torch.full((k,), 1.0 / k, dtype=torch.float64), params, buffers)
    loss_sum = torch.zeros(k, dtype=torch.float64, device=view.device)
    for j in range(total):
        x = view.train_x[plan.idx[j]]
        if plan.shifts is not None:
            x = cifar_augment(x, plan.shifts[j], plan.flips[j], fill=view.pad_fill)
        grads, losses = view.trainer.grads(tmp, x, view.train_y[plan.idx[j]], plan.mask[j])
        if direction is not None:
            grads = direction(grads, params)
        active = steps_t > j
        with torch.no_grad():
            for n in names:  # the gradients are this step's own: masked in place (no [K, ...] copy)
                params[n].sub_(grads[n].mul_(expand(active, grads[n])), alpha=lr)
        loss_sum += losses.detach().double() * active
    return loss_sum / steps_t.double()


# ---------------------------------------------------------------------------- evaluation
class Personalization:
    """Captures local models and evaluates every client's model on its local test split (``personal_acc``).

    ``evaluate_models`` is False only for ALA on a non-personalized method run without local test splits:
    the local models are still kept (ALA needs them), ``personal_acc`` stays empty.
    """

    def __init__(self, ctx: StoreContext):
        parts = list(ctx.parts.values())
        self.parts = parts
        self.prefix = next((p.personal_prefix for p in parts if p.personal_prefix), LOCAL)
        # capture the trained local models when something reads them: the evaluation, or ALA next round
        self.capture_local = self.prefix == LOCAL or any(p.keeps_local_models for p in parts)
        test = ctx.partition.test
        self.test = [torch.as_tensor(t, dtype=torch.long) for t in test] if test is not None else []
        self.total = int(sum(t.numel() for t in self.test))
        # --client-val-fraction: each client's own validation samples (None without), and the last evaluation's
        # accuracy of the clients' models on them, pooled as personal_acc is (personal_val_acc)
        val = getattr(ctx.partition, "val", None)
        self.val = [torch.as_tensor(t, dtype=torch.long) for t in val] if val is not None else None
        self.val_acc: float | None = None
        self.evaluate_models = self.total > 0
        self.client_rows: list[dict] = []  # the last evaluation's per-client numbers (clients.csv)
        # --personal-eval after-init: the models as the round's initialization left them (kept under INITIALIZED)
        self.at_init = getattr(ctx.cfg, "personal_eval", "after-training") == "after-init"
        # --personal-clients cohort: only the last round's cohort is evaluated (FedALA Table 7)
        self.cohort_only = getattr(ctx.cfg, "personal_clients", "all") == "cohort"
        # parts that compute a client's evaluated model on demand (Per-FedAvg)
        self.on_demand = [p for p in parts if type(p).personalize is not Part.personalize]
        if not self.evaluate_models and (ctx.method.personalized or self.prefix != LOCAL):
            raise ConfigError(
                f"--algo {ctx.cfg.algo} is evaluated on each client's local test split: give "
                "--client-test-fraction (FedALA uses 0.25) or a partition file that has local test splits"
            )

    def capture(self, view, cohort) -> None:
        """Keep each cohort client's model as it is now (after local training, before the round-end sync)."""
        if self.capture_local:  # on every rank, also one without clients (the sharing may be collective)
            save_models(view, cohort.clients, cohort.params, cohort.buffers)

    def initialized(self, view, cohort, stage: str) -> None:
        """``--personal-eval after-init``: keep each cohort client's evaluated model as it stands after the round's
        initialization, before local training. The engine calls it at ``stage`` "init" (after ``init.initialize``,
        before the parts' ``begin_round``) and "begin" (after it: Per-FedAvg's on-demand model needs the round its
        ``begin_round`` notes); collective: every rank calls it."""
        if not (self.at_init and self.evaluate_models) or bool(self.on_demand) != (stage == "begin"):
            return
        if self.on_demand and cohort.clients:
            models = [
                next(m for m in (p.personalize(view, c) for p in self.on_demand) if m is not None)
                for c in cohort.clients
            ]
            params = {n: torch.stack([m[0][n] for m in models]) for n in view.global_params}
            buffers = {n: torch.stack([m[1][n] for m in models]) for n in view.global_buffers}
        elif self.on_demand or self.prefix != LOCAL:
            params, buffers = load_models(view, cohort.clients, self.prefix)  # as stored (empty: no clients here)
        else:
            params, buffers = dict(cohort.params), cohort.buffers
            if view.local_layers:  # never synchronized (FedRep's head): the client's own, as its last round left it
                own, _ = load_models(view, cohort.clients, LOCAL)
                params.update({view.layers[i].name: own[view.layers[i].name] for i in view.local_layers})
        save_models(view, cohort.clients, params, buffers, prefix=INITIALIZED)

    @torch.no_grad()
    def evaluate(self, view, round_idx: int | None = None) -> float | None:
        """Accuracy over all local test samples of all clients (each client's model on its own split);
        None without local test splits. ``--personal-clients cohort``: only the clients that trained in the last
        round (FedALA Table 7, rho = 0.5*: "the averaged results collected from the joining clients"), pooled the
        same way; the cohort is recomputed from (seed, round), so it needs no state.

        Each evaluated client's own numbers are kept in ``client_rows`` (``clients.csv``, :meth:`client_table`): its
        personal model's and the global model's loss and accuracy on its local test split. ``personal_acc`` is their
        test-sample-weighted mean: sum_i n_i acc_i / sum_i n_i."""
        if not self.evaluate_models:
            return None
        n = len(view.client_indices)
        clients = list(range(n))
        if self.cohort_only and round_idx is not None and round_idx > 0:
            clients = sorted(sample_cohort(view.seed, round_idx - 1, n, view.n_active))
        total = sum(int(self.test[c].numel()) for c in clients)
        mine = assign_clients(clients, view.sizes, view.comm.rank, view.comm.size)
        # the global model is a whole model only when the method synchronizes every layer (FedRep's head is local)
        has_global = not view.local_layers
        stats = torch.full((len(mine), len(STAT_COLUMNS)), float("nan"), dtype=torch.float64)
        correct = 0.0
        val_correct = 0.0
        for row, c in enumerate(mine):
            idx = self.test[c]
            stats[row, 0] = float(idx.numel())
            if idx.numel() == 0 and self.val is None:
                continue
            # a part may compute a client's evaluated model on demand (Per-FedAvg: one step from the global model)
            own = (
                None
                if self.at_init
                else next((m for m in (p.personalize(view, c) for p in self.parts) if m is not None), None)
            )
            params, buffers = (
                own if own is not None else client_model(view, c, INITIALIZED if self.at_init else self.prefix)
            )
            if idx.numel():
                idx = idx.to(view.train_x.device)
                stats[row, 1], stats[row, 2] = score(view, params, buffers, idx)
                correct += float(stats[row, 2])
                if has_global:
                    stats[row, 3], stats[row, 4] = score(view, view.global_params, view.global_buffers, idx)
            if self.val is not None:  # the same model on the client's own validation samples
                val_correct += score(view, params, buffers, self.val[c].to(view.train_x.device))[1]
        # every client's numbers to every rank, each row from the one rank that evaluated it (exact)
        pos = {c: i for i, c in enumerate(clients)}
        gathered = view.comm.client_gather(torch.nan_to_num(stats, nan=0.0), [pos[c] for c in mine], len(clients))
        missing = view.comm.client_gather(torch.isnan(stats).double(), [pos[c] for c in mine], len(clients))
        gathered[missing > 0] = float("nan")
        self.client_rows = client_table(clients, view.sizes, gathered)
        tot = view.comm.allreduce_(
            torch.tensor([correct] + ([val_correct] if self.val is not None else []), dtype=torch.float64)
        )
        if self.val is not None:
            val_total = sum(int(self.val[c].numel()) for c in clients)
            self.val_acc = float(tot[1]) / val_total if val_total else float("nan")
        return float(tot[0]) / total if total else float("nan")


#: per-client numbers of one evaluation, in the order ``Personalization.evaluate`` gathers them
STAT_COLUMNS = ("test_samples", "personal_loss", "personal_correct", "global_loss", "global_correct")


@torch.no_grad()
def score(view, params: dict, buffers: dict, idx: torch.Tensor) -> tuple[float, float]:
    """A model (``params``, ``buffers``, unstacked) on the training-set samples ``idx`` (a client's local test split):
    (mean cross-entropy, correct predictions), in chunks of 1024 samples."""
    view.model.eval()
    loss, correct = 0.0, 0.0
    for s in range(0, idx.numel(), 1024):
        chunk = idx[s : s + 1024]
        out = functional_call(view.model, (params, buffers), (view.trainer.eval_input(view.train_x[chunk]),))
        y = view.train_y[chunk]
        # per-sample losses summed in float64: a float32 sum's bits depend on the memory layout (the process count)
        loss += float(torch.nn.functional.cross_entropy(out.float(), y, reduction="none").double().sum())
        correct += float((out.argmax(1) == y).sum())
    return loss / idx.numel(), correct


def client_table(clients: list[int], train_sizes, stats: torch.Tensor) -> list[dict]:
    """``clients.csv`` rows (docs/run-directory.md) from the gathered ``stats`` [len(clients), STAT_COLUMNS]: per client
    its training and test sample counts, and the personal and global model's loss and accuracy on its local test
    split (empty where a model is not evaluated: the global one of a method that keeps layers local, a client without
    test samples)."""

    def cell(v: float):
        return "" if math.isnan(v) else v

    rows = []
    for c, (n, pl, pc, gl, gc) in zip(clients, stats.tolist()):
        rows.append(
            {
                "client": c,
                "train_samples": int(train_sizes[c]),
                "test_samples": int(n),
                "personal_loss": cell(pl),
                "personal_acc": cell(pc / n) if n else "",
                "global_loss": cell(gl),
                "global_acc": cell(gc / n) if n else "",
            }
        )
    return rows


def build_personalization(ctx: StoreContext) -> Personalization | None:
    """The personalization of a run: personalized methods (``Method.personalized``) and any method whose
    parts keep per-client models (``--init ala``: ALA on FedAvg is evaluated as FedALA is); None otherwise."""
    parts = ctx.parts.values()
    if not (ctx.method.personalized or any(p.keeps_local_models or p.personal_prefix for p in parts)):
        return None
    return Personalization(ctx)


def local_layers(ctx: StoreContext) -> set[int]:
    """Layers a method keeps on the clients and never synchronizes (FedRep's head), from its parts."""
    out: set[int] = set()
    for p in ctx.parts.values():
        out |= set(p.local_layers(ctx.view))
    return out
