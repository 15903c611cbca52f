"""Wall time of the whole ``fedcli train`` command with and without trackers (issue 27: "within 5% of without").

    python scripts/bench_trackers.py [--reps 5] [--trackers tensorboard,mlflow] [--json OUT] [-- TRAIN ARGS ...]

The same ``fedcli train`` (default: the default run, 600 iterations of FedLAMA on digits, ``--threads 1 --workers 1``)
runs as its own process, alternately without and with ``--tracker`` for each name of ``--trackers`` (the order flips
every repetition, so a drift of the machine's load hits both alike), after one unmeasured warm-up of each (file
caches; the MLflow SQLite store's creation). MLflow writes to a SQLite store in a temporary folder. Measured: the
command's wall time (start to exit, what a user or a sweep waits for), the training's own ``wall_s`` (metrics.csv's
last row) and, not counted in the command, when the trackers' process that the command left behind was done (the
script waits for it before the next run, so no run shares the machine with another run's trackers). Printed: one line
per run with the 1-minute load average before it, the medians, and the ratio of the medians (tracked / untracked).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRAIN = ["--threads", "1", "--workers", "1"]


def one_run(out: Path, trackers: list[str], train: list[str], env: dict) -> dict:
    from fedcli.trackers import state

    args = [sys.executable, "-m", "fedcli", "train", "--quiet", "--out", str(out), *train]
    for name in trackers:
        args += ["--tracker", name]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run(args, env=env, cwd=out.parent, capture_output=True, text=True, timeout=1800)
    command_s = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"bench_trackers: {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    with open(out / "metrics.csv") as f:
        train_s = float(list(csv.DictReader(f))[-1]["wall_s"])
    done_s = None
    if trackers:  # the trackers' process the command left behind: until trackers.json says done and it has ended
        while not (state.read(out).get("phase") == "done" and state.finishing(out) is None):
            if time.perf_counter() - t0 > 600:
                raise SystemExit(f"bench_trackers: the trackers of {out} were not done after 600 s")
            time.sleep(0.05)
        done_s = time.perf_counter() - t0
    return {
        "trackers": ",".join(trackers),
        "command_s": command_s,
        "train_wall_s": train_s,
        "trackers_done_s": done_s,
        "load1_before": load,
    }


def _clean_env(work: Path) -> dict:
    """The runs' environment: no Slurm, MLflow, W&B or tracker-wait settings of the caller; this checkout first on
    PYTHONPATH, MLflow in a SQLite file under ``work``, W&B offline."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "MLFLOW_", "WANDB_")) and k != "FEDCLI_TRACKER_WAIT"
    }
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        MLFLOW_TRACKING_URI=f"sqlite:///{work / 'mlflow.db'}",
        WANDB_MODE="offline",
    )
    return env


def _medians(rows: list[dict], trackers: list[str]) -> dict:
    """Median command and training seconds without and with the trackers (and when the trackers were done)."""
    med = {}
    for label, key in (("none", ""), ("tracked", ",".join(trackers))):
        sel = [r for r in rows if r["trackers"] == key]
        med[label] = {k: statistics.median(r[k] for r in sel) for k in ("command_s", "train_wall_s")}
        if key:
            med[label]["trackers_done_s"] = statistics.median(r["trackers_done_s"] for r in sel)
    return med


def _parser() -> argparse.ArgumentParser:
    """The script's flags: repetitions, the trackers, the JSON file, and fedcli train's arguments after --."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="measured runs of each configuration (default 5)")
    ap.add_argument("--trackers", default="tensorboard,mlflow", help="the trackers of the tracked runs")
    ap.add_argument("--json", help="also write every measurement and the summary to this file")
    ap.add_argument("train", nargs="*", help="fedcli train arguments after -- (default: --threads 1 --workers 1)")
    return ap


def main(argv: list[str]) -> int:
    """Time fedcli train without and with trackers, alternating, and print (and optionally save) the medians."""
    a = _parser().parse_args(argv)
    train = a.train or DEFAULT_TRAIN
    trackers = [t for t in a.trackers.split(",") if t]
    work = Path(tempfile.mkdtemp(prefix="fedcli-bench-trackers-"))
    env = _clean_env(work)
    print(
        f"bench_trackers: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"fedcli train {' '.join(train)} vs the same with --tracker {' --tracker '.join(trackers)}; "
        f"{a.reps} reps; in {work}",
        flush=True,
    )
    for cfg in ([], trackers):  # warm-up, not measured
        one_run(work / f"warmup-{'-'.join(cfg) or 'none'}", cfg, train, env)
    rows = []
    for i in range(a.reps):
        for cfg in ([], trackers) if i % 2 == 0 else (trackers, []):
            r = one_run(work / f"rep{i}-{'-'.join(cfg) or 'none'}", cfg, train, env)
            r["rep"] = i
            rows.append(r)
            done = f"{r['trackers_done_s']:7.2f}" if r["trackers_done_s"] is not None else "      -"
            print(
                f"rep {i} {r['trackers'] or 'none':>20}  command {r['command_s']:7.2f} s  training wall_s "
                f"{r['train_wall_s']:7.2f}  "
                f"trackers done at {done} s  load1 {r['load1_before']:.2f}",
                flush=True,
            )
    med = _medians(rows, trackers)
    ratio = med["tracked"]["command_s"] / med["none"]["command_s"]
    summary = {
        "medians": med,
        "ratio_command": ratio,
        "ratio_train_wall": med["tracked"]["train_wall_s"] / med["none"]["train_wall_s"],
        "load_after": os.getloadavg(),
        "cores": os.cpu_count(),
        "train_args": train,
        "trackers": trackers,
    }
    print(
        f"median command: {med['none']['command_s']:.2f} s without, {med['tracked']['command_s']:.2f} s with trackers: "
        f"ratio {ratio:.3f} ({100 * (ratio - 1):+.1f}%); training wall_s ratio {summary['ratio_train_wall']:.3f}; "
        f"trackers done {med['tracked']['trackers_done_s']:.2f} s after the start (median, not waited for by the "
        f"command); load average after {' '.join(f'{x:.2f}' for x in summary['load_after'])}"
    )
    if a.json:
        Path(a.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
