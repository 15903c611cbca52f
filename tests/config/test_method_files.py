"""Every method found by its name (docs/method-contract.md): a method's options and preset are in
``fedcli/specs/<method>.py`` and its parts in ``fedcli/fl/algorithms/<method>.py``, and its name appears in no other
code. Comments, docstrings and prose (a help or error message, a label such as "FedLAMA") are text, not code: a
name in code is an identifier, a module path or a string without whitespace (a section, a key, a registered name)."""

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fedcli"
METHODS = ("fedlama", "fedlamb", "fedala", "fedprox", "feddyn", "fedyogi")
#: where a method's name is code outside its two files, and why (issue 49's exceptions)
ALLOWED = {
    ("fedcli/config.py", "fedlama"): "the default --algo",
    ("fedcli/bench/compare.py", "fedala"): "a benchmark's workload name",
    ("fedcli/cli/bench.py", "fedala"): "a benchmark's workload name",
    ("fedcli/bench/gpu.py", "fedlama"): "a benchmark's workload name",
    ("fedcli/papers.py", "fedlamb"): "the paper's name (Fed-LAMB is also a paper)",
    (
        "fedcli/specs/fedams.py",
        "fedlamb",
    ): "Fed-AMS's step extends Fed-LAMB's (issue 60), as FedYogi's server FedAdam's",
    ("fedcli/fl/algorithms/fedams.py", "fedlamb"): "Fed-AMS's step extends Fed-LAMB's (issue 60)",
}


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


@functools.cache
def code_words(path: Path) -> tuple:
    """(line, text) of every identifier, module path and whitespace-free string constant of the file ``path``."""
    return tuple(_code_words(path.read_text()))


def _code_words(source: str):
    tree = ast.parse(source)
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in skip and not re.search(r"\s", node.value):
                yield node.lineno, node.value
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.module or ""
            yield from ((node.lineno, f"{a.name} {a.asname or ''}") for a in node.names)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, f"{a.name} {a.asname or ''}") for a in node.names)
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.value.lineno, node.arg
        elif isinstance(node, ast.arg):
            yield node.lineno, node.arg


def occurrences(name: str) -> list[str]:
    """Where ``name`` is code in fedcli/ outside its spec and algorithm file and the allowed places."""
    word = re.compile(rf"(?<![A-Za-z0-9_-]){re.escape(name)}(?![A-Za-z0-9_-])")
    own = {f"fedcli/specs/{name}.py", f"fedcli/fl/algorithms/{name}.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where in own or (where, name) in ALLOWED:
            continue
        found += [f"{where}:{line}: {text}" for line, text in code_words(path) if word.search(text)]
    return found


@pytest.mark.parametrize("name", METHODS)
def test_a_method_is_found_by_its_name_and_only_there(name):
    assert (PACKAGE / "specs" / f"{name}.py").is_file()
    assert (PACKAGE / "fl" / "algorithms" / f"{name}.py").is_file()
    assert occurrences(name) == []


def test_the_scan_sees_code_and_not_text(tmp_path, monkeypatch):
    """The rule catches a name in an import, an identifier and a key, and passes it in a comment, a docstring, a
    message and a label."""
    pkg = tmp_path / "fedcli"
    (pkg / "specs").mkdir(parents=True)
    (pkg / "fl" / "algorithms").mkdir(parents=True)
    (pkg / "specs" / "fedyogi.py").write_text('SECTION = "fedyogi"\n')
    (pkg / "fl" / "algorithms" / "fedyogi.py").write_text("")
    (pkg / "other.py").write_text(
        '"""fedyogi in a docstring."""\n# fedyogi in a comment\n'
        "from fedcli.fl.algorithms.fedyogi import YogiServer\n"
        'fedyogi_rate = {"fedyogi": 1}\nlabel = "FedYogi"\n'
        'def f():\n    raise ValueError(f"no fedyogi here {label}")\n'
    )
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    assert [o.split(": ")[0] for o in occurrences("fedyogi")] == ["fedcli/other.py:3", "fedcli/other.py:4"]
