"""The package's layers (pyproject.toml, [tool.importlinter]; docs/architecture.md, "Layers"): import-linter's layers
contract holds, and no fedcli modules import each other in a circle (imports inside functions count too)."""

import os
import subprocess
import sys
from pathlib import Path

import grimp

import srckit

ROOT = Path(__file__).resolve().parents[1]


def test_layers_contract_holds():
    """``lint-imports`` with the contract in pyproject.toml: an upward import (the engine importing the results
    layer, the config importing a method file, ...) breaks it and fails here, naming the import chain."""
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), f"{lint}: import-linter is not installed (pip install -e '.[test]', or make install)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in p.stdout, p.stdout[-2000:]


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import cycles."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return found


def test_cycles_finds_a_planted_cycle():
    """The cycle finder on a small graph worked out by hand: a -> b -> c -> a is one cycle, d -> a is none."""
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c", "p.d"):
        g.add_module(m)
    for x, y in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a")):
        g.add_import(importer=x, imported=y)
    assert cycles(g) == [["p.a", "p.b", "p.c"]]


def test_no_import_cycles_among_fedcli_modules():
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph("fedcli", cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    assert cycles(graph) == []


def contracts() -> list[dict]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def layer_names(contract: dict) -> set[str]:
    return {name.strip() for line in contract["layers"] for name in line.split("|")}


def children(package: Path) -> set[str]:
    """The modules and subpackages directly inside ``package`` (``__init__`` aside)."""
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }


def test_every_module_is_in_a_layer():
    """A module outside every layer is outside the contract: lint-imports never sees its imports (``gpuplan.py`` was,
    at the package root, and imported the estimate and the config unchecked). Every module and subpackage of
    ``fedcli`` is in the top contract's layers, and every module of a package with its own contract in that one."""
    top, *inner = contracts()
    assert {f"fedcli.{c}" for c in children(ROOT / "fedcli")} - layer_names(top) == set()
    for c in inner:
        (container,) = c["containers"]
        assert children(ROOT / container.replace(".", "/")) - layer_names(c) == set(), container


def string_programs(tree) -> list[str]:
    """The string constants of a module that parse as Python with an import: the programs it runs as
    ``python -c``."""
    import ast

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            try:
                program = ast.parse(node.value)
            except SyntaxError:
                continue
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(program)):
                found.append(node.value)
    return found


def private_imports(program: str) -> list[str]:
    """``module:name`` for each name starting with ``_`` that ``program`` imports from fedcli."""
    import ast

    return [
        f"{n.module}:{a.name}"
        for n in ast.walk(ast.parse(program))
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fedcli")
        for a in n.names
        if a.name.startswith("_")
    ]


def test_private_imports_finds_a_planted_one():
    assert private_imports("from fedcli.sweep.executors import _pool_init, execute_inline\nimport os") == [
        "fedcli.sweep.executors:_pool_init"
    ]
    assert private_imports("from fedcli.sweep.executors import execute_inline") == []


def test_no_string_program_imports_a_private_name():
    """The layers contract cannot see a program run as ``python -c "..."``: such a program imports only public names
    (the sweep estimate's probe is a module, ``python -m fedcli.sweep.probe``, inside the contract)."""
    import ast

    bad = {
        str(p.relative_to(ROOT)): private_imports(prog)
        for p in sorted((ROOT / "fedcli").rglob("*.py"))
        for prog in string_programs(srckit.tree(p))
        if private_imports(prog)
    }
    assert bad == {}
