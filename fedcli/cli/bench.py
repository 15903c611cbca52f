"""``fedcli bench``: fedcli against the per-client loop, Flower's simulation and the machine's bound."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import typer

from fedcli.cli.console import err_console
from fedcli.errors import ConfigError

KNOWN = ("startup", "fedala", "a", "b", "c")


def bench(  # noqa: PLR0913
    workloads: str = typer.Option(
        "fedala,a",
        "--workloads",
        help="Comma-separated: startup (wall time of --help and an argument error, no torch), fedala (FedALA's "
        "MNIST setting, seconds per round against "
        "the per-client loop and Flower), a (femnist_cnn), b (resnet20), c (mlp): local-training throughput.",
    ),
    rounds: int = typer.Option(
        4,
        "--rounds",
        min=2,
        help="Rounds of the fedala workload (the first is warm-up); throughput workloads run one fewer.",
    ),
    steps: int = typer.Option(
        3, "--steps", min=1, help="Timed local steps of the sequential-loop and single-model paths."
    ),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Untimed warm-up steps of those paths."),
    data_dir: str = typer.Option(
        None,
        "--data-dir",
        help="MNIST folder for the fedala workload (default: ../shared/datasets/mnist-t10k or "
        "data/mnist; none found: scikit-learn digits with the mlp).",
    ),
    flower_python: str = typer.Option(
        None,
        "--flower-python",
        help="Python interpreter with Flower and Ray installed, for the Flower path "
        "(default: this one; `make install-bench` installs it).",
    ),
    json_out: str = typer.Option("", "--json", help="Also write the results as JSON to this file."),
    scale: bool = typer.Option(
        False,
        "--scale",
        help="Instead: the scale section: Ditto with 1,000 and 10,000 synthetic clients, 1% active, "
        "200 writers split iid (client state in memory and on disk, rounds in chunks of 10 clients and once whole) and "
        "one generated user a client (--partition natural, 3 rounds), 1 process and mpiexec -n 2: "
        "peak memory of the process tree (RSS and PSS) and of one bare process (the floor, and mpiexec -n "
        "2 taken apart "
        "over it), disk used by client state, s/round; and the start-up of `fedcli train` with no flags.",
    ),
    ops: bool = typer.Option(
        False,
        "--ops",
        help="Instead: top-level torch ops per local iteration of the cohort step at 8, 16 and 32 clients "
        "(FedAvg, vmap, one process, counted with torch.profiler on the CPU): the FEMNIST CNN with --data-dir a LEAF "
        "folder, else the digits mlp. A stacked step should not grow with the clients.",
    ),
    device: str = typer.Option(
        None,
        "--device",
        help="Instead: the GPU bench (docs/gpu-speed.md) on this device (cuda, cuda:K, or cpu to run "
        "its code paths with tiny sizes): ms per iteration of fedcli's vmap and loop trainers in fp32 and bf16 beside "
        "a bare torch.func vmap step and a plain per-client loop, top-level ops and GPU kernels per iteration, "
        "1/2/4 runs at once on the device, the projected FedLAMA Table 1; the FEMNIST CNN with --data-dir a LEAF "
        "folder, ResNet20 (FedLAMA Table 1's flags) with --cifar-dir a CIFAR-10 folder.",
        rich_help_panel="GPU bench (--device)",
    ),
    cifar_dir: str = typer.Option(
        None,
        "--cifar-dir",
        help="The GPU bench's ResNet20 workload: a folder holding cifar-10-batches-py.",
        rich_help_panel="GPU bench (--device)",
    ),
    clients: int = typer.Option(
        32,
        "--clients",
        min=1,
        help="The GPU bench: clients, all trained every iteration.",
        rich_help_panel="GPU bench (--device)",
    ),
    batch: int = typer.Option(
        32, "--batch", min=1, help="The GPU bench: batch size of every client.", rich_help_panel="GPU bench (--device)"
    ),
    iterations: str = typer.Option(
        "5,15",
        "--iterations",
        metavar="SHORT,LONG",
        help="The GPU bench: a fedcli run's ms per iteration is the "
        "wall time of LONG iterations minus SHORT, over LONG - SHORT.",
        rich_help_panel="GPU bench (--device)",
    ),
    concurrent: str = typer.Option(
        "1,2,4",
        "--concurrent",
        help="The GPU bench: how many fedcli train processes at once on the device.",
        rich_help_panel="GPU bench (--device)",
    ),
    concurrent_iterations: int = typer.Option(
        300,
        "--concurrent-iterations",
        min=1,
        help="The GPU bench: iterations of each of those "
        "processes (their start-up is in the wall time: keep training the larger part).",
        rich_help_panel="GPU bench (--device)",
    ),
):
    """Measure fedcli against what researchers use instead, on the same data and cores: the per-client loop
    (PFLlib-style), Flower's simulation, and the bound (cores x one model's one-thread throughput at batch K x B)."""
    keys = _workload_keys(workloads, data_dir)
    t0 = time.perf_counter()
    progress = _progress_lines(t0)
    if device is not None:
        sizes = {
            "clients": clients,
            "batch": batch,
            "iterations": iterations,
            "concurrent": concurrent,
            "steps": steps,
            "concurrent_iterations": concurrent_iterations,
        }
        return gpu_section(device, data_dir, cifar_dir, sizes, json_out, progress)
    if ops:
        from fedcli.bench import ops as bench_ops

        for line in bench_ops.report(data_dir or None):
            print(line)
        return None
    if scale:  # before torch loads here: a parent holding torch's libraries would share their pages with the
        return scale_section(progress, json_out)  # measured runs and lower their PSS
    from fedcli.bench import compare as b

    err_console.print(
        f"fedcli bench: {', '.join(keys)} on {b.physical_cores()} physical core(s), load average {b.load_average()}",
        soft_wrap=True,
        highlight=False,
    )
    results = b.run(
        keys,
        rounds=rounds,
        steps=steps,
        warmup=warmup,
        data_dir=data_dir,
        flower_python=flower_python,
        progress=progress,
    )
    results["seconds"] = time.perf_counter() - t0
    _print_compare(results, json_out)


def _workload_keys(workloads: str, data_dir: str | None) -> list[str]:
    """The --workloads list, each one of KNOWN; ConfigError (exit 2) for an unknown one or a --data-dir that is no
    folder."""
    keys = [k.strip() for k in workloads.split(",") if k.strip()]
    bad = [k for k in keys if k not in KNOWN]
    if bad or not keys:
        raise ConfigError(
            f"--workloads: unknown workload(s) {', '.join(bad) or '(none)'}; choose from {', '.join(KNOWN)}"
        )
    if data_dir is not None and data_dir and not Path(data_dir).is_dir():
        raise ConfigError(f"--data-dir {data_dir} is not a folder")
    return keys


def _progress_lines(t0: float):
    """A progress callback: each call prints a numbered step on stderr with the seconds since ``t0``."""
    step = [0]

    def progress(what: str) -> None:
        step[0] += 1
        err_console.print(
            f"[dim]{time.perf_counter() - t0:6.1f} s[/]  [{step[0]}] {what} ...", soft_wrap=True, highlight=False
        )

    return progress


def _print_compare(results: dict, json_out: str | None) -> None:
    """Print the comparison's tables, targets and duration (at least 160 columns wide); its JSON to ``json_out``."""
    from rich.console import Console

    from fedcli.bench import compare as b

    wide = Console(width=max(160, shutil.get_terminal_size((160, 24)).columns), soft_wrap=False)
    for t in b.tables(results):
        wide.print(t)
    for line in b.targets(results):
        wide.print(line, highlight=False)
    wide.print(f"bench took {results['seconds']:.0f} s", highlight=False)
    if json_out:
        from fedcli.safefs import write_named

        write_named(json_out, b.to_json(results) + "\n")  # never through a link (fedcli/safefs.py)


def _ints(text: str, flag: str, n: int | None = None) -> list[int]:
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        vals = []
    if not vals or any(v < 1 for v in vals) or (n is not None and len(vals) != n):
        raise ConfigError(
            f"{flag} takes {'two' if n == 2 else 'a list of'} positive integers separated by commas, got '{text}'"
        )
    return vals


def gpu_section(device, data_dir, cifar_dir, sizes: dict, json_out, progress) -> None:
    """``fedcli bench --device D`` (fedcli/bench/gpu.py); JSON to ``--json``, else results/bench-gpu.json. ``sizes``:
    the flags --clients, --batch, --iterations, --concurrent, --steps and --concurrent-iterations by name."""
    iterations, concurrent = sizes["iterations"], sizes["concurrent"]
    short, long = _ints(iterations, "--iterations", 2)
    if long <= short:
        raise ConfigError(f"--iterations SHORT,LONG: LONG must be above SHORT, got {iterations}")
    together = _ints(concurrent, "--concurrent")
    for flag, d in (("--data-dir", data_dir), ("--cifar-dir", cifar_dir)):
        if d and not Path(d).is_dir():
            raise ConfigError(f"{flag} {d} is not a folder")
    if not (data_dir or cifar_dir):
        raise ConfigError(
            "fedcli bench --device: give --data-dir (a LEAF FEMNIST folder) and/or --cifar-dir (a folder with "
            "cifar-10-batches-py)"
        )
    import torch

    if device != "cpu" and not torch.cuda.is_available():
        raise ConfigError(
            f"fedcli bench --device {device} needs a CUDA device and none is visible; `fedcli bench --ops` counts "
            f"the ops per step on a CPU, `--device cpu` runs the GPU bench's code paths here"
        )
    from fedcli.bench import gpu as bench_gpu

    measured = bench_gpu.Sizes(
        clients=sizes["clients"],
        batch=sizes["batch"],
        short=short,
        long=long,
        steps=sizes["steps"],
        concurrent=together,
        concurrent_iterations=sizes["concurrent_iterations"],
    )
    info = bench_gpu.run(data_dir, cifar_dir, device, measured, progress=progress)
    for line in bench_gpu.lines(info):
        print(line)
    bench_gpu.write_json(info, json_out or "results/bench-gpu.json")


def scale_section(progress, json_out: str) -> None:
    """``fedcli bench --scale`` (fedcli/bench/scale.py)."""
    import json

    from rich.console import Console

    from fedcli.bench import scale as bench_scale

    err_console.print(f"fedcli bench --scale: load average {_load()}", soft_wrap=True, highlight=False)
    results = bench_scale.run(progress)
    wide = Console(width=max(160, shutil.get_terminal_size((160, 24)).columns), soft_wrap=False)
    wide.print(bench_scale.table(results))
    for line in bench_scale.targets(results):
        wide.print(line, highlight=False)
    if json_out:
        from fedcli.safefs import write_named

        write_named(json_out, json.dumps(results, indent=1) + "\n")  # never through a link (fedcli/safefs.py)


def _load() -> str:
    from fedcli.bench.startup import load_average  # not fedcli.bench.compare's: that module imports torch

    return load_average()
