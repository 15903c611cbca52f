"""What fedcli knows of its methods without importing torch: the method presets, the parts they are made of, and
the options each part reads.

A named method is a preset of five parts (local step, schedule, codec, init, server; ``fedcli.fl.parts``). This
package declares them as plain data, one small module per method (``fedcli/specs/feddyn.py``) and one per family of
general parts (``fedcli/specs/parts.py``, ``fedcli/specs/adaptive.py``):

- a params dataclass per section of options (``fedcli.params.register_params``: ``[feddyn] feddyn_alpha``);
- a :class:`PartSpec` per part: its family and name, the torch class that implements it (``impl``, imported only
  when a run builds the part), the options it reads (``Params``, and ``uses`` for general fields), the part it
  extends (``base``: its options come along) and what it offers and needs of the run's other parts;
- the :class:`Method` preset itself (``register_method``): the five part names, its label, its defaults.

``fedcli/specs/trackers.py`` declares the experiment trackers the same way (each ``--tracker`` name, its library, its
class as ``"module:Class"``), so the config checks ``--tracker`` without the trackers' code.

Nothing here imports torch, so ``--help``, argument errors, recipe and config validation read the registries
directly. The registries fill themselves on first use (:func:`load` imports every module of this package once):
no module needs importing for its side effects first. A method of your own registers the same way from any
module (``docs/method-contract.md``); fedcli's own keep the torch classes in ``fedcli/fl``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedcli.params import bind, register_params

__all__ = [
    "FAMILIES",
    "PARTS",
    "METHODS",
    "PartSpec",
    "Method",
    "Cost",
    "CostInput",
    "FORWARD_ONLY",
    "part",
    "register_method",
    "register_params",
    "load",
    "spec_of",
]

#: the five part families, in the order a method names them
FAMILIES = ("local_step", "schedule", "codec", "init", "server")

_LOADED: list[bool] = []


def load() -> None:
    """Import every spec module of fedcli once (their declarations fill the registries). Called by the registries
    themselves at their first read, and by ``fedcli.config`` when it assembles ``TrainConfig``."""
    if _LOADED:  # loaded, or loading (a spec module that reads a registry while it loads sees it as it stands)
        return
    _LOADED.append(True)
    try:
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name != "parts"):  # the defaults first
            importlib.import_module(f"{__name__}.{mod.name}")
    except BaseException:
        _LOADED.clear()  # a broken spec module fails every read, not only the first
        raise


class Registry(dict):
    """A name -> spec table that loads fedcli's spec modules before its first read (writes do not load)."""

    def _ready(self):
        load()
        return self

    def __getitem__(self, key):
        return dict.__getitem__(self._ready(), key)

    def __contains__(self, key):
        return dict.__contains__(self._ready(), key)

    def __iter__(self):
        return dict.__iter__(self._ready())

    def __len__(self):
        return dict.__len__(self._ready())

    def get(self, key, default=None):
        return dict.get(self._ready(), key, default)

    def keys(self):
        return dict.keys(self._ready())

    def values(self):
        return dict.values(self._ready())

    def items(self):
        return dict.items(self._ready())


# ------------------------------------------------------------------------------------------------------- parts
#: the declarations a spec inherits from its ``base`` unless it gives its own, copied onto its class when the class is
#: defined (``fedcli.fl.parts.Part.__init_subclass__``)
DECLARATIONS = ("requires", "provides", "full_participation", "wraps_base", "cost", "label", "layerwise")

#: a forward pass alone, in forward-backward passes: the system model counts a forward-backward pass as 3 forward
#: passes (``fedcli.models.flops.TRAIN_FLOPS_PER_FORWARD``: the backward pass costs twice the forward)
FORWARD_ONLY = 1.0 / 3.0


@dataclass(frozen=True)
class CostInput:
    """What a part's :class:`Cost` may depend on, for one client in one round: the part's options (``params``), the
    round (from 0), the client's training split (``split`` samples; ``samples`` of them it trains on: fewer when the
    method holds some back, FedFomo's validation part), the mini-batch size (``batch``, ``--batch-size`` as the run
    uses it), ``drop_last``, the clients in the round (``clients``) and ``epoch_steps(E)``: the local steps of E epochs
    over the client's samples (``fedcli.fl.budget.epoch_steps``, each of min(batch, samples) samples)."""

    params: Any
    round_idx: int
    split: int
    samples: int
    batch: int
    drop_last: bool
    clients: int
    epoch_steps: Any = None


@dataclass(frozen=True)
class Cost:
    """The work a part does beyond FedAvg's (one forward-backward pass of the step's mini-batch per local step, the
    model's synchronizations), declared once with the part (``part(..., cost=Cost(...))``) and charged by the system
    model (``--system``, ``fedcli.fl.system``; docs/system-model.md's table). Each field is a number or a function of a
    :class:`CostInput`:

    - ``step``: extra forward-backward passes of the local step's mini-batch, per local step (pFedMe's K inner steps
      are K passes where FedAvg takes 1: ``K - 1``); a forward pass alone counts :data:`FORWARD_ONLY`;
    - ``round``: extra forward-backward passes of single samples, per client and round (Ditto's personalized
      epochs: its steps x its batch; a full-batch gradient: the client's samples);
    - ``trips``: extra round trips between a client and the server per round, each 2 x the client's latency (Mime's
      exchange of the full-batch gradients before the local steps);
    - ``down``, ``up`` (numbers): whole-model copies every client of a round downloads before the part's round and
      uploads after it, beyond the synchronizations (SCAFFOLD's c and c_i+ - c_i): the engine records them in the
      ledger around the part's ``begin_round`` / ``end_round`` (``fedcli.fl.clientstate.open_round``).

    Copies a part moves only in some rounds it records itself (``view.ledger.record_transfer``: Fed-LAMB's v_hat at a
    synchronization); the system model charges both. ``source``: the paper and algorithm line the cost follows."""

    step: Any = 0.0
    round: Any = 0.0
    trips: Any = 0.0
    down: float = 0.0
    up: float = 0.0
    source: str = ""

    @staticmethod
    def value(field, given: "CostInput") -> float:
        return float(field(given) if callable(field) else field)

    def step_passes(self, given: "CostInput") -> float:
        return self.value(self.step, given)

    def round_passes(self, given: "CostInput") -> float:
        return self.value(self.round, given)

    def round_trips(self, given: "CostInput") -> float:
        return self.value(self.trips, given)


#: no work beyond FedAvg's: the default of every part
NO_COST = Cost()


@dataclass(frozen=True, eq=False)
class PartSpec:
    """One part as the registries know it: what it reads and declares, and where its torch class is.

    ``Params`` and ``uses`` are what this part adds to its ``base``'s (a part reads its base's options too);
    ``requires`` (family -> capability), ``provides`` (capabilities), ``full_participation`` (every client every
    round: cross-silo), ``wraps_base`` (an init built around the method's own) and ``cost`` (its work beyond FedAvg's,
    :class:`Cost`) and ``round_length`` (a schedule's local iterations a round, a function of its bound params) are
    inherited from ``base`` unless given, and so are what the reports read of a part, without its torch class:
    ``label`` (what the part adds to a run's label when it replaces its preset's own: "FedProx + ALA"; None: nothing),
    ``layerwise`` (a schedule whose intervals differ by layer: a legend gives tau' and phi) and ``learned_weights``
    (an init's weights learned for each client, a function of its bound params and the layers' sizes in parameter
    order: FedALA Tables 1 and 6; None: it learns none). The spec is the only registration of its part: the torch
    class (``impl``, ``"module:Class"``) names nothing of it; when the class is defined it finds its spec here by its
    own ``module:Class`` (:func:`spec_of`), is checked to extend the class of the spec's ``base``, and gets the
    declarations. Declare a spec before its class."""

    family: str
    name: str
    impl: str
    Params: type | None = None
    uses: tuple[str, ...] = ()
    base: "PartSpec | None" = None
    requires: dict | None = None
    provides: frozenset | None = None
    full_participation: bool | None = None
    wraps_base: bool | None = None
    cost: Cost | None = None
    round_length: Callable | None = None
    label: str | None = None
    layerwise: bool | None = None
    learned_weights: Callable | None = None

    def chain(self) -> tuple["PartSpec", ...]:
        """This spec and the ones it extends, bases first."""
        return (*(self.base.chain() if self.base else ()), self)

    def params_classes(self) -> tuple[type, ...]:
        """The params classes of the part, bases first, each once."""
        return tuple(dict.fromkeys(s.Params for s in self.chain() if s.Params is not None))

    def declared(self) -> tuple[str, ...]:
        """Every config field the part reads: its params classes' fields and the general names it ``uses``, along the
        chain of specs it extends, bases first."""
        names: list[str] = []
        for s in self.chain():
            names += [f.name for f in dataclasses.fields(s.Params)] if s.Params is not None else []
            names += s.uses
        return tuple(dict.fromkeys(names))

    def sections(self) -> tuple[str, ...]:
        """The params sections the part reads (``fedlama`` for the lama schedule)."""
        return tuple(p.section for p in self.params_classes())

    def declaration(self, name: str):
        """A declaration (``requires``, ``provides``, ...): this spec's own, else its base's, else the default."""
        for s in reversed(self.chain()):
            if getattr(s, name) is not None:
                return getattr(s, name)
        return {"requires": {}, "provides": frozenset(), "cost": NO_COST, "label": None, "learned_weights": None}.get(
            name, False
        )

    def iterations(self, cfg) -> int:
        """A schedule's local iterations a round under ``cfg`` (a config or its params): its declared ``round_length``
        of its options, known without its torch class (``fedcli.fl.budget``)."""
        return self.declaration("round_length")(bind(self, cfg))

    def weights_learned(self, config: dict, numels: list[int]) -> int | None:
        """How many weights the part learns for each client in a run of recorded ``config`` (name -> value) whose
        layers have ``numels`` elements in parameter order: its ``learned_weights`` of its recorded options
        (``fedcli.params.recorded``); None for a part that learns none."""
        from fedcli.params import recorded

        count = self.declaration("learned_weights")
        return None if count is None else count(recorded(self, config), numels)

    def load(self) -> type:
        """The torch class that implements the part (imports its module; defining it binds it to this spec)."""
        module, _, qualname = self.impl.partition(":")
        cls = importlib.import_module(module)
        for attr in qualname.split("."):
            cls = getattr(cls, attr)
        if vars(cls).get("spec") is not self:
            raise TypeError(
                f"{self.impl} is not bound to the spec of {self.family} {self.name!r}: declare the spec "
                "(part(...)) before the class is defined"
            )
        return cls


#: family -> name -> spec of every registered part
PARTS: dict[str, Registry] = {f: Registry() for f in FAMILIES}
#: "module:Class" -> the spec of every declared part, named or not (a class finds its own here: :func:`spec_of`)
_BY_IMPL: dict[str, PartSpec] = {}


def part(family: str, name: str, impl: str, **declarations) -> PartSpec:
    """Declare a part (``name``: its registered name; empty for a base only extended by others) and return its spec:
    the one registration of the part, its class (``impl``) names nothing of it. ``base``: the spec it extends, or the
    name of one of fedcli's default parts (``"sgd"``, ``"average"``)."""
    if family not in FAMILIES:
        raise TypeError(f"part {name!r}: unknown family {family!r}; one of {', '.join(FAMILIES)}")
    base = declarations.get("base")
    if isinstance(base, str):  # a part of specs/parts.py by its name ("sgd", "average"), loaded before any other
        declarations["base"] = dict.get(PARTS[family], base)
        if declarations["base"] is None:
            raise TypeError(f"part {name!r}: no {family} {base!r} is declared yet; pass its spec (base=SPEC)")
    spec = PartSpec(family, name, impl, **declarations)
    old = _BY_IMPL.get(impl)
    if old is not None and (old.family, old.name) != (family, name):
        raise TypeError(f"{impl} already implements {old.family} {old.name!r}: one class, one part")
    if name:
        old = dict.get(PARTS[family], name)
        if old is not None and old.impl != impl:
            raise TypeError(f"{family} {name!r} is already declared, implemented by {old.impl}")
        dict.__setitem__(PARTS[family], name, spec)
    _BY_IMPL[impl] = spec
    return spec


def spec_of(impl: str) -> PartSpec | None:
    """The spec whose class is ``impl`` ("module:Class"); None for a class no spec names (a helper base)."""
    load()
    return _BY_IMPL.get(impl)


# ----------------------------------------------------------------------------------------------------- methods
# The setting of FedALA's experiments (Zhang et al., AAAI 2023, "Experimental Setup"), in which FedALA and every
# baseline of its Table 2 ran: the defaults of the personalized presets (FedALA and those 11 baselines).
PERSONALIZED_SETUP = {
    # "25% of the local data forms the test dataset" (each client's own split: personal_acc)
    "client_test_fraction": 0.25,
    "active_ratio": 1.0,  # "we have 20 clients and set rho = 1 by default" (following pFedMe)
    "batch_size": 10,  # "We set the batch size to 10 and the number of local model training epochs to 1"
    "local_epochs": 1.0,
    "drop_last": True,  # the reference code's training loader, DataLoader(shuffle=True, drop_last=True)
    "weighting": "samples",  # Algorithm 1, line 19: the server weighs client i by k_i = |D_i| / sum_j |D_j|
    "lr": 0.1,  # "0.1 on MNIST following FedAvg" (0.005 for the 4-layer CNN on Cifar/Tiny-ImageNet)
}


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    local_step: str = "sgd"
    schedule: str = "periodic"
    codec: str = "identity"
    init: str = "overwrite"
    server: str = "average"
    aliases: tuple[str, ...] = ()
    label: str = ""  # the name papers and reports give the method ("FedAvg", "Fed-LAMB"); empty: ``name``
    alias_labels: dict[str, str] = field(
        default_factory=dict, compare=False
    )  # an alias's own label ("fedsgd": "Fed-SGD")
    #: (colour, marker) of the method in every figure (fedcli/reports/style.py), fixed so that the same method looks
    #: the same in every figure and panel; recorded in the manifest. Empty: one chosen from the label.
    style: tuple[str, str] = ()
    personalized: bool = (
        False  # judged by each client's own model on its local test split (personal_acc; fedcli/fl/personal.py)
    )
    # config values this method runs with unless the user (flag or recipe key) gives another: the settings of
    # the method's paper (lr, server lr, participation, ...) that differ from fedcli's general defaults
    defaults: dict[str, Any] = field(default_factory=dict, compare=False)
    #: the options ``fedcli tune`` searches with ``[tune.space.<method>] defaults = true`` (issue 58), each over its
    #: option's declared ``search`` range (``fedcli.params.opt``) unless ``search_ranges`` gives the method its own;
    #: empty: the learning rate alone
    search: tuple[str, ...] = ()
    search_ranges: dict[str, dict] = field(default_factory=dict, compare=False)

    def parts(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in FAMILIES}

    def label_for(self, name: str | None = None) -> str:
        """The label of the method as ``name`` (the method's name or one of its aliases) calls it."""
        return self.alias_labels.get(name or "", self.label or self.name)

    def effective_defaults(self) -> dict[str, Any]:
        """The method's defaults: a personalized method's start from FedALA's setup (``PERSONALIZED_SETUP``)."""
        base = dict(PERSONALIZED_SETUP) if self.personalized else {}
        return {**base, **self.defaults}


#: every method name and alias -> its preset
METHODS: Registry = Registry()


def register_method(method: Method) -> Method:
    for name in (method.name, *method.aliases):
        dict.__setitem__(METHODS, name, method)
    return method


def method_labels() -> dict[str, str]:
    """Every registered name (and alias) with the label papers give it (``fedlamb``: ``Fed-LAMB``)."""
    return {name: m.label_for(name) for name, m in METHODS.items()}


# ------------------------------------------------------------------------------------------------- what a run reads
def run_specs(algo: str, schedule: str = "", init: str = "") -> dict[str, PartSpec]:
    """The part specs of a run of method ``algo`` (a registered name), ``--schedule`` / ``--init`` overriding its own
    (an init that wraps the method's own, ALA, brings both as ``method_init``); unknown part names are left out
    (validation names them)."""
    m = METHODS[algo]
    names = {**m.parts(), **({"schedule": schedule} if schedule else {}), **({"init": init} if init else {})}
    out = {kind: PARTS[kind][n] for kind, n in names.items() if n in PARTS[kind]}
    if init and init != m.init and "init" in out and out["init"].declaration("wraps_base") and m.init in PARTS["init"]:
        out["method_init"] = PARTS["init"][m.init]
    return out


def run_sections(algo: str, schedule: str = "", init: str = "") -> list[str]:
    """The params sections a run reads: its parts' (``fedlama`` for ``--algo fedprox --schedule lama``)."""
    return list(dict.fromkeys(s for spec in run_specs(algo, schedule, init).values() for s in spec.sections()))


# ------------------------------------------------------------------------------------------------------ the rules
def check_method_config(cfg) -> None:
    """The config's rules that need the registries (run by ``TrainConfig.validate``): the method's registered name
    (FedLAMA -> fedlama, did-you-mean on a typo), a known ``--schedule`` and ``--init``, ``--local-epochs`` only on
    the periodic schedule, what each part requires of the others (``requires``, met by another part's ``provides``:
    the adaptive steps and the v_hat servers), and every client every round for a part that declares
    ``full_participation`` (cross-silo methods: APPLE, FedAMP)."""
    from fedcli.errors import ConfigError
    from fedcli.method_names import resolve_method

    cfg.algo = resolve_method(cfg.algo, method_labels())
    for family, given in (("schedule", cfg.schedule), ("init", cfg.init)):
        if given and given not in PARTS[family]:
            what = {"schedule": "schedule", "init": "local initialization"}[family]
            raise ConfigError(
                f"--{family}: unknown {what} '{given}'; choose one of: {', '.join(sorted(PARTS[family]))}", key=family
            )
    if cfg.local_epochs and (cfg.schedule or METHODS[cfg.algo].schedule) != "periodic":
        raise ConfigError(
            f"--local-epochs {cfg.local_epochs:g} needs the periodic schedule (layer-wise schedules need equal local "
            "steps); --local-epochs 0 runs --tau steps per round (personalized presets default to 1 epoch)",
            key="local_epochs",
        )
    specs = run_specs(cfg.algo, init=cfg.init)
    for kind, spec in specs.items():  # what each part requires of the others (requires / provides)
        if kind in ("schedule", "method_init"):
            continue
        for family, capability in spec.declaration("requires").items():
            other = specs[family]
            if capability not in other.declaration("provides"):
                offer = sorted(n for n, c in PARTS[family].items() if capability in c.declaration("provides"))
                raise ConfigError(
                    f"--algo {cfg.algo}: its {kind.replace('_', ' ')} '{spec.name}' needs a "
                    f"{family.replace('_', ' ')} part that provides {capability} ({', '.join(offer)}), "
                    f"not '{other.name}'",
                    key="algo",
                )
    if cfg.active_ratio < 1.0:
        needs = [
            f"{kind.replace('_', ' ')} '{spec.name}'"
            for kind, spec in specs.items()
            if kind not in ("schedule", "method_init") and spec.declaration("full_participation")
        ]
        if needs:
            raise ConfigError(
                f"--algo {cfg.algo} needs every client in every round (a cross-silo method: its "
                f"{' and '.join(needs)}): use --active-ratio 1, not {cfg.active_ratio}",
                key="active_ratio",
            )
