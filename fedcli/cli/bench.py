"""``fedcli bench``: throughput of fedcli's local training vs a sequential loop and a single-model bound."""

from __future__ import annotations

from pathlib import Path

import typer

from fedcli.cli.console import out_console
from fedcli.errors import ConfigError


def bench(
    workloads: str = typer.Option("a,b,c", "--workloads", help="Comma-separated workloads: a (femnist_cnn), b (resnet20), c (mlp)."),
    steps: int = typer.Option(5, "--steps", min=1, help="Timed local steps per path."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Untimed warm-up steps."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    trainer: str = typer.Option("auto", "--trainer", help="fedcli path: auto, vmap or loop."),
    threads: int = typer.Option(0, "--threads", min=0, help="Torch threads per path (0: torch default)."),
    json_out: str = typer.Option("", "--json", help="Also write the results as JSON to this file."),
):
    """Measure local-training throughput: fedcli vs a sequential per-client loop vs one model with batch K x B."""
    from fedcli import bench as b

    keys = [k.strip() for k in workloads.split(",") if k.strip()]
    bad = [k for k in keys if k not in b.WORKLOADS]
    if bad or not keys:
        raise ConfigError(f"--workloads: unknown workload(s) {', '.join(bad) or '(none)'}; choose from a, b, c")
    if trainer not in ("auto", "vmap", "loop"):
        raise ConfigError(f"--trainer must be one of auto, vmap, loop, got '{trainer}'")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu or cuda, got '{device}'")
    results = b.run(keys, steps, warmup, device, trainer, threads)
    out_console.print(b.table(results))
    if json_out:
        Path(json_out).write_text(b.to_json(results) + "\n")
