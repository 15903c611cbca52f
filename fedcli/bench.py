"""``fedcli bench``: local-training throughput of the stacked cohort against the usual ways.

For each workload, measured in the same run, each path in its own fresh process (so peak memory is
per path):

- ``fedcli``: the engine's local-training path (``--trainer``, default the one ``auto`` picks):
  stacked parameters [K, ...], one gradient call and one optimizer call for all K clients.
- ``sequential``: what most frameworks do: K ``nn.Module`` copies, each with its own
  ``torch.optim.SGD``, trained one after another (forward, backward, step per client).
- ``single``: one model trained with batch K x B on the same samples: a lower bound on the time.

Throughput is client samples per second (K x B x steps / seconds). Ratios are printed as
fedcli / sequential (higher is better) and fedcli time / single-model time (lower is better).
"""

from __future__ import annotations

import copy
import json
import multiprocessing as mp
import platform
import resource
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    input_shape: tuple
    num_classes: int
    clients: int
    batch: int = 32


WORKLOADS = {
    "a": Workload("a: femnist_cnn, FEMNIST-shaped, 32 clients", "femnist_cnn", (1, 28, 28), 62, 32),
    "b": Workload("b: resnet20, CIFAR-shaped, 32 clients", "resnet20", (3, 32, 32), 10, 32),
    "c": Workload("c: mlp, MNIST-shaped, 128 clients", "mlp", (1, 28, 28), 10, 128),
}


def _data(w: Workload, steps: int, device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps, w.clients, w.batch, *w.input_shape, generator=g).to(device)
    y = torch.randint(0, w.num_classes, (steps, w.clients, w.batch), generator=g).to(device)
    return x, y


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _run_path(path: str, w: Workload, steps: int, warmup: int, device_name: str, trainer: str, threads: int) -> dict:
    from fedcli.config import TrainConfig
    from fedcli.fl.cohort import Cohort
    from fedcli.fl.parts import SGDStep
    from fedcli.fl.trainers import choose_trainer
    from fedcli.models import build_model

    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device_name)
    torch.manual_seed(0)
    model = build_model(w.model, w.input_shape, w.num_classes).to(device)
    x, y = _data(w, steps + warmup, device)
    lr = 0.01
    if path == "fedcli":
        cfg = TrainConfig(lr=lr, trainer=trainer)
        tr = choose_trainer(trainer, model, device)
        params = {n: p.detach() for n, p in model.named_parameters()}
        buffers = {n: b.detach() for n, b in model.named_buffers()}
        cohort = Cohort.from_global(list(range(w.clients)), torch.full((w.clients,), 1.0 / w.clients), params, buffers)
        opt = SGDStep(cfg)
        opt.begin_round(None, cohort)
        mask = torch.ones(w.clients, w.batch, device=device)

        def step(i):
            grads, _ = tr.grads(cohort, x[i], y[i], mask)
            opt.step(cohort, grads, lr)
        used = tr.name
    elif path == "sequential":
        models = [copy.deepcopy(model) for _ in range(w.clients)]
        opts = [torch.optim.SGD(m.parameters(), lr=lr) for m in models]

        def step(i):
            for k, (m, o) in enumerate(zip(models, opts)):
                m.train()
                o.zero_grad(set_to_none=True)
                F.cross_entropy(m(x[i, k]), y[i, k]).backward()
                o.step()
        used = "per-client nn.Module + torch.optim.SGD"
    elif path == "single":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        xs, ys = x.flatten(1, 2), y.flatten(1, 2)

        def step(i):
            model.train()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xs[i]), ys[i]).backward()
            opt.step()
        used = f"one model, batch {w.clients * w.batch}"
    else:
        raise ValueError(path)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(warmup):
        step(i)
    _sync(device)
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    _sync(device)
    secs = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"path": path, "impl": used, "seconds": secs, "samples_per_s": w.clients * w.batch * steps / secs, "peak_bytes": peak}


def _worker(q, *args):
    try:
        q.put(_run_path(*args))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put({"error": f"{type(e).__name__}: {e}"})


def measure(path: str, w: Workload, steps: int, warmup: int, device: str, trainer: str, threads: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_worker, args=(q, path, w, steps, warmup, device, trainer, threads))
    p.start()
    res = q.get()
    p.join()
    if "error" in res:
        raise RuntimeError(f"{path} on {w.name}: {res['error']}")
    return res


def device_description(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    import os

    return f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def run(workloads: list[str], steps: int, warmup: int, device: str, trainer: str, threads: int) -> list[dict]:
    results = []
    for key in workloads:
        w = WORKLOADS[key]
        r = {p: measure(p, w, steps, warmup, device, trainer, threads) for p in ("fedcli", "sequential", "single")}
        results.append({
            "workload": w.name, "device": device_description(device), "clients": w.clients, "batch": w.batch, "steps": steps,
            "fedcli_impl": r["fedcli"]["impl"],
            "fedcli_sps": r["fedcli"]["samples_per_s"], "sequential_sps": r["sequential"]["samples_per_s"], "single_sps": r["single"]["samples_per_s"],
            "speedup_vs_sequential": r["fedcli"]["samples_per_s"] / r["sequential"]["samples_per_s"],
            "time_vs_single": r["single"]["samples_per_s"] / r["fedcli"]["samples_per_s"],
            "peak_mb": {p: r[p]["peak_bytes"] / 2**20 for p in r},
        })
    return results


def table(results: list[dict]):
    from rich.table import Table

    t = Table(title="fedcli bench: local-training throughput (client samples / s)")
    for col in ("workload", "fedcli path", "fedcli", "sequential", "single model", "fedcli / sequential", "fedcli time / single", "peak MB (fedcli/seq/single)"):
        t.add_column(col, justify="right" if col not in ("workload", "fedcli path") else "left")
    for r in results:
        pk = r["peak_mb"]
        t.add_row(r["workload"], r["fedcli_impl"], f"{r['fedcli_sps']:,.0f}", f"{r['sequential_sps']:,.0f}", f"{r['single_sps']:,.0f}",
                  f"{r['speedup_vs_sequential']:.2f}x", f"{r['time_vs_single']:.2f}x",
                  f"{pk['fedcli']:,.0f} / {pk['sequential']:,.0f} / {pk['single']:,.0f}")
    if results:
        t.caption = f"device: {results[0]['device']}; {results[0]['steps']} timed steps after warm-up"
    return t


def to_json(results: list[dict]) -> str:
    return json.dumps(results, indent=2)
