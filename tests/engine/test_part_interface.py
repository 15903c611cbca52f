"""The part interface (fedcli/fl/view.py): the parts see the run only through a PartView, never the Simulation, and
reach another part only through a declared capability.

The source checks read every file that holds parts (``fedcli/fl/algorithms/*.py`` and the shared part modules) as a
syntax tree: no name ``sim``/``Simulation``, no attribute ``.sim``/``._src``/``.__self__`` (the ways past the view),
every hook's first argument after ``self`` named ``view``, no ``isinstance``/``issubclass`` against a part class, no
``cohort.state`` (a method's parts share state through their own objects and declared capabilities), no item
assignment into the global model's tables."""

import ast
import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

import srckit
from fedcli.config import TrainConfig
from fedcli.fl.algorithms.fedlama import Lama
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.parts import CODECS, INITS, LOCAL_STEPS, SERVERS, Part
from fedcli.fl.schedules import SCHEDULES, Periodic
from fedcli.fl.view import MEMBERS, PartView
from fedcli.models.layers import LayerInfo
from fedcli.specs import PARTS

FL = Path(__file__).resolve().parents[2] / "fedcli" / "fl"
# every file that defines parts: the method files and the shared part modules (the rule of docs/method-contract.md)
# every part's module, as the specs name them (``PartSpec.impl``), and the slots helper parts share
PART_FILES = sorted(
    {
        FL.parent.parent / (spec.impl.partition(":")[0].replace(".", "/") + ".py")
        for family in PARTS.values()
        for spec in family.values()
    }
    | {FL / "slots.py"}
)
HOOKS = (
    "setup",
    "begin_round",
    "end_round",
    "local_layers",
    "training_indices",
    "personalize",
    "round_tables",
    "gradients",
    "download",
    "received",
    "initialize",
    "starts_from_global",
    "mixes_received",
    "synchronized",
)


def all_part_classes() -> list[type]:
    out, todo = [], [Part]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def nodes():
    """(file, node) for every syntax-tree node of every part file."""
    for path in PART_FILES:
        where = path.relative_to(FL.parent.parent).as_posix()
        for node in ast.walk(srckit.tree(path)):
            yield where, node


def test_the_part_files_are_the_ones_on_disk():
    assert all(p.exists() for p in PART_FILES) and len(PART_FILES) > 20
    assert set(FL.glob("algorithms/[a-z]*.py")) <= set(PART_FILES)  # every method file with parts of its own


def test_no_part_file_reads_the_simulation():
    found = []
    for where, node in nodes():
        if isinstance(node, ast.Name) and node.id in ("sim", "Simulation"):
            found.append(f"{where}:{node.lineno} {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in ("sim", "_src", "__self__", "Simulation"):
            found.append(f"{where}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "fedcli.fl.engine":
            found.append(f"{where}:{node.lineno} imports the engine")
    assert found == []


def test_every_hook_takes_the_view():
    """In the source (every hook defined in a part file) and on every registered part class (wherever it lives)."""
    wrong = []
    for where, node in nodes():
        if (
            isinstance(node, ast.FunctionDef)
            and node.name in HOOKS
            and len(node.args.args) > 1
            and node.args.args[0].arg == "self"
            and node.args.args[1].arg != "view"
        ):
            wrong.append(f"{where}:{node.lineno} {node.name}({node.args.args[1].arg}, ...)")
    for cls in all_part_classes():
        for hook in HOOKS:
            fn = getattr(cls, hook, None)
            if fn is not None:
                params = list(inspect.signature(fn).parameters)
                if len(params) > 1 and params[1] != "view":
                    wrong.append(f"{cls.__name__}.{hook}({params[1]}, ...)")
    assert wrong == []


def test_no_part_type_checks_another_part():
    names = {cls.__name__ for cls in all_part_classes()}
    found = []
    for where, node in nodes():
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
        ):
            against = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} | {
                n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)
            }
            if against & names:
                found.append(f"{where}:{node.lineno} {node.func.id}(..., {', '.join(sorted(against & names))})")
    assert found == []


def test_no_part_shares_state_through_cohort_state_or_writes_the_global_tables():
    found = []
    for where, node in nodes():
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "state"
            and isinstance(node.value, ast.Name)
            and node.value.id == "cohort"
        ):
            found.append(f"{where}:{node.lineno} cohort.state")
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for t in targets:
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Attribute)
                and t.value.attr in ("global_params", "global_buffers")
            ):
                found.append(f"{where}:{node.lineno} writes {t.value.attr}[...]")
    assert found == []


def test_the_view_has_exactly_the_declared_members():
    public = {n for n in dir(PartView) if not n.startswith("_")} - {"fake"}
    assert public == set(MEMBERS) and len(MEMBERS) == len(set(MEMBERS))


def test_a_fake_view_takes_declared_members_only_and_is_read_only():
    view = PartView.fake(n_active=3)
    assert view.n_active == 3
    with pytest.raises(TypeError, match="not members of the part interface: simulation"):
        PartView.fake(simulation=object())
    with pytest.raises(AttributeError):
        view.n_active = 4
    with pytest.raises(AttributeError):
        view.store
    # share is computed from active and the number of clients (|P_t| / m), never given
    assert PartView.fake(n_active=3, client_indices=[()] * 12).share == 0.25
    with pytest.raises(TypeError, match="computed from other members, not given: share"):
        PartView.fake(share=0.5)


def test_the_capabilities_go_through_declarations():
    """offered/provided find the part that provides a capability (Part.provides / Part.offer); declared reads a Part
    declaration of every part; a name that is not a declaration is refused."""
    from fedcli.fl.adaptive import VhatMaxServer
    from fedcli.fl.algorithms.fedlamb import LambStep

    cfg = TrainConfig(algo="fedlamb").validate()
    step, server = LambStep(cfg), VhatMaxServer(cfg)
    server.vhat = {"w": torch.ones(1)}
    view = PartView.fake(parts={"local_step": step, "server": server})
    assert view.provided("vhat") and view.provided("v") and not view.provided("mime")
    assert view.offered("vhat", None) is server.vhat
    with pytest.raises(LookupError):
        view.offered("mime", None)
    assert view.declared("fresh_momentum_needed") == {"local_step": None, "server": None}
    with pytest.raises(AttributeError):
        view.declared("offer")


def test_the_engine_view_reads_the_current_values_read_only():
    """FedFomo's init holds back validation samples (training_indices): the view shows the split the engine trains on;
    the sample counts cannot be written through it."""
    cfg = TrainConfig(
        algo="fedfomo", dataset="digits", model="mlp", clients=4, rounds=1, threads=1, client_test_fraction=0.25
    ).validate()
    sim = Simulation(cfg).setup()
    view = sim.view
    assert view.client_indices == tuple(sim.client_indices) and [int(n) for n in view.sizes] == [
        int(n) for n in sim.sizes
    ]
    assert sum(int(t.numel()) for t in view.client_indices) < sum(len(ix) for ix in sim.partition.train)
    with pytest.raises(ValueError):
        view.sizes[0] = 1
    assert isinstance(view.layers, tuple) and view.global_params is sim.global_params
    assert not view.starts_from_global()  # FedFomo's init starts each client from its aggregate


# ---------------------------------------------------------------------------- the schedule is a part
def test_every_schedule_is_a_part_the_engine_calls_last():
    assert all(issubclass(cls, Part) for cls in SCHEDULES.values())
    sim = Simulation(TrainConfig(dataset="digits", model="mlp", clients=4, rounds=1, threads=1).validate()).setup()
    assert (
        list(sim.parts) == ["local_step", "codec", "init", "server", "schedule"]
        and sim.parts["schedule"] is sim.schedule
    )
    assert Periodic.__dict__["separable"] and "separable" not in Lama.__dict__  # FedLAMA syncs layers mid-round


def test_the_schedule_adjusts_at_its_end_round_hook():
    """FedLAMA at tau' = 2, phi = 2, two layers: the round-end hook adjusts once the run is past
    --lama-first-adjust * tau' iterations (cohort.end_iteration) and keeps the adjustment until the next round."""
    cfg = TrainConfig(algo="fedlama", tau=2, phi=2, lama_rule="paper", lama_eligible="all", lama_first_adjust=1)
    layers = [LayerInfo(0, "a", (10,), 10, "kernel"), LayerInfo(1, "b", (1000,), 1000, "kernel")]
    s = Lama(cfg, layers)
    view = PartView.fake(layers=tuple(layers))
    cohort = Cohort([0], torch.ones(1, dtype=torch.float64), {}, {}, round_idx=0)
    s.observe(0, 1.0 * 10 * 4, 4)  # d_0 = 1 (Eq. 2: the distance / (steps * numel))
    s.observe(1, 1e-6 * 1000 * 4, 4)  # d_1 = 1e-6
    s.begin_round(view, cohort)
    cohort.end_iteration = 2  # not past 1 * tau' = 2 iterations: no adjustment
    s.end_round(view, cohort)
    assert s.adjustment is None and s.intervals == [2, 2]
    cohort.round_idx, cohort.end_iteration = 1, 4
    s.begin_round(view, cohort)
    s.end_round(view, cohort)
    # along increasing d: layer 1 first, delta = 1e-3 / (1e-3 + 10) < 1 - lambda = 10 / 1010: phi * tau' = 4;
    # then layer 0, delta = 1 >= 1 - 1 = 0: tau' = 2
    assert s.adjustment.round == 1 and s.adjustment.iteration == 4 and s.intervals == [2, 4]
    s.begin_round(view, cohort)
    assert s.adjustment is None and np.array_equal(s.intervals, [2, 4])


def test_every_registered_part_is_a_part():
    for table in (LOCAL_STEPS, CODECS, INITS, SERVERS, SCHEDULES):
        assert all(issubclass(cls, Part) for cls in table.values())


# ------------------------------------------------------------------ where parts live (docs/method-contract.md)
#: the family modules of fedcli/fl/ and why a part lives there rather than in a method's file
FAMILIES = {
    "parts": "the defaults",
    "schedules": "the schedules' base and the periodic default",
    "codecs": "several presets",
    "parts_servers": "several presets",
    "adaptive": "the v_hat servers' base",
}


def test_each_part_lives_where_the_rule_says():
    """Every method found by its name: a part of a method lives in ``fedcli/fl/algorithms/<method>.py`` and its spec in
    ``fedcli/specs/<method>.py`` (the same name, a registered method, which uses the part or declares the part it
    extends: lama-accelerate is FedLAMA's); every other part is a default, a base, or shared by several presets, in
    a family module of fedcli/fl/ with its spec outside the methods' spec files."""
    from fedcli.specs import FAMILIES as FAMILY_NAMES
    from fedcli.specs import METHODS, Method

    users: dict[tuple, set] = {}
    for m in {m.name: m for m in METHODS.values()}.values():
        for family, name in m.parts().items():
            users.setdefault((family, name), set()).add(m.name)
    defaults = {f.default for f in dataclasses.fields(Method) if f.name in FAMILY_NAMES}  # sgd, periodic, ...
    declared_in = {}  # impl -> the spec module that declares it
    for path in sorted((FL.parent / "specs").glob("*.py")):
        for node in ast.walk(srckit.tree(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "part" and len(node.args) >= 3:
                declared_in[node.args[2].value] = path.stem
    wrong = []
    for family in PARTS:
        for spec in PARTS[family].values():
            where = spec.impl.partition(":")[0].removeprefix("fedcli.fl.")
            used, in_spec = users.get((family, spec.name), set()), declared_in.get(spec.impl)
            if where.startswith("algorithms."):
                method = where.removeprefix("algorithms.")
                base_there = spec.base is not None and declared_in.get(spec.base.impl) == method
                if in_spec != method or method not in METHODS or not (method in used or base_there):
                    wrong.append(
                        f"{family} {spec.name} lives in {where}, its spec in specs/{in_spec}.py, used by {sorted(used)}"
                    )
            elif where not in FAMILIES:
                wrong.append(f"{family} {spec.name} lives in {where}, not a family module")
            elif in_spec in METHODS:
                wrong.append(f"{family} {spec.name} lives in a family module but its spec in specs/{in_spec}.py")
            elif spec.name not in defaults and len(used) < 2:
                wrong.append(f"{family} {spec.name} is used by {sorted(used)} only: it belongs in that method's file")
    assert wrong == []


def test_per_client_state_goes_through_the_one_helper():
    """Per-client state is a ``fedcli.fl.clientstate.ClientState`` (declared once: name, shape, default): no part file,
    nor the helpers parts share (personal models, slots), gathers from the store, builds an empty cohort's tensor or
    calls ``share`` itself."""
    files = sorted(set(PART_FILES) | {FL / "personal.py", FL / "slots.py"})
    found = []
    for path in files:
        for node in ast.walk(srckit.tree(path)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                owner = f.value.attr if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) else ""
                if name == "share" or (name == "gather" and owner == "store"):
                    found.append(f"{path.name}:{node.lineno}: {name}")
    assert found == []


def test_a_part_checkpoints_the_attributes_it_keeps():
    """``keeps`` names what a part keeps across rounds; the default ``state_dict`` / ``load_state_dict`` copy it
    (detached CPU
    tensors out, clones in), so a part with state writes no checkpoint code (FedDyn's server: ``keeps = ("h",)``)."""
    from fedcli.fl.algorithms.feddyn import FedDynServer

    server = FedDynServer(TrainConfig(algo="feddyn"))
    server.h = {"w": torch.tensor([1.0, 2.0])}
    state = server.state_dict()
    assert list(state) == ["h"] and torch.equal(state["h"]["w"], server.h["w"])
    again = FedDynServer(TrainConfig(algo="feddyn"))
    again.load_state_dict(state)
    assert again.h["w"].tolist() == [1.0, 2.0] and again.h["w"] is not state["h"]["w"]  # a clone of the checkpoint's
    from fedcli.fl.parts import AverageServer

    assert Part.state_dict(AverageServer.__new__(AverageServer)) == {}  # nothing kept: nothing written


def test_keeps_copies_lists_and_a_wrapped_part_by_its_own_keeps():
    """``keeps`` covers every part's own state (issue 60): a list is copied out and in (a schedule's intervals,
    FedLAMA's
    d_l), and a part it wraps (ALA's base init) is kept through that part's own ``keeps``."""
    from fedcli.fl.algorithms.fedala import ALAInit
    from fedcli.fl.algorithms.feddyn import FedDynServer

    class Inner(Part):
        keeps = ("xs",)

    class Outer(Part):
        keeps = ("inner", "xs")

    outer = Outer.__new__(Outer)
    outer.inner, outer.xs = Inner.__new__(Inner), [1, 2]
    outer.inner.xs = [torch.tensor([3.0]), 4]
    state = outer.state_dict()
    outer.xs.append(9)
    outer.inner.xs[1] = 5
    assert state == {"inner": {"xs": [torch.tensor([3.0]), 4]}, "xs": [1, 2]}  # the copies, not the live lists
    again = Outer.__new__(Outer)
    again.inner, again.xs = Inner.__new__(Inner), []
    again.load_state_dict(state)
    assert again.xs == [1, 2] and again.inner.xs[1] == 4 and again.inner.xs[0] is not state["inner"]["xs"][0]
    ala = ALAInit(TrainConfig(algo="fedavg", init="ala"))
    ala.initial_passes, ala.capped = {3: 7}, [3]
    assert ala.state_dict() == {"initial_passes": {3: 7}, "capped": [3], "base": {}}
    dyn = FedDynServer(TrainConfig(algo="feddyn"))
    dyn.h = {"w": torch.tensor([2.0])}
    ala.base = dyn
    assert ala.state_dict()["base"]["h"]["w"].tolist() == [2.0]


def test_no_part_writes_its_checkpoint_by_hand():
    """One idiom for a part's own state (issue 60): every part class declares ``keeps``; none overrides ``state_dict``
    or
    ``load_state_dict`` (8 did: fedadam, mime, mimelamb, scaffold, fedala, fedlama, schedules, adaptive)."""
    by_hand = sorted(
        {
            f"{k.__module__}:{k.__qualname__}"
            for family in PARTS.values()
            for spec in family.values()
            for k in spec.load().__mro__
            if k is not Part and issubclass(k, Part) and ({"state_dict", "load_state_dict"} & set(vars(k)))
        }
    )
    assert by_hand == []
