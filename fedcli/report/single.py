"""Reports of ``fedcli train`` run directories: ``fedcli report RUN_DIR [RUN_DIR...]`` and the runs of ``results/``.

For each run: its learning curves (test accuracy, and ``personal_acc`` for personalized methods; train and test
loss), its communications and data size per layer (from ``layers.csv``, FedLAMA AAAI Figures 4 and 5) and, for a
layer-wise schedule, delta_l against 1 - lambda_l at its last interval adjustment (from ``intervals.csv``, Algorithm 1,
FedLAMA AAAI Figure 2). Several runs give one comparison table (method, final and best accuracy, communication as %
of FedAvg with the run's own tau over the same iterations, bytes moved, wall time) and the same figures with one
curve or bar per run. Labels come from each run's manifest (the method preset and parts it recorded, and its
interval settings), never from a list of algorithm names.

Every run directory is read through :func:`load_run`, the one place to check a run's files against its manifest.
"""

from __future__ import annotations

import math
from pathlib import Path

from fedcli.errors import ConfigError, DataError
from fedcli.report.rundata import COMPLETED, CORRUPT, MISSING, RunData, read_manifest
from fedcli.report.tables import Cell, Column, Section, Table, latex_escape

from fedcli.report.validate import validate_run

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
        raise ConfigError(f"{path}: not a run directory ({RUN_MANIFEST} not found); give a `fedcli train` --out folder, "
                          f"a sweep folder or a folder holding them")
    if status == CORRUPT or not isinstance(manifest, dict):
        raise DataError(f"{path / RUN_MANIFEST}: not a readable run manifest; expected the JSON that `fedcli train` writes "
                        f"(with config, method and status)")
    if status == COMPLETED:  # a completed run's files must match its manifest
        problems = validate_run(path, manifest)
        if problems:
            raise ConfigError(f"{path}: its files do not match its manifest ({'; '.join(problems[:3])}); nothing is reported "
                              f"from it: run it again (`fedcli train --overwrite --out {path}` with the config in its manifest.json)")
    run = RunData(path, manifest)
    try:
        run.metrics, run.layers, run.intervals  # noqa: B018 - read the CSVs now, so a bad file fails here
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: cannot read its CSV files ({type(e).__name__}: {e}); expected metrics.csv, layers.csv and "
                        f"intervals.csv as `fedcli train` writes them") from None
    return run


def find_runs(folder: Path, skip: list[Path] = ()) -> list[Path]:
    """Run directories one or two levels below ``folder``, outside the folders in ``skip`` (sweeps)."""
    found = sorted({p.parent for pat in (f"*/{RUN_MANIFEST}", f"*/*/{RUN_MANIFEST}") for p in Path(folder).glob(pat)})
    skip = [Path(s).resolve() for s in skip]
    return [p for p in found if not any(s == p.resolve() or s in p.resolve().parents for s in skip)]


# ------------------------------------------------------------------------------------------------ labels


def method_label(run: RunData) -> str:
    """``fedlama (tau'=5, phi=2)``, ``fedavg + init ala (tau=5)``: the preset and overridden parts from the manifest."""
    cfg = run.config
    label = str(run.method.get("name") or cfg.get("algo") or "?")
    for part in ("schedule", "init"):  # parts given on the command line over the preset's own
        if cfg.get(part):
            label += f" + {part} {run.method.get(part, cfg[part])}"
    if cfg.get("local_epochs"):
        inner = f"E={cfg['local_epochs']:g}"
    elif run.layerwise:
        inner = f"tau'={cfg.get('tau')}, phi={cfg.get('phi')}"
    else:
        inner = f"tau={cfg.get('tau')}"
    return f"{label} ({inner})"


def run_names(runs: list[RunData]) -> list[str]:
    """Unique short names: the folder name, with its parent's when two runs share one."""
    names = [r.path.name for r in runs]
    return [f"{r.path.parent.name}/{r.path.name}" if names.count(r.path.name) > 1 else r.path.name for r in runs]


def data_label(run: RunData) -> str:
    cfg = run.config
    return f"{cfg.get('dataset', '?')}/{cfg.get('model', '?')}"


# ------------------------------------------------------------------------------------------------ table


def _num(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return x


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

    return float(fedavg_params(int(sum(r["numel"] for r in run.layers)), int(run.metrics[-1]["iteration"]), int(run.config.get("tau", 1))))


def comparison_table(runs: list[RunData], title: str = "") -> Table:
    """One row per run: method, data, status, budget done, final and best accuracy, communication, time."""
    personal = any(r.personalized for r in runs)
    keys = [("name", "Run"), ("method", "Method"), ("data", "Data / model"), ("status", "Status"),
            ("iterations", "Iterations (rounds)"), ("final_acc", "Final acc."), ("best_acc", "Best acc. (iteration)")]
    if personal:
        keys += [("final_personal_acc", "Final personal acc."), ("best_personal_acc", "Best personal acc.")]
    keys += [("comm", "Comm. vs FedAvg"), ("comm_mb", "MB moved"), ("wall_s", "Wall time")]
    columns = [Column(k, md, latex_escape(md)) for k, md in keys]
    rows, meta = [], []
    for name, run in zip(run_names(runs), runs):
        last = run.metrics[-1] if run.metrics else {}
        best = max(run.evaluations("test_acc"), key=lambda r: r["test_acc"], default=None)
        it, rnd = last.get("iteration"), last.get("round")
        total = run.config.get("rounds") or run.config.get("iterations")
        unit = "rounds" if run.config.get("rounds") else "iterations"
        budget = f"{it:,} ({rnd})" if it is not None else "—"
        if run.manifest.get("status") != COMPLETED and total:
            budget += f" of {total:,} {unit}"
        cells = {
            "name": Cell(name, latex_escape(name), {"value": str(run.path)}),
            "method": Cell(method_label(run), latex_escape(method_label(run)), {"value": method_label(run)}),
            "data": Cell(data_label(run), latex_escape(data_label(run)), {"value": data_label(run)}),
            "status": Cell(str(run.manifest.get("status", "?")), None, {"value": run.manifest.get("status", "?")}),
            "iterations": Cell(budget, latex_escape(budget), {"iteration": it if it is not None else float("nan"),
                                                             "round": rnd if rnd is not None else float("nan")}),
            "final_acc": _flag_nan(_pct_cell(run.accuracy("final")), run),
            "best_acc": Cell("—", "---", {"value": float("nan")}) if best is None else
            Cell(f"{100 * best['test_acc']:.2f}% ({best['iteration']:,})", f"{100 * best['test_acc']:.2f}\\% ({best['iteration']:,})",
                 {"value": 100 * best["test_acc"], "iteration": best["iteration"]}),
            "final_personal_acc": _pct_cell(run.accuracy("final", "personal_acc") if run.personalized else float("nan")),
            "best_personal_acc": _pct_cell(run.accuracy("best", "personal_acc") if run.personalized else float("nan")),
        }
        base = fedavg_comm(run)
        comm = run.comm_params
        cells["comm"] = (_pct_cell(comm / base) if base and math.isfinite(base) else _pct_cell(float("nan")))
        mb = run.comm_bytes / 1e6
        cells["comm_mb"] = Cell(f"{mb:,.2f}", None, {"value": mb}) if math.isfinite(mb) else Cell("—", "---", {"value": float("nan")})
        wall = run.wall_s
        cells["wall_s"] = Cell(f"{wall:,.1f} s", None, {"value": wall}) if math.isfinite(wall) else Cell("—", "---", {"value": float("nan")})
        rows.append([cells[k] for k, _ in keys])
        meta.append({"run_dir": str(run.path)})
    notes = ["Final / best: test accuracy of the global model at the last / best evaluation"
             + ("; personal acc.: each client's model on its local test split, pooled (personalized methods)." if personal else ".")]
    if any("nan)" in r[keys.index(("final_acc", "Final acc."))].text for r in rows):
        notes.append("(k nan): k evaluations of the run have a test_acc that is not a number; final and best accuracy are "
                     "over the others.")
    notes.append("Comm. vs FedAvg: Eq. 8 parameters as % of FedAvg with the run's own tau over the same iterations; "
                 "MB moved: comm_bytes (10^6 bytes).")
    return Table("runs", title or ("Run" if len(runs) == 1 else f"{len(runs)} runs"), "", [Section("", [], columns, rows, meta)], notes)


# ------------------------------------------------------------------------------------------------ figures


def _x_axis(runs: list[RunData]) -> str:
    return "round" if all(r.config.get("rounds") for r in runs) else "iteration"


def draw_curves(runs: list[RunData], labels: list[str], out_dir: Path, name: str = "curves") -> list[Path]:
    """Accuracy (test_acc; personal_acc dashed) and loss (test solid, train dotted) against iterations or rounds."""
    from fedcli.report.figures import _plt, save

    plt = _plt()
    x = _x_axis(runs)
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10.4, 3.9))
    for run, label in zip(runs, labels):
        rows = run.metrics
        xs = [r[x] for r in rows]
        (line,) = acc_ax.plot(xs, [100 * _num(r.get("test_acc")) for r in rows], label=f"{label}: global model", linewidth=1.6)
        if run.personalized:
            acc_ax.plot(xs, [100 * _num(r.get("personal_acc")) for r in rows], linestyle="--", color=line.get_color(),
                        label=f"{label}: personal (clients' models)", linewidth=1.4)
        loss_ax.plot(xs, [_num(r.get("test_loss")) for r in rows], color=line.get_color(), label=f"{label}: test", linewidth=1.6)
        loss_ax.plot(xs, [_num(r.get("train_loss")) for r in rows], color=line.get_color(), linestyle=":", label=f"{label}: train",
                     linewidth=1.4)
    xlabel = "Communication rounds" if x == "round" else "Iterations (local steps)"
    for ax, ylabel in ((acc_ax, "Test accuracy (%)"), (loss_ax, "Cross-entropy loss")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    acc_ax.set_title("Accuracy", fontsize=10)
    loss_ax.set_title("Loss", fontsize=10)
    fig.suptitle(_suptitle(runs, labels), fontsize=9)
    return save(fig, out_dir, name)


def _suptitle(runs: list[RunData], labels: list[str]) -> str:
    if len(runs) == 1:
        return f"{labels[0]} on {data_label(runs[0])} ({runs[0].path.name})"
    return f"{len(runs)} runs on {', '.join(dict.fromkeys(data_label(r) for r in runs))}"


def write_figures(runs: list[RunData], out_dir: str | Path) -> list[Path]:
    """The curves, the per-layer communication figures and (layer-wise runs) delta_l vs 1 - lambda_l."""
    from fedcli.report.figures import draw
    from fedcli.report.spec import FigureSpec, Panel

    out_dir = Path(out_dir)
    labels = [method_label(r) for r in runs]
    if len(set(labels)) < len(labels):  # the same method twice: tell the runs apart by their folders
        labels = [f"{lab} [{n}]" for lab, n in zip(labels, run_names(runs))]
    files = draw_curves(runs, labels, out_dir)
    keyed = {str(r.path): {0: r} for r in runs}
    with_layers = [(str(r.path), lab) for r, lab in zip(runs, labels) if r.layers]
    what = _suptitle(runs, labels)
    if with_layers:
        panel = Panel(runs=[k for k, _ in with_layers], labels=[lab for _, lab in with_layers])
        files += draw(FigureSpec("layer-syncs", "layer-syncs", title=f"Communications per layer over the whole training: {what}",
                                 panels=[panel]), keyed, out_dir)
        files += draw(FigureSpec("layer-size", "layer-size", title=f"Data size per layer (Eq. 8): {what}", panels=[panel]),
                      keyed, out_dir)
    lama = [(str(r.path), lab, r) for r, lab in zip(runs, labels) if r.intervals]
    if lama:
        panels = [Panel(title=f"{lab} ({r.path.name})" if len(lama) > 1 else "", runs=[k], labels=[lab]) for k, lab, r in lama]
        files += draw(FigureSpec("delta-lambda", "delta-lambda", title="Algorithm 1 at the last interval adjustment: delta_l "
                                 "(discrepancy ratio) vs 1 - lambda_l (size ratio)", panels=panels), keyed, out_dir)
    return files
