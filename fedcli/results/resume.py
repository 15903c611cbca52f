"""``fedcli train --resume RUN_DIR``: the config a run continues with (its manifest's, plus the flags that may
change), the checkpoint it continues from (read by the root, checked against the run's experiment and process count,
sent to every process) and its run directory reopened at that checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from fedcli.config import FIELDS, TrainConfig, flag
from fedcli.errors import ConfigError, DataError, FedcliError
from fedcli.fl.context import LogContext
from fedcli.results.runstate import RESUME_MAY_CHANGE


def read_manifest(run_dir: str | Path) -> dict:
    run_dir = Path(run_dir)
    path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise ConfigError(f"--resume {run_dir}: no such folder; expected a run directory written by fedcli train")
    if not path.exists():
        raise ConfigError(
            f"--resume {run_dir}: it has no manifest.json; expected a run directory written by fedcli train"
        )
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot be read ({e}); expected the JSON manifest of a fedcli run") from None
    if not isinstance(man, dict) or not isinstance(man.get("config"), dict):
        raise DataError(f"{path}: has no 'config' table; expected the JSON manifest of a fedcli run")
    return man


def resume_config(
    run_dir: str | Path, flags: dict, *, recipe=None, scale=None, overwrite: bool = False, promote: bool = False
) -> TrainConfig:
    """The config to continue ``run_dir`` with: its manifest's, plus the ``flags`` that may change
    (:data:`RESUME_MAY_CHANGE`); any other flag that differs is refused (exit 2). A pruned run (stopped on request,
    fedcli/results/stopfile.py) is refused too, unless ``promote`` (``--promote``: finish it)."""
    run_dir = Path(run_dir)
    if recipe or scale:
        raise ConfigError(
            "--resume takes the run's config from RUN_DIR/manifest.json; --recipe/--scale cannot be combined with it"
        )
    if overwrite:
        raise ConfigError("--resume continues a run; --overwrite cannot be combined with it")
    if run_dir.is_dir():
        from fedcli.results.rundir import refuse_links

        refuse_links(run_dir)  # a planted link is named before anything is read through it
    man = read_manifest(run_dir)
    status = man.get("status")
    if status == "completed":
        raise ConfigError(f"--resume {run_dir}: the run already completed; nothing to resume")
    from fedcli.results.runstate import refuse_pruned

    if not promote:
        refuse_pruned(run_dir, man)
    # a run still in progress is refused by its lock (fedcli/results/lock.py), taken before anything is touched
    values = dict(man["config"])
    try:
        cfg = TrainConfig.from_dict(values, where=str(run_dir / "manifest.json"))
    except ConfigError as e:
        raise ConfigError(f"--resume: {e} (written by another fedcli version?)") from None
    for key, value in flags.items():
        if key == "out" and Path(value).resolve() != run_dir.resolve():
            raise ConfigError(f"--out {value} differs from --resume {run_dir}; a resumed run stays in its folder")
        if key in RESUME_MAY_CHANGE:
            setattr(cfg, key, value)
        elif key in FIELDS and getattr(cfg, key) != value:
            raise ConfigError(
                f"{flag(key)} {value} would change the experiment being resumed (it ran with "
                f"{flag(key)} {getattr(cfg, key)}); only "
                f"{', '.join(sorted(flag(k) for k in RESUME_MAY_CHANGE - {'out'}))} may change"
            )
    cfg.out = str(run_dir)
    return cfg.validate()


def check_traces(run_dir: str | Path, config: dict) -> None:
    """The traces the run reads (``--system-trace``, ``--availability-trace``) are the files it started with: a
    changed one (its sha256 differs from the manifest's) is refused as a changed option is (ConfigError, exit 2), so
    the rest of the run is not simulated on other values than the rounds before."""
    from fedcli.specs.system import TRACE_ENTRIES, trace_digests

    recorded = read_manifest(run_dir).get("system") or {}
    for key, (path, digest) in trace_digests(config).items():
        was = (recorded.get(TRACE_ENTRIES[key]) or {}).get("sha256")
        if was is not None and was != digest:
            raise ConfigError(
                f"{flag(key)} {path} changed since {run_dir} started (sha256 {was[:12]}... then, "
                f"{digest[:12]}... now): the resumed rounds would be simulated on other values than the "
                f"rounds before; restore the file, or start a new run",
                key=key,
            )


def load_for_resume(run_dir: str | Path, comm, warn=None, config: dict | None = None) -> dict | None:
    """The latest checkpoint, read by the root and sent to every process (errors raised on all of them).

    A changed trace (:func:`check_traces`), a checkpoint of another experiment (``config``: the run's) or of another
    number of processes is refused before the CSVs are looked at, so the message says what is wrong with it."""
    from fedcli.results.checkpoint import check_config, check_world_size, load_latest

    payload = None
    if comm.is_root:
        try:
            if config is not None:
                check_traces(run_dir, config)  # before anything is cut back: a refused resume changes nothing
            ckpt = load_latest(run_dir, warn)
            if ckpt is not None:
                if config is not None:
                    check_config(ckpt, config)
                check_world_size(ckpt, comm.size, run_dir)
            from fedcli.results.rundir import APPEND_CSVS, rewind_csvs

            positions = {name: {"bytes": 0, "rows": 0} for name in APPEND_CSVS}
            positions.update(ckpt["csv"] if ckpt is not None else {})
            rewind_csvs(run_dir, positions)  # checked here, so a bad file stops every process
            payload = {"ckpt": ckpt}
        except FedcliError as e:
            payload = {"error": (type(e).__name__, str(e))}
    payload = comm.bcast(payload)
    if "error" in payload:
        kind, msg = payload["error"]
        err = (ConfigError if kind == "ConfigError" else DataError)(msg)
        err.collective = True
        raise err
    return payload["ckpt"]


def reopen_run_dir(
    run_dir: str | Path,
    ckpt: dict | None,
    ctx: LogContext,
    manifest_updates: dict | None = None,
    state=None,
    promoted: dict | None = None,
):
    """The RunDir of a resumed run: CSVs cut back to the checkpoint (to nothing without one), reopened
    for appending, the manifest back to ``running`` with a ``resumes`` entry, layers.csv as of the checkpoint
    (``state``: the restored TrainState, whose simulated seconds per layer it gives with ``--system``). ``promoted``:
    ``--promote`` of a pruned run, whose ``pruned`` entry moves into the ``resumes`` entry (``promoted``) and whose
    ``reason`` goes."""
    from fedcli.results.runlog import layer_rows

    run_dir = Path(run_dir)
    rd = _reopen_csvs(run_dir, ckpt, ctx)
    rd.manifest = read_manifest(run_dir)
    entry = _resume_entry(ckpt)
    if promoted is not None:
        entry["promoted"] = promoted
        rd.manifest.pop("pruned", None)
        if rd.manifest.get("reason") == "pruned":
            rd.manifest.pop("reason")
    rd.manifest.pop("error", None)
    rd.manifest.pop("summary", None)
    rd.write_manifest(
        status="running",
        end_time=None,
        pid=os.getpid(),
        host=socket.gethostname(),
        config=ctx.cfg.to_dict(),
        resumes=list(rd.manifest.get("resumes", [])) + [entry],
        **(manifest_updates or {}),
    )
    rd.write_layers(layer_rows(ctx, state))
    return rd


def _reopen_csvs(run_dir: Path, ckpt: dict | None, ctx: LogContext):
    """The run's CSVs cut back to the checkpoint's byte and row counts (to nothing without one), reopened as a
    RunDir that appends to them."""
    from fedcli.results.rundir import (
        APPEND_CSVS,
        CLIENTS_COLUMNS,
        INTERVALS_COLUMNS,
        PART_CSVS,
        SKIPPED_COLUMNS,
        SYSTEM_COLUMNS,
        AppendCSV,
        RunDir,
        rewind_csvs,
    )
    from fedcli.results.runlog import extra_columns

    positions = {name: {"bytes": 0, "rows": 0} for name in APPEND_CSVS}
    if ckpt is not None:
        positions.update(ckpt["csv"])
    rewind_csvs(run_dir, positions)
    rd = RunDir(run_dir, extra_columns(ctx))
    for name, attr, cols in (
        ("intervals.csv", "intervals", INTERVALS_COLUMNS),
        ("skipped.csv", "skipped", SKIPPED_COLUMNS),
        ("clients.csv", "clients", CLIENTS_COLUMNS),
        ("system.csv", "system", SYSTEM_COLUMNS),
    ):
        if (run_dir / name).exists():
            setattr(rd, attr, AppendCSV(run_dir / name, cols))
    rd.part_csvs = {
        name: AppendCSV(run_dir / name, cols) for name, cols in PART_CSVS.items() if (run_dir / name).exists()
    }
    return rd


def _resume_entry(ckpt: dict | None) -> dict:
    """The manifest's ``resumes`` entry of this resume: when, from which checkpoint, where and with what."""
    from fedcli.results.rundir import git_commit, now, versions

    return {
        "time": now(),
        "checkpoint": Path(ckpt["path"]).name if ckpt else None,
        "round": ckpt["round"] if ckpt else 0,
        "iteration": ckpt["iteration"] if ckpt else 0,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "versions": versions(),
        "git_commit": git_commit(),
        "command": sys.argv,
    }


def version_drift(manifest: dict) -> list[str]:
    """Packages whose version differs from the ones the run started with (the bitwise guarantee needs none)."""
    from fedcli.results.rundir import versions

    before, now_ = manifest.get("versions") or {}, versions()
    return [f"{k} {before[k]} -> {now_[k]}" for k in sorted(before) if k in now_ and before[k] != now_[k]]
