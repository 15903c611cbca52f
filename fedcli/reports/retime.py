"""``fedcli report RUN... --uplink ...``: re-time run directories under other system options, from their own records
(``timing.csv`` and the manifest's ``timing`` entry, ``fedcli.fl.timing``; docs/system-model.md, "Re-timing a run").

The options are the system model's own (``fedcli.specs.system.SystemParams``: the same declarations, syntax and
checks as ``fedcli train``): those that price what a round did (devices, links, the server), not those that decide
who trains (a deadline, availability), which a re-timed run cannot have had.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from fedcli.errors import ConfigError, DataError
from fedcli.fl.timing import OPTIONS

#: the per-client draws: giving one of them re-times with draws, not with the run's own trace
DRAWS = ("speed", "uplink", "downlink", "latency")


def fields() -> dict:
    """The re-timing options' declarations (``SystemParams``' fields), by name: ``fedcli report``'s options."""
    from fedcli.specs.system import SystemParams

    return {f.name: f for f in dataclasses.fields(SystemParams) if f.name in OPTIONS}


def check(given: dict) -> dict:
    """The re-timing options the user gave, checked as ``fedcli train`` checks them (ConfigError, exit 2)."""
    from fedcli.config import check_value
    from fedcli.specs.system import SystemParams

    fields_ = fields()
    for name, value in given.items():
        check_value(fields_[name], value)
    SystemParams(**{"system": True, **given}).check()  # each distribution parses and gives valid values
    return given


def options_for(run, given: dict) -> SimpleNamespace:
    """The system options run ``run`` is re-timed under: ``given``, over the run's own (trained with ``--system``) or
    the defaults; a draw given drops the run's own trace. Its seed keys the draws, as in training."""
    from fedcli.specs.system import SystemParams

    cfg = run.config
    own = cfg if cfg.get("system") else {}
    values = {f.name: own.get(f.name, f.default) for f in dataclasses.fields(SystemParams)}
    if any(k in given for k in DRAWS) and "system_trace" not in given:
        values["system_trace"] = ""
    values.update(given)
    values.update(availability=1.0, availability_trace="", deadline=0.0, sampling="cohort", overcommit=1.0)
    return SimpleNamespace(**values, seed=int(cfg.get("seed", run.seed)))


def records(run) -> tuple[dict, list[dict]]:
    """The run's ``timing`` manifest entry and its timing.csv rows; ConfigError (exit 2) for a run whose training
    depended on the system model or that has no records, DataError (exit 3) for records that stop short."""
    from fedcli.fl.timing import VERSION, refusal
    from fedcli.results.rundir import read_rows

    why = refusal(run.config)
    if why:
        raise ConfigError(
            f"{run.path}: cannot be re-timed: {why}; only a run whose training did not depend on the "
            f'system model can be (docs/system-model.md, "Re-timing a run")'
        )
    entry = run.manifest.get("timing")
    if not isinstance(entry, dict):
        raise ConfigError(
            f"{run.path}: cannot be re-timed: its manifest has no 'timing' entry (nor the run a "
            f"timing.csv): it was trained by a fedcli older than re-timing; train it again to re-time it"
        )
    if int(entry.get("version", 0)) > VERSION:
        raise ConfigError(
            f"{run.path}: its timing records are of format {entry.get('version')}, newer than this "
            f"fedcli reads ({VERSION}); re-time it with the fedcli that trained it"
        )
    try:
        rows = read_rows(run.path / "timing.csv")
    except ValueError as e:
        raise DataError(f"{run.path}: {e}") from None
    rounds = [int(r["round"]) for r in rows]
    if rounds != list(range(1, len(rows) + 1)):
        first = next((i + 1 for i, r in enumerate(rounds) if r != i + 1), len(rows) + 1)
        raise DataError(
            f"{run.path}/timing.csv: no record of round {first} (rounds {rounds[0] if rounds else '-'} to "
            f"{rounds[-1] if rounds else '-'} recorded): a run resumed from a checkpoint of an older fedcli, "
            f"or an edited file; it cannot be re-timed"
        )
    return entry, rows


def apply(runs, given: dict) -> None:
    """Re-time every run of ``runs`` (RunData) under the options ``given`` (:func:`check`ed): each metrics row's
    ``sim_time_s`` becomes the simulated time at its round under them, and ``run.retimed`` the options. All runs are
    checked before any is changed."""
    from fedcli.fl.timing import retime

    plans = [(run, *records(run)) for run in runs]
    for run, entry, rows in plans:
        last = max((int(m["round"]) for m in run.metrics), default=0)
        if last > len(rows):
            raise DataError(
                f"{run.path}/timing.csv: {len(rows)} round(s) recorded, metrics.csv evaluates round {last}; "
                f"it cannot be re-timed"
            )
    for run, entry, rows in plans:
        at = dict(retime(entry, rows, options_for(run, given)))
        for m in run.metrics:
            m["sim_time_s"] = at.get(int(m["round"]), 0.0)
        run.retimed = dict(given)


def describe(given: dict) -> str:
    """``--uplink constant:3e6 --latency constant:0``: the options as a note says them."""
    return " ".join(
        f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float) else f"--{k.replace('_', '-')} {v}"
        for k, v in given.items()
    )


def variant(run, options: dict):
    """A re-timed run of a sweep (a recipe run's ``retime`` entry; docs/sweeps.md, "Re-timed runs"): a new RunData of
    ``run``'s folder whose metrics' ``sim_time_s`` are re-timed under ``options`` (:func:`apply`) and whose config
    holds them (a table's ``uplink`` column shows the re-timed value), ``run`` itself unchanged."""
    import copy

    from fedcli.reports.rundata import RunData

    out = RunData(run.path, copy.deepcopy(run.manifest))
    apply([out], dict(options))
    cfg = out.manifest.setdefault("config", {})
    if any(k in options for k in DRAWS) and "system_trace" not in options:
        cfg["system_trace"] = ""
    cfg.update(options, system=True)
    return out
