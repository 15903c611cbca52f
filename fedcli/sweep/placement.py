"""Several runs on one GPU: where a sweep's concurrent runs go (``fedcli sweep --jobs N --runs-per-gpu K|auto``).

One run of a small model leaves a GPU mostly idle (issue 38, one H200: 4 runs started together finished in 20 s
against 12 s for one, 2.4x the throughput), so a sweep packs up to K runs on each visible CUDA device and spreads its
``--jobs`` concurrent runs over the devices round-robin: worker slot i runs on device i mod G. Each worker process
gets its device as ``CUDA_VISIBLE_DEVICES`` (set before CUDA starts in it), so a run's ``--device cuda`` (or auto)
resolves to that one GPU and its config, hence its config hash, is the same on any device.

``--runs-per-gpu auto``: as many runs as fit in ``share`` of the fullest device's free memory, from each run's
memory (:func:`run_memory`: measured on an earlier seed of the same run where its manifest recorded
``cuda_peak_bytes``, else estimated from the model and the cohort), at most :data:`AUTO_CAP`; one when the memory is
unknown. :func:`place` is a pure function of the device count and their free memory (tests give both by hand).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field

GiB = 1024**3
#: ``auto`` never packs more runs than this on one device (the issue measured up to 4; more gain little)
AUTO_CAP = 4
#: what a CUDA context and the caching allocator's slack cost each process, beyond its tensors
CONTEXT_BYTES = 768 * 1024**2


@dataclass
class Placement:
    """The devices of a sweep's concurrent runs: ``slots[i]`` is the device of worker slot i (None: no GPU)."""

    gpus: int  # CUDA devices visible to the sweep
    runs_per_gpu: int  # K: at most this many runs at a time on one device
    concurrent: int  # runs at a time (min of --jobs, K x gpus and the runs to go)
    slots: list = field(default_factory=list)  # device index per worker slot, round-robin
    why: str = ""  # how K was chosen, in words

    @property
    def per_device(self) -> dict[int, int]:
        """Device index -> runs at a time on it."""
        out: dict[int, int] = {}
        for d in self.slots:
            if d is not None:
                out[d] = out.get(d, 0) + 1
        return out

    def text(self, names: list[str] | None = None) -> str:
        """``2 CUDA devices, up to 2 runs per GPU (auto: ...): cuda:0 2 runs, cuda:1 1 run``."""
        if not self.gpus:
            return self.why
        names = names or [f"cuda:{i}" for i in range(self.gpus)]
        each = ", ".join(f"{names[d]} {n} run{'s' if n != 1 else ''}" for d, n in sorted(self.per_device.items()))
        return (
            f"{self.gpus} CUDA device{'s' if self.gpus != 1 else ''}, up to {self.runs_per_gpu} run"
            f"{'s' if self.runs_per_gpu != 1 else ''} per GPU ({self.why}); {self.concurrent} at a time: {each}"
        )


def parse_runs_per_gpu(value) -> int | None:
    """``--runs-per-gpu``: a count >= 1, or ``auto`` (None)."""
    from fedcli.errors import ConfigError

    text = str(value).strip().lower()
    if text == "auto":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--runs-per-gpu takes a count >= 1 or auto, got '{value}'", key="runs_per_gpu")
    return int(text)


def place(
    runs: int,
    jobs: int,
    free: list[int],
    need: int | None,
    runs_per_gpu: int | None,
    share: float = 0.9,
    how: str = "estimated",
) -> Placement:
    """Where ``runs`` runs to go, ``jobs`` at a time, go on devices with ``free`` bytes free each (empty: no GPU).

    ``runs_per_gpu``: K as asked, or None (auto): ``floor(share x min(free) / need)`` runs, between 1 and
    :data:`AUTO_CAP`, or 1 when ``need`` (a run's bytes) is unknown. The runs at a time are
    ``min(jobs, K x gpus, runs)``; slot i goes on device ``i mod gpus``, so the devices fill evenly. ``how``:
    whether ``need`` was measured or estimated (said in the plan)."""
    gpus = len(free)
    if gpus == 0:
        return Placement(
            0, 0, max(1, min(jobs, runs)), [None] * max(1, min(jobs, runs)), "no CUDA device: runs on the CPU"
        )
    if runs_per_gpu is not None:
        k, why = runs_per_gpu, f"--runs-per-gpu {runs_per_gpu}"
    elif not need:
        k, why = 1, "auto: a run's memory is unknown, one per GPU"
    else:
        fit = int(share * min(free) // need)
        k = max(1, min(AUTO_CAP, fit))
        why = (
            f"auto: a run needs about {need / GiB:.2f} GiB ({how}); the device with the least free memory has "
            f"{min(free) / GiB:.1f} GiB, {fit} run{'s' if fit != 1 else ''} fit in {share:.0%} of it"
            + (f", capped at {AUTO_CAP}" if fit > AUTO_CAP else "")
        )
    concurrent = max(1, min(jobs, k * gpus, runs))
    return Placement(gpus, k, concurrent, [i % gpus for i in range(concurrent)], why)


# ------------------------------------------------------------------------------------------------ the devices


def visible_ids() -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (None when it is not set): slot device i is ``ids[i]``."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return None
    return [x.strip() for x in env.split(",") if x.strip()]


def free_memory() -> list[int]:
    """Free bytes of each visible CUDA device, asked of ``nvidia-smi`` (no CUDA context in the sweep process); [] when
    there is none or no driver answers. Honours ``CUDA_VISIBLE_DEVICES`` given as indices."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        r = subprocess.run(
            [smi, "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if r.returncode != 0:
        return []
    rows = {}
    for line in r.stdout.splitlines():
        idx, _, mib = line.partition(",")
        if idx.strip().isdigit() and mib.strip().isdigit():
            rows[idx.strip()] = int(mib.strip()) * 1024**2
    ids = visible_ids()
    if ids is None:
        return [rows[k] for k in sorted(rows, key=int)]
    return [rows[i] for i in ids if i in rows]


def wants_gpu(config: dict) -> bool:
    """A run placed by the sweep: ``--device cuda`` or ``auto`` (an explicit ``cuda:K`` or ``cpu`` stays as asked)."""
    return config.get("device", "auto") in ("auto", "cuda")


def device_env(slot_device: int | None) -> dict:
    """The environment of a worker on ``slot_device``: ``CUDA_VISIBLE_DEVICES`` naming that one device."""
    if slot_device is None:
        return {}
    ids = visible_ids()
    return {"CUDA_VISIBLE_DEVICES": ids[slot_device] if ids else str(slot_device)}


# ------------------------------------------------------------------------------------------------ a run's memory


def estimate_memory(config: dict, facts) -> int:
    """Estimated peak GPU bytes of one run: the CUDA context, the data on the device, and per client trained at once
    (the cohort, or ``--cohort-chunk``) 4 copies of the model (parameters, gradients, momentum, the round's start)
    plus the activations a batch keeps for the backward pass (a one-sample forward on the CPU, times the batch, x3
    for their gradients and the allocator's rounding). An upper-side guess, so that packed runs do not run out."""
    import torch

    from fedcli.config import TrainConfig
    from fedcli.fl.budget import clients_per_round
    from fedcli.models import build_model

    cfg = TrainConfig(**config)
    model = build_model(
        cfg.model,
        facts.shape,
        facts.classes,
        wrn_depth=cfg.wrn_depth,
        wrn_width=cfg.wrn_width,
        mlp_hidden=cfg.hidden_sizes(),
        **({"vocab_size": int(facts.tokens)} if facts.tokens else {}),
    )
    params = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    acts = [0]

    def hook(_m, _i, out):
        if isinstance(out, torch.Tensor):
            acts[0] += out.numel()

    leaves = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    dtype = torch.long if facts.tokens else torch.float32
    with torch.no_grad():
        model.eval()
        model(torch.zeros((1, *facts.shape), dtype=dtype))
    for h in leaves:
        h.remove()
    clients = clients_per_round(config.get("active_ratio", 1.0), config.get("clients", 1))
    if config.get("cohort_chunk"):
        clients = min(clients, int(config["cohort_chunk"]))
    batch = int(config.get("batch_size", 32))
    data = ((facts.n_train or 0) + (facts.n_test or 0)) * math.prod(facts.shape) * 4
    return int(CONTEXT_BYTES + data + clients * 4 * (4 * params + 3 * batch * acts[0]))


def run_memory(todo: list, done: list) -> tuple[int | None, str]:
    """(bytes, how): the largest memory of the runs to go; a run's own ``cuda_peak_bytes`` measured on a completed seed
    of the same run where there is one, else :func:`estimate_memory`; (None, why) when neither is possible."""
    import json

    from fedcli.sweep.estimate import data_facts

    measured: dict[str, int] = {}
    for p in done:
        try:
            peak = json.loads((p.dir / "manifest.json").read_text()).get("cuda_peak_bytes")
        except (OSError, ValueError):
            continue
        if isinstance(peak, int) and peak > 0:
            measured[p.name] = max(measured.get(p.name, 0), peak + CONTEXT_BYTES)
    cache: dict = {}
    worst, hows = 0, set()
    for p in todo:
        if p.name in measured:
            need, how = measured[p.name], "measured"
        else:
            try:
                facts = data_facts(p.config, False, cache)
                need, how = (estimate_memory(p.config, facts), "estimated") if facts else (None, "")
            except Exception:
                need = None
            if not need:
                return None, f"the memory of {p.label} cannot be estimated"
        worst, _ = max(worst, need), hows.add(how)
    return (worst or None), " and ".join(sorted(hows))


def placement_for(
    todo: list, done: list, jobs: int, runs_per_gpu: int | None, free: list[int] | None = None, mpi: int = 0
) -> Placement:
    """The sweep's :class:`Placement`: the runs to go placed on the visible CUDA devices (``free``: their free bytes,
    asked of the driver when None) when every one of them asks for ``--device cuda`` or auto; else on no device.
    Under ``--mpi N`` (N > 1) a run's ranks spread over the visible GPUs themselves: no placement."""
    n = max(1, min(jobs, len(todo)))
    if mpi > 1:
        return Placement(0, 0, n, [None] * n, f"each run's {mpi} MPI ranks spread over the visible GPUs")
    odd = sorted({str(p.config.get("device")) for p in todo if not wants_gpu(p.config)})
    if odd:
        return Placement(0, 0, n, [None] * n, f"as the runs ask (--device {', '.join(odd)})")
    free = free_memory() if free is None else free
    need, how = None, ""
    if free and runs_per_gpu is None and jobs > len(free):  # K matters only when some GPU gets more than one run
        need, how = run_memory(todo, done)
    return place(len(todo), jobs, free, need, runs_per_gpu, how=how or "unknown")
