"""Reports of ``fedcli train`` run directories: ``fedcli report RUN_DIR [RUN_DIR...]`` and the runs of ``results/``.

For each run: its learning curves (test accuracy, and ``personal_acc`` for personalized methods; train and test
loss), its communications and data size per layer (from ``layers.csv``, FedLAMA AAAI Figures 4 and 5) and, for a
layer-wise schedule, delta_l against 1 - lambda_l at its last interval adjustment (from ``intervals.csv``, Algorithm 1,
FedLAMA AAAI Figure 2); for a personalized run, its clients' personal accuracy across clients with the worst-10% mean
(from ``clients.csv``, :mod:`fedcli.reports.clients`). Several runs give one comparison table (method, final and best
accuracy, communication as %
of FedAvg with the run's own tau over the same iterations, bytes moved, wall time) and the same figures with one
curve or bar per run. Labels come from each run's manifest (the method preset and parts it recorded, and its
interval settings), never from a list of algorithm names.

Every run directory is read through :func:`load_run`, the one place to check a run's files against its manifest.
"""

from __future__ import annotations

import math
from pathlib import Path

from fedcli.errors import ConfigError, DataError
from fedcli.reports import style
from fedcli.reports.clients import accuracies, worst_mean, write_clients_figure
from fedcli.reports.groups import differences, differs_from, seed_groups
from fedcli.reports.rundata import COMPLETED, CORRUPT, MISSING, RunData, read_manifest
from fedcli.reports.tables import Cell, Column, Section, Table, latex_escape
from fedcli.results.validate import diverged, status_label, validate_run

RUN_MANIFEST = "manifest.json"


def is_run_dir(path: Path) -> bool:
    """A ``fedcli train`` run directory (a sweep folder has ``sweep.json`` instead)."""
    return (Path(path) / RUN_MANIFEST).is_file()


def load_run(path: str | Path) -> RunData:
    """Read one run directory for the report: its manifest and its CSVs (through :class:`RunData`).

    A folder without a manifest, or a completed run whose files do not match its manifest (``validate_run``: cut,
    edited or deleted afterwards), is refused with exit 2 naming the fix, as sweep reports do; a manifest that
    cannot be read is a data error (exit 3). Runs that are still going, failed
    or were interrupted are reported as far as they got (their status is shown)."""
    path = Path(path)
    status, manifest = read_manifest(path)
    if status == MISSING:
        raise ConfigError(
            f"{path}: not a run directory ({RUN_MANIFEST} not found); give a `fedcli train` --out folder, "
            f"a sweep folder or a folder holding them"
        )
    if status == CORRUPT or not isinstance(manifest, dict):
        raise DataError(
            f"{path / RUN_MANIFEST}: not a readable run manifest; expected the JSON that `fedcli train` writes "
            f"(with config, method and status)"
        )
    if status == COMPLETED:  # a completed run's files must match its manifest
        problems = validate_run(path, manifest)
        if problems:
            raise ConfigError(
                f"{path}: its files do not match its manifest ({'; '.join(problems[:3])}); nothing is reported "
                f"from it: run it again (`fedcli train --overwrite --out {path}` with the config in its manifest.json)"
            )
    run = RunData(path, manifest)
    try:
        run.metrics, run.layers, run.intervals
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"{path}: cannot read its CSV files ({type(e).__name__}: {e}); expected metrics.csv, layers.csv and "
            f"intervals.csv as `fedcli train` writes them"
        ) from None
    return run


def find_runs(folder: Path, skip: list[Path] = ()) -> list[Path]:
    """Run directories one or two levels below ``folder``, outside the folders in ``skip`` (sweeps)."""
    found = sorted({p.parent for pat in (f"*/{RUN_MANIFEST}", f"*/*/{RUN_MANIFEST}") for p in Path(folder).glob(pat)})
    skip = [Path(s).resolve() for s in skip]
    return [p for p in found if not any(s == p.resolve() or s in p.resolve().parents for s in skip)]


# ------------------------------------------------------------------------------------------------ labels


def method_label(run: RunData) -> str:
    """The run's label in tables and figures, the papers' names and symbols: ``FedLAMA (τ′=5, φ=2)``
    (RunData.legend)."""
    return run.legend()


def run_names(runs: list[RunData]) -> list[str]:
    """Unique short names: the folder name, with its parent's when two runs share one."""
    names = [r.path.name for r in runs]
    return [f"{r.path.parent.name}/{r.path.name}" if names.count(r.path.name) > 1 else r.path.name for r in runs]


data_label = style.data_label  # ``dataset/model``, as every figure and table names a run's data


# ------------------------------------------------------------------------------------------------ table


def _num(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return x


def _ratio_cell(value: float, base: float) -> Cell:
    return _pct_cell(value / base) if base and math.isfinite(base) and math.isfinite(value) else _pct_cell(float("nan"))


def _pct_cell(x: float) -> Cell:
    if not math.isfinite(x):
        return Cell("—", "---", {"value": float("nan")})
    return Cell(f"{100 * x:.2f}%", f"{100 * x:.2f}\\%", {"value": 100 * x})


def _flag_nan(cell: Cell, run: RunData, metric: str = "test_acc") -> Cell:
    """A run whose metrics.csv holds non-finite accuracy cells (nan) says so in its final-accuracy cell ("(k nan)"):
    the final and best accuracy are taken over the finite evaluations, never silently."""
    nan = sum(1 for r in run.metrics if not (isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])))
    if not nan:
        return cell
    return Cell(f"{cell.text} ({nan} nan)", f"{cell.latex or latex_escape(cell.text)} ({nan} nan)", cell.values)


def fedavg_comm(run: RunData) -> float:
    """Eq. 8 parameters of FedAvg with the run's tau over the iterations the run did (its summary, else computed)."""
    s = run.manifest.get("summary") or {}
    if "fedavg_comm_params" in s:
        return _num(s["fedavg_comm_params"])
    if not run.metrics or not run.layers:
        return float("nan")
    from fedcli.comm.ledger import fedavg_params

    return float(
        fedavg_params(
            int(sum(r["numel"] for r in run.layers)), int(run.metrics[-1]["iteration"]), int(run.config.get("tau", 1))
        )
    )


class Baseline:
    """The one reference a comparison table measures communication against, in parameters (Eq. 8) and in bytes
    (everything that travels, both ways): a FedAvg run among those reported (``--baseline RUN``, else the first
    FedAvg run on the dataset and model most of the runs share), else, for each run, FedAvg with the run's cohort,
    tau, budget and model computed from the ledger's rule (every tensor every tau iterations, up and down at 32 bits
    for each cohort client: ``fedavg_params * active * 8`` bytes)."""

    def __init__(self, run: RunData | None = None, name: str = ""):
        self.run, self.name = run, name
        self.left_out: list[str] = []  # runs not measured against it: another dataset, model or budget

    def params(self, run: RunData) -> float:
        return self.run.comm_params if self.run is not None else fedavg_comm(run)

    def bytes(self, run: RunData) -> float:
        return self.run.comm_bytes if self.run is not None else fedavg_comm(run) * run.active_clients * 8.0

    @property
    def title(self) -> str:
        return self.name if self.run is not None else "FedAvg (computed)"

    def note(self) -> str:
        if self.run is not None:
            return (
                f"Comm. vs {self.name}: communication as % of the baseline run {self.name} ({self.run.legend()}, "
                f"{data_label(self.run)}, {self.run.comm_params / 1e6:,.2f} M params, "
                f"{self.run.comm_bytes / 1e6:,.2f} MB): "
                f"in parameters (Eq. 8, sum over layers of numel x synchronizations) and in bytes (comm_bytes: every "
                f"cohort client's upload and download, plus what else travels: second moments, control variates, extra "
                f"models; 1 MB = 10^6 bytes)."
            )
        return (
            "Comm. vs FedAvg: no FedAvg run among these, so each run against FedAvg with its own cohort, "
            "tau, budget and "
            "model, from the ledger's rule (params: numel x iterations // tau; bytes: those params x cohort clients x "
            "8 bytes, 32 bits up and 32 down); give a FedAvg run and --baseline to compare all runs against one."
        )


#: FedAvg's parts (fedcli/specs/__init__.py, ``Method``'s defaults): local SGD, periodic full averaging, nothing else
PLAIN_PARTS = {
    "local_step": "sgd",
    "schedule": "periodic",
    "codec": "identity",
    "init": "overwrite",
    "server": "average",
}


def plain(run: RunData) -> bool:
    """Whether the run is FedAvg: its manifest records FedAvg's parts, unweighted by anything a method adds."""
    return all(run.method.get(k) == v for k, v in PLAIN_PARTS.items()) and not run.personalized


def pick_baseline(runs: list[RunData], names: list[str], choice: str | None = None) -> Baseline:
    """``choice``: a run's name (as the table shows it), folder or path; none: the first FedAvg run on the dataset and
    model most runs share; no FedAvg run: a computed FedAvg per run."""
    if choice:
        for run, name in zip(runs, names):
            if choice in (name, run.path.name, str(run.path)) or Path(choice).resolve() == run.path.resolve():
                return Baseline(run, name)
        raise ConfigError(f"--baseline {choice}: not one of the runs reported ({', '.join(names)})")
    common = max(dict.fromkeys(map(data_label, runs)), key=[data_label(r) for r in runs].count) if runs else ""
    avg = [(r, n) for r, n in zip(runs, names) if plain(r)]
    avg.sort(key=lambda rn: data_label(rn[0]) != common)
    return Baseline(*avg[0]) if avg else Baseline()


def _run_cells(run: RunData, name: str, base: Baseline) -> dict:
    """The cells of one run's row of the comparison table."""
    last = run.metrics[-1] if run.metrics else {}
    best = max(run.evaluations("test_acc"), key=lambda r: r["test_acc"], default=None)
    cells = {
        "name": Cell(name, latex_escape(name), {"value": str(run.path)}),
        "method": Cell(method_label(run), latex_escape(method_label(run)), {"value": method_label(run)}),
        "data": Cell(data_label(run), latex_escape(data_label(run)), {"value": data_label(run)}),
        "status": Cell(status_label(run.manifest), None, {"value": status_label(run.manifest)}),
        "iterations": _progress_cell(run, last),
        "final_acc": _flag_nan(_pct_cell(run.accuracy("final")), run),
        "best_acc": Cell("—", "---", {"value": float("nan")})
        if best is None
        else Cell(
            f"{100 * best['test_acc']:.2f}% ({best['iteration']:,})",
            f"{100 * best['test_acc']:.2f}\\% ({best['iteration']:,})",
            {"value": 100 * best["test_acc"], "iteration": best["iteration"]},
        ),
        "final_personal_acc": _pct_cell(run.accuracy("final", "personal_acc") if run.personalized else float("nan")),
        "best_personal_acc": _pct_cell(run.accuracy("best", "personal_acc") if run.personalized else float("nan")),
        # --val-fraction: the global model on the validation set (NaN for a run without one)
        "final_val_acc": _pct_cell(run.accuracy("final", "val_acc")),
        "best_val_acc": _pct_cell(run.accuracy("best", "val_acc")),
        # --client-val-fraction: the clients' models on their own validation samples
        "final_personal_val_acc": _pct_cell(run.accuracy("final", "personal_val_acc")),
    }
    cells["worst_personal_acc"] = _pct_cell(worst_mean(accuracies(run)))
    return {**cells, **_cost_cells(run, base, last)}


def _progress_cell(run: RunData, last: dict) -> Cell:
    """The iterations cell: the last record's iteration (round), and the budget for a run that did not complete."""
    it, rnd = last.get("iteration"), last.get("round")
    total = run.config.get("rounds") or run.config.get("iterations")
    unit = "rounds" if run.config.get("rounds") else "iterations"
    budget = f"{it:,} ({rnd})" if it is not None else "—"
    if run.manifest.get("status") != COMPLETED and total:
        budget += f" of {total:,} {unit}"
    return Cell(
        budget,
        latex_escape(budget),
        {"iteration": it if it is not None else float("nan"), "round": rnd if rnd is not None else float("nan")},
    )


def _cost_cells(run: RunData, base: Baseline, last: dict) -> dict:
    """The cost cells of a run's row: communication against the baseline, in M parameters and MB, wall seconds and
    simulated seconds (— where not a number)."""
    cells = {}
    cells["comm"] = _ratio_cell(run.comm_params, base.params(run))
    cells["comm_pct_bytes"] = _ratio_cell(run.comm_bytes, base.bytes(run))
    mp = run.comm_params / 1e6
    cells["comm_m"] = (
        Cell(f"{mp:,.2f}", None, {"value": mp}) if math.isfinite(mp) else Cell("—", "---", {"value": float("nan")})
    )
    mb = run.comm_bytes / 1e6
    cells["comm_mb"] = (
        Cell(f"{mb:,.2f}", None, {"value": mb}) if math.isfinite(mb) else Cell("—", "---", {"value": float("nan")})
    )
    wall = run.wall_s
    cells["wall_s"] = (
        Cell(f"{wall:,.1f} s", None, {"value": wall})
        if math.isfinite(wall)
        else Cell("—", "---", {"value": float("nan")})
    )
    sim = _num(last.get("sim_time_s")) if run.simulated else float("nan")  # --system: the simulated seconds so far
    cells["sim_time_s"] = (
        Cell(f"{sim:,.2f} s", None, {"value": sim}) if math.isfinite(sim) else Cell("—", "---", {"value": float("nan")})
    )
    return cells


#: how a comparison-table column's mean ± std over seeds is written: (format of a number, unit after it)
SEED_FORMATS = {
    "final_acc": (".2f", "%"),
    "best_acc": (".2f", "%"),
    "final_personal_acc": (".2f", "%"),
    "best_personal_acc": (".2f", "%"),
    "final_val_acc": (".2f", "%"),
    "best_val_acc": (".2f", "%"),
    "final_personal_val_acc": (".2f", "%"),
    "worst_personal_acc": (".2f", "%"),
    "comm": (".2f", "%"),
    "comm_pct_bytes": (".2f", "%"),
    "comm_m": (",.2f", ""),
    "comm_mb": (",.2f", ""),
    "wall_s": (",.1f", " s"),
    "sim_time_s": (",.2f", " s"),
}


def _over_seeds(group, each: list[dict]) -> dict:
    """One row for the seeds of one experiment: every number as mean ± std over the seeds with a finite value (the
    sample std, n - 1), "(k nan)" where some had none; the status as k/n completed; the run names with their seeds."""
    from fedcli.reports.aggregate import mean_std

    cells = dict(each[0])
    n = len(each)
    seeds = ", ".join(map(str, group.seeds))
    cells["name"] = Cell(
        f"{group.name} (seeds {seeds})", latex_escape(f"{group.name} (seeds {seeds})"), {"value": group.name}
    )
    done = sum(r.manifest.get("status") == COMPLETED for r in group.runs)
    stopped = sum(diverged(r.manifest) for r in group.runs)
    status = f"{done}/{n} completed" + (f", {stopped} diverged" if stopped else "")
    cells["status"] = Cell(status, None, {"value": status, "completed": done, "n": n})
    its = {c["iterations"].text for c in each}
    if len(its) > 1:
        cells["iterations"] = Cell(
            " / ".join(sorted(its)), latex_escape(" / ".join(sorted(its))), cells["iterations"].values
        )
    for key, (f, unit) in SEED_FORMATS.items():
        s = mean_std(c[key].values.get("value", float("nan")) for c in each)
        if not s.ok:  # no seed has the value (personal accuracy of a global-model method): not applicable
            cells[key] = Cell("—", "---", {"mean": float("nan"), "std": float("nan"), "n": 0})
            continue
        flag = f" ({s.dropped} nan)" if s.dropped else ""
        spread = s.n > 1 and s.std  # the same for every seed (a schedule's communication): no ± 0; one seed: none
        tex_unit = unit.replace("%", "\\%")
        text = f"{s.mean:{f}}{f' ± {s.std:{f}}' if spread else ''}{unit}{flag}"
        latex = (f"${s.mean:{f}} \\pm {s.std:{f}}${tex_unit}" if spread else f"{s.mean:{f}}{tex_unit}").replace(
            ",", "{,}"
        ) + flag
        cells[key] = Cell(text, latex, {"mean": s.mean, "std": s.std, "n": s.n})
    return cells


def comparison_table(runs: list[RunData], title: str = "", baseline: str | None = None) -> Table:
    """One row per run: method, data, status, budget done, final and best accuracy, communication against one
    baseline in parameters and bytes (:func:`pick_baseline`; ``baseline``: ``--baseline``), time."""
    base = pick_baseline(runs, run_names(runs), baseline)
    keys = _comparison_keys(runs, base)
    columns = [Column(k, md, latex_escape(md)) for k, md in keys]
    names = run_names(runs)
    rows, meta = [], []
    for group in seed_groups(runs, names):
        each = [_run_cells(run, name, base) for run, name in zip(group.runs, group.names)]
        cells = each[0] if len(each) == 1 else _over_seeds(group, each)
        if base.run is not None and (why := differs_from(group.first, base.run)):
            for k in ("comm", "comm_pct_bytes"):
                cells[k] = Cell("— (not comparable)", "--- (not comparable)", {"value": float("nan")})
            base.left_out.append(f"{group.name} ({'; '.join(why)})")
        rows.append([cells[k] for k, _ in keys])
        meta.append({"run_dir": ";".join(str(r.path) for r in group.runs)})
    notes = _comparison_notes(runs, names, keys, rows, base)
    return Table(
        "runs",
        title
        or (
            "Run"
            if len(runs) == 1
            else f"{len(runs)} runs"
            + (f" ({len(rows)} experiments, seeds aggregated)" if len(rows) < len(runs) else "")
        ),
        "",
        [Section("", [], columns, rows, meta)],
        notes,
    )


def _comparison_keys(runs: list[RunData], base) -> list[tuple[str, str]]:
    """The columns of :func:`comparison_table` (key, Markdown header): the personal, validation, worst-clients and
    simulated-time columns where a run has them; communication against the baseline ``base``."""
    personal = any(r.personalized for r in runs)
    keys = [
        ("name", "Run"),
        ("method", "Method"),
        ("data", "Data / model"),
        ("status", "Status"),
        ("iterations", "Iterations (rounds)"),
        ("final_acc", "Final acc."),
        ("best_acc", "Best acc. (iteration)"),
    ]
    if personal:
        keys += [("final_personal_acc", "Final personal acc."), ("best_personal_acc", "Best personal acc.")]
    validated = any(r.evaluations("val_acc") for r in runs)  # a run trained with --val-fraction
    if validated:
        keys += [("final_val_acc", "Final val. acc."), ("best_val_acc", "Best val. acc.")]
    personal_validated = any(r.evaluations("personal_val_acc") for r in runs)  # trained with --client-val-fraction
    if personal_validated:
        keys += [("final_personal_val_acc", "Final personal val. acc.")]
    if any(r.clients for r in runs):
        keys += [("worst_personal_acc", "Worst 10% clients, final")]
    keys += [
        ("comm_m", "Comm. (M params)"),
        ("comm", f"Comm. vs {base.title} (params)"),
        ("comm_mb", "Data moved (MB)"),
        ("comm_pct_bytes", f"Comm. vs {base.title} (bytes)"),
        ("wall_s", "Wall time"),
    ]
    if any(r.simulated for r in runs):  # trained with --system: the simulated time beside the wall time
        keys += [("sim_time_s", "Sim. time")]
    return keys


def _accuracy_notes(runs: list[RunData]) -> list[str]:
    """What the accuracy columns mean: final / best (and personal acc.), val. acc., personal val. acc. where shown."""
    personal = any(r.personalized for r in runs)
    validated = any(r.evaluations("val_acc") for r in runs)
    personal_validated = any(r.evaluations("personal_val_acc") for r in runs)
    notes = [
        "Final / best: test accuracy of the global model at the last / best evaluation"
        + (
            "; personal acc.: each client's model on its local test split, pooled (personalized methods)."
            if personal
            else "."
        )
    ]
    if validated:
        notes.append(
            "Val. acc.: the global model on the validation set held out of the training pool (--val-fraction; "
            "never trained on), at the last / best evaluation; — for a run without one."
        )
    if personal_validated:
        notes.append(
            "Personal val. acc.: each client's model on its own validation samples held out of its training "
            "data (--client-val-fraction), pooled as personal acc. is, at the last evaluation."
        )
    return notes


def _comparison_notes(runs: list[RunData], names: list[str], keys: list, rows: list, base) -> list[str]:
    """The notes under :func:`comparison_table`: what its columns mean where shown, how seeds aggregate, how the runs
    differ, re-timing, and the baseline (with the runs left out of its comparison)."""
    notes = _accuracy_notes(runs)
    if any("nan)" in r[keys.index(("final_acc", "Final acc."))].text for r in rows):
        notes.append(
            "(k nan): k evaluations of the run have a test_acc that is not a number; final and best accuracy are "
            "over the others."
        )
    if any(r.clients for r in runs):
        notes.append(
            "Worst 10% clients: the mean personal accuracy of the ceil(0.1 N) clients with the lowest accuracy "
            "at the last evaluation (clients.csv; each client once, whatever its sample count)."
        )
    if any(
        len(c.values) > 1 and "n" in c.values and "completed" in c.values
        for c in (r[keys.index(("status", "Status"))] for r in rows)
    ):
        notes.append(
            "Runs that differ only in --seed are one row: mean ± std over their seeds (sample std, n - 1), k/n "
            "completed; a seed without a finite value is left out and counted as (k nan)."
        )
    if differ := differences(runs, names):
        notes.append("Not one comparison: the runs differ in " + "; ".join(differ) + ".")
    if any(r.simulated for r in runs):
        notes.append(
            "Sim. time: the simulated seconds of the training so far at its last evaluation (sim_time_s, the "
            "system model of --system: docs/system-model.md); — for a run trained without it."
        )
    if retimed := next((r.retimed for r in runs if getattr(r, "retimed", None)), None):
        from fedcli.reports.retime import describe

        notes.append(
            f"Sim. time re-timed under {describe(retimed)} (over each run's own system options, else the "
            f"defaults) from the runs' records (timing.csv), not as trained: docs/system-model.md, \"Re-timing "
            f'a run".'
        )
    notes.append(base.note())
    if base.left_out:
        notes.append(f"Not measured against {base.name}: " + "; ".join(base.left_out) + ".")
    return notes


# ------------------------------------------------------------------------------------------------ figures


def _x_axis(runs: list[RunData]) -> str:
    return "rounds" if all(r.config.get("rounds") for r in runs) else "iterations"


def _rounds_note(runs: list[RunData], x: str) -> str:
    """Against communication rounds, runs whose rounds are of different lengths (local iterations per round) are
    named: a round of FedAvg with tau 10 is not a round with tau 5."""
    from fedcli.reports.groups import iterations_per_round

    if x != "rounds":
        return ""
    per = {}
    for r in runs:
        per.setdefault(f"{iterations_per_round(r):g}", []).append(r.legend())
    if len(per) < 2:
        return ""
    return "rounds are not of one length here: " + "; ".join(
        f"{k} local iterations a round for {', '.join(dict.fromkeys(v))}" for k, v in per.items()
    )


def curves_figure(runs: list[RunData], labels: list[str], x: str | None = None, keyed: dict | None = None):
    """The curves of ``fedcli train`` runs against ``x`` (style.X_AXES): the global model's test accuracy; for
    personalized runs, their clients' personal accuracy on its own axes (never one axis with the global model's); the
    training loss. ``keyed``: {name: {seed: RunData}} to draw a mean over seeds with a ± std band (``runs``: one run
    of each, to label them). (figure, caption)"""
    from fedcli.reports.figures import _panel_curves, _plt
    from fedcli.reports.products import Panel

    plt = _plt()
    x = style.x_axis(x or _x_axis(runs))
    keyed = keyed or {str(r.path): {0: r} for r in runs}
    personal = [
        (k, lab) for (k, per_seed), lab in zip(keyed.items(), labels) if next(iter(per_seed.values())).personalized
    ]
    globals_ = [
        (k, lab)
        for (k, per_seed), lab in zip(keyed.items(), labels)
        if any(isinstance(r.get("test_acc"), (int, float)) for run in per_seed.values() for r in run.metrics)
    ]
    panels = (
        [("test_acc", globals_)]
        + ([("personal_acc", personal)] if personal else [])
        + [("train_loss", list(zip(keyed, labels)))]
    )
    panels = [(y, chosen) for y, chosen in panels if chosen]  # no empty panel (no run with a global model's accuracy)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.9), squeeze=False)
    for ax, (y, chosen) in zip(axes[0], panels):
        _panel_curves(ax, Panel(runs=[k for k, _ in chosen], labels=[lab for _, lab in chosen]), keyed, x, y)
    seeds = max(len(v) for v in keyed.values())
    words = {
        "test_acc": "the global model's test accuracy",
        "personal_acc": "personal accuracy (personalized runs only)",
        "train_loss": "the training loss",
    }
    said = [words[y] for y, _ in panels]
    caption = (
        f"{_what(runs, keyed)}. From left: "
        f"{', '.join(said[:-1]) + ' and ' if len(said) > 1 else ''}{said[-1]}, against "
        f"{style.X_LABELS[x][0].lower()}{style.X_LABELS[x][1:]}"
        + ("; mean over seeds with a ± std band" if seeds > 1 else "")
        + "."
    )
    if note := _rounds_note(runs, x):
        caption += f" Note: {note}."
    if x == "time" and (retimed := next((r.retimed for r in runs if getattr(r, "retimed", None)), None)):
        from fedcli.reports.retime import describe

        caption += f" Simulated time re-timed under {describe(retimed)} from the runs' records, not as trained."
    return fig, caption


def _what(runs: list[RunData], keyed: dict | None = None) -> str:
    """What a figure shows: one run by name; several, with their datasets (``keyed``: their seeds, when runs that
    differ only in seed are one line: "3 experiments (6 runs: seeds 0, 1)")."""
    total = sum(len(v) for v in keyed.values()) if keyed else len(runs)
    seeds = sorted({s for v in keyed.values() for s in v}) if keyed else []
    if len(runs) == 1 and total == 1:
        return f"{runs[0].legend()} on {data_label(runs[0])} ({runs[0].path.name})"
    data = ", ".join(dict.fromkeys(data_label(r) for r in runs))
    if total > len(runs):
        return f"{len(runs)} experiment(s) ({total} runs, seeds {', '.join(map(str, seeds))}) on {data}"
    return f"{len(runs)} runs on {data}"


def write_figures(runs: list[RunData], out_dir: str | Path, x: str | None = None, warn=None) -> list[Path]:
    """The curves against iterations (or rounds) in ``curves`` and against communication in ``curves-params`` (or
    ``curves-bytes``), the per-layer communication figures, and for layer-wise runs each layer's interval over the
    run and delta_l vs 1 - lambda_l. Runs that differ only in their seed are drawn as one line (mean ± std band).
    ``x``: one of the curves' x axes (``fedcli report --x``); ``warn``: told (one line) when the runs' datasets,
    models or budgets differ, or rounds of different lengths are compared."""
    from fedcli.reports.figures import check_simulated_time
    from fedcli.reports.groups import seed_groups
    from fedcli.reports.style import save

    out_dir = Path(out_dir)
    msg = style.data_warning(runs, run_names(runs))
    if msg and warn is not None:
        warn(msg)
    groups = seed_groups(runs, run_names(runs))
    reps = [g.first for g in groups]
    labels = [g.first.legend() for g in groups]
    if len(set(labels)) < len(labels):  # the same method twice: tell the experiments apart by their folders
        labels = [f"{lab} [{g.name}]" for lab, g in zip(labels, groups)]
    keyed = {g.name: g.per_seed for g in groups}
    x = style.x_axis(x) if x else None
    if x == "time":
        check_simulated_time(runs)  # before any file is written
    time_x = x if x in style.PROGRESS_AXES else _x_axis(reps)
    comm_x = x if x in style.COMM_AXES else "params"  # drawn beside the progress axis (default: params)
    files = []
    evaluated = any(
        r.metrics for per_seed in keyed.values() for r in per_seed.values()
    )  # none: killed before its first
    for name, axis in (("curves", time_x), (f"curves-{comm_x}", comm_x)) if evaluated else ():
        if warn is not None and (note := _rounds_note(reps, axis)):
            warn(note)
        fig, caption = curves_figure(reps, labels, axis, keyed)
        files += save(fig, out_dir, name, caption)
    files += _layer_figures(groups, labels, reps, keyed, out_dir)
    from fedcli.reports.ala_figures import write_ala_figures  # --ala-trace runs: FedALA Figures 3 and 5

    for r, name in zip(runs, run_names(runs)):
        files += write_ala_figures(r, out_dir, f"{r.legend()} on {data_label(r)}", "" if len(runs) == 1 else f"-{name}")
    return files


def _per_layer_figures(with_layers: list, what: str, keyed: dict, out_dir: Path) -> list[Path]:
    """Synchronizations and data moved per layer over the whole run, one panel of the runs with per-layer records."""
    from fedcli.reports.figures import draw
    from fedcli.reports.products import FigureDef, Panel

    panel = Panel(runs=[k for k, _ in with_layers], labels=[lab for _, lab in with_layers])
    files = draw(
        FigureDef(
            "layer-syncs",
            "layer-syncs",
            title=f"Synchronizations per layer over the whole run: {what}",
            panels=[panel],
        ),
        keyed,
        out_dir,
    )
    return files + draw(
        FigureDef(
            "layer-size",
            "layer-size",
            title=f"Data moved per layer over the whole run (MB: every "
            f"cohort client, both directions, everything that travels for the layer): {what}",
            panels=[panel],
        ),
        keyed,
        out_dir,
    )  # a log axis when the layers span two decades


def _interval_figures(lama: list, keyed: dict, out_dir: Path) -> list[Path]:
    """For layer-wise runs, a panel each: each layer's interval over the run, and Algorithm 1's delta_l vs
    1 - lambda_l at the last adjustment."""
    from fedcli.reports.figures import draw
    from fedcli.reports.products import FigureDef, Panel

    mixed = len({data_label(r) for _, _, r in lama}) > 1  # runs of several datasets: each panel names its own
    panels = [
        Panel(
            title=f"{lab}{f', {data_label(r)}' if mixed else ''} ({k})" if len(lama) > 1 else "",
            runs=[k],
            labels=[lab],
        )
        for k, lab, r in lama
    ]
    files = draw(
        FigureDef(
            "intervals",
            "intervals",
            title="Each layer's synchronization interval over the run "
            "(intervals.csv: the interval Algorithm 1 gave it at each adjustment)",
            panels=panels,
        ),
        keyed,
        out_dir,
    )
    return files + draw(
        FigureDef(
            "delta-lambda",
            "delta-lambda",
            title="Algorithm 1 at the last interval adjustment: delta_l "
            "(discrepancy ratio) vs 1 - lambda_l (size ratio)",
            panels=panels,
        ),
        keyed,
        out_dir,
    )


def _layer_figures(groups: list, labels: list[str], reps: list[RunData], keyed: dict, out_dir: Path) -> list[Path]:
    """The per-layer figures of :func:`write_figures`: synchronizations and data moved per layer (runs with per-layer
    records), the clients' accuracy (personalized runs), and for layer-wise runs each layer's interval over the run and
    Algorithm 1's delta_l vs 1 - lambda_l."""
    files = []
    with_layers = [(g.name, lab) for g, lab in zip(groups, labels) if g.first.layers]
    what = _what(reps, keyed)
    if with_layers:
        files += _per_layer_figures(with_layers, what, keyed, out_dir)
    files += write_clients_figure(reps, labels, out_dir)  # personalized runs: accuracy across clients (clients.csv)
    lama = [(g.name, lab, g.first) for g, lab in zip(groups, labels) if g.first.intervals]
    if lama:
        files += _interval_figures(lama, keyed, out_dir)
    return files
