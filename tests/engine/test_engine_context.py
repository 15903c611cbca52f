"""The engine's declared contexts (fedcli/fl/context.py): no function outside fedcli/fl/engine.py takes the engine,
and each helper module reads only the members of its context.

The source checks read every module of the package as a syntax tree: no parameter named ``sim``, none annotated
``Simulation``; in each helper module every ``ctx.NAME`` a function reads is a member of the context its ``ctx``
parameter is annotated with (or of the module's context, for a method reading a context it keeps)."""

import ast
from pathlib import Path

import pytest

import srckit
from fedcli.config import TrainConfig
from fedcli.fl import context
from fedcli.fl.engine import Simulation

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fedcli"
CONTEXTS = {
    cls.__name__: cls
    for cls in vars(context).values()
    if isinstance(cls, type) and issubclass(cls, context.Context) and cls is not context.Context
}
# each helper module and the context its functions get from the engine
HELPERS = {
    "fedcli/fl/sync.py": "SyncContext",
    "fedcli/fl/chunked.py": "SyncContext",
    "fedcli/fl/guard.py": "GuardContext",
    "fedcli/fl/store.py": "StoreContext",
    "fedcli/fl/personal.py": "StoreContext",
    "fedcli/fl/system.py": "SystemContext",
    "fedcli/fl/evaluation.py": "EvalContext",
    "fedcli/fl/build.py": "ManifestContext",
    "fedcli/results/runlog.py": "LogContext",
    "fedcli/results/resume.py": "LogContext",
    "fedcli/trackers/hook.py": "LogContext",
    "fedcli/cli/train.py": "LogContext",
    "fedcli/results/checkpoint.py": "CheckpointContext",
    "fedcli/results/signals.py": "CheckpointContext",
    "fedcli/results/run_directory.py": "DriverContext",
    "fedcli/runner.py": "DriverContext",
}


def functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


def params(fn) -> list[ast.arg]:
    a = fn.args
    return a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]


def takes_the_engine(paths) -> list[str]:
    """Every function in ``paths`` with a parameter ``sim`` or one annotated ``Simulation``."""
    out = []
    for path in paths:
        for fn in functions(srckit.tree(path)):
            for arg in params(fn):
                note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg == "sim" or "Simulation" in note:
                    out.append(f"{path.name}:{fn.lineno} {getattr(fn, 'name', 'lambda')}({arg.arg})")
    return out


def context_reads(path: Path, default: str) -> list[tuple[str, str, int]]:
    """(context class, member, line) of every ``ctx.NAME`` read in the module at ``path``: the class its function's
    ``ctx`` parameter is annotated with, else ``default`` (a method reading the context its object keeps)."""
    out = []
    for fn in functions(srckit.tree(path)):
        if isinstance(fn, ast.Lambda):
            continue
        declared = {a.arg: ast.unparse(a.annotation) for a in params(fn) if a.annotation is not None}
        kind = declared.get("ctx", default)
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ctx":
                out.append((kind, node.attr, node.lineno))
    return out


def undeclared(path: Path, default: str) -> list[str]:
    return [
        f"{path.name}:{line} {kind}.{name}"
        for kind, name, line in context_reads(path, default)
        if kind not in CONTEXTS or name not in CONTEXTS[kind].MEMBERS
    ]


def test_no_function_outside_the_engine_takes_it():
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "fl" / "engine.py"]
    assert len(paths) > 100 and takes_the_engine(paths) == []


def test_every_context_parameter_is_declared():
    loose = []
    for where in HELPERS:
        for fn in functions(srckit.tree((ROOT / where))):
            for arg in params(fn):
                if arg.arg == "ctx" and not isinstance(fn, ast.Lambda):
                    note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    if note not in CONTEXTS:
                        loose.append(f"{where}:{fn.lineno} {fn.name}(ctx: {note or '?'})")
    assert loose == []


@pytest.mark.parametrize("where", sorted(HELPERS))
def test_each_helper_reads_only_declared_members(where):
    assert context_reads(ROOT / where, HELPERS[where]), f"{where} reads no context"  # the map names modules that do
    assert undeclared(ROOT / where, HELPERS[where]) == []


def test_the_checks_catch_a_violation(tmp_path):
    """The checks above on a module that breaks both rules: it takes the engine, and reads an undeclared member."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(sim, x):\n    return sim.cfg\n\n\ndef g(ctx: GuardContext, y: 'Simulation'):\n"
        "    return ctx.schedule, ctx.cfg\n"
    )
    assert takes_the_engine([bad]) == ["bad.py:1 f(sim)", "bad.py:5 g(y)"]
    assert undeclared(bad, "GuardContext") == ["bad.py:6 GuardContext.schedule"]


def test_a_context_is_read_only_and_declared():
    fake = context.GuardContext.fake(cfg="c", device="cpu")
    assert (fake.cfg, fake.device) == ("c", "cpu")
    with pytest.raises(AttributeError, match="read-only"):
        fake.cfg = "other"
    with pytest.raises(AttributeError, match="not a member of GuardContext"):
        fake.schedule
    with pytest.raises(AttributeError):
        fake.store
    with pytest.raises(TypeError, match="not members of GuardContext: schedule"):
        context.GuardContext.fake(schedule=None)


def test_every_declared_member_is_the_engines():
    """Each member of each context reads the set-up engine's attribute of that name (a typo in MEMBERS fails)."""
    cfg = TrainConfig(
        dataset="digits",
        model="mlp",
        mlp_hidden="8",
        clients=4,
        active_ratio=0.5,
        iterations=2,
        batch_size=8,
        device="cpu",
    ).validate()
    sim = Simulation(cfg).setup()
    for name, cls in CONTEXTS.items():
        ctx = sim.context(cls)
        assert ctx is sim.context(cls)  # built once
        for member in cls.MEMBERS:
            assert getattr(ctx, member) is getattr(sim, member) or getattr(ctx, member) == getattr(sim, member), (
                name,
                member,
            )
    with pytest.raises(TypeError):
        sim.context(context.Context)


def test_the_part_view_has_no_config():
    """A part reads its own declared options (its bound ``params``), never the run's whole config through the view:
    the view has no ``cfg``, and no module of the package reads ``view.cfg``."""
    from fedcli.fl.view import MEMBERS, PartView

    assert "cfg" not in MEMBERS and "seed" in MEMBERS and "drop_last" in MEMBERS
    with pytest.raises(AttributeError):
        PartView.fake(seed=1).cfg
    assert (PartView.fake(seed=7, drop_last=True).seed, PartView.fake(seed=7, drop_last=True).drop_last) == (7, True)
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(srckit.tree(path)):
            if isinstance(node, ast.Attribute) and node.attr == "cfg" and "view" in ast.unparse(node.value):
                reads.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert reads == []
