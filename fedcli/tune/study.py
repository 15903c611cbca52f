"""The study folder of ``fedcli tune`` (the contract in docs/tuning.md, "The study folder"): ``tune.json`` (the
record), the storage's place, ``trials.csv`` (the index, derived from the storage and the run directories), the
trials' run directories ``<study>/trial-NNNN``. Torch-free and optuna-free.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.results.masking import masked
from fedcli.results.rundir import atomic_write
from fedcli.safefs import refuse_link

RECORD = "tune.json"
JOURNAL = "optuna.journal"
SQLITE = "optuna.sqlite3"
LOCK = "tune.lock"
WORKERS_LOCK = ".tune.workers.lock"
TRIALS_CSV = "trials.csv"
#: the environment variable a database URL may come from (``--storage env:NAME`` names another)
STORAGE_ENV = "FEDCLI_TUNE_STORAGE"


def trial_rel(study: str, number: int) -> str:
    return f"{study}/trial-{number:04d}"


def resolve_storage(storage: str, root: Path) -> tuple[str, str]:
    """(kind, what) of ``--storage``: ("journal", file), ("sqlite", URL of DIR/optuna.sqlite3), ("url", URL): a
    database URL, or ``env:NAME`` (default name :data:`STORAGE_ENV`) reading it from the environment (so the password is
    in no command line)."""
    import os

    if storage == "journal":
        return "journal", str(root / JOURNAL)
    if storage == "sqlite":
        return "sqlite", f"sqlite:///{(root / SQLITE).absolute()}"
    if storage.startswith("env:") or storage == "env":
        name = storage[4:] or STORAGE_ENV
        url = os.environ.get(name, "")
        if not url:
            raise ConfigError(
                f"--storage {storage}: the environment variable {name} is not set (it holds the database URL)"
            )
        storage = url
    if "://" not in storage:
        raise ConfigError(
            f"--storage must be journal, sqlite, a database URL (postgresql+psycopg://user@host/db) or "
            f"env:NAME, got {masked(storage)!r}"
        )
    return "url", storage


def repair_journal(root: Path) -> int:
    """Before a coordinator writes (it holds ``tune.lock``: the only writer): the journal's stale lock of a killed
    coordinator goes, and a record cut by the kill (a last line without its newline, never acknowledged) is dropped, so
    that the next record does not land on the same line (Optuna's reader would then refuse the whole journal). Returns
    the bytes dropped."""
    import os

    path = root / JOURNAL
    refuse_link(path)
    lock = root / (JOURNAL + ".lock")
    if lock.is_symlink() or lock.exists():
        lock.unlink()
    if not path.is_file():
        return 0
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return 0
        keep, chunk = size, 1 << 16
        while keep > 0:  # back to the last newline
            start = max(0, keep - chunk)
            f.seek(start)
            block = f.read(keep - start)
            i = block.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            keep = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


def storage_label(kind: str, what: str) -> str:
    return kind if kind in ("journal", "sqlite") else masked(what)


def read_record(root: Path) -> dict | None:
    path = root / RECORD
    refuse_link(path)
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable tune record ({e}); move it away or pass --fresh") from None
    if not isinstance(rec, dict) or rec.get("kind") != "fedcli-tune":
        raise ConfigError(f"{path}: not a fedcli tune record; choose another --out or pass --fresh")
    return rec


def write_record(root: Path, record: dict) -> None:
    refuse_link(root / RECORD)
    atomic_write(root / RECORD, json.dumps(record, indent=2) + "\n")


#: what a study may not change between two calls on one folder (issue 58: "a study whose recipe, space, objectives or
#: scale changed is refused")
def record_differs(old: dict, new: dict) -> str | None:
    """Why the study in the folder (``old``) is not the one asked for (``new``), naming both; None when it is."""
    if old.get("recipe_sha256") != new.get("recipe_sha256"):
        return (
            f"its recipe {old.get('recipe')} (sha256 {str(old.get('recipe_sha256'))[:12]}) is not {new['recipe']} "
            f"(sha256 {new['recipe_sha256'][:12]})"
        )
    if (old.get("scale") or None) != (new.get("scale") or None):
        return f"it was tuned at scale {old.get('scale') or 'base'}, not {new.get('scale') or 'base'}"
    if old.get("objectives") != new.get("objectives"):
        return f"its objectives {json.dumps(old.get('objectives'))} are not {json.dumps(new.get('objectives'))}"
    if old.get("select_on") != new.get("select_on"):
        return f"it selects on {old.get('select_on')}, not {new.get('select_on')}"
    os_, ns = {s["name"]: s for s in old.get("studies", [])}, {s["name"]: s for s in new.get("studies", [])}
    if set(os_) != set(ns):
        return f"its studies {sorted(os_)} are not {sorted(ns)}"
    for name, s in ns.items():
        if os_[name].get("space") != s.get("space"):
            return f"study {name}'s space {json.dumps(os_[name].get('space'))} is not {json.dumps(s.get('space'))}"
        if os_[name].get("base") != s.get("base"):
            return f"study {name}'s base configuration changed"
    if old.get("storage") != new.get("storage"):
        return f"its storage is {old.get('storage')}, not {new.get('storage')}"
    return None


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    return str(v)


def write_trials_csv(root: Path, rows: list[dict], params: list[str], objectives: int) -> None:
    """``trials.csv`` (the contract's columns: study, number, state, params_<name>..., value | values_0, values_1,
    run, pruned_iteration, baseline), sorted by study then number, replaced atomically."""
    cols = [
        "study",
        "number",
        "state",
        *[f"params_{p}" for p in params],
        *(["value"] if objectives == 1 else [f"values_{i}" for i in range(objectives)]),
        "run",
        "pruned_iteration",
        "baseline",
    ]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in sorted(rows, key=lambda r: (r["study"], r["number"])):
        vals = r.get("values") or [None] * objectives
        w.writerow(
            [
                r["study"],
                r["number"],
                r["state"],
                *[_cell(r["params"].get(p)) for p in params],
                *[_cell(v) for v in vals],
                r.get("run", ""),
                _cell(r.get("pruned_iteration")),
                1 if r.get("baseline") else 0,
            ]
        )
    refuse_link(root / TRIALS_CSV)
    atomic_write(root / TRIALS_CSV, buf.getvalue())
