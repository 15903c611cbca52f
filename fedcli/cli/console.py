"""Console output: rich progress (rank 0 only), closing summary, and one-line errors."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
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


def clock(seconds: float) -> str:
    """``0:01:05`` for 65 s; ``1d 2:00:00`` past a day."""
    seconds = max(0, int(round(seconds)))
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    text = f"{h}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}d {text}" if days else text


PROGRESS_MODES = ("auto", "bar", "lines", "none")


def progress_mode(mode: str, stream=None) -> str:
    """``--progress``: ``auto`` is a live bar when stderr is a terminal, else one plain line per evaluation (a job
    log, ``nohup``, ``2>log``)."""
    if mode != "auto":
        return mode
    stream = stream if stream is not None else sys.stderr
    return "bar" if getattr(stream, "isatty", lambda: False)() else "lines"


class _Clock:
    """Elapsed and remaining time of the run, labelled. Remaining is the time per unit of progress so far (local
    iterations, or rounds under a round budget) times the units left, counting down between evaluations."""

    def __init__(self):
        import time

        self.now = time.monotonic
        self.start = self.now()
        self.base = 0  # units done before this process started (a resumed run)
        self.done = 0
        self.at = self.start  # when ``done`` was last updated

    def update(self, done: int) -> None:
        self.done, self.at = done, self.now()

    def remaining(self, total: int) -> float | None:
        ran = self.done - self.base
        if ran <= 0:
            return None
        per_unit = (self.at - self.start) / ran
        return max(0.0, per_unit * (total - self.done) - (self.now() - self.at))

    def text(self, total: int) -> str:
        left = self.remaining(total)
        return (
            f"elapsed {clock(self.now() - self.start)}  remaining {clock(left) if left is not None else 'estimating'}"
        )


class TrainProgress:
    """Progress of ``fedcli train`` over local iterations (rounds under a ``--rounds`` budget): the round, the accuracy
    the run is judged by and the best so far, the training loss, and the communication so far as a share of FedAvg's
    communication so far (:func:`fedcli.comm.ledger.fedavg_params_so_far`: same iterations done, or same rounds with
    ``--local-epochs``), with labelled elapsed and remaining times.

    ``mode`` (``--progress``): ``bar``, a live rich bar; ``lines``, one plain flushed line per evaluation on stderr,
    never
    cut (a job log); ``none``. ``enabled=False`` is ``none``."""

    def __init__(
        self,
        total: int,
        model_params: int,
        tau: int,
        *,
        rounds: bool = False,
        per_round: bool = False,
        enabled: bool = True,
        mode: str = "bar",
        stream=None,
    ):
        self.model_params, self.tau, self.rounds, self.per_round = model_params, tau, rounds, per_round
        self.mode = mode if enabled else "none"
        self.enabled = self.mode != "none"
        self.total, self.best = total, None
        self.stream = stream
        self.clock = _Clock()
        from rich.progress import ProgressColumn
        from rich.text import Text

        clock_, total_ = self.clock, total

        class TimesColumn(ProgressColumn):
            def render(self, task):
                return Text(clock_.text(total_), style="progress.remaining")

        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimesColumn(),
            console=err_console,
            disable=self.mode != "bar",
            transient=False,
        )
        self.task = self.progress.add_task("train", total=total, info="")

    def __enter__(self):
        self.clock.start = self.clock.at = self.clock.now()
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def comm_pct(self, row: dict) -> float:
        from fedcli.comm.ledger import fedavg_params_so_far

        base = fedavg_params_so_far(self.model_params, row["iteration"], row["round"], self.tau, self.per_round)
        return 100.0 * row["comm_params"] / base if base else float("nan")

    def info(self, row: dict) -> str:
        best = f"  best {100 * self.best:.2f}%" if self.best is not None else ""
        return (
            f"round {row['round']}  {accuracy_text(row)}{best}  loss {row.get('train_loss', float('nan')):.4f}  "
            f"comm {self.comm_pct(row):.1f}% of FedAvg"
        )

    def line(self, row: dict) -> str:
        """One evaluation as the plain log line of ``--progress lines``: done of the total, never past 100% (a budget of
        --iterations under --local-epochs, where the rounds' length depends on the cohorts sampled, can end a few
        iterations past it; the total is then the iterations done)."""
        done = row["round"] if self.rounds else row["iteration"]
        unit = "round" if self.rounds else "iteration"
        total = max(self.total, done)
        return (
            f"fedcli train: {unit} {done}/{total} ({100 * done / total:.1f}%)  {self.info(row)} "
            f"({row['comm_params']:,} params, {row.get('comm_bytes', 0) / 1e6:,.2f} MB)  {self.clock.text(self.total)}"
        )

    def __call__(self, row: dict) -> None:
        personal = row.get("personal_acc")
        acc = personal if isinstance(personal, (int, float)) else row["test_acc"]
        self.best = acc if self.best is None or acc > self.best else self.best
        done = row["round"] if self.rounds else row["iteration"]
        self.clock.update(done)
        self.progress.update(self.task, completed=done, total=max(self.total, done), info=self.info(row))
        if self.mode == "lines":
            stream = self.stream if self.stream is not None else sys.stderr
            stream.write(self.line(row) + "\n")
            stream.flush()

    def advance_to(self, iteration: int, round_idx: int = 0) -> None:
        done = round_idx if self.rounds else iteration
        self.clock.base = done
        self.clock.update(done)
        self.progress.update(self.task, completed=done)


def summary_table(cfg, summary, run_dir) -> Table:
    t = Table(title=f"fedcli train: {cfg.algo} on {cfg.dataset} ({cfg.model})", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("iterations / rounds", f"{summary.iteration} / {summary.rounds}")
    if summary.best_personal_acc == summary.best_personal_acc:  # personalized: judged by its clients' own models
        t.add_row(
            "final personal accuracy",
            f"{100 * summary.final_personal_acc:.2f}% (each client's model on its local test split)",
        )
        t.add_row(
            "best personal accuracy", f"{100 * summary.best_personal_acc:.2f}% (round {summary.best_personal_round})"
        )
        t.add_row(
            "global model accuracy",
            f"{100 * summary.final_acc:.2f}% final, {100 * summary.best_acc:.2f}% best "
            f"(iteration {summary.best_iteration}), on the global test set",
        )
    else:
        t.add_row("final accuracy", f"{100 * summary.final_acc:.2f}%")
        t.add_row("best accuracy", f"{100 * summary.best_acc:.2f}% (iteration {summary.best_iteration})")
    last = summary.history[-1] if summary.history else {}
    if isinstance(last.get("val_acc"), float):  # --val-fraction
        t.add_row(
            "validation accuracy", f"{100 * last['val_acc']:.2f}% final (global model, the held-out validation set)"
        )
    if isinstance(last.get("personal_val_acc"), float):  # --client-val-fraction
        t.add_row(
            "personal validation accuracy",
            f"{100 * last['personal_val_acc']:.2f}% final (each client's model on its own validation samples)",
        )
    t.add_row("communication", f"{summary.comm_params:,} parameters (Eq. 8), {summary.comm_bytes / 1e6:,.2f} MB moved")
    same = (
        "one synchronization per round, over the same rounds"
        if cfg.local_epochs
        else f"tau={cfg.tau} over the same iterations"
    )
    t.add_row("vs FedAvg", f"{summary.comm_pct:.2f}% of FedAvg with {same} ({summary.fedavg_comm_params:,} parameters)")
    t.add_row("wall time", f"{summary.wall_s:.1f} s")
    t.add_row("run directory", str(run_dir))
    return t
