"""``fedcli bench --scale``: what the client count and the process count cost in memory, disk and time.

Ditto (personalized: every client that trained keeps its model across rounds) with an MLP (512, 512) on the built-in
synthetic data (Li et al. 2020), 1% of the clients active, a few rounds, every run as ``fedcli train`` in a child
process (``mpiexec -n 2`` for two processes) with its state in memory or on disk, and rounds taken ``--cohort-chunk
10`` clients at a time end to end (``fedcli.fl.chunked``; one row without, to show what the whole cohort at once
costs), in two settings (``SETTINGS``): ``writers``, 200 writers split iid over the clients (the same data for every
client count, so that only the client state grows), and ``natural``, the issue's own, one synthetic user a client
(``--synthetic-users N --clients N --partition natural --writers-per-client 1``, 3 rounds, the other options at their
defaults), where the data grows with the client count too (generated on demand: ``fedcli.data.synthetic``). Measured:

- peak memory of the whole process tree, sampled every 0.1 s from ``/proc``: the sum of resident sets (RSS, what
  ``top`` shows; shared library pages count once per process) and of proportional sets (PSS: shared pages split
  between the processes that map them, so the sum is the memory the tree really holds). Under ``mpiexec -n 2`` RSS
  counts torch's libraries (about 0.3 GB of file-backed pages) twice though the machine holds them once: PSS is the
  tree's real footprint;
- the floor: the same measures of one process that has only imported torch and fedcli's engine (``torch.func.grad``
  no longer imports torch's compiler stack: ``fedcli.runtime.gradshim``), i.e. what every process costs before it holds
  any data or client; ``mpiexec -n 2`` against one process is also taken apart over it (``decomposition``);
- disk used by the client state (``RUN_DIR/client-state``, allocated blocks);
- seconds per round: the median of the ``wall_s`` steps of ``metrics.csv`` after the first round;

plus the start-up of ``fedcli train`` with no flags: process wall time minus its training time (the summary's
``wall_s``), i.e. launch to the first local step and from the last round to the exit, and the process's CPU time
(user + system; on a loaded machine wall time stretches, CPU time much less).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMON = [
    "--algo",
    "ditto",
    "--model",
    "mlp",
    "--mlp-hidden",
    "512,512",
    "--dataset",
    "synthetic",
    "--device",
    "cpu",
    "--workers",
    "1",
    "--checkpoint-every",
    "0",
    "--quiet",
]
# two settings: "writers" splits 200 synthetic writers iid over the clients (the same data for every client count, so
# only the client state grows); "natural" is the issue's own: one synthetic user a client (--synthetic-users N
# --clients N --partition natural --writers-per-client 1), 3 rounds, every other option at its default (Ditto's
# local epoch, its personalized evaluation of every client), so the data grows with the client count too
SETTINGS = {
    "writers": [
        *COMMON,
        "--synthetic-users",
        "200",
        "--partition",
        "iid",
        "--rounds",
        "4",
        "--eval-every",
        "1",
        "--personal-clients",
        "cohort",
    ],
    "natural": [*COMMON, "--partition", "natural", "--writers-per-client", "1", "--rounds", "3"],
}
SETTING = SETTINGS["writers"]
CHUNK = 10  # --cohort-chunk: the 1,000-client cohort (10 clients a round) in one chunk, the 10,000-client one in 10
# (setting, clients, processes, client state, active ratio, cohort chunk): the 1,000-client rows in memory and on
# disk give the disk's cost in time; 1,000 clients at 10% trains the same 100 clients a round as 10,000 at 1%, so
# that pair isolates what the client count itself costs; chunk 0 holds the whole cohort (100 clients at 10,000)
# stacked at once
CASES = [
    ("writers", 1000, 1, "memory", 0.01, CHUNK),
    ("writers", 1000, 1, "disk", 0.01, CHUNK),
    ("writers", 10000, 1, "disk", 0.01, CHUNK),
    ("writers", 10000, 2, "disk", 0.01, CHUNK),
    ("writers", 1000, 1, "disk", 0.1, CHUNK),
    ("writers", 10000, 1, "disk", 0.01, 0),
    ("writers", 10000, 2, "disk", 0.01, 0),
    ("natural", 1000, 1, "disk", 0.01, CHUNK),
    ("natural", 1000, 2, "disk", 0.01, CHUNK),
    ("natural", 10000, 1, "disk", 0.01, CHUNK),
    ("natural", 10000, 2, "disk", 0.01, CHUNK),
]
# one process that has imported what every process of a run imports (torch, fedcli's engine; torch.func.grad no
# longer imports torch's compiler stack: fedcli.runtime.gradshim) and holds nothing else
# (it reports its own peak: sampling the tree from outside also catches the short-lived children torch's import forks,
# whose resident sets count the parent's pages once more)
FLOOR = (
    "import torch, fedcli.fl.engine\n"
    "m = {l.split(':')[0]: int(l.split()[1]) * 1024 for l in open('/proc/self/smaps_rollup') if l[:4] in "
    "('Rss:', 'Pss:')}\n"
    "hwm = [int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
    "print(max(hwm, m['Rss']), m['Pss'])"
)


# the same two processes under ``mpiexec -n 2`` (mpi4py imported, both ranks alive at once), measured as a run is: the
# tree's peak, after a barrier, while both ranks sleep
FLOOR_MPI = (
    "import time, torch, fedcli.fl.engine\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\ntime.sleep(3)\n"
    "MPI.COMM_WORLD.Barrier()"
)


def _mpiexec() -> str | None:
    """The virtual environment's ``mpiexec`` (mpich from PyPI), else the one on the PATH."""
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def _children(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over ``pid`` and its descendants."""
    rss = pss = 0
    for p in _children(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss


def run_measured(cmd: list[str], env: dict | None = None, timeout: float = 1200, sample: bool = True) -> dict:
    """Run ``cmd``; its exit code, wall time, CPU time (user + system of the tree), peak tree RSS and PSS, stdout.
    ``sample=False``: no memory sampling (reading a process's ``smaps_rollup`` walks its mappings under its memory
    lock, which slows a process that is loading torch's libraries: start-up is timed without it); the peaks are then
    None."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak_rss = peak_pss = 0 if sample else None
    if sample:
        while p.poll() is None:
            rss, pss = _tree_memory(p.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.1)
            if time.perf_counter() - t0 > timeout:
                p.kill()
        out, err = p.communicate()
    else:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "rc": p.returncode,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss": peak_rss,
        "peak_pss": peak_pss,
        "stdout": out,
        "stderr": err[-2000:],
    }


def disk_used(folder: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def seconds_per_round(metrics: Path) -> float:
    with open(metrics) as f:
        walls = [float(r["wall_s"]) for r in csv.DictReader(f)]
    steps = [b - a for a, b in zip(walls, walls[1:])]
    return statistics.median(steps) if steps else float("nan")


def _env() -> dict:
    return dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )


def scale_case(setting: str, clients: int, procs: int, state: str, active: float, chunk: int, tmp: Path) -> dict:
    out = tmp / f"{setting}-c{clients}-n{procs}-{state}-a{active}-k{chunk}"
    users = ["--synthetic-users", str(clients)] if setting == "natural" else []
    cmd = [
        sys.executable,
        "-m",
        "fedcli",
        "train",
        *SETTINGS[setting],
        *users,
        "--clients",
        str(clients),
        "--client-state",
        state,
        "--active-ratio",
        str(active),
        "--cohort-chunk",
        str(chunk),
        "--out",
        str(out),
    ]
    row = {"setting": setting, "clients": clients, "processes": procs, "state": state, "active": active, "chunk": chunk}
    if procs > 1:
        mpiexec = _mpiexec()
        if mpiexec is None:
            return {**row, "error": "mpiexec not found"}
        cmd = [mpiexec, "-n", str(procs), sys.executable, "-m", "mpi4py", *cmd[1:]]
    r = run_measured(cmd, _env())
    row.update(peak_rss=r["peak_rss"], peak_pss=r["peak_pss"], wall_s=r["wall_s"])
    if r["rc"] != 0:
        return {**row, "error": r["stderr"].strip().splitlines()[-1] if r["stderr"].strip() else f"exit {r['rc']}"}
    row["disk"] = disk_used(out / "client-state")
    row["s_per_round"] = seconds_per_round(out / "metrics.csv")
    shutil.rmtree(out, ignore_errors=True)
    return row


def startup(tmp: Path, repeats: int = 3) -> dict:
    """``fedcli train`` with no flags (the default run): process wall time, training time, the rest (the run with the
    least wall time of ``repeats``: the one least disturbed by the machine's other work; every run's numbers are kept
    under ``runs``)."""
    best, runs = None, []
    for i in range(repeats):
        out = tmp / f"default{i}"
        r = run_measured([sys.executable, "-m", "fedcli", "train", "--json", "--out", str(out)], _env(), sample=False)
        if r["rc"] != 0:
            return {"error": r["stderr"].strip()[-300:]}
        train_s = float(json.loads(r["stdout"].strip().splitlines()[-1])["wall_s"])
        row = {"wall_s": r["wall_s"], "train_s": train_s, "outside_s": r["wall_s"] - train_s, "cpu_s": r["cpu_s"]}
        runs.append({k: round(v, 3) for k, v in row.items()})
        if best is None or row["wall_s"] < best["wall_s"]:
            best = row
        shutil.rmtree(out, ignore_errors=True)
    return {**best, "runs": runs}


def floor() -> dict:
    """Peak RSS and PSS of one process that has imported torch and fedcli's engine, as the process reports them."""
    r = run_measured([sys.executable, "-c", FLOOR], _env())
    if r["rc"] != 0:
        return {"error": r["stderr"].strip()[-300:]}
    rss, pss = (int(v) for v in r["stdout"].split()[-2:])
    return {"peak_rss": rss, "peak_pss": pss}


def floor_mpi(procs: int = 2) -> dict:
    """Peak tree RSS and PSS of ``mpiexec -n procs`` processes that have imported torch, fedcli's engine and mpi4py and
    hold nothing else: the floor of a run with that many processes (the launcher's own processes included)."""
    mpiexec = _mpiexec()
    if mpiexec is None:
        return {"error": "mpiexec not found"}
    r = run_measured([mpiexec, "-n", str(procs), sys.executable, "-c", FLOOR_MPI], _env())
    if r["rc"] != 0:
        return {"error": r["stderr"].strip()[-300:]}
    return {"peak_rss": r["peak_rss"], "peak_pss": r["peak_pss"], "processes": procs}


def run(progress=None, cases=CASES) -> dict:
    results = {"settings": {k: " ".join(v) for k, v in SETTINGS.items()}, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        results["floor"] = floor()
        if any(c[2] > 1 for c in cases):
            results["floor_mpi"] = floor_mpi()
        for setting, clients, procs, state, active, chunk in cases:
            if progress:
                progress(
                    f"scale ({setting}): {clients} clients ({active:.0%} active), {procs} process(es), client state "
                    f"in {state}, cohort chunk {chunk or 'none'}"
                )
            results["cases"].append(scale_case(setting, clients, procs, state, active, chunk, Path(tmp)))
        if progress:
            progress("start-up: fedcli train with no flags")
        results["startup"] = startup(Path(tmp))
    return results


def _find(
    results: dict,
    clients: int,
    procs: int,
    state: str,
    active: float = 0.01,
    chunk: int = CHUNK,
    setting: str = "writers",
) -> dict | None:
    return next(
        (
            c
            for c in results["cases"]
            if (c.get("setting", "writers"), c["clients"], c["processes"], c["state"], c["active"], c.get("chunk", 0))
            == (setting, clients, procs, state, active, chunk)
            and "error" not in c
        ),
        None,
    )


def _caption_lines(results: dict) -> list[str]:
    """The scale table's caption: the one-process and mpiexec memory floors, and fedcli train's start-up time."""
    lines = []
    f = results.get("floor") or {}
    if "peak_rss" in f:
        lines.append(
            f"floor (one process: Python, torch, fedcli's engine): RSS {f['peak_rss'] / 1e9:.2f} GB, "
            f"PSS {f['peak_pss'] / 1e9:.2f} GB"
        )
    f2 = results.get("floor_mpi") or {}
    if "peak_rss" in f2:
        lines.append(
            f"floor of mpiexec -n {f2['processes']} (the same processes, mpi4py too, and the launcher's): "
            f"RSS {f2['peak_rss'] / 1e9:.2f} GB, PSS {f2['peak_pss'] / 1e9:.2f} GB"
        )
    s = results.get("startup") or {}
    if "error" in s:
        lines.append(f"start-up: {s['error']}")
    elif s:
        lines.append(
            f"fedcli train (no flags): {s['wall_s']:.2f} s wall ({s.get('cpu_s', float('nan')):.2f} s CPU), "
            f"{s['train_s']:.2f} s training, {s['outside_s']:.2f} s outside the training loop "
            f"({s['wall_s'] / s['train_s']:.2f}x the training time)"
        )
    return lines


def table(results: dict):
    """The scale table: per case its clients, processes, client state, peak memory and seconds per round; the
    floors and the start-up time as its caption."""
    from rich.table import Table

    settings = results.get("settings") or {"writers": results.get("setting", "")}
    title = "scale: fedcli train " + "; ".join(f"[{k}] {v}" for k, v in settings.items())
    t = Table(title=title, title_justify="left")
    for col in (
        "setting",
        "clients",
        "active",
        "processes",
        "client state",
        "cohort chunk",
        "peak RSS (tree)",
        "peak PSS (tree)",
        "client-state disk",
        "s/round",
    ):
        t.add_column(col, justify="right")
    for c in results["cases"]:
        head = [
            c.get("setting", "writers"),
            f"{c['clients']:,}",
            f"{c['active']:.0%}",
            str(c["processes"]),
            c["state"],
            str(c.get("chunk") or "whole cohort"),
        ]
        if "error" in c:
            t.add_row(*head, "-", "-", "-", c["error"][:60])
            continue
        t.add_row(
            *head,
            f"{c['peak_rss'] / 1e9:.2f} GB",
            f"{c['peak_pss'] / 1e9:.2f} GB",
            f"{c['disk'] / 1e6:.1f} MB",
            f"{c['s_per_round']:.2f}",
        )
    t.caption = "\n".join(_caption_lines(results)) or None
    return t


def _ok(r: float, bound: float) -> str:
    return "ok" if r <= bound else "MISSED"


def decomposition(one: dict, two: dict, fl: dict, kind: str, fl2: dict | None = None) -> str:
    """mpiexec -n 2 over one process, taken apart: the floor F of a process, T1 = F + W1, T2 = F2 + W2, where F2 is
    the floor of two processes under mpiexec as measured (``floor_mpi``; 2F where it was not)."""
    k = f"peak_{kind}"
    f, t1, t2 = fl[k], one[k], two[k]
    f2, said = (fl2[k], "measured under mpiexec") if fl2 and k in fl2 else (2 * f, "2F")
    w1, w2 = t1 - f, t2 - f2
    line = (
        f"  {kind.upper()} taken apart: floor F {f / 1e9:.2f} GB one process, F2 {f2 / 1e9:.2f} GB two ({said}); "
        f"1 process T1 = {t1 / 1e9:.2f} GB = F + {w1 / 1e9:.2f}; 2 processes T2 = {t2 / 1e9:.2f} GB = F2 + "
        f"{w2 / 1e9:.2f}; above the floors {w2 / max(1.0, w1):.2f}x; the two floors alone are {f2 / t1:.2f}x T1"
    )
    if f2 > 1.5 * t1:
        line += " (so T2 <= 1.5 T1 cannot hold: the floors alone exceed it)"
    else:
        line += (
            f" (T2 <= 1.5 T1 needs the two processes together to hold at most {(1.5 * t1 - f2) / 1e9:.2f} GB above "
            f"their floors, against the one process's {w1 / 1e9:.2f})"
        )
    return line


def targets(results: dict) -> list[str]:
    """The issue's bounds, as ratios measured in this one run (the machine's load moves absolute numbers)."""
    lines = []
    f = results.get("floor") or {}
    for setting in ("writers", "natural"):
        a, b = _find(results, 1000, 1, "disk", setting=setting), _find(results, 10000, 1, "disk", setting=setting)
        m2 = _find(results, 10000, 2, "disk", setting=setting)
        same = _find(results, 1000, 1, "disk", 0.1, setting=setting)
        whole = _find(results, 10000, 1, "disk", chunk=0, setting=setting)
        for kind in ("rss", "pss"):
            k, K = f"peak_{kind}", kind.upper()
            if same and b:
                r = b[k] / same[k]
                lines.append(
                    f"[{setting}] peak {K} 10,000 / 1,000 clients at the same 100 clients a round (disk): {r:.2f}x "
                    f"(the client count alone; target <= 1.25x) {_ok(r, 1.25)}"
                )
            if a and b:
                r = b[k] / a[k]
                lines.append(
                    f"[{setting}] peak {K} 10,000 / 1,000 clients (disk, chunks of {CHUNK}): {r:.2f}x "
                    f"(target <= 1.25x) "
                    f"{_ok(r, 1.25)}"
                )
            if a and whole:
                lines.append(
                    f"  the same with the 10,000-client cohort (100 clients) held whole: {whole[k] / a[k]:.2f}x"
                )
            if b and m2:
                r = m2[k] / b[k]
                lines.append(
                    f"[{setting}] peak {K} mpiexec -n 2 / 1 process at 10,000 clients: {r:.2f}x (target <= "
                    f"1.5x) {_ok(r, 1.5)}"
                )
                if f.get(k):
                    lines.append(decomposition(b, m2, f, kind, results.get("floor_mpi")))
    a, mem = _find(results, 1000, 1, "disk"), _find(results, 1000, 1, "memory")
    if a and mem:
        r = a["s_per_round"] / mem["s_per_round"]
        lines.append(f"s/round on disk / in memory at 1,000 clients: {r:.2f}x (target <= 1.2x) {_ok(r, 1.2)}")
    s = results.get("startup") or {}
    if "outside_s" in s:
        lines.append(
            f"fedcli train start-up outside training: {s['outside_s']:.2f} s (target <= 2.5 s) "
            f"{_ok(s['outside_s'], 2.5)}; "
            f"wall / training {s['wall_s'] / s['train_s']:.2f}x (target <= 2x) {_ok(s['wall_s'], 2 * s['train_s'])}"
        )
    return lines
