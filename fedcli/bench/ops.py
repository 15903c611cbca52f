"""Top-level torch ops per local iteration of the cohort step (``fedcli bench --ops``; GitHub issue 38).

A stacked cohort step should cost a number of torch ops that does not grow with the number of clients: every
per-client piece of work done op by op (a slice, a cast, a multiply and an add for each client) costs a kernel
launch and Python overhead on a GPU. This counts them with ``torch.profiler`` on the CPU (no GPU needed): the
top-level ``aten::`` ops (those no other op called) of a training run of ``long`` iterations minus those of a run of
``short`` iterations, divided by the difference, so the set-up, the first step and the final evaluation cancel.
One run for each client count, all in this process, so the ratios between them are measured together.
"""

from __future__ import annotations

import collections
import tempfile

import torch


def top_level_ops(prof) -> collections.Counter:
    """name -> count of the profiled ``aten::`` ops called by no other op."""
    counts = collections.Counter()
    for e in prof.events():
        if e.cpu_parent is None and e.name.startswith("aten::"):
            counts[e.name] += 1
    return counts


def profile_run(settings: dict, iterations: int) -> collections.Counter:
    """Top-level op counts of one ``fedcli train`` run of ``settings`` (recipe keys) for ``iterations`` iterations."""
    from torch.profiler import ProfilerActivity, profile

    from fedcli.comm import communicator
    from fedcli.config import TrainConfig
    from fedcli.fl.engine import Simulation

    communicator._scratch.clear()  # every run allocates its own reused buffers, as a fresh process would

    cfg = TrainConfig.from_dict({**settings, "iterations": iterations, "eval_every": 10**6, "checkpoint_every": 0})
    with tempfile.TemporaryDirectory():
        sim = Simulation(cfg).setup()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            sim.run()
    return top_level_ops(prof)


def ops_per_iteration(
    settings: dict, clients: int, short: int = 5, long: int = 15
) -> tuple[float, collections.Counter]:
    """(top-level ops per local iteration, per-op counts per iteration) with ``clients`` clients, all active."""
    run = {**settings, "clients": clients, "active_ratio": 1.0}
    a, b = profile_run(run, short), profile_run(run, long)
    diff = collections.Counter({n: (b[n] - a[n]) / (long - short) for n in set(a) | set(b)})
    return sum(diff.values()), diff


#: the workloads counted: FedAvg, the stacked trainer, one process (the issue's setting), plain SGD and momentum
WORKLOADS = {
    "digits-mlp": {
        "dataset": "digits",
        "model": "mlp",
        "algo": "fedavg",
        "trainer": "vmap",
        "workers": 1,
        "threads": 1,
        "batch_size": 32,
        "tau": 5,
        "momentum": 0.9,
        "seed": 1,
    },
}


def femnist(data_dir: str) -> dict:
    """The issue's workload: the FEMNIST CNN on a LEAF directory, FedAvg, vmap, one process, batch 32."""
    return {
        "dataset": "femnist",
        "data_dir": data_dir,
        "model": "femnist_cnn",
        "partition": "natural",
        "algo": "fedavg",
        "trainer": "vmap",
        "workers": 1,
        "threads": 1,
        "batch_size": 32,
        "tau": 5,
        "momentum": 0.9,
        "seed": 1,
    }


def table(settings: dict, clients=(8, 16, 32), short: int = 5, long: int = 15, top: int = 6) -> list[str]:
    """Lines: ops per iteration at each client count and their ratio to the smallest count's, the same without the
    per-client ``randperm`` draws of the batch plans (each client's own generator, a small CPU op a pass over its
    data: the draws that key a run's randomness by client), and the most frequent ops."""
    lines, first = [], None
    for k in clients:
        total, diff = ops_per_iteration(settings, k, short, long)
        rest = total - diff["aten::randperm"]
        first = first or (total, rest)
        common = ", ".join(f"{n.removeprefix('aten::')} {c:g}" for n, c in diff.most_common(top) if c)
        lines.append(
            f"{k:>4} clients: {total:7.1f} top-level ops per iteration (x{total / first[0]:.2f}), "
            f"{rest:7.1f} without the per-client randperm draws (x{rest / first[1]:.2f});  most: {common}"
        )
    return lines


def report(data_dir: str | None = None, clients=(8, 16, 32)) -> list[str]:
    """``fedcli bench --ops``: the table for the FEMNIST CNN on a LEAF folder (``data_dir``), else the digits mlp."""
    torch.set_num_threads(1)
    settings = femnist(data_dir) if data_dir else WORKLOADS["digits-mlp"]
    what = (f"FEMNIST CNN on {data_dir}" if data_dir else "digits mlp") + ", FedAvg, vmap, one process, batch 32, tau 5"
    lines = [
        f"top-level torch ops per local iteration ({what}; runs of 15 minus 5 iterations, on the CPU):",
        *table(settings, clients),
    ]
    if not torch.cuda.is_available():
        lines.append("ms per iteration, GPU kernels per step and runs per GPU need a CUDA device: not measured here")
    return lines


if __name__ == "__main__":
    import sys

    print("\n".join(report(sys.argv[1] if len(sys.argv) > 1 else None)))
