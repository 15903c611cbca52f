"""Mutation testing of the modules that carry the papers' arithmetic (``make mutation``; not run by CI).

For each target below: copy the repository to a temporary folder (the worktree is never mutated), check that the
target's tests pass there unmutated, let cosmic-ray (``make install-mutation``: the ``mutation`` extra) enumerate the
mutants of the module, keep those inside the named functions and of the operators that change arithmetic or logic
(operand and comparison swaps, constants, boolean operators, ``break``/``continue``, loops run zero times), take at
most ``--max`` of them spread evenly over the file, run the target's tests against each (``pytest -x``, a timeout
each) and print the kill rate per module (a test run past the timeout counts as a kill; how many is printed too), and
each survivor's diff. ``--before REV``: the same mutants against the tests of another revision (the suite before a
change), to report kill rates before and after.

Usage: python scripts/mutation.py [--only NAME ...] [--max N] [--before REV] [--out DIR]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAMA_TESTS = [
    "tests/algorithms/test_schedules.py",
    "tests/algorithms/test_fedlama_handworked.py",
    "tests/algorithms/test_lama_accelerate.py",
    "tests/test_golden.py",
]
ADAPTIVE_TESTS = ["tests/algorithms/test_adaptive.py", "tests/algorithms/test_adaptive_reference.py"]
# name: (module, functions to mutate (empty: all), tests that check them)
TARGETS = {
    "schedules": ("fedcli/fl/schedules.py", [], LAMA_TESTS),
    # FedLAMA's Algorithm 1 and its schedules (until 2026-11 part of schedules.py; Algorithm 1 until issue 60 in
    # layerwise.py)
    "fedlama": ("fedcli/fl/algorithms/fedlama.py", [], LAMA_TESTS),
    # FedLAMA's Eqs. 3-4 (torch-free, for the report; Eq. 2 is the layer-wise base's in schedules.py since issue 60)
    "layerwise": ("fedcli/fl/layerwise.py", [], LAMA_TESTS),
    # the golden runs record the lr of every evaluation (constant in the older records)
    "lr_schedule": ("fedcli/fl/state.py", ["lr_at"], ["tests/engine/test_lr_schedule.py", "tests/test_golden.py"]),
    "ledger": (
        "fedcli/comm/ledger.py",
        [],
        [
            "tests/comm/test_ledger.py",
            "tests/comm/test_ledger_handworked.py",
            "tests/algorithms/test_schedules.py",
            "tests/algorithms/test_fedlama_handworked.py",
            "tests/algorithms/test_scaffold.py",
            "tests/algorithms/test_fedpaq.py",
        ],
    ),
    "ala": ("fedcli/fl/algorithms/fedala.py", [], ["tests/algorithms/test_fedala.py"]),
    # the adaptive methods: their shared helpers and each method's file (until 2026-11 all in fedcli/fl/adaptive.py)
    **{
        name: (path, [], ADAPTIVE_TESTS)
        for name, path in (
            ("adaptive", "fedcli/fl/adaptive.py"),
            ("fedlamb", "fedcli/fl/algorithms/fedlamb.py"),
            ("mimelamb", "fedcli/fl/algorithms/mimelamb.py"),
            ("mime", "fedcli/fl/algorithms/mime.py"),
            ("fedams", "fedcli/fl/algorithms/fedams.py"),
        )
    },
    # FedAdam's server is FedYogi's and FedAdagrad's base: their hand-worked tests check its v_{-1} = tau^2 (v_start)
    "fedadam": (
        "fedcli/fl/algorithms/fedadam.py",
        [],
        ADAPTIVE_TESTS + ["tests/algorithms/test_fedyogi_fedadagrad.py"],
    ),
    # per-client state (load, save, defaults; until 2026-11 written out in each method, e.g. adaptive.py's store_state)
    # (test_fedala.py: a load of some tensors only, names=, the loop's continue)
    "clientstate": (
        "fedcli/fl/clientstate.py",
        [],
        ["tests/engine/test_clientstate.py", "tests/algorithms/test_fedala.py"],
    ),
    # FedProx's local step (until 2026-11 fedcli/fl/parts_prox.py)
    "fedprox": ("fedcli/fl/algorithms/fedprox.py", [], ["tests/algorithms/test_fedprox.py"]),
    "servers": (
        "fedcli/fl/parts_servers.py",
        [],
        ["tests/algorithms/test_fednova.py", "tests/algorithms/test_fedcom.py", "tests/algorithms/test_fedprox.py"],
    ),
}
# operators that change arithmetic or logic; the others (bit operators, ** and <<, ...) mostly make programs that crash
KEEP = re.compile(
    r"core/(ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|Add_Mul|Mul_Add|Sub_Div|Div_Sub|FloorDiv_Div)"
    r"|ReplaceComparisonOperator_(Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Lt_Gt|Gt_Lt|Eq_NotEq|NotEq_Eq|LtE_GtE|GtE_LtE)"
    r"|NumberReplacer|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd"
    r"|ReplaceBreakWithContinue|ReplaceContinueWithBreak|ZeroIterationForLoop|AddNot|ReplaceUnaryOperator_.*)$"
)


def function_lines(path: Path, names: list[str]) -> list[tuple[int, int]]:
    tree = ast.parse(path.read_text())
    spans = [
        (n.lineno, n.end_lineno)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names
    ]
    assert len(spans) >= len(names), (path, names, spans)
    return spans


def select(db: Path, module: Path, functions: list[str], limit: int) -> int:
    """Keep the mutants of the KEEP operators (and inside ``functions``), at most ``limit`` spread evenly; returns
    how many."""
    spans = function_lines(module, functions) if functions else None
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT job_id, operator_name, start_pos_row FROM mutation_specs ORDER BY start_pos_row, "
        "start_pos_col, operator_name, occurrence"
    ).fetchall()
    keep = [j for j, op, row in rows if KEEP.match(op) and (spans is None or any(a <= row <= b for a, b in spans))]
    if len(keep) > limit:
        keep = [keep[round(i * len(keep) / limit)] for i in range(limit)]
    drop = [(j,) for j, _, _ in rows if j not in set(keep)]
    con.executemany("DELETE FROM mutation_specs WHERE job_id = ?", drop)
    con.executemany("DELETE FROM work_items WHERE job_id = ?", drop)
    con.commit()
    con.close()
    return len(keep)


# left out of the copy: these at the repository's top only (``fedcli/results/`` is a package the tests import: left
# out, the shared venv's editable install would import another checkout's in its place), caches everywhere
TOP_ONLY = shutil.ignore_patterns(".git", ".venv", "results", "mutation-*")
EVERYWHERE = shutil.ignore_patterns("__pycache__", ".pytest_cache")


def copy_repo(dest: Path, tests_rev: str | None, root: Path = ROOT) -> None:
    def ignore(folder: str, names: list[str]) -> set[str]:
        return EVERYWHERE(folder, names) | (TOP_ONLY(folder, names) if Path(folder) == root else set())

    shutil.copytree(root, dest, ignore=ignore, symlinks=True)
    if tests_rev:  # the tests as they were at tests_rev (the code stays this revision's)
        shutil.rmtree(dest / "tests")
        tar = subprocess.run(
            ["git", "-C", str(root), "archive", tests_rev, "tests"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)


def check_unmutated(name: str, cmd: str, repo: Path, env: dict, timeout: float) -> None:
    """Stop when the tests fail on the copy before any mutation: every mutant would count as killed."""
    p = subprocess.run(cmd, shell=True, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode:
        sys.exit(f"{name}: the tests fail on the unmutated copy, so no kill would mean anything:\n{p.stdout[-3000:]}")


def _write_config(cfg: Path, module: str, timeout: float, cmd: str) -> None:
    """Write cosmic-ray's config: the module to mutate, the per-mutant timeout, the test command, a local run."""
    cfg.write_text(f"""[cosmic-ray]
module-path = "{module}"
timeout = {timeout}
excluded-modules = []
test-command = "{cmd}"

[cosmic-ray.distributor]
name = "local"
""")


def _outcomes(dump: str) -> tuple[int, int, list[dict]]:
    """From ``cosmic-ray dump``'s lines: the mutants killed (a timeout counts as killed), those timeouts, and the
    survivors (operator, line, diff)."""
    killed, timeouts, survivors = 0, 0, []
    for line in dump.splitlines():
        item, result = json.loads(line)
        if result is None:
            continue
        if result.get("test_outcome") == "killed" or result.get("worker_outcome") in ("timeout", "abnormal"):
            killed += 1
            timeouts += result.get("output") == "timeout"  # cosmic-ray's record of a test run past --timeout
        else:
            spec = item["mutations"][0]
            survivors.append(
                {"operator": spec["operator_name"], "line": spec["start_pos"][0], "diff": result.get("diff")}
            )
    return killed, timeouts, survivors


def run_target(name: str, limit: int, tests_rev: str | None, out: Path, timeout: float) -> dict:
    module, functions, tests = TARGETS[name]
    work = Path(tempfile.mkdtemp(prefix=f"fedcli-mutation-{name}-"))
    repo = work / "repo"
    copy_repo(repo, tests_rev)
    tests = [t for t in tests if (repo / t).exists()]
    if not tests:
        return {"module": module, "mutants": 0, "killed": 0, "note": "no tests"}
    py = sys.executable
    cmd = f"{py} -m pytest -x -q -p no:cacheprovider -m 'not slow and not mpi' -o addopts='' {' '.join(tests)}"
    cfg = work / "cr.toml"
    _write_config(cfg, module, timeout, cmd)
    db = work / "session.sqlite"
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    cr = (
        str(Path(sys.executable).parent / "cosmic-ray")
        if (Path(sys.executable).parent / "cosmic-ray").exists()
        else "cosmic-ray"
    )
    check_unmutated(name, cmd, repo, env, timeout)
    subprocess.run([cr, "init", str(cfg), str(db)], cwd=repo, env=env, check=True)
    n = select(db, repo / module, functions, limit)
    t0 = time.time()
    subprocess.run([cr, "exec", str(cfg), str(db)], cwd=repo, env=env, check=True)
    dump = subprocess.run([cr, "dump", str(db)], cwd=repo, env=env, capture_output=True, text=True, check=True)
    killed, timeouts, survivors = _outcomes(dump.stdout)
    res = {
        "module": module,
        "functions": functions,
        "tests": tests,
        "tests_rev": tests_rev or "HEAD",
        "mutants": n,
        "killed": killed,
        "timeouts": timeouts,
        "kill_rate": round(killed / n, 3) if n else None,
        "seconds": round(time.time() - t0),
        "survivors": survivors,
    }
    (out / f"{name}{'-before' if tests_rev else ''}.json").write_text(json.dumps(res, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--max", type=int, default=60, help="at most this many mutants per module (default 60)")
    ap.add_argument("--before", metavar="REV", help="also run the same mutants against the tests of REV")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "mutation")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for name in a.only:
        for rev in ([a.before] if a.before else []) + [None]:
            r = run_target(name, a.max, rev, a.out, a.timeout)
            print(
                f"{name:12s} {r['module']:28s} tests@{r.get('tests_rev', '-'):10s} {r['killed']}/{r['mutants']} killed"
                f" ({r.get('kill_rate')}, {r.get('timeouts', 0)} by timeout) in {r.get('seconds')} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
