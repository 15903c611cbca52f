"""Adaptive Local Aggregation (ALA): FedALA's local initialization (Zhang et al., AAAI 2023, Eqs. 3-5, Alg. 1).

``--init ala`` replaces FedAvg's "overwrite the local model with the global one" at the start of a
client's round. With the client's old local model theta (the model it held after its last local
training, ``fedcli.fl.personal``) and the received global model theta_g:

- the lower layers (all parameter tensors but the last p = ``--ala-layers``) are overwritten with theta_g;
- the top p tensors become theta + (theta_g - theta) * W (Eq. 4), with element-wise weights W in [0, 1]
  (init 1, kept per client in ``view.store`` across rounds) learned on the local objective (Eq. 5):
  per mini-batch, with the loss L of the temporary model theta_t = theta + (theta_g - theta) * W,

      W <- clamp(W - eta * dL/dtheta_t * (theta_g - theta), 0, 1),   theta_t <- theta + (theta_g - theta) * W

  (``--ala-lr`` eta, 1.0), on s% (``--ala-sample-percent``, 80) of the client's training split: a
  contiguous slice of int(s/100 * n) samples at a random offset in [0, n - int(s/100 * n)], drawn from
  ``torch_gen(seed, "ala", round, client)`` (the batch source's purpose "ala", ``fedcli.fl.cohort``), in
  consecutive batches of ``--batch-size`` in the slice's order
  (not shuffled), the last one partial when the slice is not a multiple of the batch size: the reference's
  loader, ``DataLoader(slice, batch_size, drop_last=False)`` (PFLlib's ``ALA.py`` since February 2024;
  earlier versions dropped the partial batch). A slice smaller than one batch is one partial batch.
- Initial stage (the first ALA of a client): passes over the slice repeat until more than
  ``--ala-num-pre-loss`` (10) pass losses are recorded and the population std of the last 10 is below
  ``--ala-threshold`` (0.1, the reference code's default; the paper used 0.01, which can loop very long),
  where a pass's loss is the loss of its last batch (the partial one, when there is one). We cap the passes at
  ``--ala-max-passes`` (50; the
  reference has no cap). Later rounds: one pass.
- ALA is skipped while the local model equals the global one (a client's first round: in the reference,
  ``torch.sum(theta_g[0] - theta[0]) == 0``; we compare every tensor), and the initial stage is then still ahead.

This is the reference code (``ALA.py`` of FedALA / PFLlib) step for step, vectorized over the cohort:
each client's steps are exactly its own (clients whose slice has fewer batches, or whose initial stage has
converged, are left out of the later calls; a partial last batch runs in a call of its own size, so no padding
enters the loss or BatchNorm's batch statistics). Differences, all documented: ``--ala-layers 0`` means *no* ALA layer
(the
method's overwrite; the reference's ``layer_idx=0`` slices to *all* layers: give p >= the number of tensors
for that); BatchNorm buffers of the initialized model are the global ones (the engine synchronizes them;
the reference keeps the client's); the forward passes of the weight learning use train mode.

``--ala-trace`` records the data of FedALA's Figures 3 and 5 in the run directory: ``ala.csv``, every weight-learning
pass of every client (its loss: the pass's last batch, the reference's recorded value; ``stage`` initial or later),
and ``local_loss.csv``, per round and client the mean loss over the client's training split of its initialized
model (after ALA, before local training) and of its trained model (Figure 5 plots the sample-weighted mean over
the clients, Eq. 8's objective G = sum_i k_i L_i with k_i = |D_i| / sum_j |D_j|).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from fedcli.fl.clientstate import ClientState
from fedcli.fl.cohort import BatchPlan, Stream, register_purpose
from fedcli.fl.parts import OverwriteInit
from fedcli.fl.personal import load_models
from fedcli.fl.trainers import masked_loss

# ALA's weight learning (FedALA Alg. 1, Eq. 5): s% of the split at a random offset, in order, the last batch partial
ALA_BATCHES = register_purpose("ala", Stream("ala", shuffled=False, window=True))
#: each client's ALA weights W (ones at first) and whether its initial stage is done (0 at first)
WEIGHTS, STARTED = ClientState("ala.w", default=1.0), ClientState("ala.started", ())


# ---------------------------------------------------------------------------- the pieces, as functions
def ala_mix(theta: torch.Tensor, theta_g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Eq. 4 on one tensor: theta + (theta_g - theta) * W."""
    return theta + (theta_g - theta) * w


def ala_weight_step(
    w: torch.Tensor, grad_t: torch.Tensor, theta: torch.Tensor, theta_g: torch.Tensor, eta: float
) -> torch.Tensor:
    """Eq. 5 with the clip sigma: clamp(W - eta * dL/dtheta_t * (theta_g - theta), 0, 1)."""
    return torch.clamp(w - eta * grad_t * (theta_g - theta), 0.0, 1.0)


def initial_stage_done(losses: list[float], num_pre_loss: int, threshold: float) -> bool:
    """The reference's convergence test: more than ``num_pre_loss`` pass losses and the population std
    of the last ``num_pre_loss`` below ``threshold``."""
    return len(losses) > num_pre_loss and float(np.std(losses[-num_pre_loss:])) < threshold


@torch.no_grad()
def training_losses(view, clients: list[int], params: dict, buffers: dict) -> list[float]:
    """Mean cross-entropy of each client's model (``params``/``buffers`` name -> ``[K, ...]``) over its whole training
    split, in eval mode: L_i of FedALA's Eq. 8."""
    out = []
    view.model.eval()
    for k, c in enumerate(clients):
        idx = view.client_indices[c].to(view.train_x.device)
        p = {n: t[k] for n, t in params.items()}
        b = {n: t[k] for n, t in buffers.items()}
        total = 0.0
        for s in range(0, idx.numel(), 1024):
            chunk = idx[s : s + 1024]
            logits = functional_call(view.model, (p, b), (view.trainer.eval_input(view.train_x[chunk]),))
            total += float(torch.nn.functional.cross_entropy(logits.float(), view.train_y[chunk], reduction="sum"))
        out.append(total / max(1, idx.numel()))
    return out


def _grad_fn(model, per_client: bool = False):
    def loss_fn(top, lower, buffers, x, y, w):
        loss = masked_loss(functional_call(model, ({**lower, **top}, buffers), (x,)), y, w)
        return loss, loss.detach()

    return vmap(grad(loss_fn, has_aux=True), in_dims=(0, 0 if per_client else None, 0, 0, 0, 0), randomness="different")


@dataclass(frozen=True, kw_only=True)
class ALASettings:
    """Algorithm 1's hyper-parameters, as the paper names them (Sec. 4, appendix): the ALA range p (``layers``), the
    sample percent s (``percent``), the weight learning rate eta (Eq. 5), and the initial stage's convergence rule
    (more than ``num_pre_loss`` pass losses, the std of the last ``num_pre_loss`` below ``threshold``; at most
    ``max_passes`` passes, our cap). Defaults: the options' (``fedcli.specs.fedala.ALAParams``, tested equal)."""

    layers: int = 2
    percent: float = 80.0
    eta: float = 1.0
    threshold: float = 0.1
    num_pre_loss: int = 10
    max_passes: int = 50

    @classmethod
    def from_options(cls, opts) -> ALASettings:
        """The settings of ``--ala-layers``, ``--ala-sample-percent``, ``--ala-lr``, ``--ala-threshold``,
        ``--ala-num-pre-loss`` and ``--ala-max-passes``."""
        return cls(
            layers=int(opts.ala_layers),
            percent=float(opts.ala_sample_percent),
            eta=float(opts.ala_lr),
            threshold=float(opts.ala_threshold),
            num_pre_loss=int(opts.ala_num_pre_loss),
            max_passes=int(opts.ala_max_passes),
        )

    def stage_goes_on(self, losses: list[float], passes: int) -> bool:
        """Whether a client's initial stage takes another pass after ``passes`` passes with pass losses ``losses``:
        not converged (:func:`initial_stage_done`) and under ``max_passes``."""
        return not initial_stage_done(losses, self.num_pre_loss, self.threshold) and passes < self.max_passes


@dataclass(frozen=True)
class ALAClients:
    """Algorithm 1's models for K clients at once: theta_g (``global_params``, the whole received model: its lower
    tensors are the temporary model's lower layers), the top p tensors of the old local model theta (``local_top``,
    name -> ``[K, *shape]``), their weights W (``weights``, the same shapes, updated in place), the clients'
    ``buffers`` (name -> ``[K, ...]``; a throwaway copy is used) and ``start_phase[k]``, whether client k is in its
    initial stage. ``global_params`` is shared by all clients (``[*shape]``) or, with ``per_client``, one per client
    (``[K, *shape]``: FedAMP sends each client its own)."""

    global_params: dict
    local_top: dict
    weights: dict
    buffers: dict
    start_phase: list[bool]
    per_client: bool = False


def learn_weights(
    model: torch.nn.Module,
    clients: ALAClients,
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    plan: BatchPlan,
    settings: ALASettings,
    grad_fn=None,
) -> tuple[dict, list[int], list[list[float]]]:
    """ALA's weight learning (Alg. 1, Eq. 5) for the K ``clients`` at once, with ``settings``' eta and initial-stage
    rule (its p and s are the caller's: ``clients.local_top`` holds the last p tensors, ``plan`` the s% slices).

    ``plan`` is the clients' batches in order, indices into ``x_all``/``y_all`` (``fedcli.fl.cohort.in_order_plan``:
    batch j of client k is its first ``real[j, k]`` entries, none once its data is used up). Returns (weights,
    passes per client, pass losses per client); ``clients.weights`` are updated in place and returned.
    """
    global_params, local_top, weights = clients.global_params, clients.local_top, clients.weights
    buffers, start_phase, per_client = clients.buffers, clients.start_phase, clients.per_client
    k_all = plan.idx.shape[1]
    device = x_all.device
    names = list(local_top)
    lower = {n: p for n, p in global_params.items() if n not in local_top}
    delta = {n: (global_params[n] if per_client else global_params[n].unsqueeze(0)) - local_top[n] for n in names}
    grad_fn = grad_fn or _grad_fn(model, per_client)
    # the reference's loader (drop_last=False): consecutive batches, the last one partial (no padding enters)
    real = plan.real.tolist()
    idx = plan.idx.to(device)
    nb = [sum(1 for row in real if row[k] > 0) for k in range(k_all)]
    losses: list[list[float]] = [[] for _ in range(k_all)]
    passes = [0] * k_all
    running = [k for k in range(k_all) if nb[k] > 0]
    model.train()
    while running:
        last = {}
        for j in range(max(nb[k] for k in running)):
            # one call per batch size: the full batches of every client, then each size of partial last batch
            by_size: dict[int, list[int]] = {}
            for k in running:
                if j < nb[k]:
                    by_size.setdefault(real[j][k], []).append(k)
            for size, sel in by_size.items():
                s = torch.tensor(sel, device=device)
                top_t = {n: local_top[n][s] + delta[n][s] * weights[n][s] for n in names}
                bufs = {n: b[s].clone() for n, b in buffers.items()}
                ix = idx[j, s, :size]
                low = {n: t[s] for n, t in lower.items()} if per_client else lower
                g, loss = grad_fn(top_t, low, bufs, x_all[ix], y_all[ix], torch.ones(len(sel), size, device=device))
                with torch.no_grad():
                    for n in names:
                        weights[n][s] = torch.clamp(weights[n][s] - settings.eta * g[n] * delta[n][s], 0.0, 1.0)
                loss = loss.detach().cpu()
                for pos, k in enumerate(sel):
                    if j == nb[k] - 1:
                        last[k] = float(loss[pos])
        still = []
        for k in running:
            losses[k].append(last[k])
            passes[k] += 1
            if start_phase[k] and settings.stage_goes_on(losses[k], passes[k]):
                still.append(k)
        running = still
    return weights, passes, losses


# ---------------------------------------------------------------------------- the init part
class ALAInit(OverwriteInit):
    """FedALA's adaptive local aggregation (see the module docstring) on top of any method.

    ALA replaces the method's own local initialization (``base``, the init part of the method's preset;
    ``overwrite`` for FedAvg). theta_g is what the server sends the client (``base.received``: the global
    model, or FedAMP's personalized cloud model u_i), and the ALA range is the last p tensors the client
    *receives* (a method's never-synchronized layers, FedRep's head, are not in it). ``--ala-layers 0``
    runs the base init unchanged, so ``--init ala --ala-layers 0`` is the base method (tested).
    """

    keeps_local_models = True  # the engine keeps each client's trained model (fedcli.fl.personal)
    keeps = ("initial_passes", "capped", "base")  # checkpointed with the run: the base init by its own ``keeps``

    def __init__(self, opts, base=None):
        super().__init__(opts)
        self.base = base if base is not None else OverwriteInit(opts)
        self.provides = self.base.provides  # what the method's own init offers the other parts (FedAMP's u_i)
        p = self.opts
        self.settings = ALASettings.from_options(p)  # p, s, eta and the initial stage's rule
        self.initial_passes: dict[int, int] = {}  # client -> passes its initial stage took
        self.capped: list[int] = []  # clients whose initial stage stopped at --ala-max-passes
        self._grad = {}
        self.trace = bool(p.ala_trace)
        self.rows: dict[str, list[dict]] = {"ala.csv": [], "local_loss.csv": []}  # this process's, this round's
        self.init_loss: dict[int, float] = {}  # --ala-trace: client -> loss of its initialized model this round

    def setup(self, view) -> None:
        self.base.setup(view)

    def training_indices(self, view) -> list | None:
        return self.base.training_indices(view)

    def begin_round(self, view, cohort) -> None:
        self.base.begin_round(view, cohort)

    def end_round(self, view, cohort) -> None:
        self.base.end_round(view, cohort)
        if not self.trace:
            return
        if cohort.clients:  # the trained models, captured before the round-end synchronization (fedcli.fl.personal)
            params, buffers = load_models(view, cohort.clients)
            for c, loss in zip(cohort.clients, training_losses(view, cohort.clients, params, buffers)):
                self.rows["local_loss.csv"].append(
                    {
                        "round": cohort.round_idx + 1,
                        "client": c,
                        "samples": int(view.sizes[c]),
                        "initialized": self.init_loss.pop(c),
                        "trained": loss,
                    }
                )
        gathered = view.comm.allgather(self.rows) if view.comm.size > 1 else [self.rows]  # every process (collective)
        self.rows = (
            {
                name: sorted((r for s in gathered for r in s[name]), key=lambda r: (r["client"], r.get("pass", 0)))
                for name in self.rows
            }
            if view.comm.is_root
            else {name: [] for name in self.rows}
        )

    def round_tables(self, view) -> dict[str, list[dict]]:
        rows, self.rows = self.rows, {name: [] for name in self.rows}
        return rows

    def top_names(self, view) -> list[str]:
        shared = [li for li in view.layers if li.index not in view.local_layers]
        p = min(self.settings.layers, len(shared))
        return [li.name for li in shared[len(shared) - p :]] if p > 0 else []

    def starts_from_global(self, view) -> bool:
        return not self.top_names(view) and self.base.starts_from_global(view)

    def mixes_received(self, view) -> bool:
        return bool(self.top_names(view))

    def download(self, view, cohort) -> None:
        self.base.download(view, cohort)

    def received(self, view, cohort) -> dict:
        return self.base.received(view, cohort)

    def offer(self, capability: str, view, cohort):
        return self.base.offer(capability, view, cohort)

    def initialize(self, view, cohort) -> None:
        self._initialize(view, cohort)
        if self.trace and cohort.clients:  # Figure 5: the initialized models' loss, before local training
            losses = training_losses(view, cohort.clients, cohort.params, cohort.buffers)
            self.init_loss.update(zip(cohort.clients, losses))

    def _initialize(self, view, cohort) -> None:
        names = self.top_names(view)
        if not names:
            self.base.initialize(view, cohort)
            return
        rec = self.base.received(view, cohort)  # name -> [K or 1, *shape]
        cohort.load_global(rec, view.global_buffers)  # lower layers (and buffers) = received
        per_client = any(t.shape[0] != 1 for t in rec.values())
        clients, weights, flags = [], {}, torch.zeros(0)
        if cohort.clients:
            local, _ = load_models(view, cohort.clients)
            run = [
                k
                for k in range(cohort.size)
                if not all(torch.equal(local[n][k], rec[n][k if rec[n].shape[0] > 1 else 0]) for n in rec)
            ]
            if run:
                clients = [cohort.clients[k] for k in run]
                weights, flags = self.learn(view, cohort, run, clients, {n: local[n] for n in names}, rec, per_client)
        # every rank shares (a collective call under MPI with partial participation), also with no client to learn for
        empty = WEIGHTS.load(view, [], names=names)
        WEIGHTS.save(view, clients, {n: weights.get(n, empty[n]) for n in names})
        STARTED.save(view, clients, flags)

    def learn(
        self, view, cohort, run: list[int], clients: list[int], local: dict, rec: dict, per_client: bool
    ) -> tuple[dict, torch.Tensor]:
        """Learn W for the cohort rows ``run`` (global ids ``clients``) and write their initialized top layers
        into the cohort; returns the new W and the clients' "initial stage done" flags."""
        dev = view.device
        sel = torch.tensor(run, device=dev)
        top = {n: t[sel] for n, t in local.items()}
        if per_client:
            theta_g = {n: t.expand(cohort.size, *t.shape[1:])[sel] for n, t in rec.items()}
        else:
            theta_g = {n: t[0] for n, t in rec.items()}
        weights = WEIGHTS.load(view, clients, dev, names=top)
        started = STARTED.load(view, clients, dev)
        start_phase = [not bool(v) for v in started.tolist()]
        plan = view.batches.plan(ALA_BATCHES, clients, cohort.round_idx, percent=self.settings.percent)
        if per_client not in self._grad:
            self._grad[per_client] = _grad_fn(view.model, per_client)
        buffers = {n: b[sel] for n, b in cohort.buffers.items()}
        ala = ALAClients(theta_g, top, weights, buffers, start_phase, per_client=per_client)
        weights, passes, losses = learn_weights(
            view.model, ala, view.train_x, view.train_y, plan, self.settings, grad_fn=self._grad[per_client]
        )
        if self.trace:  # Figure 3: the loss of every weight-learning pass
            self._trace_passes(cohort.round_idx, clients, start_phase, losses)
        with torch.no_grad():
            for n in top:
                g = theta_g[n] if per_client else theta_g[n].unsqueeze(0)
                cohort.params[n][sel] = ala_mix(top[n], g, weights[n])
        learned = (plan.real > 0).any(0).tolist()  # clients with data to learn on
        self._note_initial_stage(clients, start_phase, learned, passes)
        flags = torch.tensor([1.0 if (learned[i] or not start_phase[i]) else 0.0 for i in range(len(clients))])
        return weights, flags

    def _trace_passes(self, round_idx: int, clients: list[int], start_phase: list[bool], losses: list) -> None:
        """ala.csv rows (Figure 3): the loss of every weight-learning pass of each client, with its stage."""
        self.rows["ala.csv"] += [
            {
                "round": round_idx + 1,
                "client": c,
                "pass": j + 1,
                "stage": "initial" if start_phase[i] else "later",
                "loss": loss,
            }
            for i, c in enumerate(clients)
            for j, loss in enumerate(losses[i])
        ]

    def _note_initial_stage(self, clients: list[int], start_phase: list[bool], learned: list, passes: list) -> None:
        """The passes of each client's initial stage (Alg. 1's "start phase") recorded; a stage cut at
        ``--ala-max-passes`` warned of."""
        for i, c in enumerate(clients):
            if start_phase[i] and learned[i]:
                self.initial_passes[c] = passes[i]
                cap = self.settings.max_passes
                if passes[i] >= cap and cap > self.settings.num_pre_loss:
                    self.capped.append(c)
                    warnings.warn(
                        f"ALA: client {c}'s initial stage stopped at --ala-max-passes {cap} "
                        f"before the loss std fell below --ala-threshold {self.settings.threshold}",
                        stacklevel=3,
                    )
