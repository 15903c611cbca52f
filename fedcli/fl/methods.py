"""Method presets: a named method is a choice of the five parts of ``fedcli.fl.parts``.

Presets are registered by the small modules in ``fedcli.fl.algorithms`` (one per method). Importing this module is
the start-up of the configuration: it loads every method file (their options register with ``fedcli.params``),
then extends the leaf ``fedcli.config`` with them (``config.extend``: ``TrainConfig``) and with the rules that need
the registries (:func:`check_method_config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedcli import config as _config
from fedcli.params import declared, params_classes

METHODS: dict[str, "Method"] = {}

# The setting of FedALA's experiments (Zhang et al., AAAI 2023, "Experimental Setup"), in which FedALA and every
# baseline of its Table 2 ran: the defaults of the personalized presets (FedALA and those 11 baselines).
PERSONALIZED_SETUP = {
    "client_test_fraction": 0.25,  # "25% of the local data forms the test dataset" (each client's own split: personal_acc)
    "active_ratio": 1.0,           # "we have 20 clients and set rho = 1 by default" (following pFedMe)
    "batch_size": 10,              # "We set the batch size to 10 and the number of local model training epochs to 1"
    "local_epochs": 1.0,
    "drop_last": True,             # the reference code's training loader, DataLoader(shuffle=True, drop_last=True)
    "weighting": "samples",        # Algorithm 1, line 19: the server weighs client i by k_i = |D_i| / sum_j |D_j|
    "lr": 0.1,                     # "0.1 on MNIST following FedAvg" (0.005 for the 4-layer CNN on Cifar/Tiny-ImageNet)
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
    alias_labels: dict[str, str] = field(default_factory=dict, compare=False)  # an alias's own label ("fedsgd": "Fed-SGD")
    #: (colour, marker) of the method in every figure (fedcli/report/style.py), fixed so that the same method looks
    #: the same in every figure and panel; recorded in the manifest. Empty: one chosen from the label.
    style: tuple[str, str] = ()
    personalized: bool = False  # judged by each client's own model on its local test split (personal_acc; fedcli/fl/personal.py)
    # config values this method runs with unless the user (flag or recipe key) gives another: the settings of
    # the method's paper (lr, server lr, participation, ...) that differ from fedcli's general defaults
    defaults: dict[str, Any] = field(default_factory=dict, compare=False)

    def parts(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("local_step", "schedule", "codec", "init", "server")}

    def label_for(self, name: str | None = None) -> str:
        """The label of the method as ``name`` (the method's name or one of its aliases) calls it."""
        return self.alias_labels.get(name or "", self.label or self.name)

    def effective_defaults(self) -> dict[str, Any]:
        """The method's defaults: a personalized method's start from FedALA's setup (``PERSONALIZED_SETUP``)."""
        base = dict(PERSONALIZED_SETUP) if self.personalized else {}
        return {**base, **self.defaults}


def register_method(method: Method) -> Method:
    for name in (method.name, *method.aliases):
        METHODS[name] = method
    return method


def method_labels() -> dict[str, str]:
    """Every registered name (and alias) with the label papers give it (``fedlamb``: ``Fed-LAMB``)."""
    return {name: m.label_for(name) for name, m in METHODS.items()}


def with_method_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (recipe keys and flags) completed with the chosen method's defaults for the keys they do
    not set: an explicit value always wins. An explicit ``tau`` (local steps per round) also wins over a default
    number of local epochs, which would otherwise replace it. An unknown method is left for validation to report."""
    from fedcli.config import FIELDS

    from fedcli.errors import ConfigError
    from fedcli.names import resolve_method

    values = dict(values)
    try:
        algo = resolve_method(values.get("algo", FIELDS["algo"].default), method_labels())
    except ConfigError:
        return values
    if "algo" in values:
        values["algo"] = algo  # the registered name: FedLAMA -> fedlama
    method = METHODS[algo]
    defaults = method.effective_defaults()
    if "tau" in values and "local_epochs" not in values:
        defaults.pop("local_epochs", None)
    return {**defaults, **values}


def check_method_config(cfg) -> None:
    """The config's rules that need the registries (run by ``TrainConfig.validate``, ``fedcli.config.register_check``):
    the method's registered name (FedLAMA -> fedlama, did-you-mean on a typo), a known ``--schedule`` and ``--init``,
    ``--local-epochs`` only on the periodic schedule, what each part requires of the others (``Part.requires``, met
    by another part's ``Part.provides``: the adaptive steps and the v_hat servers), and every client every round for a
    part that declares ``full_participation`` (cross-silo methods: APPLE, FedAMP)."""
    from fedcli.errors import ConfigError
    from fedcli.fl import parts
    from fedcli.fl.schedules import SCHEDULES
    from fedcli.names import resolve_method

    cfg.algo = resolve_method(cfg.algo, method_labels())
    if cfg.schedule and cfg.schedule not in SCHEDULES:
        raise ConfigError(f"--schedule: unknown schedule '{cfg.schedule}'; choose one of: {', '.join(sorted(SCHEDULES))}",
                          key="schedule")
    if cfg.init and cfg.init not in parts.INITS:
        raise ConfigError(f"--init: unknown local initialization '{cfg.init}'; choose one of: {', '.join(sorted(parts.INITS))}",
                          key="init")
    if cfg.local_epochs and (cfg.schedule or METHODS[cfg.algo].schedule) != "periodic":
        raise ConfigError(f"--local-epochs {cfg.local_epochs:g} needs the periodic schedule (layer-wise schedules need equal local "
                          "steps); --local-epochs 0 runs --tau steps per round (personalized presets default to 1 epoch)",
                          key="local_epochs")
    names = {**METHODS[cfg.algo].parts(), **({"init": cfg.init} if cfg.init else {})}
    tables = {"local_step": parts.LOCAL_STEPS, "codec": parts.CODECS, "init": parts.INITS, "server": parts.SERVERS}
    for kind, table in tables.items():  # what each part requires of the others (Part.requires / Part.provides)
        for family, capability in table[names[kind]].requires.items():
            if capability not in tables[family][names[family]].provides:
                offer = sorted(n for n, c in tables[family].items() if capability in c.provides)
                raise ConfigError(f"--algo {cfg.algo}: its {kind.replace('_', ' ')} '{names[kind]}' needs a "
                                  f"{family.replace('_', ' ')} part that provides {capability} ({', '.join(offer)}), "
                                  f"not '{names[family]}'", key="algo")
    if cfg.active_ratio < 1.0:
        needs = [f"{kind.replace('_', ' ')} '{name}'" for kind, name in names.items()
                 if kind in tables and tables[kind][name].full_participation]
        if needs:
            raise ConfigError(f"--algo {cfg.algo} needs every client in every round (a cross-silo method: its "
                              f"{' and '.join(needs)}): use --active-ratio 1, not {cfg.active_ratio}", key="active_ratio")


# ------------------------------------------------------------------------------------------------- params sections
def run_parts(algo: str, schedule: str = "", init: str = "") -> dict[str, type]:
    """The part classes of a run of method ``algo`` (a registered name), ``--schedule`` / ``--init`` overriding its own
    (an init that wraps the method's own, ALA, brings both); unknown part names are left out (validation names them)."""
    from fedcli.fl import parts
    from fedcli.fl.schedules import SCHEDULES

    m = METHODS[algo]
    tables = {"local_step": parts.LOCAL_STEPS, "codec": parts.CODECS, "init": parts.INITS, "server": parts.SERVERS,
              "schedule": SCHEDULES}
    names = {**m.parts(), **({"schedule": schedule} if schedule else {}), **({"init": init} if init else {})}
    out = {kind: tables[kind][n] for kind, n in names.items() if n in tables[kind]}
    if init and init != m.init and getattr(out.get("init"), "wraps_base", False) and m.init in parts.INITS:
        out["method_init"] = parts.INITS[m.init]
    return out


def _sections_of(classes) -> list[str]:
    """The params sections the part classes read (their ``Params`` along each class hierarchy), in first-seen order."""
    return list(dict.fromkeys(p.section for c in classes for p in params_classes(c)))


def run_sections(algo: str, schedule: str = "", init: str = "") -> list[str]:
    """The params sections a run reads: its parts' (``fedlama`` for ``--algo fedprox --schedule lama``)."""
    return _sections_of(run_parts(algo, schedule, init).values())


def table_keys(name: str) -> set[str] | None:
    """The keys a recipe table ``[name]`` may hold: a params section's fields, and for a method name the fields its
    parts read beyond the general ones (``[fedlamb] beta2``); None when ``name`` is neither."""
    from fedcli.params import SECTIONS

    keys: set[str] | None = None
    if name in SECTIONS:
        keys = {f.name for f in dataclasses.fields(SECTIONS[name])}
    if name in METHODS:
        general = {f.name for f in dataclasses.fields(_config.GeneralConfig)}
        own = {n for c in run_parts(name).values() for n in declared(c) if n not in general}
        keys = (keys or set()) | own
    return keys


def table_applies(name: str, algo: str, schedule: str = "", init: str = "") -> bool:
    """Whether the recipe table ``[name]`` concerns a run: ``name`` is its method or a params section its parts read."""
    return METHODS.get(name, name) is METHODS.get(algo) or name in run_sections(algo, schedule, init)


def _load_all() -> None:
    import importlib
    import pkgutil

    import fedcli.fl.algorithms as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")


_load_all()
# every method file is imported: the config is extended with their params and the rules above
_config.register_check(check_method_config)
_config.extend()
