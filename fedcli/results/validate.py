"""Is a run directory's data what its manifest says it completed? (every report reads runs through this)

``fedcli train`` writes ``metrics.csv`` row by row and records in ``manifest.json`` how many evaluations the
config's schedule gives (``evaluations``), and at the end the status and summary. A file edited, cut or
deleted afterwards must not turn into a table with other numbers: :func:`validate_run` lists what does not
hold, and the report (tables, figures, single-run reports) refuses such a run, naming it, as does ``fedcli
sweep``, which then runs it again.

Checks: ``status`` is ``completed``; ``metrics.csv`` exists, ends with a whole line, has the contract's
columns (docs/run-directory.md: round, iteration, train_loss, test_loss, test_acc, comm_params, comm_bytes, wall_s),
every row has as many cells as the header, required cells are numbers, other cells are numbers or empty,
rows come in increasing iteration; the row count is the one the manifest planned (``evaluations``), and the
last row is at the summary's round and iteration; ``layers.csv`` (when the manifest names the model's layer
count, or the file exists) has one whole numeric row per layer; ``intervals.csv`` (when present) has whole
numeric rows.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

#: metrics.csv columns every run has (docs/run-directory.md)
REQUIRED_METRICS = ("round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes", "wall_s")
REQUIRED_LAYERS = ("layer", "numel")
TEXT_COLUMNS = {"name", "kind"}  # layers.csv / intervals.csv columns that hold names, not numbers


def _number(cell: str) -> bool:
    try:
        float(cell)
    except (TypeError, ValueError):
        return False
    return True


def _read_table(path: Path, what: str, required: tuple, problems: list) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows) of a CSV that is whole: ends with a newline, every row as long as the header, the required
    columns present, numbers where numbers belong. Appends what is wrong to ``problems``; None if unusable."""
    if not path.exists():
        problems.append(f"{what} is missing")
        return None
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{what} cannot be read ({getattr(e, 'strerror', None) or e})")
        return None
    if not text:
        problems.append(f"{what} is empty")
        return None
    if not text.endswith("\n"):
        problems.append(f"{what} ends in the middle of a row (the file was cut)")
        return None
    table = list(csv.reader(io.StringIO(text)))
    header, rows = table[0], table[1:]
    missing = [c for c in required if c not in header]
    if missing:
        problems.append(f"{what} lacks the column(s) {', '.join(missing)}")
        return None
    for i, row in enumerate(rows, start=2):
        if len(row) != len(header):
            problems.append(f"{what} line {i} has {len(row)} cells where the header has {len(header)}")
            return None
        for col, cell in zip(header, row):
            if col in TEXT_COLUMNS:
                continue
            if (cell or col in required) and not _number(cell):
                problems.append(f"{what} line {i}, column {col}: {cell!r} is not a number")
                return None
    return header, rows


def diverged(manifest: dict | None) -> bool:
    """A run that stopped because training diverged (exit 4, ``--on-diverge stop`` or ``--diverge-factor``): a result,
    not a missing run. Its manifest says ``status: failed`` (the contract's values) with ``reason: diverged`` (a
    manifest of an older fedcli, only its ``error``). Reports use the evaluations it made before diverging (it
    reaches a target only if it did so before)."""
    return (
        isinstance(manifest, dict)
        and manifest.get("status") == "failed"
        and (manifest.get("reason") == "diverged" or str(manifest.get("error", "")).startswith("DivergenceError"))
    )


def pruned(manifest: dict | None) -> dict | None:
    """Where a run stopped on request stopped (``fedcli tune``'s pruning, exit 5; fedcli/results/stopfile.py): the
    manifest's ``pruned`` entry (``iteration``, ``round``, ``why``) of a run whose manifest says ``status: interrupted``
    with ``reason: pruned``, else None. Kept as it stands: ``fedcli train --resume RUN --promote`` finishes it."""
    if not (
        isinstance(manifest, dict) and manifest.get("status") == "interrupted" and manifest.get("reason") == "pruned"
    ):
        return None
    where = manifest.get("pruned")
    return dict(where) if isinstance(where, dict) else {}


def status_label(manifest: dict | None) -> str:
    """A run's status as every report shows it: the manifest's ``status``, ``diverged`` for a run that diverged,
    ``pruned`` for one stopped on request (:func:`pruned`)."""
    if diverged(manifest):
        return "diverged"
    if pruned(manifest) is not None:
        return "pruned"
    return str(manifest.get("status", "?")) if isinstance(manifest, dict) else "?"


def validate_run(run_dir: str | Path, manifest: dict | None = None) -> list[str]:  # noqa: C901
    """What is wrong with a completed run directory's data, as short phrases (empty: the run can be reported).

    A run that diverged (:func:`diverged`) is checked the same way, except that it holds the evaluations made
    before it stopped: fewer rows than planned, and no summary to end at.

    ``manifest``: the parsed ``manifest.json`` when the caller already read it. Used by every report path
    (sweep tables and figures, single-run reports) and by ``fedcli sweep`` (a damaged run is run again)."""
    run_dir = Path(run_dir)
    if manifest is None:
        path = run_dir / "manifest.json"
        if not path.exists():
            return ["manifest.json is missing"]
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return [f"manifest.json cannot be read ({e})"]
    if not isinstance(manifest, dict):
        return ["manifest.json is not a JSON object"]
    status = manifest.get("status")
    stopped = diverged(manifest)
    if status != "completed" and not stopped:
        return [f"status is {status!r}, not 'completed'"]
    problems: list[str] = []
    metrics = _read_table(run_dir / "metrics.csv", "metrics.csv", REQUIRED_METRICS, problems)
    if metrics is not None:
        header, rows = metrics
        planned = manifest.get("evaluations")
        summary = manifest.get("summary") if isinstance(manifest.get("summary"), dict) else {}
        if not rows:
            problems.append("metrics.csv holds no rows (only its header)")
        elif isinstance(planned, int) and (len(rows) > planned if stopped else len(rows) != planned):
            problems.append(f"metrics.csv holds {len(rows)} rows where the run's evaluation schedule gives {planned}")
        if rows:
            it = header.index("iteration")
            its = [float(r[it]) for r in rows]
            if any(b <= a for a, b in zip(its, its[1:])):
                problems.append("metrics.csv rows are not in increasing iteration")
            last = dict(zip(header, rows[-1]))
            for key, col in (("iterations", "iteration"), ("rounds", "round")):
                want = summary.get(key)
                if isinstance(want, (int, float)) and math.isfinite(want) and float(last[col]) != float(want):
                    problems.append(
                        f"the last metrics.csv row is at {col} {last[col]}, the run ended at {col} {want:g}"
                    )
                    break
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    n_layers = model.get("layers")
    if isinstance(n_layers, int) or (run_dir / "layers.csv").exists():
        layers = _read_table(run_dir / "layers.csv", "layers.csv", REQUIRED_LAYERS, problems)
        if layers is not None and isinstance(n_layers, int) and len(layers[1]) != n_layers:
            problems.append(f"layers.csv holds {len(layers[1])} rows for a model of {n_layers} layers")
    if (run_dir / "intervals.csv").exists():
        _read_table(
            run_dir / "intervals.csv", "intervals.csv", ("round", "iteration", "layer", "d", "interval"), problems
        )
    return problems
