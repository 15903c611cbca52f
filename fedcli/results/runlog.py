"""The run directory's CSV rows, written by a round hook as training goes (``Simulation.round_hooks``, like the
checkpointer of ``fedcli.results.checkpoint``; ``Simulation.attach`` registers it ahead of every other hook,
so a checkpoint taken after a round records the CSVs with that round's rows).

After every round :class:`RunLog` appends what the round produced (``Simulation.record``): the clients dropped by
``--on-diverge skip-client`` (``skipped.csv``), the schedule's interval adjustment (FedLAMA Alg. 1,
``intervals.csv``) and, at an evaluation point, the ``metrics.csv`` row and (personalized methods) the clients' rows
(``clients.csv``), and then replaces ``layers.csv``; with ``--system``, the round's simulated time (``system.csv``);
for a run that can be re-timed, the round's timing records (``timing.csv``, ``fedcli.fl.timing``).
Appended rows reach the disk as they are written (``rundir.AppendCSV``), so a crash loses at most one round.
"""

from __future__ import annotations

from fedcli.fl.context import LogContext
from fedcli.fl.hooks import RoundHook


def extra_columns(ctx: LogContext) -> dict[str, list[str]]:
    """Columns a run adds after a CSV's own (``rundir.RunDir``'s ``extra``): with ``--system``, ``sim_time_s`` in
    metrics.csv (the simulated time at the evaluation) and in layers.csv (the time the layer's synchronizations
    cost); with ``--val-fraction``, ``val_loss`` and ``val_acc`` in metrics.csv; with ``--client-val-fraction``,
    ``personal_val_acc``. None otherwise, so a run without them writes the files it always wrote."""
    extra = {"metrics.csv": ["sim_time_s"], "layers.csv": ["sim_time_s"]} if ctx.system is not None else {}
    if ctx.cfg.val_fraction > 0:  # --val-fraction: the global model on the validation set
        extra["metrics.csv"] = extra.get("metrics.csv", []) + ["val_loss", "val_acc"]
    if ctx.cfg.client_val_fraction > 0:  # --client-val-fraction: the clients' models on their validation samples
        extra["metrics.csv"] = extra.get("metrics.csv", []) + ["personal_val_acc"]
    return extra


def layer_rows(ctx: LogContext, state=None) -> list[dict]:
    """layers.csv; ``interval`` is 0 for a layer the method never synchronizes (FedRep's head); with ``--system``,
    ``sim_time_s``, the simulated seconds of the layer's synchronizations so far (the run's ``state``'s; 0 without
    one, before the first round)."""
    rows = [
        {
            "layer": li.index,
            "name": li.name,
            "kind": li.kind,
            "numel": li.numel,
            "syncs": ctx.ledger.syncs[li.index],
            "comm_params": ctx.ledger.layer_params(li.index),
            "comm_bytes": ctx.ledger.bytes_[li.index],
            "interval": 0 if li.index in ctx.local_layers else ctx.schedule.intervals[li.index],
        }
        for li in ctx.layers
    ]
    if ctx.system is not None:  # no state: before the first round (0 s)
        for row, seconds in zip(rows, getattr(state, "layer_time_s", None) or [0.0] * len(rows)):
            row["sim_time_s"] = seconds
    return rows


def interval_rows(ctx: LogContext, adj) -> list[dict]:
    """intervals.csv: one row per layer of a schedule adjustment ``adj`` (round, iteration, d, intervals). ``round``
    follows the run directory's one rule: the rounds done when the row is written (the adjustment at the end of
    the first round is round 1), as in metrics.csv."""
    eligible = ctx.schedule.eligible
    return [
        {
            "round": adj.round + 1,
            "iteration": adj.iteration,
            "layer": li.index,
            "name": li.name,
            "numel": li.numel,
            "eligible": int(eligible[li.index]),
            "d": adj.d[li.index],
            "interval": adj.intervals[li.index],
        }
        for li in ctx.layers
    ]


def skipped_rows(skips: list[dict], start: int) -> list[dict]:
    """skipped.csv: the round's dropped client updates; ``start`` is the iteration the round started at; ``round``
    is the round they were dropped in, counted from 1 (the rounds done at its end, as in metrics.csv)."""
    return [
        {
            "round": s["round"] + 1,
            "iteration": start + s["step"],
            "step": s["step"],
            "client": s["client"],
            "reason": s["reason"],
        }
        for s in skips
    ]


class RunLog(RoundHook):
    """Round hook: the CSV rows of the round just done into the run directory ``run_dir`` (a ``rundir.RunDir``)."""

    def __init__(self, run_dir):
        self.run_dir = run_dir

    def begin(self, ctx: LogContext, state) -> None:
        """Before the first round: a layer-wise schedule's intervals.csv exists from the start (header only)."""
        if ctx.schedule.needs_discrepancy:
            self.run_dir.append_intervals([])

    def __call__(self, ctx: LogContext, state) -> None:
        rec = ctx.record
        if rec.skips:
            self.run_dir.append_skipped(skipped_rows(rec.skips, rec.start_iteration))
        if rec.system is not None:
            self.run_dir.append_system([rec.system])
        if rec.timing is not None:
            self.run_dir.append_timing([rec.timing])
        if rec.adjustment is not None:
            self.run_dir.append_intervals(interval_rows(ctx, rec.adjustment))
        if rec.metrics is not None:
            self.run_dir.append_metrics(rec.metrics)
            if ctx.personal is not None and ctx.personal.client_rows:  # the evaluation's per-client numbers
                at = {"round": rec.metrics["round"], "iteration": rec.metrics["iteration"]}
                self.run_dir.append_clients([{**at, **r} for r in ctx.personal.client_rows])
            self.run_dir.write_layers(layer_rows(ctx, state))
        for part in ctx.parts.values():  # rows a part recorded this round (ala.csv, local_loss.csv: --ala-trace)
            for name, rows in part.round_tables(ctx.view).items():
                if rows:
                    self.run_dir.append_part_rows(name, rows)
