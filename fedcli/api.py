"""Results in pandas, for notebooks: ``fedcli.load(path)``, ``fedcli.train(...)``, ``fedcli.write_report(...)`` (not
``fedcli.report``: that name is the report package, ``fedcli/report/``).

``load`` reads one ``fedcli train`` run directory, or every run directory under a folder (a sweep, ``results/``), with
the same checks as ``fedcli report`` (a completed run whose files do not match its manifest is refused), and gives
them as pandas DataFrames, one row per record with the run's identity in front (``run``, ``method``, ``seed``,
``dataset``, ``model``): ``metrics`` (metrics.csv: one row per evaluation), ``layers`` (layers.csv: one per parameter
tensor), ``intervals`` (intervals.csv: one per layer per adjustment, layer-wise methods), ``clients`` (clients.csv:
one per client per evaluation, personalized methods) and ``runs`` (one row per run: its config and summary). The
columns are those of the CSVs docs/run-directory.md describes. No torch import (pandas only, when called).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: the identity of a run put in front of each of its rows (``experiment``: the runs that differ only in their seed
#: share one, named as ``fedcli report`` names them: ``lama`` for ``lama/s0`` and ``lama/s1``)
ID_COLUMNS = ("run", "experiment", "method", "seed", "dataset", "model")
#: the per-record tables of a run directory: attribute of :class:`RunData` (its CSV)
TABLES = ("metrics", "layers", "intervals", "clients")


def _records_of(attr: str, doc: str) -> property:
    """A DataFrame of one CSV of every run (``attr``: its :class:`RunData` attribute), the run's identity in front."""
    return property(lambda self: self._records(attr), doc=doc)


@dataclass
class Results:
    """The runs :func:`load` found (``fedcli.report.rundata.RunData``, by name) and, in DataFrames, their records."""

    runs_by_name: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)  # run directories that could not be read: name -> reason

    def __len__(self) -> int:
        return len(self.runs_by_name)

    def __repr__(self) -> str:
        left = f", {len(self.skipped)} left out (see .skipped)" if self.skipped else ""
        return f"<fedcli results: {len(self)} run(s): {', '.join(self.runs_by_name) or 'none'}{left}>"

    def _identity(self, name: str, run) -> dict:
        return {"run": name, "experiment": self._experiments().get(name, name), "method": run.legend(), "seed": run.seed,
                "dataset": run.config.get("dataset"), "model": run.config.get("model")}

    def _experiments(self) -> dict:
        """{run name: experiment}: runs that differ only in their seed share one (``fedcli.report.groups``)."""
        from fedcli.report.groups import seed_groups

        if not hasattr(self, "_experiment_of"):
            groups = seed_groups(list(self.runs_by_name.values()), list(self.runs_by_name))
            self._experiment_of = {n: g.name for g in groups for n in g.names}
        return self._experiment_of

    def _records(self, attr: str):
        import pandas as pd

        frames = [pd.DataFrame([{**self._identity(name, run), **row} for row in getattr(run, attr)])
                  for name, run in self.runs_by_name.items() if getattr(run, attr)]
        if not frames:
            return pd.DataFrame(columns=list(ID_COLUMNS))
        return numeric(pd.concat(frames, ignore_index=True))

    metrics = _records_of("metrics", "metrics.csv of every run: one row per evaluation (iteration, round, test_acc, comm_params, ...).")
    layers = _records_of("layers", "layers.csv of every run: one row per parameter tensor (numel, syncs, comm_params, comm_bytes).")
    intervals = _records_of("intervals", "intervals.csv of every layer-wise run: one row per layer per adjustment (d, interval).")
    clients = _records_of("clients", "clients.csv of every personalized run: one row per client per evaluation (personal_acc, ...).")

    @property
    def runs(self):
        """One row per run: its identity, path, status (``diverged`` for a run the divergence guard stopped, whose
        manifest says ``failed``: :func:`fedcli.results.validate.status_label`), the method's parts, its whole config and its summary (the
        summary's keys prefixed ``summary.``, so that no config key is shadowed)."""
        import pandas as pd

        from fedcli.results.validate import status_label

        rows = []
        for name, run in self.runs_by_name.items():
            m = run.manifest
            rows.append({**self._identity(name, run), "path": str(run.path), "status": status_label(m),
                         "schedule": run.method.get("schedule"), **run.config,
                         **{f"summary.{k}": v for k, v in (m.get("summary") or {}).items()}})
        return numeric(pd.DataFrame(rows))

    def run(self, name: str):
        """One run's :class:`fedcli.report.rundata.RunData` (manifest, config, and its CSVs as lists of dicts)."""
        return self.runs_by_name[name]


def numeric(df):
    """Columns whose every non-empty cell is a number as numbers (an empty CSV cell, such as ``personal_acc`` of a
    global-model run: NaN), the others as they are."""
    import pandas as pd

    for col in df.columns:
        if df[col].dtype == object:
            blank = df[col].isna() | (df[col] == "")
            converted = pd.to_numeric(df[col].where(~blank), errors="coerce")
            if converted.notna().sum() == (~blank).sum():
                df[col] = converted
    return df


def _run_dirs(root: Path) -> list[Path]:
    from fedcli.report.single import RUN_MANIFEST, is_run_dir

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
    from fedcli.report.single import load_run

    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder")
    dirs = _run_dirs(root)
    if not dirs:
        raise ConfigError(f"{root}: no run directory (manifest.json) here or up to four levels below; run `fedcli train` first")
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
    return Results(dict(zip(names, runs)), skipped)


def _cli(args: list[str]) -> None:
    """``fedcli ARGS`` in this process; a non-zero exit raises :class:`fedcli.errors.FedcliError` with the code."""
    from fedcli.cli.main import main
    from fedcli.errors import FedcliError

    try:
        code = main(args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    if code not in (0, None):
        err = FedcliError(f"`fedcli {' '.join(args)}` exited with code {code} (its message is above)")
        err.exit_code = code
        raise err


def flags(**options) -> list[str]:
    """Keyword arguments as ``fedcli`` flags: ``algo="fedlama", tau=5, ala_trace=True`` -> ``--algo fedlama --tau 5
    --ala-trace`` (False and None: left out)."""
    out = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        out.append("--" + key.replace("_", "-"))
        if value is not True:
            out.append(str(value))
    return out


def train(out: str | Path, **options) -> Results:
    """``fedcli train --out OUT`` with ``options`` as its flags (see :func:`flags`), then :func:`load` of the run:
    ``fedcli.train("results/lama", algo="fedlama", dataset="digits", iterations=200)``."""
    _cli(["train", *flags(**options), "--out", str(out)])
    return load(out, strict=True)


def write_report(*paths: str | Path, **options) -> None:
    """``fedcli report PATHS`` with ``options`` as its flags: ``fedcli.write_report("results/lama", "results/avg",
    figures="results/fig")`` prints the table and writes the figures, as the command does."""
    _cli(["report", *map(str, paths), *flags(**options)])
