"""The ``[tune]`` table of a recipe (issue 58, section 2; docs/tuning.md): what ``fedcli tune`` searches and how.

::

    [tune]
    trials = 24                  # trials per study (one study per [[runs]] row)
    sampler = "tpe"              # tpe | gp | random | grid
    seed = 0                     # the sampler's seed
    pruner = "sha"               # none | sha (successive halving) | median
    objectives = [{ metric = "val_acc", reduce = "last3", direction = "maximize" }]

    [tune.space]                 # every study: an option and its range
    lr = { log = [0.01, 1.0] }
    [tune.space.fedlama]         # the studies of FedLAMA rows only
    defaults = true              # the method's declared default ranges (fedcli/specs, ``search=``)
    phi = { choices = [1, 2, 4, 8] }

A range is ``{ log = [lo, hi] }`` (float, log-uniform), ``{ float = [lo, hi] }`` or ``{ int = [lo, hi] }`` (with an
optional ``step``) or ``{ choices = [...] }``. Every key is checked with its file and line as every recipe key
(:mod:`fedcli.recipes`): an unknown key, a range outside the option's declared bounds, a log range through 0, a budget
key (``iterations``, ``eval_every``: a trial's budget is the study's, not a hyper-parameter) is a ConfigError (exit 2).
Torch-free and optuna-free: ``--help`` and every recipe error answer without them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from fedcli.errors import ConfigError

SAMPLERS = ("tpe", "gp", "random", "grid")
PRUNERS = ("none", "sha", "median")
TUNE_KEYS = ("trials", "sampler", "seed", "pruner", "objectives", "space")
#: keys that fix a trial's budget or identity, never searched: the study compares trials at one budget
BUDGET_KEYS = ("iterations", "eval_every", "seed", "out", "rounds")
KINDS = ("log", "float", "int", "choices")


@dataclass(frozen=True)
class Param:
    """One searched option: ``kind`` log | float | int | choices, its bounds (``low``, ``high``, ``step``) or
    ``choices``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    choices: tuple = ()

    def to_json(self) -> dict:
        if self.kind == "choices":
            return {"choices": list(self.choices)}
        out = {self.kind: [self.low, self.high]}
        if self.step is not None:
            out["step"] = self.step
        return out

    def values(self) -> list | None:
        """Every value of a finite range (choices, an int range, a stepped float range), for the grid sampler and
        the size of the full grid; None for a continuous range."""
        if self.kind == "choices":
            return list(self.choices)
        if self.kind == "int":
            step = int(self.step or 1)
            return list(range(int(self.low), int(self.high) + 1, step))
        if self.kind == "float" and self.step:
            n = int(math.floor((self.high - self.low) / self.step + 1e-9))
            return [round(self.low + i * self.step, 12) for i in range(n + 1)]
        return None

    def upper(self):
        """The largest value the range holds (the pruning floor's worst case)."""
        vals = self.values()
        return max(vals) if vals is not None and all(isinstance(v, (int, float)) for v in vals) else self.high


@dataclass
class Objective:
    """One objective (issue 58): ``metric`` of :data:`fedcli.tune.objectives.METRICS`, ``reduce`` final | lastK |
    best | to_target(x) (``k``, ``target``), ``direction`` maximize | minimize."""

    metric: str
    reduce: str = "final"
    direction: str = "maximize"
    k: int = 1
    target: float | None = None

    def to_json(self) -> dict:
        return {"metric": self.metric, "reduce": self.reduce, "direction": self.direction}


@dataclass
class TuneTable:
    """A recipe's ``[tune]`` table, checked."""

    trials: int = 20
    sampler: str = "tpe"
    seed: int = 0
    pruner: str = "sha"
    objectives: list[Objective] = field(default_factory=list)
    common: dict[str, Param] = field(default_factory=dict)  # [tune.space]
    methods: dict[str, tuple[bool, dict[str, Param]]] = field(
        default_factory=dict
    )  # [tune.space.<method>]: (defaults, params)

    def space_for(self, algo: str) -> dict[str, Param]:
        """The space of a study whose row runs method ``algo``: [tune.space], then the method's declared defaults
        (``defaults = true``), then its own [tune.space.<method>] ranges, later ones replacing earlier ones."""
        from fedcli import specs

        out = dict(self.common)
        for name, (defaults, params) in self.methods.items():
            if specs.METHODS.get(name) is not specs.METHODS.get(algo):
                continue
            if defaults:
                out.update(default_space(name))
            out.update(params)
        return out


def default_space(method: str) -> dict[str, Param]:
    """The search space a method declares (``Method.search`` over each option's ``search`` range, or the method's
    ``search_ranges``: fedcli/specs), as Params; the learning rate alone for a method that names none."""
    from fedcli import specs
    from fedcli.config import FIELDS

    specs.load()
    m = specs.METHODS[method]
    out = {}
    for name in m.search or ("lr",):
        rng = m.search_ranges.get(name) or FIELDS[name].metadata.get("search")
        if rng is None:  # a table's mistake, not the user's
            raise TypeError(f"method {m.name}: search names {name!r}, which declares no search range")
        out[name] = parse_range(name, dict(rng), f"method {m.name}'s default space")
    return out


def default_spaces_text() -> str:
    """Every method's default space, one line each (``fedcli tune --help``)."""
    from fedcli import specs

    specs.load()
    lines = []
    for name, m in sorted(specs.METHODS.items()):
        if name != m.name:
            continue
        sp = default_space(name)
        lines.append(f"{name}: " + "; ".join(f"{k} {_range_words(p)}" for k, p in sp.items()))
    return "\n".join(lines)


def _range_words(p: Param) -> str:
    if p.kind == "choices":
        return "{" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in p.choices) + "}"
    step = f" step {p.step:g}" if p.step is not None else ""
    return f"{p.kind} [{p.low:g}, {p.high:g}]{step}"


# ------------------------------------------------------------------------------------------------ parsing
def parse_range(name: str, rng, loc: str) -> Param:
    """One ``[tune.space]`` entry checked against its option's declaration (type, bounds, choices)."""
    from fedcli.config import field_type

    key, f = _searchable(name, loc)
    kind = _range_kind(name, rng, loc)
    vals, step = rng[kind], rng.get("step")
    t = field_type(f)

    def check(v):
        return _declared_value(v, f, name, vals, loc)

    if kind == "choices":
        if not isinstance(vals, list) or not vals or step is not None:
            raise ConfigError(f"{loc}: '{name}' choices must be a non-empty list (no step), got {rng!r}")
        vals = [check(v) for v in vals]
        if len(set(map(repr, vals))) != len(vals):
            raise ConfigError(f"{loc}: '{name}' lists a choice twice: {vals!r}")
        return Param(key, "choices", choices=tuple(vals))
    if not isinstance(vals, list) or len(vals) != 2:
        raise ConfigError(f"{loc}: '{name}' {kind} range must be [lo, hi], got {vals!r}")
    fits = {"int": (int,), "float": (float,), "log": (int, float)}[kind]
    if t not in fits:
        raise ConfigError(
            f"{loc}: '{name}' is a {t.__name__} option; a {kind} range does not fit it "
            f"({'an int range' if t is int else 'a float or log range' if t is float else 'choices'} would)"
        )
    if kind == "log" and any(isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 for v in vals):
        raise ConfigError(f"{loc}: '{name}' log range {vals!r} runs through 0 (a log range needs lo > 0)")
    lo, hi = check(vals[0]), check(vals[1])
    if not lo < hi:
        raise ConfigError(f"{loc}: '{name}' range {vals!r} is empty or runs backwards (lo < hi needed)")
    return Param(key, kind, lo, hi, _range_step(step, kind, name, loc))


def _searchable(name: str, loc: str):
    """The option ``name`` names, as (key, declared field); refused when unknown or fixing a trial's budget."""
    from fedcli.config import FIELDS

    key = name.replace("-", "_")
    if key in BUDGET_KEYS:
        raise ConfigError(
            f"{loc}: '{name}' fixes a trial's budget or identity and cannot be searched (every trial of a "
            f"study runs the same budget; set it in [base] or the row)"
        )
    if key not in FIELDS:
        raise ConfigError(f"{loc}: unknown option '{name}' in the search space")
    return key, FIELDS[key]


def _range_kind(name: str, rng, loc: str) -> str:
    """The entry's one kind (log, float, int or choices); refused when it names none, several, or other keys."""
    if (
        not isinstance(rng, dict)
        or len([k for k in rng if k in KINDS]) != 1
        or any(k not in (*KINDS, "step") for k in rng)
    ):
        raise ConfigError(
            f"{loc}: '{name}' must be one range: {{ log = [lo, hi] }}, {{ float = [lo, hi] }}, "
            f"{{ int = [lo, hi] }} (each with an optional step) or {{ choices = [...] }}, got {rng!r}"
        )
    return next(k for k in rng if k in KINDS)


def _declared_value(v, f, name: str, vals, loc: str):
    """One value of the range as the option's type, refused when of another type or outside its declared bounds."""
    from fedcli.config import check_value, field_type

    t, key = field_type(f), name.replace("-", "_")
    if (
        isinstance(v, bool)
        and t is not bool
        or (t in (int, float) and not isinstance(v, (int, float)))
        or (t is int and isinstance(v, float) and not float(v).is_integer())
        or (t is str and not isinstance(v, str))
    ):
        raise ConfigError(f"{loc}: '{name}' takes {t.__name__} values (--{key.replace('_', '-')}), got {v!r}")
    v = t(v)
    try:
        check_value(f, v)
    except ConfigError as e:
        raise ConfigError(f"{loc}: '{name}' range {vals!r} is outside the option's declared bounds ({e})") from None
    return v


def _range_step(step, kind: str, name: str, loc: str):
    """The range's step as its kind's number (None: no step); refused on a log range or when not positive."""
    if step is None:
        return None
    if (
        kind == "log"
        or isinstance(step, bool)
        or not isinstance(step, (int, float))
        or step <= 0
        or (kind == "int" and not float(step).is_integer())
    ):
        raise ConfigError(
            f"{loc}: '{name}' step must be a positive {'integer' if kind == 'int' else 'number'} "
            f"(no step on a log range), got {step!r}"
        )
    return int(step) if kind == "int" else float(step)


def parse_objective(o, loc: str) -> Objective:
    """``{ metric = "val_acc", reduce = "last3", direction = "maximize" }`` checked (fedcli.tune.objectives)."""
    from fedcli.tune.objectives import METRICS, parse_reduce

    if not isinstance(o, dict) or set(o) - {"metric", "reduce", "direction"} or "metric" not in o:
        raise ConfigError(
            f"{loc}: an objective is {{ metric = ..., reduce = ..., direction = ... }} (metric required), got {o!r}"
        )
    metric = o["metric"]
    if metric not in METRICS:
        raise ConfigError(
            f"{loc}: objective metric '{metric}' is not one of {', '.join(METRICS)} (the test set is never "
            f"an objective: --select-on test reads it in place of the validation metrics)"
        )
    reduce = o.get("reduce", "final")
    k, target = parse_reduce(reduce, loc)
    default = "minimize" if target is not None else METRICS[metric]
    direction = o.get("direction", default)
    if direction not in ("maximize", "minimize"):
        raise ConfigError(f"{loc}: objective direction must be maximize or minimize, got {direction!r}")
    return Objective(metric, reduce, direction, k, target)


def parse_tune(path, text: str, data: dict) -> TuneTable:
    """The recipe's ``[tune]`` table checked, errors with the file and line of the key (exit 2)."""
    from fedcli import specs
    from fedcli.recipes import _table_span, where_in

    specs.load()
    tune = data.get("tune")
    span = _table_span(text, "tune")
    if tune is None:
        raise ConfigError(f"recipe {path}: no [tune] table; fedcli tune needs one (its space at least: docs/tuning.md)")
    if not isinstance(tune, dict):
        raise ConfigError(f"{where_in(path, text, 'tune')}: [tune] must be a table")
    for k in tune:
        if k not in TUNE_KEYS:
            raise ConfigError(
                f"{where_in(path, text, k, span)}: unknown key '{k}' in [tune] (its keys: {', '.join(TUNE_KEYS)})"
            )
    table = TuneTable()
    _read_settings(table, tune, path, text, span)
    table.objectives = _read_objectives(tune, where_in(path, text, "objectives", span))
    space = tune.get("space", {})
    if not isinstance(space, dict):
        raise ConfigError(f"{where_in(path, text, 'space', span)}: [tune] space must be a table of option ranges")
    _read_space(table, space, path, text)
    if not table.common and not table.methods:
        raise ConfigError(
            f"{where_in(path, text, 'tune')}: [tune] searches nothing: give [tune.space] ranges or "
            f"[tune.space.<method>] defaults = true"
        )
    return table


def _read_settings(table: TuneTable, tune: dict, path, text: str, span) -> None:
    """[tune] trials, sampler, pruner and seed checked into ``table`` (absent: the table's defaults)."""
    from fedcli.recipes import where_in

    trials = tune.get("trials", table.trials)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError(
            f"{where_in(path, text, 'trials', span)}: [tune] trials must be an integer >= 1, got {trials!r}"
        )
    table.trials = trials
    for key, allowed in (("sampler", SAMPLERS), ("pruner", PRUNERS)):
        v = tune.get(key, getattr(table, key))
        if v not in allowed:
            raise ConfigError(
                f"{where_in(path, text, key, span)}: [tune] {key} must be one of {', '.join(allowed)}, got {v!r}"
            )
        setattr(table, key, v)
    seed = tune.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"{where_in(path, text, 'seed', span)}: [tune] seed must be an integer >= 0, got {seed!r}")
    table.seed = seed


def _read_objectives(tune: dict, oloc: str) -> list:
    """[tune] objectives: one or two, none twice (absent: the final validation accuracy)."""
    objs = tune.get("objectives", [{"metric": "val_acc", "reduce": "final"}])
    if not isinstance(objs, list) or not 1 <= len(objs) <= 2:
        raise ConfigError(f"{oloc}: [tune] objectives must list one or two objectives, got {objs!r}")
    objectives = [parse_objective(o, oloc) for o in objs]
    if len({o.metric + o.reduce for o in objectives}) != len(objectives):
        raise ConfigError(f"{oloc}: [tune] objectives lists the same objective twice")
    return objectives


def _read_space(table: TuneTable, space: dict, path, text: str) -> None:
    """[tune.space]: option ranges into ``table.common``, [tune.space.<method>] tables into ``table.methods``."""
    from fedcli import specs
    from fedcli.recipes import _table_span, where_in

    sspan = _table_span(text, "tune.space")
    for name, rng in space.items():
        if name in specs.METHODS and isinstance(rng, dict) and not any(k in KINDS for k in rng):
            table.methods[name] = _method_space(name, rng, path, text)
            continue
        if isinstance(rng, dict) and not any(k in KINDS for k in rng) and name not in BUDGET_KEYS:
            from fedcli.config import FIELDS

            if name.replace("-", "_") not in FIELDS:
                raise ConfigError(
                    f"{where_in(path, text, name, sspan)}: unknown table [tune.space.{name}]: not a method "
                    f"(methods: {', '.join(sorted(m for m, v in specs.METHODS.items() if m == v.name))})"
                )
        table.common[name.replace("-", "_")] = parse_range(name, rng, where_in(path, text, name, sspan))


def _method_space(name: str, rng: dict, path, text: str) -> tuple[bool, dict]:
    """A [tune.space.<method>] table: (defaults = true or false, its own ranges)."""
    from fedcli.recipes import _table_span, where_in

    mspan = _table_span(text, f"tune.space.{name}")
    defaults = rng.get("defaults", False)
    if not isinstance(defaults, bool):
        raise ConfigError(
            f"{where_in(path, text, 'defaults', mspan)}: [tune.space.{name}] defaults must be "
            f"true or false, got {defaults!r}"
        )
    own = {}
    for k, r in rng.items():
        if k != "defaults":
            own[k.replace("-", "_")] = parse_range(k, r, where_in(path, text, k, mspan))
    return defaults, own


def check_space(space: dict[str, Param], base: dict, where: str) -> None:
    """A study's space must search something its row's method reads (``fedcli.recipes.table_keys``): a range over an
    option no part of the method reads would spend trials on a no-op."""
    from fedcli.config import GeneralConfig
    from fedcli.recipes import run_tables, table_keys

    general = {f.name for f in dataclasses.fields(GeneralConfig)}
    read = set(general)
    for t in run_tables(base, {}):
        read |= table_keys(t) or set()
    idle = [k for k in space if k not in read]
    if idle:
        raise ConfigError(
            f"{where}: the search space holds {', '.join(idle)}, which the row's method "
            f"({base.get('algo')}) does not read; drop {'it' if len(idle) == 1 else 'them'} or "
            f"move {'it' if len(idle) == 1 else 'them'} to [tune.space.<method>]"
        )
