"""The cohort: the clients training together on this process, held as stacked tensors.

Every parameter and buffer is one tensor of shape ``[K, *shape]``, so a
local step for all K clients is one vectorized call and synchronizing layer l is a weighted sum
over dim 0. Per-round mini-batch plans are drawn from generators keyed by (seed, round, client).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fedcli.data.augment import draw_cifar_params
from fedcli.fl.rng import np_gen, torch_gen


def sample_cohort(seed: int, round_idx: int, clients: int, active: int) -> list[int]:
    """The round's cohort: ``active`` of ``clients`` without replacement, keyed by (seed, round) only,
    so every method and every process count sees the same clients (one shared sampling stream)."""
    if active >= clients:
        return list(range(clients))
    return sorted(int(c) for c in np_gen(seed, "cohort", round_idx).choice(clients, size=active, replace=False))


@dataclass
class StepContext:
    """What the step hooks (``LocalStep.gradients`` and ``LocalStep.step``) of one local step see, as ``cohort.ctx``:
    the round, the local step j (1-based, within the round), the local iteration before this step, the learning
    rate, the active mask (``None``: every client still trains; with ``--local-epochs`` a client whose steps are
    done is frozen) and this step's mini-batches x [K, B, ...], y [K, B], mask [K, B] (padding)."""

    round: int = 0
    step: int = 1
    iteration: int = 0
    lr: float = 0.0
    active: torch.Tensor | None = None
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    mask: torch.Tensor | None = None


@dataclass
class Cohort:
    clients: list[int]                 # global client ids held here (increasing)
    weights: torch.Tensor              # p_i for these clients, normalized over the whole cohort (float64)
    params: dict[str, torch.Tensor]    # name -> [K, *shape]
    buffers: dict[str, torch.Tensor]   # name -> [K, *shape]
    opt_state: dict = field(default_factory=dict)  # per-round optimizer state (reset by the local step)
    state: dict = field(default_factory=dict)      # stacked per-client state gathered from the client store
    round_idx: int = 0
    cohort_ids: list = field(default_factory=list)  # the whole cohort (all processes)
    steps: torch.Tensor | None = None               # [K] local steps of each client this round
    skipped: set = field(default_factory=set)       # global ids of the clients skipped this round (--on-diverge skip-client)
    skips: list = field(default_factory=list)       # their records (skipped.csv)
    ctx: StepContext = field(default_factory=StepContext)  # the current local step (set by the engine before each)

    @property
    def size(self) -> int:
        return len(self.clients)

    @property
    def total(self) -> int:
        """Clients in the whole cohort (all processes)."""
        return len(self.cohort_ids or self.clients)

    @property
    def positions(self) -> list[int]:
        """Each local client's index in the whole cohort (the order cohort sums add the clients in)."""
        where = {c: i for i, c in enumerate(self.cohort_ids or self.clients)}
        return [where[c] for c in self.clients]

    @classmethod
    def from_global(cls, clients, weights, global_params, global_buffers):
        k = len(clients)
        params = {n: p.unsqueeze(0).repeat(k, *([1] * p.dim())).contiguous() for n, p in global_params.items()}
        buffers = {n: b.unsqueeze(0).repeat(k, *([1] * b.dim())).contiguous() for n, b in global_buffers.items()}
        return cls(list(clients), weights, params, buffers)

    @torch.no_grad()
    def load_global(self, global_params, global_buffers) -> None:
        for n, p in global_params.items():
            self.params[n].copy_(p.expand_as(self.params[n]))
        for n, b in global_buffers.items():
            self.buffers[n].copy_(b.expand_as(self.buffers[n]))


@dataclass
class BatchPlan:
    """The mini-batches of one round for the K clients here: ``idx[j]`` is ``[K, B]`` dataset indices.

    ``mask[j]`` weighs each sample of the loss (1 real, 0 padding); clients with fewer samples than a
    batch see all their samples every step, padded by repetition with weight 0 (never dropped).
    """

    idx: torch.Tensor          # [steps, K, B] int64
    mask: torch.Tensor         # [steps, K, B] float32
    shifts: torch.Tensor | None = None  # [steps, K, B, 2] crop offsets (CIFAR augmentation)
    flips: torch.Tensor | None = None   # [steps, K, B] bool

    def to(self, device) -> "BatchPlan":
        mv = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return BatchPlan(mv(self.idx), mv(self.mask), mv(self.shifts), mv(self.flips))


def epoch_steps(n: int, epochs: float, batch: int, drop_last: bool = False) -> int:
    """Local steps of ``epochs`` epochs over a client's ``n`` samples in batches of ``batch``: ceil(E * n / B), or with
    ``drop_last`` (each epoch floor(n / B) full batches, as PyTorch's ``DataLoader(drop_last=True)``)
    ceil(E * floor(n / B)). At least 1: a client with fewer samples than a batch runs one padded batch."""
    return max(1, math.ceil(epochs * (n // batch) if drop_last else epochs * n / batch))


def client_batches(indices: torch.Tensor, steps: int, batch: int, gen: torch.Generator, drop_last: bool = False):
    """``steps`` mini-batches from one client's sample indices: consecutive slices of reshuffled epochs.

    By default the batches run on across epochs (an epoch's last samples share a batch with the next epoch's
    first). With ``drop_last`` every epoch (a fresh permutation) gives floor(n / B) batches and its last n mod B
    samples are not used: PyTorch's ``DataLoader(shuffle=True, drop_last=True)``, FedALA's training loader."""
    n = indices.numel()
    if n >= batch:
        per = n // batch * batch if drop_last else n
        epochs = math.ceil(steps * batch / per)
        order = torch.cat([torch.randperm(n, generator=gen)[:per] for _ in range(epochs)])[: steps * batch]
        return indices[order].view(steps, batch), torch.ones(steps, batch)
    rows, masks = [], []
    reps = math.ceil(batch / n)
    for _ in range(steps):
        perm = torch.randperm(n, generator=gen)
        rows.append(indices[perm.repeat(reps)[:batch]])
        m = torch.zeros(batch)
        m[:n] = 1.0
        masks.append(m)
    return torch.stack(rows), torch.stack(masks)


def make_plan(seed: int, round_idx: int, clients, client_indices, steps: int, batch: int, augment: str | None,
              drop_last: bool = False) -> BatchPlan:
    idx, mask, shifts, flips = [], [], [], []
    for c in clients:
        i, m = client_batches(client_indices[c], steps, batch, torch_gen(seed, "batches", round_idx, c), drop_last)
        idx.append(i)
        mask.append(m)
        if augment == "cifar":
            s, f = draw_cifar_params(steps * batch, torch_gen(seed, "augment", round_idx, c))
            shifts.append(s.view(steps, batch, 2))
            flips.append(f.view(steps, batch))
    plan = BatchPlan(torch.stack(idx, 1), torch.stack(mask, 1))
    if augment == "cifar":
        plan.shifts, plan.flips = torch.stack(shifts, 1), torch.stack(flips, 1)
    return plan
