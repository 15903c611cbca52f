"""``fedcli train --resume RUN`` of a completed run whose trackers' process ended before it was done (killed with
its job, say): the rest goes to the same tracker runs, from the run directory's CSVs, and nothing else happens (no
training, no file of the run but the trackers' own changes).

What is sent is what the round hook (``fedcli.trackers.hook``) would have sent, read back from the CSVs: one ``log``
per step (the local iteration) that evaluated or adjusted intervals, with the ``metrics.csv`` row's numbers,
``comm_pct_of_fedavg`` and the ``intervals.csv`` adjustments (``adjust/d/<layer>``, ``adjust/interval/<layer>``).
Per-layer ``syncs/<layer>`` and ``interval/<layer>`` are in the CSVs only as they stood at the end (``layers.csv``),
so they go with the last evaluation alone. The trackers' process (``fedcli.trackers.worker``, resume mode) keeps only
the steps past what each tracker already holds (``trackers.json``), then does the end work it missed: the figures,
the manifest and CSVs as artifacts, the tracker runs closed as completed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from fedcli.results.rundir import read_rows
from fedcli.trackers import state
from fedcli.trackers.hook import NOT_SCALARS, TrackerHook, info_of

#: the longest ``fedcli train --resume`` waits for the trackers to take the rest; past it they finish in the background
WAIT_S = 600.0
PARTS = ("local_step", "schedule", "codec", "init", "server")


def cut_off(run_dir: Path, manifest: dict) -> bool:
    """A completed run whose trackers' process ended before it was done (``fedcli report`` says ``ended-early``)."""
    said = state.describe(run_dir, manifest) if manifest.get("status") == "completed" else None
    return said is not None and said[0] == "ended-early"


def _rows(path: Path) -> list[dict]:
    """The whole rows of a run's CSV (a last row cut by a killed run is not read: ``rundir.read_rows``)."""
    return read_rows(path) if path.is_file() else []


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def messages(run_dir: Path, config: dict) -> list[dict]:
    """The ``log`` messages of the whole run, rebuilt from its CSVs (see the module docstring), by step."""
    from fedcli.comm.ledger import fedavg_params_so_far

    run_dir = Path(run_dir)
    layers = _rows(run_dir / "layers.csv")
    total = sum(int(r["numel"]) for r in layers)
    steps: dict[int, dict[str, float]] = {}
    for r in _rows(run_dir / "intervals.csv"):
        values = steps.setdefault(int(r["iteration"]), {})
        values[f"adjust/d/{r['name']}"] = float(r["d"])
        values[f"adjust/interval/{r['name']}"] = float(r["interval"])
    last = None
    for r in _rows(run_dir / "metrics.csv"):
        it = int(r["iteration"])
        values = steps.setdefault(it, {})
        values.update(
            {k: v for k, v in ((k, _number(x)) for k, x in r.items() if k not in NOT_SCALARS) if v is not None}
        )
        fedavg = fedavg_params_so_far(total, it, int(r["round"]), int(config["tau"]), bool(config.get("local_epochs")))
        values["comm_pct_of_fedavg"] = 100.0 * float(r["comm_params"]) / fedavg if fedavg else math.nan
        last = it
    if last is not None:
        for r in layers:
            steps[last][f"syncs/{r['name']}"] = float(r["syncs"])
            steps[last][f"interval/{r['name']}"] = float(r["interval"])
    return [{"op": "log", "step": s, "values": steps[s]} for s in sorted(steps)]


def send_rest(run_dir: Path, manifest: dict, warn, wait_s: float = WAIT_S) -> str:
    """Hand the run's evaluations and end to its trackers' process (resume mode: the same tracker runs, the steps
    they hold skipped) and wait at most ``wait_s`` for it; one line saying what was done."""
    run_dir = Path(run_dir)
    config = manifest["config"]
    before = {
        n: int(s.get("last_step", -1))
        for n, s in state.read(run_dir).get("trackers", {}).items()
        if isinstance(s, dict)
    }
    method = manifest.get("method") or {}
    info = info_of(config, {k: method[k] for k in PARTS if k in method}, int(manifest.get("world_size") or 1), run_dir)
    hook = TrackerHook(_Config(config["tracker"]), run_dir, resume=True, warn=warn, close_timeout=0.0)
    hook.launch(info)
    if hook.proc is None:
        return f"{run_dir}: the trackers could not start; nothing was sent"
    sent = messages(run_dir, config)
    for msg in sent:
        hook.queue.put(msg)
    hook.started.wait(wait_s)  # its start-up failures said here, not after the command
    hook.close(manifest["status"])  # hands the messages and the end over; the process does the rest alone
    try:
        hook.proc.wait(wait_s)
    except Exception:
        return (
            f"{run_dir}: the trackers ({config['tracker']}) are still finishing after {wait_s:g} s; they go on in "
            f"the background (`fedcli report {run_dir}` says when they are done)"
        )
    rest = [m["step"] for m in sent if m["step"] > min(before.values(), default=-1)]
    span = f" (iterations {rest[0]}-{rest[-1]})" if rest else ""
    said = state.describe(run_dir)
    return (
        f"{run_dir}: the run had completed and its trackers' process had been cut off; sent the trackers the "
        f"{len(rest)} of the run's {len(sent)} logged steps they lacked{span} from the CSVs, then the end (figures, "
        f"artifacts, status {manifest['status']}); nothing was trained. {said[1] if said else ''}"
    ).rstrip()


class _Config:
    """What ``TrackerHook`` reads of a config: the tracker names."""

    def __init__(self, tracker: str):
        self.tracker = tracker


def read_manifest(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
