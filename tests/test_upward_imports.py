"""No import in fedcli points up the layer table (pyproject.toml, [tool.importlinter]; issue 60, item 4), counting what
``lint-imports`` cannot see: an import by name (``importlib.import_module("fedcli.api")``). The ``fedcli`` package
itself is the top of the table (its ``__init__`` is the notebook API), so no module of fedcli imports it: the version
is ``fedcli.version``. And no module plays module tricks: a module ``__getattr__`` or a module whose class is swapped
(``fedcli.report(...)`` is fedcli/api.py's ``write_report``, the report package ``fedcli.reports``; ``TrainConfig`` is
assembled as fedcli/config.py is imported; the Typer app is ``fedcli.cli.main.build_app()``). None is left: a new one
fails here."""

import ast
import tomllib
from pathlib import Path

import srckit

ROOT = Path(__file__).resolve().parents[1]


def layer_ranks(root: Path) -> dict[str, int]:
    """Top contract's layer of each module name, 0 at the top; the ``fedcli`` package above them all (-1)."""
    (top, *_) = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    ranks = {name.strip(): i for i, line in enumerate(top["layers"]) for name in line.split("|")}
    return {"fedcli": -1, **ranks}


def rank_of(module: str, ranks: dict[str, int]) -> tuple[str, int] | None:
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        name = ".".join(parts[:k])
        if name in ranks:
            return name, ranks[name]
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, root: Path) -> list[str]:
    """Every fedcli module ``tree`` imports, at any depth (in functions too), by statement or by name
    (``importlib.import_module`` / ``__import__`` of a constant); ``from fedcli import x`` is the submodule ``x``
    when there is one, else the ``fedcli`` package."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            for a in n.names:
                sub = root / Path(*f"{n.module}.{a.name}".split("."))
                found.append(f"{n.module}.{a.name}" if sub.with_suffix(".py").exists() or sub.is_dir() else n.module)
        elif (
            isinstance(n, ast.Call)
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
            and getattr(n.func, "attr", getattr(n.func, "id", None)) in ("import_module", "__import__")
        ):
            found.append(n.args[0].value)
    return [m for m in found if m == "fedcli" or m.startswith("fedcli.")]


def upward_imports(root: Path) -> set[tuple[str, str]]:
    """(importer layer, imported layer) of each import from a module to a layer above its own."""
    ranks, out = layer_ranks(root), set()
    for path in sorted((root / "fedcli").rglob("*.py")):
        me = rank_of(module_name(path, root), ranks)
        for target in imported(srckit.tree(path), root):
            to = rank_of(target, ranks)
            if me is not None and to is not None and to[1] < me[1]:
                out.add((me[0], to[0]))
    return out


def module_tricks(root: Path) -> set[str]:
    """Modules defining ``__getattr__`` at module level or assigning a module's ``__class__``."""
    out = set()
    for path in sorted((root / "fedcli").rglob("*.py")):
        tree = srckit.tree(path)
        getattr_ = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
        swapped = any(
            isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "__class__" for t in n.targets)
            for n in tree.body
        )
        if getattr_ or swapped:
            out.add(path.relative_to(root).as_posix())
    return out


def test_the_scan_sees_imports_in_functions_and_by_name(tmp_path):
    """A planted tree worked out by hand: a config function importing the trackers (in a function), the report importing
    the API by name, and a results module reading the fedcli package: three imports up; the CLI importing the config
    is down."""
    (tmp_path / "pyproject.toml").write_text(
        '[[tool.importlinter.contracts]]\nname = "l"\ntype = "layers"\n'
        'layers = ["fedcli.api", "fedcli.cli", "fedcli.report", "fedcli.results", '
        '"fedcli.trackers", "fedcli.config"]\n'
    )
    pkg = tmp_path / "fedcli"
    for sub in ("cli", "report", "results", "trackers"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text("")
    (pkg / "config.py").write_text("def check():\n    from fedcli.trackers import names\n")
    (pkg / "report" / "__init__.py").write_text("import importlib\nimportlib.import_module('fedcli.api')\n")
    (pkg / "results" / "x.py").write_text("import fedcli\nfrom fedcli import config\n")
    (pkg / "cli" / "y.py").write_text("from fedcli.config import check\n")
    assert upward_imports(tmp_path) == {
        ("fedcli.config", "fedcli.trackers"),
        ("fedcli.report", "fedcli.api"),
        ("fedcli.results", "fedcli"),
    }
    (pkg / "report" / "z.py").write_text("def __getattr__(name):\n    pass\n")
    (pkg / "cli" / "w.py").write_text("import sys\nsys.modules[__name__].__class__ = type\n")
    assert module_tricks(tmp_path) == {"fedcli/report/z.py", "fedcli/cli/w.py"}


def test_no_import_points_up_the_layers():
    assert upward_imports(ROOT) == set()


def test_no_module_tricks():
    assert module_tricks(ROOT) == set()
