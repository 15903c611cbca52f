"""The cohort: the clients training together on this process, held as stacked tensors.

Every parameter and buffer is one tensor of shape ``[K, *shape]``, so a
local step for all K clients is one vectorized call and synchronizing layer l is a weighted sum
over dim 0. Per-round mini-batch plans are drawn from generators keyed by (seed, round, client).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fedcli.data.augment import draw_cifar_params
from fedcli.fl.rng import np_gen, torch_gen


def sample_cohort(seed: int, round_idx: int, clients: int, n_active: int) -> list[int]:
    """The round's cohort: ``n_active`` of ``clients`` without replacement, keyed by (seed, round) only,
    so every method and every process count sees the same clients (one shared sampling stream)."""
    if n_active >= clients:
        return list(range(clients))
    return sorted(int(c) for c in np_gen(seed, "cohort", round_idx).choice(clients, size=n_active, replace=False))


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
    clients: list[int]  # global client ids held here (increasing)
    weights: torch.Tensor  # p_i for these clients, normalized over the whole cohort (float64)
    params: dict[str, torch.Tensor]  # name -> [K, *shape]
    buffers: dict[str, torch.Tensor]  # name -> [K, *shape]
    opt_state: dict = field(default_factory=dict)  # per-round optimizer state (reset by the local step)
    state: dict = field(default_factory=dict)  # stacked per-client state gathered from the client store
    round_idx: int = 0
    cohort_ids: list = field(default_factory=list)  # the whole cohort (all processes)
    steps: torch.Tensor | None = None  # [K] local steps of each client this round
    skipped: set = field(default_factory=set)  # global ids of the clients skipped this round (--on-diverge skip-client)
    skips: list = field(default_factory=list)  # their records (skipped.csv)
    ctx: StepContext = field(default_factory=StepContext)  # the current local step (set by the engine before each)
    end_iteration: int = 0  # the global iteration the round ended at (set after its last step)

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
    """The mini-batches of the K clients here: ``idx[j]`` is ``[K, B]`` dataset indices.

    ``mask[j]`` weighs each sample of the loss (1 real, 0 padding); clients with fewer samples than a
    batch see all their samples every step, padded by repetition with weight 0 (never dropped).
    ``real[j]`` (in-order plans) counts each client's real samples in batch j.
    """

    idx: torch.Tensor  # [steps, K, B] int64
    mask: torch.Tensor  # [steps, K, B] float32
    shifts: torch.Tensor | None = None  # [steps, K, B, 2] crop offsets (CIFAR augmentation)
    flips: torch.Tensor | None = None  # [steps, K, B] bool
    real: torch.Tensor | None = None  # [steps, K] int64

    def to(self, device) -> "BatchPlan":
        mv = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return BatchPlan(mv(self.idx), mv(self.mask), mv(self.shifts), mv(self.flips), mv(self.real))


@dataclass(frozen=True)
class Stream:
    """How the batches of one purpose are made.

    ``shuffled``: ``client_batches`` (reshuffled epochs of the client's training split) drawn from
    ``torch_gen(seed, draws, round, client)``, and on augmented data crops and flips from
    ``torch_gen(seed, augment, round, client)`` (``augment`` empty: never augmented): every purpose has random streams
    of its own. Otherwise the given indices in order, ``in_order_plan`` (no augmentation); a client whose samples
    are used up gets a dummy batch of mask ``spent``. ``window``: in order over a contiguous part of the training
    split at an offset drawn from ``torch_gen(seed, draws, round, client)`` (``sample_slice``)."""

    draws: str = ""
    augment: str = ""
    shuffled: bool = True
    spent: float = 0.0
    window: bool = False


#: the purposes batches are asked for: the engine's local steps here, the parts' own registered by their files
#: (``register_purpose``); any other name: a part's extra local training (``stream``)
PURPOSES: dict[str, Stream] = {
    "train": Stream("batches", "augment"),  # the engine's local steps
}


def register_purpose(name: str, how: Stream) -> str:
    """Declare how the batches of purpose ``name`` are made (a part's own use: ALA's window, FedFomo's validation
    batches, ...); returns ``name``. A purpose has one meaning: registering another Stream under it is an error."""
    if PURPOSES.get(name, how) != how:
        raise ValueError(f"batch purpose {name!r} is already registered as {PURPOSES[name]}")
    PURPOSES[name] = how
    return name


def stream(purpose: str) -> Stream:
    """The stream of ``purpose``: a registered one, or shuffled batches keyed by the purpose's own name (Ditto's
    personal model "ditto", FedRep's head "fedrep.head": ``personal.local_sgd``)."""
    return PURPOSES.get(purpose) or Stream(purpose, purpose + ".augment")


def client_orders(n: int, steps: int, batch: int, gen: torch.Generator, drop_last: bool = False):
    """The draws behind ``client_batches`` of a client of ``n`` samples: (the permutations drawn from ``gen``, in
    order; where each of the ``steps * batch`` batch slots takes its sample in their concatenation, numpy int64;
    the mask [steps, batch], numpy float32). Only the permutations are torch ops (one a pass over the client's data),
    so a cohort's plan is gathered for all its clients at once (:func:`make_plan`)."""
    if n >= batch:
        per = n // batch * batch if drop_last else n
        epochs = math.ceil(steps * batch / per)
        perms = [torch.randperm(n, generator=gen) for _ in range(epochs)]
        where = (np.arange(epochs)[:, None] * n + np.arange(per)).reshape(-1)[: steps * batch]
        return perms, where, np.ones((steps, batch), dtype=np.float32)
    perms = [torch.randperm(n, generator=gen) for _ in range(steps)]  # every step sees all n samples, repeated
    where = (np.arange(steps)[:, None] * n + np.arange(batch) % n).reshape(-1)
    mask = np.zeros((steps, batch), dtype=np.float32)
    mask[:, :n] = 1.0
    return perms, where, mask


def client_batches(indices: torch.Tensor, steps: int, batch: int, gen: torch.Generator, drop_last: bool = False):
    """``steps`` mini-batches from one client's sample indices: consecutive slices of reshuffled epochs.

    By default the batches run on across epochs (an epoch's last samples share a batch with the next epoch's
    first). With ``drop_last`` every epoch (a fresh permutation) gives floor(n / B) batches and its last n mod B
    samples are not used: PyTorch's ``DataLoader(shuffle=True, drop_last=True)``, FedALA's training loader.
    A client with fewer samples than a batch sees all of them at every step (a fresh permutation, repeated to the
    batch size, the repeats of mask 0)."""
    perms, where, mask = client_orders(indices.numel(), steps, batch, gen, drop_last)
    return indices[torch.cat(perms)[torch.from_numpy(where)]].view(steps, batch), torch.from_numpy(mask)


def make_plan(source: BatchSource, round_idx: int, clients, steps: int, purpose: str = "train") -> BatchPlan:
    """``steps`` shuffled batches of each client's training split ``source.indices[c]`` (``client_batches``, of
    ``source``'s batch size and drop_last), keyed by (``source.seed``, the purpose's streams, round, client), on the
    CPU. Each client's permutations are drawn from its own generator; the batches of all the clients are then gathered
    by a few torch ops whatever their number (GitHub issue 38)."""
    seed, client_indices, batch, drop_last = source.seed, source.indices, source.batch, source.drop_last
    keys = stream(purpose)
    augmented = source.augment == "cifar" and bool(keys.augment)
    perms, where, masks, shifts, flips = [], [], [], [], []
    drawn = 0
    for c in clients:
        n = client_indices[c].numel()
        p, w, m = client_orders(n, steps, batch, torch_gen(seed, keys.draws, round_idx, c), drop_last)
        perms += p
        where.append(w + drawn)  # positions in the concatenation of every client's permutations
        drawn += n * len(p)
        masks.append(m)
        if augmented:
            s, f = draw_cifar_params(steps * batch, torch_gen(seed, keys.augment, round_idx, c))
            shifts.append(s.view(steps, batch, 2))
            flips.append(f.view(steps, batch))
    k = len(clients)
    if not k:
        return BatchPlan(torch.zeros(steps, 0, batch, dtype=torch.long), torch.zeros(steps, 0, batch))
    sizes = np.array([client_indices[c].numel() for c in clients])
    base = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]).reshape(k, 1))  # each client's first row
    local = torch.cat(perms)[torch.from_numpy(np.stack(where))]  # [K, steps * batch] positions in each client's split
    table = torch.cat([client_indices[c] for c in clients])
    idx = table[local + base].view(k, steps, batch).transpose(0, 1).contiguous()
    plan = BatchPlan(idx, torch.from_numpy(np.stack(masks, 1)))
    if augmented:
        plan.shifts, plan.flips = torch.stack(shifts, 1), torch.stack(flips, 1)
    return plan


def sample_slice(indices: torch.Tensor, percent: float, gen: torch.Generator) -> torch.Tensor:
    """``percent``% of a client's indices, int(percent / 100 * n) of them (none when that is 0, and then nothing is
    drawn): a contiguous slice at an offset drawn uniformly from [0, n - m], both ends included (FedALA's reference:
    ``random.randint(0, n - m)``)."""
    n = indices.numel()
    m = int(percent / 100 * n)
    if m <= 0:
        return indices[:0]
    off = int(torch.randint(0, n - m + 1, (1,), generator=gen))
    return indices[off : off + m]


def in_order_plan(indices: list[torch.Tensor], batch: int, spent: float = 0.0) -> BatchPlan:
    """Consecutive batches of each client's ``indices`` in their order, the last one partial: as many steps as
    the largest client needs. A partial batch is padded with its first sample (mask 0); a client whose samples
    are used up gets its first sample throughout, with mask ``spent``."""
    k = len(indices)
    steps = max((math.ceil(ix.numel() / batch) for ix in indices), default=0)
    idx = torch.zeros(steps, k, batch, dtype=torch.long)
    mask = torch.zeros(steps, k, batch)
    real = torch.zeros(steps, k, dtype=torch.long)
    for i, ix in enumerate(indices):
        for s in range(steps):
            chunk = ix[s * batch : (s + 1) * batch]
            if len(chunk):
                idx[s, i, : len(chunk)] = chunk
                idx[s, i, len(chunk) :] = chunk[0]
                mask[s, i, : len(chunk)] = 1.0
                real[s, i] = len(chunk)
            else:
                idx[s, i] = ix[0] if len(ix) else 0
                mask[s, i] = spent
    return BatchPlan(idx, mask, real=real)


class BatchSource:
    """The clients' mini-batches, asked for by purpose (``PURPOSES``, ``stream``): the one place padded batch plans
    are made. ``indices`` are the clients' training splits; the plans are put on ``device``."""

    def __init__(
        self,
        seed: int,
        indices: list[torch.Tensor],
        batch: int,
        drop_last: bool = False,
        augment: str | None = None,
        device="cpu",
    ):
        self.seed, self.indices, self.batch = seed, indices, batch
        self.drop_last, self.augment, self.device = drop_last, augment, device

    def plan(
        self,
        purpose: str,
        clients: list[int] = (),
        round_idx: int = 0,
        steps: int = 0,
        indices: list[torch.Tensor] | None = None,
        percent: float = 100.0,
    ) -> BatchPlan:
        """Batches for ``clients``: ``steps`` shuffled ones of round ``round_idx`` (a shuffled purpose), or in order
        (an in-order purpose) the clients' training splits (a window purpose: ``percent``% of each at the round's
        offset), or the per-client ``indices`` given instead."""
        keys = stream(purpose)
        if keys.shuffled:
            plan = make_plan(self, round_idx, clients, steps, purpose)
        else:
            if indices is None:
                indices = [
                    sample_slice(self.indices[c], percent, torch_gen(self.seed, keys.draws, round_idx, c))
                    if keys.window
                    else self.indices[c]
                    for c in clients
                ]
            plan = in_order_plan(indices, self.batch, keys.spent)
        return plan.to(self.device)
