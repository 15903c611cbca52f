"""The package's layers (pyproject.toml, [tool.importlinter]; docs/architecture.md, "Layers"): import-linter's layers
contract holds, and no fedcli modules import each other in a circle (imports inside functions count too)."""

import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_layers_contract_holds():
    """``lint-imports`` with the contract in pyproject.toml: an upward import (the engine importing the results
    layer, the config importing a method file, ...) breaks it and fails here, naming the import chain."""
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), f"{lint}: import-linter is not installed (pip install -e '.[test]', or make install)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in p.stdout, p.stdout[-2000:]


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
