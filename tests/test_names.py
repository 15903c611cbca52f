"""One meaning per name (issue 49): "spec" is a method spec, the torch-free declaration in ``fedcli/specs/``
(``PartSpec`` made by ``part(...)``, ``Method``, the ``spec`` attribute a part class gets from it), and nothing else.

What a recipe's ``[[tables]]``/``[[figures]]`` entry defines is a ``TableDef``/``FigureDef`` (a "product"), the options
of Synthetic(alpha, beta) a ``SyntheticSetting``, ``--model module:Factory`` a factory reference (``is_factory_ref``).
The scan reads every module of ``fedcli/`` outside ``fedcli/specs/`` and lists each name it defines (class, function,
argument, assigned variable or attribute, ``as`` alias) and each module file whose words include "spec"/"specs"
(``TableSpec``, ``is_factory_spec``, ``spec``; not ``inspect``, ``specific``, ``special``), unless the allow-list
below names it. On-disk keys are strings, not names, and are not scanned: the manifest's ``model.factory.spec``
stays as manifests already hold it (docs/data.md).
"""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: names allowed in every module, with why
ANYWHERE = {
    "module_spec": "importlib's ModuleSpec (importlib.util.find_spec, module.__spec__): Python's name, not fedcli's",
}

#: (module, name) -> why: the modules outside fedcli/specs/ that handle a method spec (a PartSpec) by that name
METHOD_SPEC_USES = {
    ("fedcli/fl/parts.py", "spec"): "a part class's PartSpec (the class attribute set when the class is defined)",
    ("fedcli/params.py", "spec"): "the PartSpec whose declared options a part reads",
    ("fedcli/params.py", "_spec"): "the PartSpec of a part class or of a spec",
    ("fedcli/report/rundata.py", "spec"): "the PartSpec through which a run's recorded options are read, typed",
    ("fedcli/report/rundata.py", "part_spec"): "the PartSpec of a run's part: what the report reads of it (its label, "
                                               "layerwise, learned_weights) without the torch class",
}

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def says_spec(name: str) -> bool:
    """Whether one of the words of ``name`` (snake_case or CamelCase) is spec or specs: ``TableSpec``,
    ``is_factory_spec``, ``_spec``, ``SPECS``; not ``inspect``, ``specific``, ``special``, ``respect``."""
    return any(w.lower() in ("spec", "specs") for w in _WORD.findall(name))


def defined_names(tree: ast.AST):
    """(name, line) of every name a module defines: classes, functions, arguments, assigned names and attributes
    (``for``, ``with ... as``, comprehensions, ``:=`` included), ``except ... as`` and ``import ... as``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno
        elif isinstance(node, ast.arg):
            yield node.arg, node.lineno
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id, node.lineno
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node.attr, node.lineno
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name, node.lineno
        elif isinstance(node, ast.alias) and node.asname:
            yield node.asname, getattr(node, "lineno", 0)


def spec_names(root: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) of every name with a "spec" word defined in ``root/fedcli`` outside ``fedcli/specs/``,
    module files included (line 0)."""
    found = []
    for path in sorted((root / "fedcli").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("fedcli/specs/"):
            continue
        if says_spec(path.stem):
            found.append((rel, path.stem, 0))
        found += [(rel, name, line) for name, line in defined_names(ast.parse(path.read_text(encoding="utf-8")))
                  if says_spec(name)]
    return found


def allowed(module: str, name: str) -> bool:
    return name in ANYWHERE or (module, name) in METHOD_SPEC_USES


def test_spec_names_only_method_specs():
    bad = [f"{m}:{line}: {n}" for m, n, line in sorted(set(spec_names(ROOT))) if not allowed(m, n)]
    assert not bad, ("names that say 'spec' for something that is not a method spec (fedcli/specs/); name what it is "
                     "(TableDef, SyntheticSetting, factory reference, ...), or, for a method spec (a PartSpec) read "
                     "outside fedcli/specs/, add the module to METHOD_SPEC_USES with why:\n" + "\n".join(bad))


def test_every_allowed_name_is_still_defined():
    """A stale entry is removed, so that the allow-list stays the list of what it allows."""
    found = {(m, n) for m, n, _ in spec_names(ROOT)}
    names = {n for _, n in found}
    stale = [n for n in ANYWHERE if n not in names] + [f"{m}: {n}" for m, n in METHOD_SPEC_USES
                                                        if (m, n) not in found]
    assert not stale, "allow-list entries that nothing defines any more (remove them): " + ", ".join(stale)


def test_the_scan_sees_each_kind_of_definition(tmp_path):
    """Each way of defining a name is seen (the scan is what the two tests above rely on), and words are words."""
    pkg = tmp_path / "fedcli" / "report"
    pkg.mkdir(parents=True)
    (tmp_path / "fedcli" / "specs").mkdir()
    (tmp_path / "fedcli" / "specs" / "x.py").write_text("class PartSpec: pass\nspec = 1\n")  # the method-spec package
    (pkg / "spec.py").write_text("import inspect\nspecific = special = respect = 0\n")
    (pkg / "a.py").write_text(
        "import importlib.util as spec_util\n"
        "class TableSpec:\n    def __init__(self, spec):\n        self.specs = spec\n"
        "def is_factory_spec(x, *more_specs, **SPEC): pass\n"
        "for one_spec in []: pass\n"
        "with open('f') as spec_file: pass\n"
        "[row_spec for row_spec in []]\n"
        "if (got_spec := 1): pass\n"
        "try: pass\nexcept Exception as spec_error: pass\n"
        "def inspect_specifics(specification): pass\n")
    got = sorted((m, n) for m, n, _ in spec_names(tmp_path))
    a, s = "fedcli/report/a.py", "fedcli/report/spec.py"
    assert got == sorted([(s, "spec"), (a, "spec_util"), (a, "TableSpec"), (a, "spec"), (a, "specs"),
                          (a, "is_factory_spec"), (a, "more_specs"), (a, "SPEC"), (a, "one_spec"), (a, "spec_file"), (a, "row_spec"),
                          (a, "got_spec"), (a, "spec_error")])


#: a table and a figure as sweep.json held them before the rename (spec_to_dict of main at b297b2f)
OLD_SWEEP_PRODUCTS = json.loads("""[
{"name": "t", "title": "", "paper": "", "layout": "rows", "accuracy": "best", "columns": ["method", "acc"], "groups": [
 {"label": "", "baseline": "a", "runs": ["a", "b"], "rows": [], "left_title": "FedAvg (Periodic Full Avg.)",
  "right_title": "FedLAMA", "methods": [], "method_labels": [], "settings": [], "setting_labels": [], "values": [],
  "cell": "{method} | {setting}", "compare": "", "header": [], "skip": []}], "early_stop_target": "seed",
 "target": null, "metric": "auto", "row_title": "Method", "notes": "", "select": "all", "select_by": [],
 "select_on": "", "kind": "table"},
{"name": "f", "kind": "curves", "title": "", "paper": "", "panels": [{"title": "p", "runs": ["a"], "labels": []}],
 "x": "iterations", "y": "auto", "seed": 0, "round": -1, "log": null, "notes": ""}]""")


def test_a_sweep_json_written_before_the_rename_reads_the_same():
    """The renamed classes are not stored: a sweep folder's products read back as they were, and are written the same."""
    from fedcli.report.products import FigureDef, TableDef, parse_figure, parse_table, product_from_dict, product_to_dict

    table, figure = (product_from_dict(d) for d in OLD_SWEEP_PRODUCTS)
    assert isinstance(table, TableDef) and isinstance(figure, FigureDef)
    assert [product_to_dict(table), product_to_dict(figure)] == OLD_SWEEP_PRODUCTS
    loc = str  # where a recipe key is (unused: the entries are valid)
    assert table == parse_table({"name": "t", "layout": "rows", "columns": ["method", "acc"], "runs": ["a", "b"]}, loc)
    assert figure == parse_figure({"name": "f", "kind": "curves", "panels": [{"title": "p", "runs": ["a"]}]}, loc)
