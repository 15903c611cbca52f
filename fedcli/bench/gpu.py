"""``fedcli bench --device cuda`` (``make bench-gpu``): the cohort step near the hardware (GitHub issue 38).

For each workload, one local iteration = every one of ``clients`` clients takes one local step at batch ``batch``:

- **fedcli vmap / loop** (fp32 and bf16): ms per iteration of ``fedcli train``'s own trainers, the wall time of a run
  of ``long`` iterations minus one of ``short`` (set-up, first steps and the final evaluation cancel), divided by the
  difference;
- **bare vmap**: ``torch.func.vmap(grad(...))`` over the clients' stacked parameters and BatchNorm buffers (train mode),
  then a momentum SGD update with ``_foreach`` ops, the same models and batches, nothing else (bf16: parameters and
  inputs cast inside the differentiated loss, as ``--precision bf16`` does);
- **plain loop**: one model and optimizer a client, forward, backward and ``step`` client after client;
- **ops / kernels per iteration**: ``torch.profiler`` top-level ``aten::`` ops and (on CUDA) GPU kernels of fedcli's
  vmap step, long minus short run;
- **runs per device**: 1, 2, 4 ``fedcli train`` processes of ``concurrent_iterations`` iterations started together
  on the device, throughput against one (n x wall(1) / wall(n); each process's start-up, some seconds, included).

Ratios are taken of numbers measured in the same process, in one call. On a CPU (``--device cpu``, tiny sizes) it
runs the same code paths (its timings say nothing of a GPU's); CUDA kernels are counted on CUDA only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

#: the issue's two workloads (recipe keys); ``data_dir`` is filled in by :func:`workloads`
FEMNIST = {
    "dataset": "femnist",
    "model": "femnist_cnn",
    "partition": "natural",
    "algo": "fedavg",
    "tau": 5,
    "momentum": 0.9,
    "lr": 0.05,
}
RESNET20 = {
    "dataset": "cifar10",
    "model": "resnet20",
    "partition": "dirichlet",
    "alpha": 0.1,
    "algo": "fedlama",
    "tau": 10,
    "phi": 2,
    "lr": 0.2,
    "weighting": "uniform",
    "momentum": 0.9,
    "momentum_persist": "slot",
    "weight_decay": 2e-4,
    "weight_decay_on": "kernels+final-bias",
    "lama_rule": "reference",
    "lama_eligible": "kernels",
    "lama_first_adjust": 6,
    "bn_buffers": "never",
}  # FedLAMA AAAI Table 1's flags


def workloads(femnist_dir: str | None, cifar_dir: str | None) -> dict:
    """Name -> recipe keys of the workloads whose data was given."""
    out = {}
    if femnist_dir:
        out["femnist-cnn"] = {**FEMNIST, "data_dir": femnist_dir}
    if cifar_dir:
        out["resnet20"] = {**RESNET20, "data_dir": cifar_dir}
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------- fedcli's own trainers


def _values(
    settings: dict, clients: int, batch: int, device: str, trainer: str, precision: str, iterations: int
) -> dict:
    """The recipe keys of one measured run: all clients active, one process, no evaluation but the last."""
    return {
        **settings,
        "clients": clients,
        "active_ratio": 1.0,
        "batch_size": batch,
        "device": device,
        "trainer": trainer,
        "precision": precision,
        "workers": 1,
        "threads": 1 if device == "cpu" else 0,
        "seed": 1,
        "iterations": iterations,
        "eval_every": 10**6,
        "checkpoint_every": 0,
    }


def _config(*args):
    from fedcli.config import TrainConfig

    return TrainConfig.from_dict(_values(*args))


def fedcli_run_s(
    settings: dict,
    clients: int,
    batch: int,
    device: str,
    trainer: str,
    precision: str,
    iterations: int,
    profile: bool = False,
):
    """Seconds of ``Simulation.run`` for ``iterations`` iterations (set-up excluded), and with ``profile`` the
    (top-level aten ops, CUDA kernels) of the run."""
    from fedcli.comm import communicator
    from fedcli.fl.engine import Simulation

    communicator._scratch.clear()
    cfg = _config(settings, clients, batch, device, trainer, precision, iterations)
    with tempfile.TemporaryDirectory():
        sim = Simulation(cfg).setup()
        _sync(sim.device)
        if not profile:
            t0 = time.perf_counter()
            sim.run()
            _sync(sim.device)
            return time.perf_counter() - t0
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as prof_ctx

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if sim.device.type == "cuda" else [])
        with prof_ctx(activities=acts) as prof:
            sim.run()
            _sync(sim.device)
    return count_ops(prof)


def count_ops(prof) -> tuple[int, int | None]:
    """(top-level ``aten::`` ops, GPU kernels; None without CUDA activity) of a profile."""
    ops = kernels = 0
    cuda = False
    for e in prof.events():
        if e.cpu_parent is None and e.name.startswith("aten::"):
            ops += 1
        kind = str(getattr(e, "device_type", ""))
        if kind.endswith("CUDA"):
            cuda = True
            kernels += 1
    return ops, (kernels if cuda else None)


def per_iteration(f, short: int, long: int, repeats: int = 1):
    """``(f(long) - f(short)) / (long - short)``, elementwise for tuples (None stays None).

    With ``repeats`` > 1 each of ``f(short)`` and ``f(long)`` is the least of that many calls (wall times: the least is
    the one least disturbed). A difference that is not positive is noise larger than the iterations' own cost (runs too
    short for this machine, or a loaded one): it is reported as None, never as a negative time."""

    def best(it):
        vals = [f(it) for _ in range(max(1, repeats))]
        return vals[0] if isinstance(vals[0], tuple) else min(vals)

    a, b = best(short), best(long)
    if isinstance(a, tuple):
        return tuple(None if x is None else (y - x) / (long - short) for x, y in zip(a, b))
    return (b - a) / (long - short) if b > a else None


# ------------------------------------------------------------------------------------------- the bare references


def _model_and_data(settings: dict, clients: int, batch: int, device: torch.device):
    """The workload's model (on ``device``) and ``clients`` random batches of its input shape."""
    from fedcli.config import TrainConfig
    from fedcli.data.setup import load_data
    from fedcli.fl.engine import build_run_model

    cfg = TrainConfig.from_dict({**settings, "clients": clients})
    data = load_data(cfg)
    model = build_run_model(cfg, data).to(device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn((clients, batch, *data.input_shape), generator=g).to(device)
    y = torch.randint(0, data.num_classes, (clients, batch), generator=g).to(device)
    return model, x, y


def bare_vmap_s(model, x, y, steps: int, precision: str = "fp32", lr: float = 0.05, momentum: float = 0.9) -> float:
    """Seconds per step of the bare stacked step: ``vmap(grad)`` over the clients' parameters and buffers, then
    momentum SGD with ``_foreach`` ops (one warm-up step untimed)."""
    import copy

    from torch.func import functional_call, grad, stack_module_state, vmap

    k = x.shape[0]
    params, buffers = stack_module_state([copy.deepcopy(model) for _ in range(k)])
    params = {n: t.detach() for n, t in params.items()}  # plain tensors: the update below is in place
    base = copy.deepcopy(model).to("meta")
    low = torch.bfloat16 if precision == "bf16" else None

    def loss(p, b, xb, yb):
        if low is not None:  # bf16 compute, fp32 master weights: the cast is differentiated
            p = {n: t.to(low) for n, t in p.items()}
            b = {n: (t.to(low) if t.is_floating_point() else t) for n, t in b.items()}
            xb = xb.to(low)
        out = functional_call(base, (p, b), (xb,))
        return torch.nn.functional.cross_entropy(out.float(), yb)

    step_grad = vmap(grad(loss), in_dims=(0, 0, 0, 0), randomness="different")
    names = list(params)
    ps = [params[n] for n in names]
    bufs = [torch.zeros_like(t) for t in ps]

    def step():
        g = step_grad(params, buffers, x, y)
        gs = [g[n] for n in names]
        torch._foreach_mul_(bufs, momentum)
        torch._foreach_add_(bufs, gs)
        torch._foreach_add_(ps, bufs, alpha=-lr)

    return _timed(step, steps, x.device)


def plain_loop_s(model, x, y, steps: int, lr: float = 0.05, momentum: float = 0.9) -> float:
    """Seconds per iteration of a plain per-client loop: one model and SGD optimizer a client, client after client."""
    import copy

    models = [copy.deepcopy(model).train() for _ in range(x.shape[0])]
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum) for m in models]

    def step():
        for m, o, xb, yb in zip(models, opts, x, y):
            o.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(m(xb), yb).backward()
            o.step()

    return _timed(step, steps, x.device)


def _timed(step, steps: int, device: torch.device) -> float:
    step()  # warm-up: kernels chosen, memory allocated
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


# ------------------------------------------------------------------------------------------------ runs per device


def concurrent_runs_s(settings: dict, clients: int, batch: int, device: str, iterations: int, n: int) -> float:
    """Wall seconds of ``n`` ``fedcli train`` processes started together on ``device`` (fp32, vmap), until all end."""
    from fedcli.sweep.executors import toml_flat

    cmd_of = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            recipe = Path(tmp) / f"run{i}.toml"
            recipe.write_text(
                toml_flat(
                    {
                        **_values(settings, clients, batch, device, "vmap", "fp32", iterations),
                        "out": str(Path(tmp) / f"run{i}"),
                    }
                )
            )
            cmd_of.append([sys.executable, "-m", "fedcli", "train", "--recipe", str(recipe), "--quiet"])
        t0 = time.perf_counter()
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in cmd_of]
        errs = [(p.wait(), p.stderr.read()) for p in procs]
        wall = time.perf_counter() - t0
    bad = [e for code, e in errs if code]
    if bad:
        raise RuntimeError(f"a concurrent run failed: {' '.join(bad[0].strip().splitlines()[-1:])}")
    return wall


# ------------------------------------------------------------------------------------------------------- the bench


@dataclass
class Sizes:
    """The sizes of :func:`run`'s measurements: ``clients`` at batch ``batch``; ``short``/``long`` iterations (the
    per-iteration time is their difference over long - short, best of ``repeats``); ``steps`` of the bare and plain
    steps; ``concurrent`` runs at once for ``concurrent_iterations`` iterations; ``precisions`` of each trainer."""

    clients: int = 32
    batch: int = 32
    short: int = 5
    long: int = 15
    steps: int = 10
    concurrent: tuple = (1, 2, 4)
    precisions: tuple = ("fp32", "bf16")
    concurrent_iterations: int = 300
    repeats: int = 2


def run(
    femnist_dir: str | None, cifar_dir: str | None, device: str = "cuda", sizes: Sizes | None = None, progress=None
) -> dict:
    """Every measurement of every workload whose data was given; a JSON-able dict."""
    z = sizes or Sizes()
    say = progress or (lambda what: None)
    dev = torch.device(device)
    info = {
        "device": device,
        "torch": torch.__version__,
        "clients": z.clients,
        "batch": z.batch,
        "iterations": [z.short, z.long],
        "concurrent_iterations": z.concurrent_iterations,
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "workloads": {},
    }
    for name, settings in workloads(femnist_dir, cifar_dir).items():
        info["workloads"][name] = _measure(name, settings, device, z, say)
    return info


def _measure(name: str, settings: dict, device: str, z: Sizes, say) -> dict:
    """The measurements of one workload (the module docstring's list), with their ratios."""
    clients, batch, short, long, steps = z.clients, z.batch, z.short, z.long, z.steps
    concurrent, precisions, concurrent_iterations, repeats = (
        z.concurrent,
        z.precisions,
        z.concurrent_iterations,
        z.repeats,
    )
    dev = torch.device(device)
    r: dict = {}
    for prec in precisions:
        for trainer in ("vmap", "loop"):
            say(f"{name}: fedcli {trainer} {prec}")
            s = per_iteration(
                lambda it: fedcli_run_s(settings, clients, batch, device, trainer, prec, it), short, long, repeats
            )
            r[f"fedcli_{trainer}_{prec}_ms"] = None if s is None else 1e3 * s
    say(f"{name}: ops and kernels of fedcli's vmap step")
    ops, kernels = per_iteration(
        lambda it: fedcli_run_s(settings, clients, batch, device, "vmap", "fp32", it, True), short, long
    )
    r["ops_per_iteration"], r["kernels_per_iteration"] = ops, kernels
    model, x, y = _model_and_data(settings, clients, batch, dev)
    for prec in precisions:
        say(f"{name}: bare vmap {prec}")
        r[f"bare_vmap_{prec}_ms"] = 1e3 * bare_vmap_s(model, x, y, steps, prec, settings["lr"])
    say(f"{name}: plain loop fp32")
    r["plain_loop_fp32_ms"] = 1e3 * plain_loop_s(model, x, y, steps, settings["lr"])
    walls = {}
    for n in concurrent:
        say(f"{name}: {n} run(s) at once on {device}")
        walls[n] = concurrent_runs_s(settings, clients, batch, device, concurrent_iterations, n)
    r["concurrent_wall_s"] = {str(n): w for n, w in walls.items()}
    one = walls.get(1)
    r["throughput_vs_one"] = {str(n): n * one / w for n, w in walls.items()} if one else {}
    ratios(r, precisions)
    if name == "resnet20":
        r["table1_paper_projection_s"] = table1_projection(r)
    return r


def _ratio(a, b):
    return None if a is None or b is None else a / b


def ratios(r: dict, precisions) -> None:
    """The issue's ratios, added to ``r``: fedcli's steps over the bare ones, bf16's speed-up (None where a time could
    not be measured above the noise)."""
    for prec in precisions:
        r[f"vmap_over_bare_{prec}"] = _ratio(r[f"fedcli_vmap_{prec}_ms"], r[f"bare_vmap_{prec}_ms"])
    r["loop_over_plain_fp32"] = _ratio(r["fedcli_loop_fp32_ms"], r["plain_loop_fp32_ms"])
    if "bf16" in precisions:
        r["bf16_speedup_vmap"] = _ratio(r["fedcli_vmap_fp32_ms"], r["fedcli_vmap_bf16_ms"])
        r["bf16_speedup_bare"] = _ratio(r["bare_vmap_fp32_ms"], r["bare_vmap_bf16_ms"])


#: FedLAMA AAAI Table 1 at paper scale: 5 rows x 3 seeds of 10,000 local iterations (recipes/fedlama/aaai-table1.toml)
TABLE1 = {"runs": 15, "iterations": 10_000}


def table1_projection(r: dict) -> float:
    """Seconds of training of FedLAMA Table 1 at paper scale on one device: 15 runs of 10,000 iterations at fedcli's
    fp32 vmap step, packed at the best measured runs-per-device throughput (set-up and evaluations not counted)."""
    best = max(r["throughput_vs_one"].values(), default=1.0)
    if r["fedcli_vmap_fp32_ms"] is None:
        return None
    return TABLE1["runs"] * TABLE1["iterations"] * r["fedcli_vmap_fp32_ms"] / 1e3 / max(1.0, best)


def lines(info: dict) -> list[str]:
    """The printed report: one block per workload, ms and ratios measured in this call."""
    out = [
        f"fedcli bench --device {info['device']}: {info['gpu'] or 'CPU'}, torch {info['torch']}, "
        f"{info['clients']} clients, "
        f"batch {info['batch']}, one iteration = every client one local step"
    ]
    if info["device"] == "cpu":
        out.append("(on a CPU: the code paths run; the timings say nothing of a GPU's)")
    for name, r in info["workloads"].items():
        out.append(f"{name}:")
        for key, v in r.items():
            if key.endswith("_ms"):
                out.append(
                    f"  {key.removesuffix('_ms'):24s} {v:10.2f} ms/iteration"
                    if v is not None
                    else f"  {key.removesuffix('_ms'):24s} not measured: the long run was no slower than the short "
                    "one (noise above the iterations' cost; raise --iterations)"
                )
        k = r["kernels_per_iteration"]
        out.append(
            f"  top-level torch ops {r['ops_per_iteration']:.1f}, GPU kernels "
            f"{'n/a (no CUDA)' if k is None else f'{k:.1f}'} per iteration (fedcli vmap fp32)"
        )
        for key in [k for k in r if "_over_" in k or "speedup" in k]:
            out.append(f"  {key:24s} " + ("n/a" if r[key] is None else f"x{r[key]:.2f}"))
        tp = ", ".join(f"{n} at once x{v:.2f}" for n, v in r["throughput_vs_one"].items())
        out.append(f"  runs per device, throughput against one run: {tp}")
        if r.get("table1_paper_projection_s") is not None:
            out.append(
                f"  FedLAMA AAAI Table 1 at paper scale (15 runs x 10,000 iterations), training only: "
                f"{r['table1_paper_projection_s'] / 60:.1f} min on this device"
            )
    if not info["workloads"]:
        out.append("no workload: give --data-dir (a LEAF FEMNIST folder) and/or --cifar-dir (CIFAR-10 python pickles)")
    return out


def write_json(info: dict, path: str) -> None:
    """``--json-out FILE`` replaced whole through its folder's descriptor; a link at the file is refused
    (``fedcli.safefs.write_named``), never written through."""
    from fedcli.safefs import write_named

    write_named(path, json.dumps(info, indent=1) + "\n")
