"""``fedcli bench --workloads startup``: how long the answers that need no model take, each in a fresh process.

``fedcli --help``, ``fedcli train --help`` and an argument error (``fedcli train --algo fedlamma``) never import
torch (their options, presets and dataset names are read from the torch-free specs: fedcli/cli/catalog.py); the target
is under 1 s of wall time on an idle 2-core machine. Each command runs ``repeats`` times after one untimed run (the
bytecode and the disk cache warm); the median is reported, with whether torch was imported.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

COMMANDS = (["--help"], ["train", "--help"], ["train", "--algo", "fedlamma"])
TARGET_S = 1.0
_PROBE = (
    "import sys\nfrom fedcli.cli.main import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
    "sys.__stderr__.write('@@TORCH %s' % ('torch' in sys.modules))"
)


def load_average() -> str:
    """The machine's 1, 5 and 15-minute load averages, as printed beside every measurement (read without torch)."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def _once(args: list[str]) -> tuple[float, bool]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _PROBE.format(args=args)], capture_output=True, text=True, timeout=120)
    return time.perf_counter() - t0, "@@TORCH True" in p.stderr


def run(repeats: int = 3, progress=print) -> dict:
    res = {"workload": "startup", "label": "start-up: answers without a model", "commands": []}
    _once(["train", "--help"])  # untimed: bytecode and the page cache warm
    for args in COMMANDS:
        progress(f"start-up: fedcli {' '.join(args)}")
        runs = [_once(args) for _ in range(repeats)]
        res["commands"].append(
            {
                "command": "fedcli " + " ".join(args),
                "wall_s": statistics.median(t for t, _ in runs),
                "torch_imported": any(t for _, t in runs),
            }
        )
    return res


def table(r: dict):
    from rich.table import Table

    t = Table(title=f"fedcli bench, {r['label']}", title_justify="left")
    for col, just in (("command", "left"), ("wall (s, median)", "right"), ("torch imported", "left")):
        t.add_column(col, justify=just)
    for c in r["commands"]:
        t.add_row(c["command"], f"{c['wall_s']:.2f}", "yes" if c["torch_imported"] else "no")
    t.caption = f"each in a fresh process; target under {TARGET_S:g} s on an idle machine"
    return t


def targets(r: dict) -> list[str]:
    return [
        f"start-up: {c['command']} {c['wall_s']:.2f} s (target < {TARGET_S:g} s, no torch): "
        f"{'met' if c['wall_s'] < TARGET_S and not c['torch_imported'] else 'MISSED'}"
        for c in r["commands"]
    ]
