"""Results in pandas, for notebooks: ``fedcli.load(path)``, ``fedcli.train(...)``, ``fedcli.write_report(...)`` (also
``fedcli.report(...)``; the report package is ``fedcli.reports``).

``load`` reads one ``fedcli train`` run directory, or every run directory under a folder (a sweep, ``results/``), with
the same checks as ``fedcli report`` (a completed run whose files do not match its manifest is refused), and gives
them as pandas DataFrames, one row per record with the run's identity in front (``run``, ``method``, ``seed``,
``dataset``, ``model``): ``metrics`` (metrics.csv: one row per evaluation), ``layers`` (layers.csv: one per parameter
tensor), ``intervals`` (intervals.csv: one per layer per adjustment, layer-wise methods), ``clients`` (clients.csv:
one per client per evaluation, personalized methods), ``system`` (system.csv: one per round, runs trained with
``--system``), ``runs`` (one row per run: its config and summary) and ``experiments`` (one row per experiment: the runs
that differ only in their seed, with their config, so that a sweep table joins it one row to one) and, for a study
folder of ``fedcli tune``, ``trials`` (one row per trial, Optuna's names: ``fedcli.tune.results``). The columns are
those of the CSVs docs/run-directory.md describes, each with the dtype :data:`SCHEMA` declares, whatever was loaded,
but for metrics.csv's ``lr`` (:data:`RENAMED`: ``current_lr``, so that it never meets the config's ``lr`` of ``runs``
in a merge). ``train`` and ``write_report`` run the commands in this process: their errors are raised (the command's
one-line message, ``exit_code``), and ``write_report`` returns the table the command prints (printed only with
``print=True``) and the figures it drew (:class:`Report`). No torch import (pandas only, when called).
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

#: the identity of a run put in front of each of its rows (``experiment``: the runs that differ only in their seed
#: share one, named as ``fedcli report`` names them: ``lama`` for ``lama/s0`` and ``lama/s1``; for a run of a sweep,
#: ``sweep``: its sweep folder, ``recipe_run``: its name in the recipe, the name a sweep table's ``run``, ``left_run``
#: and ``right_run`` give, and ``scale``: the recipe scale it ran at; empty for a run of ``fedcli train``)
ID_COLUMNS = ("run", "experiment", "method", "seed", "dataset", "model", "sweep", "recipe_run", "scale")
#: the per-record tables of a run directory: attribute of :class:`RunData` (its CSV)
TABLES = ("metrics", "layers", "intervals", "clients", "system")
#: columns of a run's CSV named otherwise in its frame: metrics.csv's ``lr`` (the learning rate in effect at the
#: evaluation, after any decay) is ``current_lr``, so that a merge with ``runs`` (whose ``lr`` is the config's) on the
#: identity columns gives no ``lr_x`` / ``lr_y``
RENAMED = {"metrics": {"lr": "current_lr"}}

INT, FLOAT, TEXT = "Int64", "float64", "object"  # Int64: pandas' integer column that can hold a missing value
#: each frame's columns and their dtypes, declared once (the CSVs of docs/run-directory.md): a frame has these
#: columns with these dtypes whatever was loaded, an empty cell (``personal_acc`` of a global-model run) or a column a
#: run lacks is missing (NaN / <NA>), and an empty frame is typed too. Columns a run writes beyond these follow.
SCHEMA = {
    "identity": {
        "run": TEXT,
        "experiment": TEXT,
        "method": TEXT,
        "seed": INT,
        "dataset": TEXT,
        "model": TEXT,
        "sweep": TEXT,
        "recipe_run": TEXT,
        "scale": TEXT,
    },
    "metrics": {
        "round": INT,
        "iteration": INT,
        "train_loss": FLOAT,
        "test_loss": FLOAT,
        "test_acc": FLOAT,
        "comm_params": INT,
        "comm_bytes": FLOAT,
        "wall_s": FLOAT,
        "current_lr": FLOAT,
        "skipped_clients": INT,
        "personal_acc": FLOAT,
        "val_loss": FLOAT,
        "val_acc": FLOAT,  # val_*: --val-fraction runs only
        "personal_val_acc": FLOAT,
    },  # --client-val-fraction runs only
    "layers": {
        "layer": INT,
        "name": TEXT,
        "kind": TEXT,
        "numel": INT,
        "syncs": INT,
        "comm_params": INT,
        "comm_bytes": FLOAT,
        "interval": INT,
    },
    "intervals": {
        "round": INT,
        "iteration": INT,
        "layer": INT,
        "name": TEXT,
        "numel": INT,
        "eligible": INT,
        "d": FLOAT,
        "interval": INT,
    },
    "clients": {
        "round": INT,
        "iteration": INT,
        "client": INT,
        "train_samples": INT,
        "test_samples": INT,
        "personal_loss": FLOAT,
        "personal_acc": FLOAT,
        "global_loss": FLOAT,
        "global_acc": FLOAT,
    },
    # system.csv (--system): the round's simulated seconds and the total so far, the clients sampled, those that took
    # part, were unavailable, missed the deadline and were dropped or kept partial work, and the last two's ids
    # (space-separated, as text)
    "system": {
        "round": INT,
        "iteration": INT,
        "round_s": FLOAT,
        "sim_time_s": FLOAT,
        "sampled": INT,
        "participants": INT,
        "unavailable": INT,
        "dropped": INT,
        "partial": INT,
        "dropped_clients": TEXT,
        "partial_clients": TEXT,
        "wait_s": FLOAT,
    },
    # fedcli tune's study folder (fedcli.tune.results.trial_records): one row per trial, Optuna's trials_dataframe
    # names (params_<name> follow state; value, or values_0 and values_1, follow them); then its run directory and
    # whether it is in the Pareto set (two objectives), its study, the run directory's status and the iterations trained
    "trials": {
        "number": INT,
        "state": TEXT,
        "run": TEXT,
        "pareto": "boolean",
        "study": TEXT,
        "run_status": TEXT,
        "baseline": "boolean",
        "pruned_iteration": INT,
        "iterations": INT,
    },
    "runs": {"path": TEXT, "status": TEXT, "schedule": TEXT},  # then the config (typed by its fields) and summary.*
    # one row per experiment: its identity less run and seed, its seeds ("0, 1"), how many runs and how many
    # completed; then the config of its runs (but the seed) and their schedule
    "experiments": {
        "experiment": TEXT,
        "method": TEXT,
        "dataset": TEXT,
        "model": TEXT,
        "sweep": TEXT,
        "recipe_run": TEXT,
        "scale": TEXT,
        "seeds": TEXT,
        "n_runs": INT,
        "completed": INT,
    },
}


def _records_of(attr: str, doc: str) -> property:
    """A DataFrame of one CSV of every run (``attr``: its :class:`RunData` attribute), the run's identity in front."""
    return property(lambda self: self._records(attr), doc=doc)


@dataclass
class Results:
    """The runs :func:`load` found (``fedcli.reports.rundata.RunData``, by name) and, in DataFrames, their records."""

    runs_by_name: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)  # run directories that could not be read: name -> reason
    sweeps: dict = field(default_factory=dict)  # run name -> {"sweep", "recipe_run", "scale"} (runs of a sweep)
    study: object = None  # a study folder of `fedcli tune` (fedcli.tune.results.StudyFolder), else None

    def __len__(self) -> int:
        return len(self.runs_by_name)

    def __repr__(self) -> str:
        left = f", {len(self.skipped)} left out (see .skipped)" if self.skipped else ""
        return f"<fedcli results: {len(self)} run(s): {', '.join(self.runs_by_name) or 'none'}{left}>"

    def _identity(self, name: str, run) -> dict:
        return {
            "run": name,
            "experiment": self._experiments().get(name, name),
            "method": run.legend(),
            "seed": run.seed,
            "dataset": run.config.get("dataset"),
            "model": run.config.get("model"),
            **self.sweeps.get(name, {}),
        }

    def _experiments(self) -> dict:
        """{run name: experiment}: runs that differ only in their seed share one (``fedcli.reports.groups``)."""
        from fedcli.reports.groups import seed_groups

        if not hasattr(self, "_experiment_of"):
            groups = seed_groups(list(self.runs_by_name.values()), list(self.runs_by_name))
            self._experiment_of = {n: g.name for g in groups for n in g.names}
        return self._experiment_of

    def _records(self, attr: str):
        renamed = RENAMED.get(attr, {})
        rows = [
            {**self._identity(name, run), **{renamed.get(k, k): v for k, v in row.items()}}
            for name, run in self.runs_by_name.items()
            for row in getattr(run, attr)
        ]
        return typed(rows, {**SCHEMA["identity"], **SCHEMA[attr]})

    metrics = _records_of(
        "metrics",
        "metrics.csv of every run: one row per evaluation (iteration, round, test_acc, comm_params, "
        "...; its lr as current_lr).",
    )
    layers = _records_of(
        "layers", "layers.csv of every run: one row per parameter tensor (numel, syncs, comm_params, comm_bytes)."
    )
    intervals = _records_of(
        "intervals", "intervals.csv of every layer-wise run: one row per layer per adjustment (d, interval)."
    )
    clients = _records_of(
        "clients", "clients.csv of every personalized run: one row per client per evaluation (personal_acc, ...)."
    )
    system = _records_of(
        "system",
        "system.csv of every run trained with --system: one row per round (participants, dropped, "
        "partial, round_s, sim_time_s, ...).",
    )

    @property
    def trials(self):
        """One row per trial of a study folder of ``fedcli tune`` (``fedcli.load(DIR)`` on it), named as Optuna's
        ``trials_dataframe`` names them: ``number``, ``state`` (the run directory's word wins over the study's
        index: ``fedcli.tune.results``), ``params_<name>``, ``value`` (one objective) or ``values_0``, ``values_1``
        (two; recomputed from each run's metrics.csv), ``run`` (the trial's run directory, the name the other frames
        give it), ``pareto`` (two objectives: in the Pareto set of the completed trials), ``study``; then
        ``run_status``, ``baseline`` (trial 0, the recipe's own configuration), ``pruned_iteration`` and
        ``iterations`` (local iterations trained). Loaded from anything else: an empty frame with these columns."""
        from fedcli.tune.results import trial_records, value_columns

        schema = dict(SCHEMA["trials"])
        if self.study is None:
            return typed([], {"number": INT, "state": TEXT, "value": FLOAT, **schema})
        rows = trial_records(self.study)
        params = sorted({k for r in rows for k in r if k.startswith("params_")})
        cols = value_columns(self.study.objectives)
        order = {"number": INT, "state": TEXT, **{p: None for p in params}, **{c: FLOAT for c in cols}, **schema}
        frame = typed(rows, {k: v for k, v in order.items() if v is not None})
        head = ["number", "state", *params, *cols]
        return frame[head + [c for c in frame.columns if c not in head]]

    @property
    def runs(self):
        """One row per run: its identity, path, status (``diverged`` for a run the divergence guard stopped, whose
        manifest says ``failed``: :func:`fedcli.results.validate.status_label`), its schedule (the config's, else the
        method's), its whole config (typed by the config's fields) and its summary (the summary's keys prefixed
        ``summary.``, so that no config key is shadowed)."""
        from fedcli.results.validate import status_label

        rows = []
        for name, run in self.runs_by_name.items():
            m = run.manifest
            rows.append(
                {
                    **self._identity(name, run),
                    "path": str(run.path),
                    "status": status_label(m),
                    **run.config,
                    "schedule": run.schedule,
                    **{f"summary.{k}": v for k, v in (m.get("summary") or {}).items()},
                }
            )
        return typed(rows, {**SCHEMA["identity"], **SCHEMA["runs"], **_config_schema()})

    @property
    def experiments(self):
        """One row per experiment (the runs that differ only in their seed, as ``fedcli report`` makes them one row):
        its identity but ``run`` and ``seed``, its ``seeds`` ("0, 1"), ``n_runs`` and how many ``completed``, then the
        config its runs share (its first run's, but the seed) and their schedule. A sweep table has one row per recipe
        run, so it joins this frame one row to one: ``table.merge(results.experiments, left_on=["sweep", "left_run"],
        right_on=["sweep", "recipe_run"])`` (joined with ``runs``, each row would come once per seed)."""
        from fedcli.results.runstate import COMPLETED

        rows, seen = [], {}
        for name, run in self.runs_by_name.items():
            seen.setdefault(self._experiments().get(name, name), []).append((name, run))
        for experiment, members in seen.items():
            name, first = members[0]
            ident = {k: v for k, v in self._identity(name, first).items() if k not in ("run", "seed")}
            config = {k: v for k, v in first.config.items() if k != "seed"}
            rows.append(
                {
                    **ident,
                    "seeds": ", ".join(str(r.seed) for _, r in members),
                    "n_runs": len(members),
                    "completed": sum(r.manifest.get("status") == COMPLETED for _, r in members),
                    **config,
                    "schedule": first.schedule,
                }
            )
        config = {k: v for k, v in _config_schema().items() if k != "seed"}
        return typed(rows, {**SCHEMA["experiments"], **config, "schedule": TEXT})

    def run(self, name: str):
        """One run's :class:`fedcli.reports.rundata.RunData` (manifest, config, and its CSVs as lists of dicts); a name
        that is not one of them: ConfigError naming the closest ones."""
        if name not in self.runs_by_name:
            from fedcli.errors import ConfigError
            from fedcli.method_names import suggest

            known = list(self.runs_by_name)
            listed = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
            raise ConfigError(
                f"no run named '{name}' in these results; {suggest(name, known)}the runs here: {listed or 'none'}"
            )
        return self.runs_by_name[name]


def _config_schema() -> dict:
    """The dtype of each config key (``fedcli.config`` fields: int, float, bool, str)."""
    from fedcli.config import FIELDS, field_type

    kinds = {int: INT, float: FLOAT, bool: "boolean", str: TEXT}
    return {name: kinds[field_type(f)] for name, f in FIELDS.items() if name != "schedule"}


def typed(rows: list[dict], schema: dict):
    """A DataFrame of ``rows`` with the columns of ``schema`` first, each of its dtype (numbers: an empty cell or a
    missing column is NaN / <NA>; text: an empty string is NaN), then any other column (its numbers as numbers)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    extra = [c for c in df.columns if c not in schema]
    out = pd.DataFrame(
        {
            col: _as(df[col] if col in df.columns else pd.Series([None] * len(df), dtype=object), dtype)
            for col, dtype in schema.items()
        },
        index=df.index,
    )
    return pd.concat([out, numeric(df[extra].copy())], axis=1) if extra else out


def _as(col, dtype: str):
    """One column as ``dtype`` (module SCHEMA's kinds, or pandas' ``boolean``)."""
    import pandas as pd

    blank = col.isna() | col.map(lambda v: isinstance(v, str) and v == "")
    if dtype == TEXT:  # a text value that reads as a number (a client id "3") stays text
        return col.where(~blank, None).map(lambda v: v if isinstance(v, str) or pd.isna(v) else str(v)).astype(object)
    if dtype == "boolean":
        return col.where(~blank, None).astype("boolean")
    number = pd.to_numeric(col.where(~blank, None), errors="coerce")
    return number.astype(dtype)


def numeric(df):
    """Columns whose every non-empty cell is a number as numbers (an empty CSV cell: NaN), the others as they are."""
    import pandas as pd

    for col in df.columns:
        if df[col].dtype == object:
            blank = df[col].isna() | (df[col] == "")
            converted = pd.to_numeric(df[col].where(~blank), errors="coerce")
            if converted.notna().sum() == (~blank).sum():
                df[col] = converted
    return df


def _sweep_of(run_dir: Path, cache: dict) -> dict:
    """{"sweep", "recipe_run", "scale"} of a run directory that a sweep planned (a ``sweep.json`` one to three folders
    up lists it: ``SWEEP/<slug>/seed<k>``), else {}."""
    from fedcli.errors import ConfigError
    from fedcli.results.sweepdir import MANIFEST, load_manifest

    for folder in list(run_dir.parents)[:3]:
        if not (folder / MANIFEST).is_file():
            continue
        if folder not in cache:
            try:
                manifest = load_manifest(folder)
            except ConfigError:  # unreadable: the run is read as one of no sweep
                manifest = {}
            retimed = [v for v in manifest.get("retimed") or [] if isinstance(v, dict)]
            cache[folder] = {
                (folder / e["dir"]).resolve(): {
                    "sweep": str(folder),
                    "recipe_run": e.get("name"),
                    "scale": manifest.get("scale"),
                    "retimed": [v for v in retimed if v.get("of") == e.get("name")],
                }
                for e in manifest.get("runs", [])
                if isinstance(e, dict) and "dir" in e
            }
        if run_dir.resolve() in cache[folder]:
            return cache[folder][run_dir.resolve()]
    return {}


def _run_dirs(root: Path) -> list[Path]:
    from fedcli.reports.single import RUN_MANIFEST, is_run_dir

    if is_run_dir(root):
        return [root]
    found = set()
    for depth in ("*", "*/*", "*/*/*", "*/*/*/*"):  # results/, a sweep folder, results/<sweep>/<run>/<seed>
        found.update(p.parent for p in root.glob(f"{depth}/{RUN_MANIFEST}"))
    return sorted(found)


def load(path: str | Path = "results", strict: bool = False) -> Results:
    """The run directory ``path``, or every run directory up to four levels below it (a sweep's, ``results/``).

    Each run is read and checked as ``fedcli report`` reads it; one that cannot be read is left out and named in
    ``.skipped`` with its reason (``strict=True``: raise its error instead). No run directory at all is an error."""
    from fedcli.errors import ConfigError, FedcliError
    from fedcli.reports.single import load_run

    root = given_path(path, "fedcli.load", "path")
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder")
    dirs = _run_dirs(root)
    if not dirs:
        raise ConfigError(
            f"{root}: no run directory (manifest.json) here or up to four levels below; run `fedcli train` first"
        )
    runs, skipped = [], {}
    for d in dirs:
        try:
            runs.append(load_run(d))
        except FedcliError as e:
            if strict:
                raise
            skipped[str(d.relative_to(root)) if d != root else d.name] = str(e)
    # names: the run directory's own name, or its path below the folder given (unique by construction)
    names = [root.name] if dirs == [root] else [str(r.path.relative_to(root)) for r in runs]
    cache: dict = {}
    sweeps = {name: dict(found) for name, r in zip(names, runs) if (found := _sweep_of(Path(r.path), cache))}
    found_runs = dict(zip(names, runs))
    _add_retimed(found_runs, sweeps, skipped, strict)
    from fedcli.tune.results import is_study, read_study

    return Results(found_runs, skipped, sweeps, read_study(root) if is_study(root) else None)


def _add_retimed(runs: dict, sweeps: dict, skipped: dict, strict: bool) -> None:
    """The re-timed runs of a sweep (a recipe run's ``retime`` entries; docs/sweeps.md, "Re-timed runs"), as the report
    reads them: each trained run once more per entry, named ``<run> [<entry's name>]``, its ``sim_time_s`` re-timed
    under the entry's options (:func:`fedcli.reports.retime.variant`) and its ``recipe_run`` the entry's name. One that
    cannot be re-timed is left out and named in ``skipped``."""
    from fedcli.errors import FedcliError
    from fedcli.reports.retime import variant

    for name in list(runs):
        info = sweeps.get(name) or {}
        for entry in info.pop("retimed", None) or []:
            key = f"{name} [{entry.get('name')}]"
            try:
                runs[key] = variant(runs[name], dict(entry.get("options") or {}))
            except FedcliError as e:
                if strict:
                    raise
                skipped[key] = str(e)
                continue
            sweeps[key] = {**info, "recipe_run": entry.get("name")}


def _cli(args: list[str]):
    """``fedcli ARGS`` in this process (:func:`fedcli.cli.main.invoke`): the command's return value. A failure raises
    :class:`fedcli.errors.FedcliError` (or its subclass: ConfigError, DataError, ...) with the command's one-line
    message and its exit code as ``exit_code``, as the command would print and exit with."""
    import typer

    from fedcli.cli.main import invoke
    from fedcli.errors import FedcliError

    try:
        return invoke(args)
    except typer.Exit as e:
        if e.exit_code in (0, None):
            return None
        err = FedcliError(f"`fedcli {' '.join(args)}` exited with code {e.exit_code} (its messages are above)")
        err.exit_code = e.exit_code
        raise err from None


def given_path(value, where: str, name: str) -> Path:
    """A path an API call was given (``name`` of ``where``, e.g. ``out`` of ``fedcli.train``): a str or a path naming
    something, else ConfigError (exit 2) before anything runs (``None`` became the folder ``./None``)."""
    from fedcli.errors import ConfigError

    if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
        raise ConfigError(f"{where}: {name} must be a path (a str or a pathlib.Path naming a folder), got {value!r}")
    return Path(value)


#: the values a flag takes from a keyword argument: one each (True: a switch), or a list or tuple of them for a
#: repeatable flag (``figure=["a", "b"]``: ``--figure a --figure b``)
FLAG_VALUES = (str, numbers.Real, os.PathLike)  # numbers.Real: numpy's scalars too


def flags(where: str = "fedcli", /, **options) -> list[str]:
    """Keyword arguments as ``fedcli`` flags: ``algo="fedlama", tau=5, ala_trace=True`` -> ``--algo fedlama --tau 5
    --ala-trace`` (False and None: left out; a list or tuple: the flag once per item). Any other value (a dict, a
    set, an object) is a ConfigError (exit 2) naming the keyword, not its ``str()`` passed on as the flag's value.
    ``where``: the API call, for the message."""
    from fedcli.errors import ConfigError

    out = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
            continue
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, bool) or not isinstance(item, FLAG_VALUES):
                raise ConfigError(
                    f"{where}: {key}={value!r} is not a flag's value (a str, a number or a path; True for a "
                    f"switch; a list of them for a repeatable flag)",
                    key=key,
                )
            out += [flag, str(os.fspath(item) if isinstance(item, os.PathLike) else item)]
    return out


def train(out: str | Path, **options) -> Results:
    """``fedcli train --out OUT`` with ``options`` as its flags (see :func:`flags`), then :func:`load` of the run:
    ``fedcli.train("results/lama", algo="fedlama", dataset="digits", iterations=200)``. ``out`` must be a path (a
    ConfigError, exit 2, before anything is written otherwise); it is given first, so no flag can take it as a value."""
    out = given_path(out, "fedcli.train", "out")
    _cli(["train", "--out", str(out), *flags("fedcli.train", **options)])
    return load(out, strict=True)


class Report(NamedTuple):
    """What :func:`write_report` (``fedcli.report(...)``) gives back: ``table``, the table it made as a pandas
    DataFrame (the tidy CSV of ``--format csv``: a sweep table's identifiers ``table``, ``group``, ``run`` or
    ``left_run`` / ``right_run`` (the recipe's run names, the frames' ``recipe_run``) and ``sweep``, then
    ``<column>_mean``, ``<column>_std``, ...; the comparison of run directories: one row per experiment), None where
    none was made (``--paper``, figures only); ``figures``: the figure files it wrote (PNG, PDF and each caption's
    .txt), as Paths."""

    table: object
    figures: list


def write_report(*paths: str | Path, print: bool = False, **options) -> Report:
    """``fedcli report PATHS`` with ``options`` as its flags: ``fedcli.write_report("results/lama", "results/avg",
    figures="results/fig")`` writes the figures, as the command does, and returns the table and the figures
    (:class:`Report`: ``table, figures = fedcli.report(...)``). The table (or a folder's listing) is printed only with
    ``print=True``, as the command prints it; what is said on stderr (where files went, warnings) is said either way."""
    import contextlib
    import io
    import sys

    import pandas as pd

    from fedcli.reports.tables import render_csv

    given = [str(given_path(p, "fedcli.report", "each path")) for p in paths]
    with contextlib.redirect_stdout(sys.stdout if print else io.StringIO()):
        out = _cli(["report", *given, *flags("fedcli.report", **options)])
    table = getattr(out, "table", None)
    frame = None
    if table is not None:
        frame = pd.read_csv(io.StringIO(render_csv(table)))
        if getattr(out, "sweep", None) is not None:
            frame.insert(1, "sweep", out.sweep)
    return Report(frame, [Path(f) for f in getattr(out, "figures", [])])
