"""Local-training paths: gradients of every cohort client's mini-batch loss in one call.

``vmap``: ``torch.func.vmap(torch.func.grad(loss))`` over the stacked parameters and buffers
(BatchNorm running statistics are stacked too and updated in place per client).
``loop``: the same computation one client at a time on views of the stacked tensors; on CPU this is
sometimes faster. Both return identical numbers up to float reassociation (tested).
"""

from __future__ import annotations

import sys

import torch
from torch.func import functional_call, grad, vmap

from fedcli.runtime import gradshim

gradshim.install()  # torch.func.grad without the compiler stack: 150 MB and 0.9 s of CPU less in every process


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy ``-log_softmax(logits)[y]``: the arithmetic of ``F.cross_entropy(reduction="none")``
    (log-softmax, then the target's entry negated), written out so that under ``vmap`` it needs no decomposition:
    torch's ``nll_loss`` decomposition calls ``torch._check``, whose first call imports sympy (about 0.5 s in every
    process's first local step). The same bits forward and backward (the golden records)."""
    return -torch.log_softmax(logits, 1).gather(1, y.unsqueeze(1)).squeeze(1)


def masked_loss(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the real samples of a (possibly padded) batch."""
    losses = cross_entropy(logits, y)
    return (losses * w).sum() / w.sum()


#: ``--precision``: the dtype local training computes in (None: the tensors' own, fp32)
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def lowered(tensors: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """Floating tensors cast to ``dtype`` (None: as they are); integer ones (BatchNorm's batch count) as they are.
    Inside ``grad`` the cast of an fp32 parameter is differentiated too, so its gradient comes back fp32: mixed
    precision with fp32 master weights (Micikevicius et al. 2018, Sec. 3.1; bfloat16 needs no loss scaling)."""
    if dtype is None:
        return tensors
    return {n: lower(t, dtype) for n, t in tensors.items()}


def lower(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """One tensor as :func:`lowered` casts it."""
    return t if dtype is None or not t.is_floating_point() else t.to(dtype)


def write_back(low: dict[str, torch.Tensor], full: dict[str, torch.Tensor]) -> None:
    """The BatchNorm statistics a lowered step updated (``low``) copied into the fp32 stacked buffers (``full``)."""
    for n, t in low.items():
        if t is not full[n]:
            full[n].copy_(t)


class Trainer:
    """A local-training path: ``grads(cohort, x, y, mask)`` -> (grads name -> [K, ...], losses [K])."""

    name = "base"
    # whether ``grads(..., lr=lr)`` applies plain SGD itself right after each client's backward (``LocalStep.fused_lr``)
    fuses_sgd = False
    # whether the chunk of clients per vectorized call is chosen at the first call (``--cohort-chunk 0`` on CUDA)
    chooses_chunk = False

    def eval_input(self, x: torch.Tensor) -> torch.Tensor:
        """A batch [B, ...] as evaluations feed it to the model: in the layout this path trains in."""
        return x


class VmapTrainer(Trainer):
    """The stacked path. ``chunk`` (``--cohort-chunk``): at most this many clients per vectorized call (0: the whole
    cohort), so the activations of a large cohort (WRN-28-10 at 32 clients) need not fit on the device at once; the
    gradients of the chunks are joined into the same ``[K, ...]`` tensors. On the CPU each client's arithmetic is
    the same in a chunk as in the whole cohort for models without BatchNorm, so the result is bitwise the unchunked
    one (every stacked golden run, tested); batched BatchNorm reduces over another shape, within 1e-6 (tested).
    Models with dropout draw their masks chunk by chunk, a different (equally distributed) stream. ``chunk`` None on
    CUDA:
    chosen at the first call from the device's free memory (:func:`auto_chunk`)."""

    name = "vmap"

    def __init__(self, model: torch.nn.Module, chunk: int | None = 0, dtype: torch.dtype | None = None):
        self.model = model
        self.chunk = chunk
        self.chooses_chunk = chunk is None
        self.dtype = dtype  # --precision: the parameters and inputs are cast to it inside the step

        def loss_fn(params, buffers, x, y, w):
            logits = functional_call(model, (lowered(params, dtype), buffers), (lower(x, dtype),))
            loss = masked_loss(logits.float(), y, w)
            return loss, loss.detach()

        self._grad = vmap(grad(loss_fn, has_aux=True), randomness="different")
        self._custom: dict = {}

    def grads(self, cohort, x, y, w, loss=None, extra=(), extra_dims=()):
        """x [K, B, ...], y [K, B], w [K, B] -> (grads name->[K, ...], losses [K]).

        ``loss(params, buffers, x, y, w, *extra)``: another per-client loss than the masked cross-entropy
        (FedPHP adds an MMD term); ``extra_dims[i]`` is 0 for an extra stacked per client, None for one shared."""
        self.model.train()
        if loss is None:
            fn = self._grad
        else:
            key = (loss, tuple(extra_dims))
            fn = self._custom.get(key)
            if fn is None:

                def with_aux(params, buffers, x, *rest):
                    value = loss(lowered(params, self.dtype), buffers, lower(x, self.dtype), *rest).float()
                    return value, value.detach()

                fn = self._custom[key] = vmap(
                    grad(with_aux, has_aux=True), in_dims=(0, 0, 0, 0, 0, *extra_dims), randomness="different"
                )
        k = x.shape[0]
        low = lowered(cohort.buffers, self.dtype)  # BatchNorm statistics in the compute dtype, written back below
        held = Held(cohort.params, low)
        if self.chunk is None:
            self.chunk = auto_chunk(lambda sl: fn(*self._args(held, x, y, w, extra, extra_dims, sl)), k, x.device)
        if not self.chunk or self.chunk >= k:
            out = fn(cohort.params, low, x, y, w, *extra)
        else:
            parts = [
                fn(*self._args(held, x, y, w, extra, extra_dims, slice(a, a + self.chunk)))
                for a in range(0, k, self.chunk)
            ]
            out = (
                {n: torch.cat([g[n] for g, _ in parts]) for n in parts[0][0]},
                torch.cat([loss_ for _, loss_ in parts]),
            )
        write_back(low, cohort.buffers)
        return out

    @staticmethod
    def _args(cohort, x, y, w, extra, extra_dims, sl: slice) -> tuple:
        """The arguments of one chunk of clients: views of the stacked tensors (BatchNorm statistics updated in place
        through them)."""
        return (
            {n: p[sl] for n, p in cohort.params.items()},
            {n: b[sl] for n, b in cohort.buffers.items()},
            x[sl],
            y[sl],
            w[sl],
            *(e if d is None else _row(e, sl) for e, d in zip(extra, extra_dims)),
        )


class Held:
    """The stacked tensors one vectorized call reads: the cohort's parameters and its buffers as the step holds them."""

    def __init__(self, params: dict, buffers: dict):
        self.params, self.buffers = params, buffers


def auto_chunk(run, k: int, device: torch.device, share: float = 0.8) -> int:
    """``--cohort-chunk 0`` on CUDA: as many clients per vectorized call as fit in ``share`` of the device's free
    memory, from the peak memory of one client's call (``run(slice)``); the whole cohort on other devices."""
    if device.type != "cuda" or k <= 1:
        return 0
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    with torch.random.fork_rng(devices=[device]):  # the probe draws no random numbers of the run
        run(slice(0, 1))
    per_client = max(1, torch.cuda.max_memory_allocated(device) - base)
    free, _ = torch.cuda.mem_get_info(device)
    return chunk_from_memory(free, per_client, k, share)


def chunk_from_memory(free: int, per_client: int, k: int, share: float = 0.8) -> int:
    """The clients per vectorized call for ``free`` bytes free on the device and ``per_client`` bytes a client's call
    takes at its peak: as many as fit in ``share`` of the free memory, at least one; 0 (the whole cohort at once)
    when all ``k`` fit. :func:`auto_chunk`'s arithmetic, apart from CUDA's memory counters, so a CPU test states the
    figures (tests/comm/test_cuda_branches.py)."""
    fit = int(share * free // max(1, per_client))
    return 0 if fit >= k else max(1, fit)


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """A copy of an image batch [B, C, H, W] with channels-last strides, also when C = 1 (where
    ``contiguous(memory_format=...)`` keeps the NCHW strides, so the convolution stays NCHW)."""
    return torch.empty_like(x, memory_format=torch.channels_last).copy_(x)


class LoopTrainer(Trainer):
    name = "loop"

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype | None = None, nhwc_on: str = "cuda"):
        self.model = model
        self.dtype = dtype  # --precision (see VmapTrainer)
        self._pool: list[dict[str, torch.Tensor]] = []
        # on the CPU, 2-d convolutions and max-pooling run channels-last (oneDNN's NHWC kernels are faster at small
        # batches, gradients as accurate); models with BatchNorm keep NCHW, whose gradients are the accurate ones
        # there (measurements: docs/method-notes.md)
        mods = list(model.modules())
        conv = any(isinstance(m, torch.nn.Conv2d) for m in mods)
        self.nhwc = conv and not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in mods)
        # on CUDA in bf16 convolutional models run channels-last, inputs and 4-d weights (the tensor cores' layout:
        # one ResNet20 at batch 1024 3.8x faster than fp32 NCHW on an H200, issue 38); fp32 keeps NCHW there.
        # nhwc_on: the device type of that path, "cuda"; a CPU test names "cpu" to take it on CPU tensors (its
        # arithmetic needs no GPU: tests/comm/test_cuda_branches.py)
        self.nhwc_cuda, self.nhwc_on = conv and dtype is not None, nhwc_on

    def layout(self, device: torch.device) -> tuple[bool, bool]:
        """(inputs, 4-d weights) channels-last in a local step on ``device``: both on CUDA in bf16 for convolutional
        models; the inputs alone on the CPU for convolutional models without BatchNorm; else neither."""
        if self.nhwc_cuda and device.type == self.nhwc_on:
            return True, True
        return self.nhwc and device.type == "cpu", False

    def buffers_for(self, cohort) -> dict[str, torch.Tensor]:
        """Stacked gradient tensors [K, ...], reused from step to step.

        A fresh allocation per step is page-faulted in again every time (822 MB for femnist_cnn's 6.4M-element
        layer at K = 32), which cost about a third of the step on CPU (``fedcli bench`` a: 432 -> 761 client
        samples/s). A set is reused only when nothing outside the pool still holds one of its tensors (the
        caller dropped the previous step's gradients), so a part that asks for a second set while holding the
        first (Mime's gradient at the anchor) gets a new one.
        """
        for bufs in self._pool:
            if not bufs or not all(sys.getrefcount(t) <= 3 for t in bufs.values()):  # pool dict + loop var + argument
                continue
            if all(
                n in bufs and bufs[n].shape == p.shape and bufs[n].dtype == p.dtype and bufs[n].device == p.device
                for n, p in cohort.params.items()
            ) and len(bufs) == len(cohort.params):
                return dict(bufs)
        bufs = {n: torch.empty_like(p) for n, p in cohort.params.items()}
        self._pool.append(bufs)
        if len(self._pool) > 4:  # shapes changed (another cohort size): forget the oldest set
            self._pool.pop(0)
        return dict(bufs)

    fuses_sgd = True

    def eval_input(self, x: torch.Tensor) -> torch.Tensor:
        """Image batches channels-last on the CPU when training runs so (the evaluations' convolutions then take the
        same NHWC kernels, about 1.7x faster than NCHW for cnn4 at one thread)."""
        return channels_last(x) if self.nhwc and x.dim() == 4 and x.device.type == "cpu" else x

    def grads(self, cohort, x, y, w, loss=None, extra=(), extra_dims=(), lr: float | None = None):
        """As :meth:`VmapTrainer.grads`, one client at a time.

        ``lr``: plain SGD fused in (``SGDStep.fused_lr``): client k's parameters take x_k <- x_k - lr * g_k
        right after its backward, while they are in cache, and no stacked gradient is written (the copy into
        the [K, ...] buffers and the separate optimizer pass were 13% of a cnn4 round at batch 10, thread CPU
        time 3.9 vs 3.4 s); returns (None, losses). Each element gets the same x + (-lr) * g as the stacked step."""
        self.model.train()
        names = list(cohort.params)
        out = self.buffers_for(cohort) if lr is None else None
        losses = torch.empty(cohort.size, device=x.device)
        nhwc, nhwc_weights = self.layout(x.device) if x.dim() == 5 else (False, False)
        for k in range(cohort.size):
            params = {n: cohort.params[n][k].detach().requires_grad_(True) for n in names}
            full = {n: b[k] for n, b in cohort.buffers.items()}
            buffers = lowered(full, self.dtype)
            xk = lower(channels_last(x[k]) if nhwc else x[k], self.dtype)
            low = lowered(params, self.dtype)
            if nhwc_weights:
                low = {n: channels_last(p) if p.dim() == 4 else p for n, p in low.items()}
            if loss is None:
                value = masked_loss(functional_call(self.model, (low, buffers), (xk,)).float(), y[k], w[k])
            else:
                value = loss(
                    low, buffers, xk, y[k], w[k], *(e if d is None else _row(e, k) for e, d in zip(extra, extra_dims))
                ).float()
            write_back(buffers, full)
            gs = torch.autograd.grad(value, [params[n] for n in names])
            if out is None:
                with torch.no_grad():
                    torch._foreach_add_([cohort.params[n][k] for n in names], list(gs), alpha=-lr)
            else:
                for n, g in zip(names, gs):
                    out[n][k] = g
            losses[k] = value.detach()
        return out, losses


def _row(stacked, k):
    """Client k's slice (or a slice of clients) of a per-client extra: a stacked tensor or a dict of them."""
    return {n: t[k] for n, t in stacked.items()} if isinstance(stacked, dict) else stacked[k]


TRAINERS = {"vmap": VmapTrainer, "loop": LoopTrainer}


def auto_trainer(model: torch.nn.Module, device: torch.device) -> str:
    """The path ``--trainer auto`` takes: a fixed rule (so results never depend on timing), from ``fedcli bench``.

    On CPU (2 cores, batch 32) convolutional models train faster one client at a time: resnet20 240 vs
    96 client samples/s (loop vs vmap), femnist_cnn 560 vs 398, since vmap turns the K clients'
    convolutions into grouped convolutions that oneDNN runs slowly; dense models (mlp, 128 clients)
    are far faster stacked (44,449 vs 16,176 for the sequential loop). On CUDA the stacked path is used.
    """
    if device.type == "cpu" and any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules()):
        return "loop"
    return "vmap"


def choose_trainer(name: str, model: torch.nn.Module, device: torch.device, chunk: int = 0, precision: str = "fp32"):
    """The trainer ``--trainer`` names (auto: :func:`auto_trainer`); ``chunk``: ``--cohort-chunk`` for the stacked path
    (0: the whole cohort on the CPU, chosen from the free memory on CUDA); ``precision``: ``--precision``."""
    if name == "auto":
        name = auto_trainer(model, device)
    dtype = PRECISIONS[precision]
    if name == "vmap":
        return VmapTrainer(model, chunk or (None if device.type == "cuda" else 0), dtype)
    return TRAINERS[name](model, dtype)
