"""The ``matrix`` table layout: methods x settings, one run per cell (FedALA, AAAI 2023, Tables 1-4, 6, 7).

Rows are methods (the row keys double as the row labels, "FedAvg-C", "Per-FedAvg", ..., unless ``method_labels``
are given), columns are settings
(datasets, heterogeneity, client counts), and the run of a cell is named by the template ``cell``
(``"{method} | {setting}"``). Each cell shows one or more ``values``, aggregated over the seeds with
:func:`fedcli.reports.aggregate.mean_std` (mean and sample std, as every layout):

- ``acc``: the best evaluation over the rounds (``accuracy = "final"``: the last), pFedMe's convention that
  FedALA follows ("Evaluation metrics"): personalized methods report ``personal_acc`` (each client's model on
  its local test split), traditional FL (FedAvg, FedProx) ``test_acc`` of the global model (``metric = "auto"``).
- ``imp``: Table 4 "Applicability of ALA": the cell's mean accuracy minus that of the run named by the template
  ``compare`` (the same method without ALA), in percentage points.
- ``ala_params``: Tables 1 and 6: ALA's trainable weights, the numel of the last ``ala_layers`` parameter tensors
  (layers.csv).
- ``time_total``: Table 3 "Total time": the wall time until the best evaluation (the run's "convergence"; the
  accuracy the table reports), from metrics.csv ``wall_s`` (evaluation time included).
- ``time_round``: Table 3 "Time/iter.": the median wall time of a round (between consecutive evaluations, so
  evaluation time included; the median keeps the first round's start-up and ALA's initial stage out, as the
  paper's "1.93 min" for FedALA does).
- ``time_init``: FedALA's "7+116 min": the extra time of ALA's initial stage, estimated as the slowest round after
  the first minus the median round (with all clients joining every round, the initial stage is one round);
  "—" for runs without ALA.
- ``params_round``: Table 3 "Param./iter.": parameters moved per client per round in units of Sigma (the model's
  parameter count): ``comm_bytes / 4 / (active clients x rounds) / Sigma`` (4 bytes a float32 parameter): 2.00 Σ
  for FedAvg (one download, one upload), 2 alpha_f Σ for FedRep, (1 + M) Σ for FedFomo and APPLE.

Times are shown in seconds, or in minutes when a column's largest mean is a minute or more.
"""

from __future__ import annotations

import math
import statistics

from fedcli.reports.aggregate import NAN, Stat, mean_std
from fedcli.reports.products import VALUES, TableDef
from fedcli.reports.tables import (
    Cell,
    Column,
    Section,
    Table,
    accuracy_source,
    diverged_mark,
    fmt_acc,
    latex_escape,
    over_seeds,
)

TIME_VALUES = ("time_total", "time_round", "time_init")
DASH = Cell("—", "---", {"mean": float("nan"), "std": float("nan"), "n": 0})


# ------------------------------------------------------------------------------------------------ values


def seconds(per_seed: dict, value: str, table_def: TableDef) -> Stat:
    """Mean and std over the seeds of a time value (seconds); NAN where it does not apply."""
    xs = []
    for r in per_seed.values():
        times = r.round_times()
        if value == "time_total":
            evals = r.evaluations(table_def.metric)
            if not evals:
                continue
            col = r.acc_metric(table_def.metric)
            row = (
                max(evals, key=lambda e: e[col]) if table_def.accuracy == "best" else evals[-1]
            )  # first best (max keeps the first)
            xs.append(row.get("wall_s", float("nan")))
        elif value == "time_round":
            if times:
                xs.append(statistics.median(times))
        elif value == "time_init":
            if r.learned_init and len(times) >= 3:
                xs.append(max(0.0, max(times[1:]) - statistics.median(times)))
    return mean_std(xs)


def params_round(per_seed: dict) -> Stat:
    """comm_bytes / 4 / (active clients x rounds) / Sigma, over the seeds."""
    return mean_std(r.comm_bytes / 4.0 / (r.active_clients * r.rounds) / r.model_params for r in per_seed.values())


def fmt_time(s: Stat, unit: str) -> Cell:
    if not s.ok:
        return DASH
    div = 60.0 if unit == "min" else 1.0
    m, sd = s.mean / div, s.std / div
    text = f"{m:.2f}" if s.n == 1 else f"{m:.2f} ± {sd:.2f}"
    latex = text if s.n == 1 else f"${m:.2f} \\pm {sd:.2f}$"
    return Cell(text, latex, {"mean": m, "std": sd if s.n > 1 else float("nan"), "n": s.n})


def fmt_sigma(s: Stat) -> Cell:
    if not s.ok:
        return DASH
    text = f"{s.mean:.2f} Σ" + (f" ± {s.std:.2f}" if s.std > 5e-3 else "")
    return Cell(text, latex_escape(text).replace("Σ", "$\\Sigma$"), {"mean": s.mean, "std": s.std, "n": s.n})


def fmt_imp(diff: float) -> Cell:
    if not math.isfinite(diff):
        return DASH
    return Cell(f"{diff:+.2f}", f"{diff:+.2f}", {"value": diff})


def fmt_count(s: Stat) -> Cell:
    if not s.ok:
        return DASH
    return Cell(f"{s.mean:,.0f}", f"{s.mean:,.0f}".replace(",", "{,}"), {"value": s.mean})


# ------------------------------------------------------------------------------------------------ build


def build_matrix(table_def: TableDef, runs: dict, seeds: list[int], scale: str | None = None) -> Table:
    """``runs`` maps run name -> {seed: RunData} (complete for every cell that is not skipped)."""
    sections = [_group_section(table_def, g, runs) for g in table_def.groups]
    return Table(
        table_def.name, table_def.title, table_def.paper, sections, _matrix_notes(table_def, runs, seeds, scale)
    )


def _time_units(table_def: TableDef, g, runs: dict) -> dict[str, str]:
    """The unit of each time value of group ``g``: minutes when its largest mean in this group is a minute or more."""
    units = {}
    for v in g.values:
        if v in TIME_VALUES:
            means = [
                seconds(runs[n], v, table_def).mean for m in g.methods for s in g.settings if (n := g.cell_run(m, s))
            ]
            means = [x for x in means if math.isfinite(x)]
            units[v] = "min" if means and max(means) >= 60 else "s"
    return units


def _group_section(table_def: TableDef, g, runs: dict) -> Section:
    """The section of the group ``g``: its columns (a setting, or setting x value) with their headers, a row per
    method (:func:`_method_cells`)."""
    labels = g.setting_labels or g.settings
    nv = len(g.values)
    units = _time_units(table_def, g, runs)

    def head(v):
        md, tex = VALUES[v]
        if v in units:
            return f"{md} ({units[v]})", f"{tex} ({units[v]})"
        return md, tex

    cols = [Column("method", table_def.row_title, latex_escape(table_def.row_title))]
    for key, label in zip(g.settings, labels):
        for v in g.values:
            md, tex = head(v)
            cols.append(
                Column(
                    f"{key}:{v}" if nv > 1 else key,
                    label if nv == 1 else f"{label}: {md}",
                    latex_escape(label) if nv == 1 else tex,
                )
            )
    header = []
    if g.header:
        header.append([("", "", 1)] + [(lab, latex_escape(lab), n * nv) for lab, n in g.header])
    if nv > 1:
        header.append([("", "", 1)] + [(lab, latex_escape(lab), nv) for lab in labels])
    rows, meta = [], []
    for m, mlabel in zip(g.methods, g.method_labels or g.methods):
        rows.append(
            [Cell(mlabel, latex_escape(mlabel), {"value": mlabel}), *_method_cells(table_def, g, m, runs, units)]
        )
        meta.append({"group": g.label, "method": m})
    return Section(g.label, header, cols, rows, meta)


def _method_cells(table_def: TableDef, g, m: str, runs: dict, units: dict) -> list[Cell]:
    """The cells of method ``m``'s row in group ``g``: for each setting, each value (accuracy, improvement over the
    method without ALA, ALA weights, parameters per round, times in ``units``); a dash where no run is."""

    def acc(name) -> Stat:
        return mean_std(r.accuracy(table_def.accuracy, table_def.metric) for r in runs[name].values()) if name else NAN

    cells = []
    for s in g.settings:
        name = g.cell_run(m, s)
        for v in g.values:
            if name is None:
                cells.append(DASH)
            elif v == "acc":
                cells.append(diverged_mark(fmt_acc(acc(name)), runs[name]))
            elif v == "imp":
                base = g.cell_run(m, s, g.compare)
                a, b = acc(name), acc(base)
                cells.append(fmt_imp(100 * (a.mean - b.mean) if a.ok and b.ok else float("nan")))
            elif v == "ala_params":
                cells.append(fmt_count(mean_std(r.ala_params for r in runs[name].values())))
            elif v == "params_round":
                cells.append(fmt_sigma(params_round(runs[name])))
            else:
                cells.append(fmt_time(seconds(runs[name], v, table_def), units[v]))
    return cells


def _matrix_notes(table_def: TableDef, runs: dict, seeds: list[int], scale: str | None) -> list[str]:
    """The notes under the matrix: seeds and accuracy source, then what each value shown means, skipped cells, the
    scale, and the recipe's own notes."""
    acc_what = "best evaluation of each run" if table_def.accuracy == "best" else "last evaluation of each run"
    values = {v for g in table_def.groups for v in g.values}
    notes = [
        f"{over_seeds(seeds)}; accuracy (%): {acc_what} "
        f"({accuracy_source(table_def.metric, {n: runs[n] for n in table_def.run_names() if n in runs})})."
    ]
    if "imp" in values:
        notes.append(
            "Imps.: the accuracy minus that of the same method without ALA (mean over the seeds, percentage points)."
        )
    if "ala_params" in values:
        notes.append(
            "ALA weights: the numel of the last `ala_layers` parameter tensors of the model (ALA's trainable weights)."
        )
    if values & set(TIME_VALUES):
        notes.append(
            "Times (wall clock, evaluation included): Total time until the best evaluation; Time/iter.: "
            "the median round"
            + (
                "; ALA initial stage: the slowest round after the first minus the median round"
                if "time_init" in values
                else ""
            )
            + "."
        )
    if "params_round" in values:
        notes.append(
            "Param./iter.: parameters moved per client per round (bytes moved / 4 / (clients per round x rounds)) "
            "in units of Σ, the model's parameter count."
        )
    if any(g.skip for g in table_def.groups):
        notes.append("—: not run (left out as in the paper).")
    if scale and scale != "paper":
        notes.append(
            f"Scale '{scale}': a reduced version of the paper's grid; the numbers check the pipeline, not the paper."
        )
    if table_def.notes:
        notes.append(table_def.notes)
    return notes
