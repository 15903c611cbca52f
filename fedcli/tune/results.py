"""What a study folder of ``fedcli tune`` holds, read back for reports (issue 58, section 3; the folder contract of
docs/tuning.md, "Reading a study").

A study folder holds ``tune.json`` (the record: objectives, and per study its space, rungs, grid size and the
iterations of one full trial), ``trials.csv`` (an index the coordinator rewrites, derived, never the truth) and one
ordinary run directory per trial, ``DIR/<study>/trial-NNNN``, whose manifest carries a ``tune`` entry (study, number,
params, baseline). :func:`read_study` reads all three and lets the run directories win: a trial's state comes from its
manifest (``completed``: COMPLETE; ``failed`` because it diverged: COMPLETE, shown as diverged; ``interrupted`` with
``reason: pruned``: PRUNED; ``interrupted`` or ``running``: RUNNING; ``failed``: FAIL), its params from the manifest's
``tune`` entry, and its objective values are recomputed from its metrics.csv with the objectives of ``tune.json``
(:func:`reduce_rows`; a diverged trial has none: its metrics stop where it blew up, and whatever worst value the
coordinator told the sampler is not a measurement); each disagreement with trials.csv is said in one sentence
(:attr:`StudyFolder.notes`).

The validity checks a report prints (:func:`validity_notes`) and the Pareto set of two objectives
(:func:`pareto_set`) are computed here too. Torch-free and Optuna-free (the standard library only).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.tune.objectives import _num as _number  # a cell as a finite number, else None

RECORD = "tune.json"
INDEX = "trials.csv"
KIND = "fedcli-tune"
#: Optuna's trial states, as trials.csv names them
STATES = ("COMPLETE", "PRUNED", "RUNNING", "WAITING", "FAIL")
#: how far into its range (a share of it, log scale for a log range) a best value counts as "on the edge"
EDGE = 0.1
#: at or above this Spearman correlation between the values at a pruning point and the final values, pruning there
#: is called safe
SAFE_RHO = 0.8


@dataclass
class Objective:
    """One objective of ``tune.json``: a metrics.csv column, its reduction over the evaluations and a direction."""

    metric: str
    reduce: str = "final"
    direction: str = "maximize"

    @property
    def label(self) -> str:
        return f"{self.metric} ({self.reduce}, {self.direction})"

    def better(self, a: float, b: float) -> bool:
        return a > b if self.direction == "maximize" else a < b


@dataclass
class Trial:
    study: str
    number: int
    state: str  # Optuna's name, as the run directory says (module docstring)
    params: dict
    values: list  # one per objective: float or None (recomputed from metrics.csv)
    run: str  # the run directory relative to the study folder
    path: Path
    run_status: str  # completed | diverged | pruned | interrupted | running | failed | missing | damaged
    baseline: bool = False
    pruned: dict | None = None  # the manifest's ``pruned`` entry: iteration, round, why
    iterations: int = 0  # local iterations trained
    rounds: int = 0  # rounds trained (the compute spent of a study whose budget is in rounds)
    rows: list = field(default_factory=list, repr=False)  # metrics.csv as numbers

    @property
    def usable(self) -> bool:
        """A completed, non-diverged trial with every objective value: what the best, the Pareto set and the
        importances are computed from."""
        return self.state == "COMPLETE" and self.run_status == "completed" and all(v is not None for v in self.values)


@dataclass
class Study:
    name: str
    space: dict
    rungs: list
    floor: int | None
    grid_size: int | None
    budget_iterations: int  # one full trial's budget, in :attr:`unit`s
    base: dict
    planned_trials: int
    trials: list = field(default_factory=list)
    unit: str = "iteration"  # what the budget and the rungs count: local iterations, or rounds (``budget_rounds``)

    @property
    def unit_name(self) -> str:
        return "rounds" if self.unit == "round" else "local iterations"

    @property
    def spent(self) -> int:
        return sum(t.rounds if self.unit == "round" else t.iterations for t in self.trials)

    @property
    def budget(self) -> int:
        return self.planned_trials * self.budget_iterations

    @property
    def grid(self) -> int | None:
        return self.grid_size * self.budget_iterations if self.grid_size else None


@dataclass
class StudyFolder:
    root: Path
    record: dict
    objectives: list
    studies: list
    notes: list = field(default_factory=list)  # where trials.csv and the run directories disagree

    @property
    def trials(self) -> list:
        return [t for s in self.studies for t in s.trials]

    @property
    def select_on(self) -> str:
        return str(self.record.get("select_on", "validation"))


def is_study(path: str | Path) -> bool:
    """Whether ``path`` is a study folder of ``fedcli tune`` (it holds ``tune.json``)."""
    return (Path(path) / RECORD).is_file()


# ------------------------------------------------------------------------------------------------ the reductions


def reduce_rows(rows: list[dict], objective: Objective | dict, select_on: str = "validation") -> float | None:
    """One objective's value over a run's evaluations ``rows`` (metrics.csv rows, cells as text or numbers): the
    coordinator's own reduction, :func:`fedcli.tune.objectives.value_of_rows` (``final``, ``lastK``, ``best``,
    ``to_target(x)``: for an accuracy the local iteration of the first evaluation reaching ``x``, for a cost its value
    then), so a study's report recomputes exactly what was told. Evaluations where the metric is empty or not finite
    are left out; None when none is left or the target is never reached."""
    from fedcli.tune.objectives import value_of_rows

    obj = objective if isinstance(objective, Objective) else Objective(**objective)
    return value_of_rows(rows, {"metric": obj.metric, "reduce": obj.reduce, "direction": obj.direction}, select_on)


def read_rows(run_dir: Path) -> list[dict]:
    """metrics.csv of a run as a list of dicts (text cells), with system.csv's ``sim_time_s`` joined on the round
    (runs trained with ``--system``); [] when it cannot be read."""
    rows = _csv(run_dir / "metrics.csv")
    system = {r.get("round"): r.get("sim_time_s") for r in _csv(run_dir / "system.csv")}
    if system:
        for r in rows:
            r.setdefault("sim_time_s", system.get(r.get("round"), ""))
    return rows


def _csv(path: Path) -> list[dict]:
    """The whole rows of a run's CSV (:func:`fedcli.tune.objectives.read_rows`: the one reader, a row cut mid-write
    left out); [] when it cannot be read."""
    from fedcli.tune.objectives import read_rows as rows_of

    return rows_of(path.parent, path.name)


def until(rows: list[dict], iteration: float, unit: str = "iteration") -> list[dict]:
    """The evaluations at or before local iteration ``iteration`` (``unit`` "round": at or before that round): what a
    pruner saw at that rung."""
    return [r for r in rows if (it := _number(r.get(unit))) is not None and it <= iteration]


# ------------------------------------------------------------------------------------------------ reading a folder


def _record(root: Path) -> dict:
    path = root / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"{path}: not a readable study record ({e}); expected the tune.json `fedcli tune` writes"
        ) from None
    if not isinstance(record, dict) or record.get("kind") != KIND or not isinstance(record.get("studies"), list):
        raise ConfigError(f"{path}: not a study record of `fedcli tune` (kind '{KIND}' with its studies)")
    return record


def _objectives(record: dict, path: Path) -> list[Objective]:
    got = record.get("objectives")
    if (
        not isinstance(got, list)
        or not 1 <= len(got) <= 2
        or not all(isinstance(o, dict) and "metric" in o for o in got)
    ):
        raise ConfigError(f"{path / RECORD}: 'objectives' must list one or two objectives (metric, reduce, direction)")
    return [
        Objective(str(o["metric"]), str(o.get("reduce", "final")), str(o.get("direction", "maximize"))) for o in got
    ]


def _state_of(path: Path) -> tuple[str, str, dict | None]:
    """(Optuna state, run status, manifest) of a trial's run directory (module docstring)."""
    from fedcli.results.runstate import COMPLETED, FAILED, INTERRUPTED, MISSING, RUNNING, read_manifest
    from fedcli.results.validate import diverged, validate_run

    status, m = read_manifest(path)
    if status == MISSING:
        return "", "missing", None
    if m is None:
        return "FAIL", "damaged", None
    if status == COMPLETED:
        return ("COMPLETE", "completed", m) if not validate_run(path, m) else ("FAIL", "damaged", m)
    if status == FAILED:
        return ("COMPLETE", "diverged", m) if diverged(m) else ("FAIL", "failed", m)
    if status == INTERRUPTED:
        return ("PRUNED", "pruned", m) if m.get("reason") == "pruned" else ("RUNNING", "interrupted", m)
    if status == RUNNING:
        return "RUNNING", "running", m
    return "FAIL", "damaged", m


def _spent(m: dict | None, rows: list[dict], unit: str = "iteration") -> int:
    """Local iterations (``unit`` "round": rounds) a trial trained: its summary's, a pruned run's ``pruned`` entry's,
    else its last evaluation's."""
    m = m or {}
    key = "rounds" if unit == "round" else "iterations"
    summary = m.get("summary") if isinstance(m.get("summary"), dict) else {}
    if m.get("status") == "completed" and isinstance(summary.get(key), (int, float)):
        return int(summary[key])
    if isinstance(m.get("pruned"), dict) and isinstance(m["pruned"].get(unit), (int, float)):
        return int(m["pruned"][unit])
    last = _number(rows[-1].get(unit)) if rows else None
    return int(last) if last is not None else 0


def _listed(root: Path, notes: list) -> dict:
    """trials.csv: {(study, number): row}; a missing or unreadable index is said, not fatal (it is derived)."""
    path = root / INDEX
    if not path.is_file():
        notes.append(f"{INDEX} is missing; the trials were read from their run directories")
        return {}
    out = {}
    for row in _csv(path):
        try:
            out[(row.get("study", ""), int(row.get("number", "")))] = row
        except ValueError:
            continue
    return out


def _params_listed(row: dict) -> dict:
    return {
        k[len("params_") :]: (_number(v) if _number(v) is not None else v)
        for k, v in row.items()
        if k.startswith("params_") and v not in ("", None)
    }


def read_study(path: str | Path) -> StudyFolder:
    """The study folder ``path`` read back (module docstring): its objectives, and per study its trials, each from
    its run directory where it has one. Not a study folder (no tune.json, or not fedcli's): ConfigError (exit 2)."""
    root = Path(path)
    if not is_study(root):
        raise ConfigError(f"{root}: not a study folder of `fedcli tune` (no {RECORD} here)")
    record = _record(root)
    objectives = _objectives(record, root)
    notes: list[str] = []
    listed = _listed(root, notes)
    studies = []
    for s in record["studies"]:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise ConfigError(f"{root / RECORD}: every study needs a name")
        studies.append(
            Study(
                s["name"],
                dict(s.get("space") or {}),
                sorted(int(r) for r in s.get("rungs") or []),
                s.get("floor"),
                s.get("grid_size"),
                int(s.get("budget_iterations") or s.get("budget_rounds") or 0),
                dict(s.get("base") or {}),
                int(s.get("trials", record.get("trials", 0)) or 0),
                unit="round" if s.get("budget_rounds") and not s.get("budget_iterations") else "iteration",
            )
        )
    for study in studies:
        numbers = {n for (st, n) in listed if st == study.name}
        for d in sorted((root / study.name).glob("trial-*")):
            if (m := re.fullmatch(r"trial-(\d+)", d.name)) and d.is_dir():
                numbers.add(int(m.group(1)))
        for number in sorted(numbers):
            study.trials.append(
                _trial(
                    root,
                    study,
                    number,
                    listed.get((study.name, number)),
                    objectives,
                    notes,
                    str(record.get("select_on", "validation")),
                )
            )
    return StudyFolder(root, record, objectives, studies, notes)


def _settled_state(state: str, run_status: str, row: dict | None, rel: str, said: str, notes: list) -> str:
    """The trial's state: its run directory's, or the index's where the directory is missing; disagreements noted."""
    listed_state = (row or {}).get("state") or None
    if run_status == "missing":
        state = listed_state or "WAITING"
        if state in ("COMPLETE", "PRUNED"):
            notes.append(f"{said}: {INDEX} says {state}, but its run directory {rel} is missing; counted as FAIL")
            state = "FAIL"
    elif listed_state and listed_state != state:
        notes.append(
            f"{said}: {INDEX} says {listed_state}, its run directory says {run_status}; the run directory is used"
        )
    elif row is None:
        notes.append(f"{said}: not in {INDEX}; read from its run directory {rel}")
    return state


def _trial(
    root: Path,
    study: Study,
    number: int,
    row: dict | None,
    objectives: list,
    notes: list,
    select_on: str = "validation",
) -> Trial:
    rel = (row or {}).get("run") or f"{study.name}/trial-{number:04d}"
    path = root / rel
    state, run_status, m = _state_of(path)
    said = f"trial {number} of study '{study.name}'"
    state = _settled_state(state, run_status, row, rel, said, notes)
    tune = (m or {}).get("tune") if isinstance((m or {}).get("tune"), dict) else {}
    params = dict(tune.get("params") or {}) if tune else _params_listed(row or {})
    rows = read_rows(path) if m is not None else []
    values = (
        [reduce_rows(rows, o, select_on) for o in objectives]
        if rows and run_status != "diverged"
        else [None] * len(objectives)
    )
    if row is not None and m is not None:
        keys = ["value"] if len(objectives) == 1 else [f"values_{i}" for i in range(len(objectives))]
        for k, v in zip(keys, values):
            got = _number(row.get(k))
            if (
                state == "COMPLETE"
                and run_status == "completed"
                and got is not None
                and v is not None
                and not math.isclose(got, v, rel_tol=1e-9, abs_tol=1e-12)
            ):
                notes.append(f"{said}: {INDEX} gives {k} {got:g}, its metrics.csv gives {v:g}; metrics.csv is used")
    baseline = bool(tune.get("baseline")) if tune else str((row or {}).get("baseline", "0")) in ("1", "True", "true")
    pruned = m.get("pruned") if m is not None and isinstance(m.get("pruned"), dict) else None
    return Trial(
        study.name,
        number,
        state,
        params,
        values,
        rel,
        path,
        run_status,
        baseline,
        pruned,
        _spent(m, rows),
        _spent(m, rows, "round"),
        rows,
    )


# ------------------------------------------------------------------------------------------------ analyses


def dominates(a: list, b: list, objectives: list) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every objective and better in one."""
    no_worse = all(x == y or o.better(x, y) for x, y, o in zip(a, b, objectives))
    return no_worse and any(o.better(x, y) for x, y, o in zip(a, b, objectives))


def pareto_set(trials: list, objectives: list) -> list:
    """The trials no other trial dominates (:func:`dominates`), over the usable ones (:attr:`Trial.usable`), by
    number."""
    pool = [t for t in trials if t.usable]
    return [t for t in pool if not any(dominates(o.values, t.values, objectives) for o in pool if o is not t)]


def ranked(trials: list, objective: Objective, index: int = 0) -> list:
    """The usable trials best first on objective ``index`` (ties: the lower number first)."""
    sign = -1 if objective.direction == "maximize" else 1
    return sorted((t for t in trials if t.usable), key=lambda t: (sign * t.values[index], t.number))


def spearman(xs: list, ys: list) -> float | None:
    """Spearman's rank correlation (the Pearson correlation of the ranks, ties averaged); None for fewer than three
    pairs or a constant side."""
    from fedcli.reports.paired import signed_ranks as ranks

    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else None


def rung_correlations(
    study: Study, objective: Objective, select_on: str = "validation"
) -> list[tuple[int, float | None, int]]:
    """Per pruning rung of ``study``: (iteration, Spearman correlation between the completed trials' values at that rung
    (the objective reduced over their evaluations up to it) and their final values, trials counted)."""
    done = [t for t in study.trials if t.usable]
    out = []
    for rung in study.rungs:
        pairs = [
            (v, t.values[0])
            for t in done
            if (v := reduce_rows(until(t.rows, rung, study.unit), objective, select_on)) is not None
        ]
        out.append((rung, spearman([a for a, _ in pairs], [b for _, b in pairs]), len(pairs)))
    return out


def importances(study: Study, objective_index: int, bins: int = 3) -> dict[str, float]:
    """Per parameter of the space, the share of the objective's variance over the usable trials that the parameter
    alone explains: the correlation ratio eta^2 = between-group sum of squares / total sum of squares, the trials
    grouped by the parameter's value (a choice: its own group; a range: ``bins`` groups of equal count, ordered by
    value). A simple, torch-free and Optuna-free measure (not Optuna's fANOVA): it sees each parameter alone, not
    their interactions. Empty for fewer than three usable trials or a constant objective."""
    done = [t for t in study.trials if t.usable]
    ys = [t.values[objective_index] for t in done]
    if len(done) < 3:
        return {}
    mean = sum(ys) / len(ys)
    total = sum((y - mean) ** 2 for y in ys)
    if not total:
        return {}
    out = {}
    for name, bounds in study.space.items():
        xs = [t.params.get(name) for t in done]
        if any(x is None for x in xs):
            continue
        if isinstance(bounds, dict) and "choices" in bounds:
            keys = [repr(x) for x in xs]
        else:
            order = sorted(range(len(xs)), key=lambda i: (xs[i], i))
            keys = [0] * len(xs)
            for rank, i in enumerate(order):
                keys[i] = rank * bins // len(xs)
        groups: dict = {}
        for k, y in zip(keys, ys):
            groups.setdefault(k, []).append(y)
        between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
        out[name] = between / total
    return out


def _range(bounds) -> tuple[str, float, float] | None:
    """(kind, low, high) of a numeric range in a space (``{log = [a, b]}``, ``{float = [a, b]}``, ``{int = [a, b]}``,
    ``{low, high, log}``), or ("choices", min, max) of three or more numeric choices; None otherwise."""
    if not isinstance(bounds, dict):
        return None
    for kind in ("log", "float", "int", "range"):
        got = bounds.get(kind)
        if isinstance(got, list) and len(got) == 2 and all(isinstance(v, (int, float)) for v in got):
            return ("log" if kind == "log" else "linear"), float(min(got)), float(max(got))
    if isinstance(bounds.get("low"), (int, float)) and isinstance(bounds.get("high"), (int, float)):
        return ("log" if bounds.get("log") is True else "linear"), float(bounds["low"]), float(bounds["high"])
    choices = bounds.get("choices")
    if (
        isinstance(choices, list)
        and len(choices) >= 3
        and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices)
    ):
        return "choices", float(min(choices)), float(max(choices))
    return None


def on_edge(value, bounds) -> str | None:
    """ "bottom" or "top" when ``value`` lies in the lowest or highest :data:`EDGE` of its range (log scale for a log
    range), or is the smallest or largest of three or more numeric choices; None otherwise."""
    got = _range(bounds)
    if got is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    kind, lo, hi = got
    if kind == "choices":
        return "bottom" if value <= lo else "top" if value >= hi else None
    if hi <= lo or (kind == "log" and lo <= 0):
        return None
    pos = (
        (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
        if kind == "log" and value > 0
        else (value - lo) / (hi - lo)
    )
    return "bottom" if pos <= EDGE else "top" if pos >= 1 - EDGE else None


def validity_notes(folder: StudyFolder) -> list[str]:
    """The report's validity notes, one sentence each (docs/tuning.md, "Reading a study"): a best value on the edge of
    its range, whether pruning was safe (rank correlation at the rungs), unequal tuning budgets across the studies,
    and selection on the test set."""
    notes = []
    objs = folder.objectives
    for study in folder.studies:
        bests = [(o, ranked(study.trials, o, i)[:1]) for i, o in enumerate(objs)]
        for o, best in bests:
            for t in best:
                for name, bounds in study.space.items():
                    side = on_edge(t.params.get(name), bounds)
                    if side:
                        kind, lo, hi = _range(bounds)
                        notes.append(
                            f"study '{study.name}': the best {o.metric} (trial {t.number}) has {name} = "
                            f"{t.params[name]:g} at the {side} of its range [{lo:g}, {hi:g}]: widen it, the optimum "
                            f"may lie beyond."
                        )
        if len(objs) == 1 and study.rungs:
            corr = rung_correlations(study, objs[0], folder.select_on)
            known = [(r, rho, n) for r, rho, n in corr if rho is not None]
            if not known:
                notes.append(
                    f"study '{study.name}': too few completed trials to tell whether pruning was safe (the rank "
                    f"correlation at the pruning points needs three)."
                )
            else:
                worst = min(known, key=lambda c: c[1])
                said = ", ".join(f"{rho:.2f} at {study.unit} {r}" for r, rho, _ in known)
                verdict = (
                    "pruning looks safe here: the values at the pruning points ranked the completed trials as their "
                    "final values did"
                    if worst[1] >= SAFE_RHO
                    else "pruning may not have been safe here: the values at the pruning points ranked the completed "
                    "trials otherwise than their final values did, so a pruned trial might have ended better"
                )
                notes.append(
                    f"study '{study.name}': {verdict} (Spearman rank correlation {said}, over {worst[2]} completed "
                    f"trials)."
                )
    budgets = {s.name: (s.planned_trials, f"{s.budget_iterations} {s.unit_name}") for s in folder.studies}
    if len(set(budgets.values())) > 1:
        said = ", ".join(f"'{n}' {k} trials x {b}" for n, (k, b) in budgets.items())
        notes.append(
            f"Unequal tuning budgets across the studies ({said}): a row tuned with more budget is favoured in a "
            f"comparison of the rows."
        )
    if folder.select_on == "test":
        notes.append(
            "Selected on the test set (optimistic): the objectives read test metrics, so the chosen "
            "configurations' test accuracy overstates what a fresh test set would give."
        )
    return notes


def value_columns(objectives: list) -> list[str]:
    """The objective columns as Optuna's ``trials_dataframe`` names them: ``value``, or ``values_0``, ``values_1``."""
    return ["value"] if len(objectives) == 1 else [f"values_{i}" for i in range(len(objectives))]


def trial_records(folder: StudyFolder) -> list[dict]:
    """One dict per trial, named as Optuna's ``trials_dataframe`` names its columns (issue 58): ``number``, ``state``,
    ``params_<name>``, ``value`` or ``values_0``/``values_1``, then ``run`` (the run directory relative to the study
    folder, the name ``fedcli.load`` gives the run), ``pareto`` (two objectives: in the Pareto set; else None),
    ``study``; then ``run_status`` (the run directory's word: completed, diverged, pruned, ...), ``baseline``,
    ``pruned_iteration`` and ``iterations`` (local iterations trained)."""
    names = sorted({k for t in folder.trials for k in t.params})
    cols = value_columns(folder.objectives)
    out = []
    for study in folder.studies:
        front = {t.number for t in pareto_set(study.trials, folder.objectives)} if len(cols) > 1 else set()
        for t in study.trials:
            out.append(
                {
                    "number": t.number,
                    "state": t.state,
                    **{f"params_{n}": t.params.get(n) for n in names},
                    **dict(zip(cols, t.values)),
                    "run": t.run,
                    "pareto": (t.number in front) if len(cols) > 1 else None,
                    "study": study.name,
                    "run_status": t.run_status,
                    "baseline": t.baseline,
                    "pruned_iteration": (t.pruned or {}).get("iteration"),
                    "iterations": t.iterations,
                }
            )
    return out


def summary(folder: StudyFolder, top: int = 5, confirmation: dict | None = None) -> dict:
    """Everything ``fedcli report DIR`` shows of a study folder, as plain data for ``fedcli.reports.tune``: per study
    its trials by state, the compute spent against the budget and the full grid, the best ``top`` trials (one objective)
    or the Pareto set (two), the baseline, the importances per objective, the confirmation over seeds where one was
    run (``confirmation``: ``fedcli.tune.confirm.confirmed`` of the folder); the folder's notes and validity notes."""
    out = []
    for s in folder.studies:
        states: dict[str, int] = {}
        for t in s.trials:
            word = "COMPLETE (diverged)" if t.run_status == "diverged" else t.state
            states[word] = states.get(word, 0) + 1
        out.append(
            {
                "study": s,
                "states": states,
                "spent": s.spent,
                "budget": s.budget,
                "grid": s.grid,
                "best": ranked(s.trials, folder.objectives[0])[:top],
                "pareto": sorted(
                    pareto_set(s.trials, folder.objectives),
                    key=lambda t: ranked(s.trials, folder.objectives[0]).index(t),
                )
                if len(folder.objectives) > 1
                else [],
                "baseline": next((t for t in s.trials if t.baseline), None),
                "importances": [importances(s, i) for i in range(len(folder.objectives))],
            }
        )
    for entry in out:
        entry["confirmed"] = (confirmation or {}).get(entry["study"].name)
    return {"folder": folder, "studies": out, "notes": list(folder.notes), "validity": validity_notes(folder)}
