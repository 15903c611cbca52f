"""``fedcli partition``: split a dataset over clients and write a partition file (or show a summary)."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

from fedcli.cli import catalog
from fedcli.cli.console import err_console, out_console
from fedcli.cli.options import config_parameters, given, with_parameters

CATALOG = catalog.load()

GROUPS = ("data", "partition")


def partition(**kwargs):
    """Split a dataset over clients (iid, dirichlet, pathological, natural); write FILE and/or show a summary."""
    from fedcli.config import TrainConfig
    from fedcli.errors import ConfigError

    out, show = kwargs.pop("out"), kwargs.pop("summary")
    values = given(kwargs, CATALOG)
    values.pop("partition_file", None)
    cfg = TrainConfig(**values).validate()  # the arguments first, without torch: a bad one is answered at once
    if not out and not show:
        raise ConfigError("fedcli partition needs --out FILE, --summary, or both")
    from fedcli.data.partition import save_partition, summary_table
    from fedcli.data.setup import load_data, split_pool

    # --val-fraction: the clients split the pool less the samples a run of this --seed holds out for validation
    dataset, partition = split_pool(cfg, load_data(cfg))
    if out:
        save_partition(partition, Path(out))
        err_console.print(
            f"wrote {out}: {len(partition.train)} clients, {int(partition.sizes().sum())} samples, hash "
            f"{partition.hash[:12]}"
        )
    if show:
        out_console.print(summary_table(partition, dataset.train_y.numpy(), dataset.num_classes))


_fields = config_parameters(
    CATALOG,
    [
        f["name"]
        for f in CATALOG["fields"]
        if (f["group"] in GROUPS or f["name"] == "seed") and f["name"] != "partition_file"
    ],
)
_extra = [
    inspect.Parameter(
        "out",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(None, "--out", "-o", help="Partition file to write (JSON)."),
        annotation=str | None,
    ),
    inspect.Parameter(
        "summary",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(False, "--summary", help="Show clients, sample counts and class histograms."),
        annotation=bool,
    ),
]
with_parameters(partition, _fields + _extra)
