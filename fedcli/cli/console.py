"""Console output: rich progress (rank 0 only), closing summary, and one-line errors."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


def err_line(msg: str) -> None:
    err_console.print(f"fedcli: error: {msg}", markup=False, soft_wrap=True)


def error(msg: str, code: int) -> None:
    err_line(msg)
    sys.exit(code)


class TrainProgress:
    """A rich progress bar over local iterations, with round, accuracy and communication so far."""

    def __init__(self, total: int, fedavg_params: int, enabled: bool = True):
        self.fedavg_params = fedavg_params
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, disable=not enabled, transient=False)
        self.task = self.progress.add_task("train", total=total, info="")

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def __call__(self, row: dict) -> None:
        pct = 100.0 * row["comm_params"] / self.fedavg_params if self.fedavg_params else float("nan")
        info = f"round {row['round']}  acc {100 * row['test_acc']:.2f}%  comm {pct:.1f}% of FedAvg"
        self.progress.update(self.task, completed=row["iteration"], info=info)

    def advance_to(self, iteration: int) -> None:
        self.progress.update(self.task, completed=iteration)


def summary_table(cfg, summary, run_dir) -> Table:
    t = Table(title=f"fedcli train: {cfg.algo} on {cfg.dataset} ({cfg.model})", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("iterations / rounds", f"{summary.iteration} / {summary.rounds}")
    t.add_row("final accuracy", f"{100 * summary.final_acc:.2f}%")
    t.add_row("best accuracy", f"{100 * summary.best_acc:.2f}% (iteration {summary.best_iteration})")
    t.add_row("communication", f"{summary.comm_params:,} parameters (Eq. 8), {summary.comm_bytes / 1e6:,.2f} MB moved")
    t.add_row("vs FedAvg", f"{summary.comm_pct:.2f}% of FedAvg with tau={cfg.tau} over the same iterations ({summary.fedavg_comm_params:,} parameters)")
    t.add_row("wall time", f"{summary.wall_s:.1f} s")
    t.add_row("run directory", str(run_dir))
    return t
