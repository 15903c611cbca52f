"""Declaring options: ``opt`` field metadata and the registry of per-method params dataclasses.

A method's spec (``fedcli/specs/``) declares its own hyperparameters as a small dataclass of ``opt`` fields and
registers it under its section (the recipe table ``[feddyn]``, the manifest's ``params.feddyn``, its own ``--help``
panel)::

    @register_params(section="feddyn")
    class FedDynParams:
        feddyn_alpha: float = opt(0.1, "FedDyn: coefficient alpha ...", lo=Open(0.0), group="method")

:class:`fedcli.config.TrainConfig` is assembled from the general fields of ``fedcli/config.py`` and every
registered params class, so each field is a ``fedcli train`` flag (``--feddyn-alpha``), a recipe key
(``feddyn_alpha``, also in its table: ``[feddyn] feddyn_alpha = 0.1``), an entry of the manifest's ``config``, validated
by
its bounds or choices. A part's spec declares what it reads (``Params=FedDynParams``, ``uses=("lr",)`` for general
fields: ``fedcli.specs.part``) and the part is built with exactly those (:func:`bind`): ``self.opts.feddyn_alpha``.
This module imports nothing of fedcli, so specs import it freely.
"""

from __future__ import annotations

import dataclasses

#: the ``--help`` panels in the order they are shown; a group not listed here comes after them
GROUPS = (
    "method",
    "data",
    "partition",
    "personalized",
    "model",
    "federated",
    "optimizer",
    "adaptive",
    "system",
    "run",
    "scale",
    "crash safety",
)

#: registered params classes, in registration order (method files load in name order)
PARAMS: list[type] = []


@dataclasses.dataclass(frozen=True)
class Open:
    """An open bound of :func:`opt`: ``lo=Open(0.0)`` is "> 0", ``hi=Open(1.0)`` "< 1" (a plain number is a closed
    bound, ">=" or "<=")."""

    value: float


def opt(default, help: str, *, choices=None, lo=None, hi=None, group="general", search=None, was=()):
    """A config field with its CLI help and its validation rule: ``choices``, or the bounds ``lo`` and ``hi``, each
    closed (a number) or open (:class:`Open`); ``search``: its default search range for ``fedcli tune`` (plain data,
    as a recipe's ``[tune.space]`` writes it: ``{"log": [0.001, 1.0]}``, ``{"choices": [1, 2, 4]}``, ``{"int": [1,
    8]}``, ``{"float": [0.0, 1.0], "step": 0.1}``; docs/tuning.md), used by ``[tune.space.<method>] defaults = true``
    and shown in ``--help``; ``was``: the field's old names (issue 60, one word one meaning), still read as it: a
    hidden flag, a recipe key, a stored config's key (:data:`RENAMED`). A repeatable flag: :func:`repeatable`."""
    return dataclasses.field(
        default=default,
        metadata={
            "help": help,
            "choices": choices,
            "lo": lo.value if isinstance(lo, Open) else lo,
            "hi": hi.value if isinstance(hi, Open) else hi,
            "lo_open": isinstance(lo, Open),
            "hi_open": isinstance(hi, Open),
            "group": group,
            "multiple": False,
            "search": search,
            "was": tuple(was),
        },
    )


def repeatable(default: str, help: str, *, choices=None, group="general", was=()):
    """:func:`opt`'s field of a comma-separated string whose flag may be repeated (``--tracker a --tracker b`` is
    ``"a,b"``)."""
    field = opt(default, help, choices=choices, group=group, was=was)
    return dataclasses.field(default=default, metadata={**field.metadata, "multiple": True})


#: a config field's old name -> its name (``opt(was=...)``): a flag, recipe key or stored config that still says the
#: old one means the field (``--phi-bounds`` is ``--scaling-bounds``)
RENAMED: dict[str, str] = {}


def current_names(values: dict, flags: bool = False) -> dict:
    """``values`` (config keys -> values; keys with ``-`` or ``_``) with each old name (:data:`RENAMED`) replaced by
    the field's name; a value given under both names is refused (ConfigError, exit 2): which one was meant?"""
    from fedcli.errors import ConfigError

    out = dict(values)
    for key in values:
        new = RENAMED.get(key.replace("-", "_"))
        if new is None:
            continue
        if new in out or new.replace("_", "-") in out:
            say = (lambda n: "--" + n.replace("_", "-")) if flags else (lambda n: n)
            raise ConfigError(
                f"{say(new)} and {say(key.replace('-', '_'))} (its old name) are both given: give {say(new)} only",
                key=new,
            )
        out[new] = out.pop(key)
    return out


#: section name -> its params class (``register_params(section=...)``): the recipe table ``[section]`` and the
#: manifest's ``params.section`` hold its fields
SECTIONS: dict[str, type] = {}

#: sections the engine reads for every run, whatever its parts (``register_params(every_run=True)``): a recipe's table
#: of one applies to every run (``[system]``, the system model)
EVERY_RUN: set[str] = set()


def register_params(cls: type | None = None, *, section: str = "", every_run: bool = False):
    """Make ``cls`` a dataclass of ``opt`` fields and add its fields to the config (class decorator).

    ``section`` names the params' own namespace (default: the class name without ``Params``, lower case): a recipe may
    set them in a ``[section]`` table, the manifest records
    them under ``params.<section>`` and ``--help`` shows them in their own panel; each field is also a flat option
    (``--phi``, recipe key ``phi``), an alias of ``fedlama.phi``. A params class may define ``check(self)``, called by
    ``TrainConfig.validate`` after the per-field checks, for rules between its fields; it raises
    ``ConfigError(message, key=...)``. A field name another params class already declared is a programming error
    (TypeError at import)."""
    if cls is None:
        return lambda c: register_params(c, section=section, every_run=every_run)
    if not dataclasses.is_dataclass(cls):
        cls = dataclasses.dataclass(cls)
    if cls in PARAMS:
        return cls
    section = section or cls.__name__.lower().removesuffix("params") or cls.__name__.lower()  # FakeParams: "fake"
    if SECTIONS.get(section, cls) is not cls:
        raise TypeError(f"{cls.__qualname__}: section {section!r} is already {SECTIONS[section].__qualname__}'s")
    taken = {f.name: p for p in PARAMS for f in dataclasses.fields(p)}
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            raise TypeError(f"{cls.__qualname__}.{f.name}: declare params fields with fedcli.params.opt(...)")
        if f.name in taken:
            raise TypeError(
                f"{cls.__qualname__}.{f.name}: the option is already declared by {taken[f.name].__qualname__}"
            )
        for old in f.metadata.get("was", ()):
            RENAMED[old] = f.name
    cls.section = section
    SECTIONS[section] = cls
    if every_run:
        EVERY_RUN.add(section)
    PARAMS.append(cls)
    return cls


def section_of(name: str) -> str | None:
    """The section of the params field ``name``; None for a general field (fedcli/config.py)."""
    for p in PARAMS:
        if any(f.name == name for f in dataclasses.fields(p)):
            return p.section
    return None


def section_values(cfg, sections) -> dict[str, dict]:
    """``{section: {field: value}}`` of ``cfg`` for the named params sections (the manifest's ``params``)."""
    return {s: {f.name: getattr(cfg, f.name) for f in dataclasses.fields(SECTIONS[s])} for s in sections}


# ------------------------------------------------------------------------------------------- what a part receives
def _spec(cls_or_spec):
    """The spec (``fedcli.specs.PartSpec``) of ``cls_or_spec``, a part class or a spec; None for a part without one."""
    return cls_or_spec if hasattr(cls_or_spec, "chain") else getattr(cls_or_spec, "spec", None)


def params_classes(cls_or_spec) -> tuple[type, ...]:
    """The params classes a part (class or spec) reads, along the specs it extends, bases first, each once."""
    spec = _spec(cls_or_spec)
    return spec.params_classes() if spec is not None else ()


def declared(cls_or_spec) -> tuple[str, ...]:
    """The config fields a part (class or spec) reads: its params classes' fields and the general names its spec
    ``uses``, along the specs it extends, bases first (a part reads what its base reads, and adds its own)."""
    spec = _spec(cls_or_spec)
    return spec.declared() if spec is not None else ()


_BOUND: dict[object, type] = {}


def params_class(cls_or_spec) -> type:
    """The dataclass a part (class or spec) is built with: its params classes as bases (their methods, e.g.
    ``scaling_values``, come along) and one field per general name it ``uses``; nothing else of the config."""
    spec = _spec(cls_or_spec)
    if spec not in _BOUND:
        bases = params_classes(spec)
        own = {f.name for b in bases for f in dataclasses.fields(b)}
        extra = [(n, object, dataclasses.field(default=None)) for n in declared(spec) if n not in own]
        # named in this module, so that a part's params pickle (a process pool, a deep copy) like any dataclass
        where = spec.impl if spec is not None else "none"
        name = where.replace(".", "_").replace(":", "_") + "_Params"
        cls = dataclasses.make_dataclass(name, extra, bases=bases[::-1], namespace={"__module__": __name__})
        globals()[name] = _BOUND[spec] = cls
    return _BOUND[spec]


def bind(cls_or_spec, source):
    """``cls_or_spec``'s params (a part class or spec) read from ``source`` (a config, or anything with those
    attributes):
    exactly the fields it declares (:func:`declared`), so a part cannot depend on an option it does not declare.
    Already bound: as is."""
    cls = params_class(cls_or_spec)
    if type(source) is cls:
        return source
    names = declared(cls_or_spec)
    missing = [n for n in names if not hasattr(source, n)]
    if missing:
        raise TypeError(
            f"{getattr(cls_or_spec, '__qualname__', cls_or_spec)} reads {', '.join(missing)}, which "
            f"{type(source).__qualname__} lacks"
        )
    return cls(**{n: getattr(source, n) for n in names})


def recorded(cls_or_spec, config: dict):
    """``cls_or_spec``'s params (a part class or spec), typed, read from a run's recorded config (the manifest's
    ``config``,
    name -> value): what the report reads of a run's method options, through the same declarations the part was built
    with. An option the run did not record (a run older than the option) takes its declared default."""
    cls = params_class(cls_or_spec)
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    config = current_names(config)  # a run recorded before a field's rename
    return cls(**{n: config.get(n, defaults.get(n)) for n in declared(cls_or_spec)})


def group_rank(f) -> int:
    """Position of a field's help panel (``GROUPS`` order; other groups after them)."""
    g = f.metadata.get("group")
    return GROUPS.index(g) if g in GROUPS else len(GROUPS)
