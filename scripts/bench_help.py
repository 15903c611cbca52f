"""Wall time of ``fedcli COMMAND --help`` drawn by fedcli's panel renderer against Typer's rich renderer (issue 48, 19:
``fedcli train --help`` took 1.5-2.3 s on 2 cores, ~85% in rich drawing its 28 option panels).

    python scripts/bench_help.py [--reps 7] [--commands train,sweep] [--json OUT]

Each ``python -m fedcli COMMAND --help`` runs as its own process (stdout to a pipe, ``COLUMNS=80``), alternately with
``FEDCLI_RICH_HELP=1`` (Typer's renderer: "before") and without (fedcli/cli/helpfmt.py: "after"), the order flipping
every repetition so that a drift of the machine's load hits both alike, after one unmeasured warm-up of each. Also
timed: ``python -c "import fedcli.cli.COMMAND"``, the floor that no renderer goes under (Python, typer, the command's
options). Each run's wall time and CPU time (user + system of the process: steadier than the wall time on a shared
machine). Printed: one line per run with the 1-minute load average before it, the medians, and the ratios of the
medians (after / before). A first, unmeasured run of each (2,000 columns wide) checks that the two list the same
options in the same order.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(args: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process, its stdout)."""
    c0, t0 = cpu_children(), time.perf_counter()
    p = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    took, cpu = time.perf_counter() - t0, cpu_children() - c0
    if p.returncode != 0:
        raise SystemExit(f"bench_help: {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return took, cpu, p.stdout


def options(text: str) -> list[str]:
    """The option names a help lists, in order (the first word of each row that starts with --)."""
    rows = (line.strip("│ ").split() for line in text.splitlines())
    return [words[0] for words in rows if words and words[0].startswith("--")]


def bench(command: str, reps: int, env: dict) -> dict:
    help_args = [sys.executable, "-m", "fedcli", command, "--help"]
    kinds = {"before": {**env, "FEDCLI_RICH_HELP": "1"}, "after": env}
    floor_args = [sys.executable, "-c", f"import fedcli.cli.{command}"]
    # warm-up (file caches), unmeasured, wide enough that every option is one line: the two list the same options
    shown = {kind: timed(help_args, {**e, "COLUMNS": "2000"})[2] for kind, e in kinds.items()}
    if options(shown["before"]) != options(shown["after"]):
        raise SystemExit(f"bench_help: `fedcli {command} --help` lists other options than Typer's renderer")
    times: dict[str, list[float]] = {"before": [], "after": [], "import": []}
    cpus: dict[str, list[float]] = {"before": [], "after": [], "import": []}
    for rep in range(reps):
        order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
        for kind in order + ["import"]:
            load = os.getloadavg()[0]
            took, cpu, _ = timed(floor_args, env) if kind == "import" else timed(help_args, kinds[kind])
            times[kind].append(took)
            cpus[kind].append(cpu)
            print(
                f"fedcli {command} --help  {kind:6s}  {took:6.3f} s wall  {cpu:6.3f} s CPU  (load {load:.2f})",
                file=sys.stderr,
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpus.items()}
    return {
        "command": command,
        "reps": reps,
        "options": len(options(shown["after"])),
        "runs_s": times,
        "cpu_s": cpus,
        "median_s": med,
        "median_cpu_s": med_cpu,
        "ratio_after_before": med["after"] / med["before"],
        "cpu_ratio_after_before": med_cpu["after"] / med_cpu["before"],
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="measured runs of each renderer (default 7)")
    ap.add_argument("--commands", default="train", help="comma-separated commands (default: train)")
    ap.add_argument("--json", help="write the runs and medians to this file")
    a = ap.parse_args(argv)
    env = {
        **os.environ,
        "COLUMNS": "80",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("FEDCLI_RICH_HELP", None)
    results = [bench(c, a.reps, env) for c in a.commands.split(",")]
    for r in results:
        m, c = r["median_s"], r["median_cpu_s"]
        print(
            f"fedcli {r['command']} --help ({r['options']} options), median of {r['reps']}: before (Typer's rich "
            f"renderer) {m['before']:.3f} s wall / {c['before']:.3f} s CPU, after (fedcli's) {m['after']:.3f} s / "
            f"{c['after']:.3f} s, ratio {r['ratio_after_before']:.2f} wall / {r['cpu_ratio_after_before']:.2f} CPU; "
            f"import alone {m['import']:.3f} s / {c['import']:.3f} s"
        )
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
