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

import pytest

import srckit

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
    ("fedcli/params.py", "cls_or_spec"): "a part class or its PartSpec, either: what the functions reading a part's "
    "declared options take (issue 60: it was ``part``, a third meaning)",
    ("fedcli/reports/rundata.py", "spec"): "the PartSpec through which a run's recorded options are read, typed",
    ("fedcli/reports/rundata.py", "part_spec"): "the PartSpec of a run's part: what the report reads of it (its label, "
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
        found += [(rel, name, line) for name, line in defined_names(srckit.tree(path)) if says_spec(name)]
    return found


def allowed(module: str, name: str) -> bool:
    return name in ANYWHERE or (module, name) in METHOD_SPEC_USES


def test_spec_names_only_method_specs():
    bad = [f"{m}:{line}: {n}" for m, n, line in sorted(set(spec_names(ROOT))) if not allowed(m, n)]
    assert not bad, (
        "names that say 'spec' for something that is not a method spec (fedcli/specs/); name what it is "
        "(TableDef, SyntheticSetting, factory reference, ...), or, for a method spec (a PartSpec) read "
        "outside fedcli/specs/, add the module to METHOD_SPEC_USES with why:\n" + "\n".join(bad)
    )


def test_every_allowed_name_is_still_defined():
    """A stale entry is removed, so that the allow-list stays the list of what it allows."""
    found = {(m, n) for m, n, _ in spec_names(ROOT)}
    names = {n for _, n in found}
    stale = [n for n in ANYWHERE if n not in names] + [f"{m}: {n}" for m, n in METHOD_SPEC_USES if (m, n) not in found]
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
        "def inspect_specifics(specification): pass\n"
    )
    got = sorted((m, n) for m, n, _ in spec_names(tmp_path))
    a, s = "fedcli/report/a.py", "fedcli/report/spec.py"
    assert got == sorted(
        [
            (s, "spec"),
            (a, "spec_util"),
            (a, "TableSpec"),
            (a, "spec"),
            (a, "specs"),
            (a, "is_factory_spec"),
            (a, "more_specs"),
            (a, "SPEC"),
            (a, "one_spec"),
            (a, "spec_file"),
            (a, "row_spec"),
            (a, "got_spec"),
            (a, "spec_error"),
        ]
    )


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
    """The renamed classes are not stored: a sweep folder's products read back as they were, and are written the
    same."""
    from fedcli.reports.products import (
        FigureDef,
        TableDef,
        parse_figure,
        parse_table,
        product_from_dict,
        product_to_dict,
    )

    table, figure = (product_from_dict(d) for d in OLD_SWEEP_PRODUCTS)
    assert isinstance(table, TableDef) and isinstance(figure, FigureDef)
    assert [product_to_dict(table), product_to_dict(figure)] == OLD_SWEEP_PRODUCTS
    loc = str  # where a recipe key is (unused: the entries are valid)
    assert table == parse_table({"name": "t", "layout": "rows", "columns": ["method", "acc"], "runs": ["a", "b"]}, loc)
    assert figure == parse_figure({"name": "f", "kind": "curves", "panels": [{"title": "p", "runs": ["a"]}]}, loc)


# ------------------------------------------------------------------------ issue 60: one word, one meaning (item 5)
def fedcli_modules(root: Path = ROOT) -> list[tuple[str, ast.AST]]:
    """(module path relative to ``root``, its syntax tree) of every module of ``root/fedcli`` (parsed once a root)."""
    if root not in _PARSED:
        _PARSED[root] = [
            (path.relative_to(root).as_posix(), srckit.tree(path)) for path in sorted((root / "fedcli").rglob("*.py"))
        ]
    return _PARSED[root]


_PARSED: dict[Path, list] = {}


def bound(tree: ast.AST, word: str):
    """Line of every place ``tree`` binds the name ``word``: an argument, an assigned or loop name, a def or class."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.arg)
            and node.arg == word
            or isinstance(node, ast.Name)
            and node.id == word
            and isinstance(node.ctx, ast.Store)
            or isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and node.name == word
        ):
            yield node.lineno


def opts_misuses(root: Path = ROOT) -> list[str]:
    """``params`` in ``fedcli/fl/`` is the model's tensors (``cohort.params``, a step's ``params`` list); a part's
    declared options are ``self.opts``. An option read as ``self.params.<name>`` (not a dict's ``items``, ``values``,
    ``keys``, ``get``), or a constructor taking its options as ``params`` (``super().__init__(params)``), is the old
    second meaning (FedDyn's ``apply`` read ``self.params.feddyn_alpha`` beside its ``params`` tensors)."""
    bad = []
    for rel, tree in fedcli_modules(root):
        if not rel.startswith("fedcli/fl/"):
            continue
        for node in ast.walk(tree):
            inner = node.value if isinstance(node, ast.Attribute) else None
            if (
                isinstance(inner, ast.Attribute)
                and inner.attr == "params"
                and isinstance(inner.value, ast.Name)
                and inner.value.id == "self"
                and node.attr not in ("items", "values", "keys", "get")
            ):
                bad.append(f"{rel}:{node.lineno}: self.params.{node.attr}")
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "super().__init__"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "params"
            ):
                bad.append(f"{rel}:{node.lineno}: super().__init__(params)")
    return bad


def active_misuses(root: Path = ROOT) -> list[str]:
    """``active`` in ``fedcli/fl/`` is the ``[K]`` mask of the clients still training (a step hook's argument,
    ``StepContext.active``); the clients in a round are counted by ``n_active`` (``view.n_active``, the plan's, the
    engine's). An attribute ``.active`` (``view.active``, ``plan.active``, except a step context's ``ctx.active``) or
    an ``active: int`` argument is the count under the mask's name (SCAFFOLD read both)."""
    bad = []
    for rel, tree in fedcli_modules(root):
        if not rel.startswith("fedcli/fl/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "active"
                and not ast.unparse(node.value).endswith("ctx")
            ):
                bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.FunctionDef) and node.name == "active":
                bad.append(f"{rel}:{node.lineno}: def active")
            elif (
                isinstance(node, ast.arg)
                and node.arg == "active"
                and node.annotation is not None
                and "int" in ast.unparse(node.annotation)
            ):
                bad.append(f"{rel}:{node.lineno}: active: {ast.unparse(node.annotation)}")
            elif isinstance(node, ast.Constant) and node.value == "active" and rel == "fedcli/fl/view.py":
                bad.append(f"{rel}:{node.lineno}: the member 'active'")
    return bad


#: where a run's built parts are handled: the only packages that bind the name ``part`` (to a part instance)
PART_PACKAGES = ("fedcli/fl/", "fedcli/results/")


def part_misuses(root: Path = ROOT) -> list[str]:
    """A bound name ``part`` is a built part (an instance of ``fedcli.fl.parts.Part``), in the packages that run parts
    (:data:`PART_PACKAGES`), from a run's parts: a part class is a class, its declaration a spec (``cls_or_spec`` where
    either will do), a Partition a partition, a slice a chunk. ``fedcli.specs.part(...)``, the call that declares a
    part's spec, is the one ``def part``."""
    bad = []
    for rel, tree in fedcli_modules(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "part" and rel != "fedcli/specs/__init__.py":
                bad.append(f"{rel}:{node.lineno}: def part (a name of a part is part_name)")
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Subscript)
                and any(isinstance(t, ast.Name) and t.id == "part" for t in node.targets)
            ):
                bad.append(f"{rel}:{node.lineno}: part = {ast.unparse(node.value)} (a slice)")
        if not rel.startswith(PART_PACKAGES) and rel != "fedcli/specs/__init__.py":
            bad += [f"{rel}:{line}: part (outside {', '.join(PART_PACKAGES)})" for line in bound(tree, "part")]
    return bad


def share_misuses(root: Path = ROOT) -> list[str]:
    """``share`` is a fraction (``view.share``, |P_t| / m; a share of memory): a function named ``share`` that is not
    a property is a verb (the store's collective is ``fedcli.fl.store.publish``), and ``shares`` the lists an
    allgather returns (``gathered``)."""
    bad = []
    for rel, tree in fedcli_modules(root):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef)
                and node.name == "share"
                and not any(ast.unparse(d) == "property" for d in node.decorator_list)
            ):
                bad.append(f"{rel}:{node.lineno}: def share (a verb)")
        bad += [f"{rel}:{line}: shares" for line in bound(tree, "shares")]
    return bad


def view_misuses(root: Path = ROOT) -> list[str]:
    """``view`` is a part's window on the run (``fedcli.fl.view.PartView``), nothing else: what a run says is a
    printer (``RunPrinter``, ``TerminalPrinter``). A class whose name says "view" other than ``PartView``, or an
    argument ``view`` annotated with another class, is the old second meaning."""
    bad = []
    for rel, tree in fedcli_modules(root):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ClassDef)
                and "view" in (w.lower() for w in _WORD.findall(node.name))
                and node.name != "PartView"
            ):
                bad.append(f"{rel}:{node.lineno}: class {node.name}")
            elif (
                isinstance(node, ast.arg)
                and node.arg == "view"
                and node.annotation is not None
                and "PartView" not in ast.unparse(node.annotation)
            ):
                bad.append(f"{rel}:{node.lineno}: view: {ast.unparse(node.annotation)}")
    return bad


def period_misuses(root: Path = ROOT) -> list[str]:
    """A round's local iterations are ``round_length`` (what a schedule's spec declares, ``round_length=``), never
    ``period``: no name, attribute or keyword ``period`` in ``fedcli/``."""
    bad = []
    for rel, tree in fedcli_modules(root):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "period"
                or isinstance(node, ast.keyword)
                and node.arg == "period"
                or isinstance(node, ast.Name)
                and node.id == "period"
                or isinstance(node, ast.arg)
                and node.arg == "period"
                or isinstance(node, ast.FunctionDef)
                and node.name == "period"
            ):
                bad.append(f"{rel}:{node.lineno}: period")
    return bad


def phi_options() -> set[str]:
    """Config fields (each a flag and a recipe key) whose name says phi: FedLAMA's interval factor ``--phi`` only;
    Fed-LAMB's bounded scaling function is ``--scaling-bounds`` (its old ``--phi-bounds`` a hidden alias)."""
    from fedcli.config import FIELDS

    return {name for name in FIELDS if "phi" in name.split("_")}


RULES = {
    "params": opts_misuses,
    "active": active_misuses,
    "part": part_misuses,
    "share": share_misuses,
    "view": view_misuses,
    "period": period_misuses,
}


@pytest.mark.parametrize("word", sorted(RULES))
def test_one_word_one_meaning(word):
    bad = RULES[word](ROOT)
    assert not bad, f"'{word}' used in its other meaning ({RULES[word].__doc__.split(':')[0]}):\n" + "\n".join(bad)


def test_phi_on_the_command_line_is_fedlamas():
    assert phi_options() == {"phi"}


def test_each_rule_sees_the_meaning_it_forbids(tmp_path):
    """Each rule fails on the old uses (the code before issue 60's renames, in small) and passes on the new."""
    fl = tmp_path / "fedcli" / "fl"
    fl.mkdir(parents=True)
    (tmp_path / "fedcli" / "report").mkdir()
    (fl / "old.py").write_text(
        "class FedDynStep(SGDStep):\n"
        "    def __init__(self, params):\n        super().__init__(params)\n        a = self.params.feddyn_alpha\n"
        "    def apply(self, cohort, names, params, g, lr, active):\n        n = view.active\n"
        "def sample_cohort(seed, round_idx, clients, active: int): pass\n"
        "def share(view, clients, tables):\n    shares = []\n"
        "def plan_run(cfg, period): return cfg.period\n"
        "def score(idx):\n    part = idx[0:4]\n"
    )
    (tmp_path / "fedcli" / "report" / "old.py").write_text(
        "class RunView: pass\ndef run_train(cfg, view: RunView): pass\n"
        "class RunData:\n    def part(self, kind): pass\ndef bind(part, source): pass\n"
    )
    got = {word: len(rule(tmp_path)) for word, rule in RULES.items()}
    assert got == {"params": 2, "active": 2, "part": 4, "share": 2, "view": 2, "period": 2}
    (fl / "old.py").write_text(
        "class FedDynStep(SGDStep):\n"
        "    def __init__(self, opts):\n        super().__init__(opts)\n        a = self.opts.feddyn_alpha\n"
        "    def apply(self, cohort, names, params, g, lr, active):\n"
        "        n = view.n_active + len(self.params.items())\n"
        "        m = cohort.ctx.active\n"
        "def sample_cohort(seed, round_idx, clients, n_active: int): pass\n"
        "def publish(view, clients, tables):\n    gathered = []\n"
        "def plan_run(cfg, round_length): return cfg.round_length\n"
        "def engine(sim):\n    for part in sim.parts.values(): part.setup(sim.view)\n"
    )
    (tmp_path / "fedcli" / "report" / "old.py").write_text(
        "class RunPrinter: pass\ndef run_train(cfg, printer: RunPrinter): pass\n"
        "class RunData:\n    def part_name(self, kind): pass\ndef bind(cls_or_spec, source): pass\n"
        "class PartView: pass\ndef hook(view: PartView): pass\n"
    )
    _PARSED.pop(tmp_path)  # the files changed: parse them again
    assert {word: rule(tmp_path) for word, rule in RULES.items()} == {word: [] for word in RULES}
