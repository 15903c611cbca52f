"""The style gate (issue 60, item 6): ``ruff check`` and ``ruff format --check`` on fedcli/, tests/ and scripts/ under
the rules of pyproject.toml's ``[tool.ruff]`` (lines of at most 120 characters, pyflakes, import order, McCabe
complexity, at most 8 arguments and 50 statements a function), and the two measures ruff has no rule for, over the
functions of fedcli/ and scripts/:

- length: a function's body in lines, from its first statement after the docstring to its last line (the signature,
  where a Typer command declares its options, and the docstring do not count); at most 50, none over 100;
- parameters: at most 8 (``self``/``cls`` not counted).

The functions over a limit today are listed by name below (``path:qualified name``), each with its measure when the
list was made; a function not listed may not go over, and a listed one that came within its limit, or is gone, must
leave the list: the lists only shrink. docs/development.md says how to run the gate and fix a finding.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import srckit

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["fedcli", "tests", "scripts"]
MEASURED = ["fedcli", "scripts"]
MAX_LINES, HARD_MAX_LINES, MAX_PARAMS = 50, 100, 8

#: functions whose body is over MAX_LINES lines (never over HARD_MAX_LINES): name -> lines when listed
LONG = {}

#: functions with more than MAX_PARAMS parameters: name -> count when listed (the Typer commands declare one
#: parameter per option)
MANY_PARAMS = {
    "fedcli/cli/tune.py:tune": 29,
    "fedcli/cli/sweep.py:sweep": 27,
    "fedcli/cli/bench.py:bench": 16,
    "fedcli/cli/report.py:report": 11,
}


def ruff() -> str | None:
    """The ruff beside this Python (the venv's, from the ``test`` extra), else the one on PATH; None if neither."""
    here = Path(sys.executable).with_name("ruff")
    return str(here) if here.exists() else shutil.which("ruff")


def required() -> bool:
    """Under CI (``CI`` set) ruff must be there: it is in the ``test`` extra that ``make install`` installs."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def run_ruff(*args: str) -> subprocess.CompletedProcess:
    exe = ruff()
    if exe is None:
        if required():
            pytest.fail("ruff is not installed (pip install -e '.[test]'), and CI requires the style gate")
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    return subprocess.run([exe, *args, *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_finds_nothing():
    out = run_ruff("check", "--no-cache", "--output-format", "concise")
    assert out.returncode == 0, f"ruff check (fix: ruff check --fix; docs/development.md):\n{out.stdout}{out.stderr}"


def test_ruff_format_changes_nothing():
    out = run_ruff("format", "--check", "--no-cache")
    assert out.returncode == 0, f"ruff format --check (fix: ruff format):\n{out.stdout}{out.stderr}"


def functions(path: Path):
    """(qualified name, node) of every function in the module at ``path``, nested ones and methods included."""

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(srckit.tree(path), "")


def body_lines(fn: ast.FunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's last line (0 for a docstring alone)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return fn.end_lineno - body[0].lineno + 1 if body else 0


def param_count(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args]
    n = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if names and names[0] in ("self", "cls") else 0)


def measures() -> dict[str, tuple[int, int]]:
    """``path:qualified name`` -> (body lines, parameters) for every function of fedcli/ and scripts/."""
    out = {}
    for top in MEASURED:
        for path in sorted((ROOT / top).rglob("*.py")):
            for name, fn in functions(path):
                key = f"{path.relative_to(ROOT).as_posix()}:{name}"
                lines, params = body_lines(fn), param_count(fn)
                prev = out.get(key, (0, 0))  # a name defined twice (a property's setter): the larger of each
                out[key] = (max(lines, prev[0]), max(params, prev[1]))
    return out


def check_limit(allowed: dict[str, int], actual: dict[str, int], limit: int, what: str) -> list[str]:
    """The findings: a function over ``limit`` not in ``allowed``, or over its listed measure; a listed one gone or
    within the limit (to take off the list)."""
    bad = [f"{k}: {v} {what}, over {limit}, not listed" for k, v in actual.items() if v > limit and k not in allowed]
    bad += [f"{k}: {actual[k]} {what}, more than the {v} listed" for k, v in allowed.items() if actual.get(k, 0) > v]
    bad += [f"{k}: gone or within {limit} {what}: take it off the list" for k in allowed if actual.get(k, 0) <= limit]
    return bad


def test_function_lengths_within_the_limits_or_listed():
    lines = {k: v[0] for k, v in measures().items()}
    bad = check_limit(LONG, lines, MAX_LINES, "lines")
    bad += [f"{k}: {v} lines, over the hard limit {HARD_MAX_LINES}" for k, v in lines.items() if v > HARD_MAX_LINES]
    assert not bad, "\n".join(bad)


def test_parameter_counts_within_the_limit_or_listed():
    params = {k: v[1] for k, v in measures().items()}
    assert not (bad := check_limit(MANY_PARAMS, params, MAX_PARAMS, "parameters")), "\n".join(bad)


def test_the_measures_count_body_lines_and_parameters(tmp_path):
    """The two measures on a function worked out by hand: a docstring and a signature over 3 lines do not count."""
    src = (
        "class C:\n"
        "    def f(\n        self, a, b,\n        *c, d, **e\n    ):\n"
        '        """Doc."""\n        x = 1\n\n        return x\n'
    )
    (tmp_path / "m.py").write_text(src)
    [(name, fn)] = list(functions(tmp_path / "m.py"))
    assert (name, body_lines(fn), param_count(fn)) == ("C.f", 3, 5)
    assert check_limit({"k": 60}, {"k": 40, "j": 51}, 50, "lines") == [
        "j: 51 lines, over 50, not listed",
        "k: gone or within 50 lines: take it off the list",
    ]


if __name__ == "__main__":  # `python tests/test_style.py`: the two lists as they would be now, to paste above
    now = measures()
    print("LONG = {")
    for k, (lines, _) in sorted(now.items(), key=lambda kv: -kv[1][0]):
        if lines > MAX_LINES:
            print(f'    "{k}": {lines},')
    print("}\nMANY_PARAMS = {")
    for k, (_, params) in sorted(now.items(), key=lambda kv: -kv[1][1]):
        if params > MAX_PARAMS:
            print(f'    "{k}": {params},')
    print("}")
