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


def accuracy_text(row: dict) -> str:
    """The accuracy a run is judged by: ``personal acc`` (each client's model on its local test split, the paper's
    metric) for a personalized run, else the global model's ``acc``."""
    personal = row.get("personal_acc")
    if isinstance(personal, (int, float)):
        return f"personal acc {100 * personal:.2f}%"
    return f"acc {100 * row['test_acc']:.2f}%"


class TrainProgress:
    """A rich progress bar over local iterations (rounds under a ``--rounds`` budget), with the round, the accuracy
    the run is judged by, and its communication so far as a share of FedAvg's communication so far
    (:func:`fedcli.comm.ledger.fedavg_params_so_far`: same iterations done, or same rounds with ``--local-epochs``)."""

    def __init__(self, total: int, model_params: int, tau: int, *, rounds: bool = False, per_round: bool = False,
                 enabled: bool = True):
        self.model_params, self.tau, self.rounds, self.per_round = model_params, tau, rounds, per_round
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

    def info(self, row: dict) -> str:
        from fedcli.comm.ledger import fedavg_params_so_far

        base = fedavg_params_so_far(self.model_params, row["iteration"], row["round"], self.tau, self.per_round)
        pct = 100.0 * row["comm_params"] / base if base else float("nan")
        return f"round {row['round']}  {accuracy_text(row)}  comm {pct:.1f}% of FedAvg"

    def __call__(self, row: dict) -> None:
        self.progress.update(self.task, completed=row["round"] if self.rounds else row["iteration"], info=self.info(row))

    def advance_to(self, iteration: int, round_idx: int = 0) -> None:
        self.progress.update(self.task, completed=round_idx if self.rounds else iteration)


def summary_table(cfg, summary, run_dir) -> Table:
    t = Table(title=f"fedcli train: {cfg.algo} on {cfg.dataset} ({cfg.model})", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("iterations / rounds", f"{summary.iteration} / {summary.rounds}")
    if summary.best_personal_acc == summary.best_personal_acc:  # personalized: judged by its clients' own models
        t.add_row("final personal accuracy", f"{100 * summary.final_personal_acc:.2f}% (each client's model on its local test split)")
        t.add_row("best personal accuracy", f"{100 * summary.best_personal_acc:.2f}% (round {summary.best_personal_round})")
        t.add_row("global model accuracy", f"{100 * summary.final_acc:.2f}% final, {100 * summary.best_acc:.2f}% best "
                                           f"(iteration {summary.best_iteration}), on the global test set")
    else:
        t.add_row("final accuracy", f"{100 * summary.final_acc:.2f}%")
        t.add_row("best accuracy", f"{100 * summary.best_acc:.2f}% (iteration {summary.best_iteration})")
    t.add_row("communication", f"{summary.comm_params:,} parameters (Eq. 8), {summary.comm_bytes / 1e6:,.2f} MB moved")
    same = "one synchronization per round, over the same rounds" if cfg.local_epochs else f"tau={cfg.tau} over the same iterations"
    t.add_row("vs FedAvg", f"{summary.comm_pct:.2f}% of FedAvg with {same} ({summary.fedavg_comm_params:,} parameters)")
    t.add_row("wall time", f"{summary.wall_s:.1f} s")
    t.add_row("run directory", str(run_dir))
    return t
