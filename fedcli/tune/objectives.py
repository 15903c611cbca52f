"""A trial's objective values, read from its run directory (issue 58: "the run directories are the truth"; the
contract in docs/tuning.md): torch-free and optuna-free.

Metrics (``[tune] objectives``): ``val_acc`` and ``personal_val_acc`` (the validation split, ``--val-fraction`` and
``--client-val-fraction``: selection is honest, the test set is never an objective), ``comm_bytes``,
``comm_params`` (cumulative, metrics.csv), ``sim_time_s`` (the system model's simulated time, system.csv) and
``wall_s``. Reductions over the run's evaluations: ``final`` (the last), ``lastK`` (the mean of the last K, e.g.
``last3``), ``best`` (the best in the objective's direction) and ``to_target(x)``: for an accuracy metric the local
iteration at which it first reaches ``x``; for a cost metric its value then (the accuracy: the first accuracy column
the run has, validation first). A run that never reaches the target has no value (None): the coordinator tells it
as the worst (:func:`worst`).

``--select-on test`` (docs/tuning.md, "optimistic"): the accuracy metrics are read from ``test_acc`` and
``personal_acc`` instead.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from fedcli.errors import ConfigError

#: metric -> its natural direction
METRICS = {
    "val_acc": "maximize",
    "personal_val_acc": "maximize",
    "comm_bytes": "minimize",
    "comm_params": "minimize",
    "sim_time_s": "minimize",
    "wall_s": "minimize",
}
ACCURACY = ("val_acc", "personal_val_acc")
#: --select-on test: the column an accuracy metric is read from
TEST_COLUMN = {"val_acc": "test_acc", "personal_val_acc": "personal_acc"}

_LAST = re.compile(r"^last([1-9][0-9]*)$")
_TARGET = re.compile(r"^to_target\(\s*([-+0-9.eE]+)\s*\)$")


def parse_reduce(reduce, loc: str) -> tuple[int, float | None]:
    """(K, target) of a reduction: final -> (1, None), last3 -> (3, None), best -> (0, None), to_target(0.9) ->
    (0, 0.9). ConfigError (exit 2) for anything else."""
    if reduce == "final":
        return 1, None
    if reduce == "best":
        return 0, None
    if isinstance(reduce, str):
        m = _LAST.match(reduce)
        if m:
            return int(m.group(1)), None
        m = _TARGET.match(reduce)
        if m:
            try:
                x = float(m.group(1))
            except ValueError:
                x = math.nan
            if math.isfinite(x):
                return 0, x
    raise ConfigError(f"{loc}: objective reduce must be final, lastK (last3), best or to_target(x), got {reduce!r}")


def read_rows(run_dir: Path, name: str = "metrics.csv") -> list[dict]:
    """The whole rows of one of the run's CSVs (:func:`fedcli.results.rundir.read_rows`, the one reader: a last row
    cut by the training still writing it is not read; a running trial's metrics.csv is read while it grows). [] for a
    missing file or one edited out of shape."""
    from fedcli.results.rundir import read_rows as whole_rows

    try:
        return whole_rows(Path(run_dir) / name)
    except (OSError, UnicodeDecodeError, ValueError):
        return []


def _num(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def points(
    rows: list[dict], metric: str, select_on: str = "validation", step: str = "iteration"
) -> list[tuple[int, float]]:
    """(step, value) of every evaluation row of ``rows`` (metrics.csv rows, cells as text or numbers) that has a finite
    ``metric`` (``--select-on test``: an accuracy metric's test column, :data:`TEST_COLUMN`); ``step``: ``iteration``
    (local iterations) or ``round`` (a budget in rounds)."""
    col = TEST_COLUMN.get(metric, metric) if select_on == "test" else metric
    out = []
    for r in rows:
        it, v = _num(r.get(step)), _num(r.get(col))
        if it is not None and v is not None:
            out.append((int(it), v))
    return out


def column(
    run_dir: Path, metric: str, select_on: str = "validation", step: str = "iteration"
) -> list[tuple[int, float]]:
    """:func:`points` of the run in ``run_dir`` (``sim_time_s``: the system model's rows, system.csv, when metrics.csv
    has no such column)."""
    col = TEST_COLUMN.get(metric, metric) if select_on == "test" else metric
    rows = read_rows(run_dir)
    if col not in (rows[0] if rows else {}) and col == "sim_time_s":
        rows = read_rows(run_dir, "system.csv")
    return points(rows, metric, select_on, step)


def reduce_values(
    points: list[tuple[int, float]], objective, accuracy: list[tuple[int, float]] | None = None
) -> float | None:
    """The reduction of ``points`` (iteration, value) for ``objective`` (fedcli.tune.space.Objective); None when
    there is nothing to reduce (no evaluation, the target never reached)."""
    if objective.target is not None:
        acc = points if objective.metric in ACCURACY else (accuracy or [])
        at = next((it for it, v in acc if v >= objective.target), None)
        if at is None:
            return None
        if objective.metric in ACCURACY:
            return float(at)
        before = [v for it, v in points if it <= at]
        return before[-1] if before else None
    if not points:
        return None
    vals = [v for _, v in points]
    if objective.k == 0:
        return max(vals) if objective.direction == "maximize" else min(vals)
    last = vals[-objective.k :]
    return sum(last) / len(last)


def _objective(objective):
    """A :class:`fedcli.tune.space.Objective`, or one from its record in tune.json (``{"metric": "val_acc",
    "reduce": "last3", "direction": "maximize"}``)."""
    if not isinstance(objective, dict):
        return objective
    from types import SimpleNamespace  # (fedcli.tune.space.Objective's fields; that module reads this one)

    k, target = parse_reduce(objective.get("reduce", "final"), "objective")
    metric = objective["metric"]
    return SimpleNamespace(
        metric=metric,
        k=k,
        target=target,
        direction=objective.get("direction", "minimize" if target is not None else METRICS.get(metric, "maximize")),
    )


def value_of_rows(rows: list[dict], objective, select_on: str = "validation") -> float | None:
    """The objective's value over a run's metrics.csv ``rows`` (the one reduction the coordinator tells and the
    study's report recomputes, :func:`value`)."""
    objective = _objective(objective)
    acc = None
    if objective.target is not None and objective.metric not in ACCURACY:
        acc = points(rows, "val_acc", select_on) or points(rows, "personal_val_acc", select_on)
    return reduce_values(points(rows, objective.metric, select_on), objective, acc)


def value(run_dir, objective, select_on: str = "validation") -> float | None:
    """The objective's value of the run in ``run_dir`` from its metrics.csv (the contract's
    ``fedcli.tune.objectives.value``). ``objective``: a :class:`fedcli.tune.space.Objective` or its record in
    tune.json (``{"metric": "val_acc", "reduce": "last3", "direction": "maximize"}``)."""
    objective = _objective(objective)
    run_dir = Path(run_dir)
    pts = column(run_dir, objective.metric, select_on)
    acc = None
    if objective.target is not None and objective.metric not in ACCURACY:
        acc = column(run_dir, "val_acc", select_on) or column(run_dir, "personal_val_acc", select_on)
    return reduce_values(pts, objective, acc)


def worst(objective) -> float:
    """The value a diverged trial (exit 4) or one without a value is told (docs/tuning.md): 0 for an accuracy
    maximized (no better than nothing learned), +inf for a cost or an iteration count minimized."""
    return (
        0.0
        if objective.direction == "maximize" and objective.metric in ACCURACY and objective.target is None
        else (-math.inf if objective.direction == "maximize" else math.inf)
    )
