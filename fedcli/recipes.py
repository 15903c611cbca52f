"""TOML recipes: config keys (= ``fedcli train`` option names with ``_``), with file and line in errors.

A recipe for a single run is a flat table of keys. A recipe for a sweep (``fedcli sweep``) has
``[base]`` keys, optional ``[scale.<name>]`` overrides and a list of ``[[runs]]``; ``fedcli train
--recipe`` on such a file uses ``[base]`` (+ ``--scale``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from pathlib import Path

from fedcli import specs
from fedcli.config import FIELDS, GeneralConfig, TrainConfig, check_value, coerce
from fedcli.errors import ConfigError
from fedcli.params import EVERY_RUN, RENAMED, SECTIONS
from fedcli.userfiles import PARTITION_LIMIT, RECIPE_LIMIT, read_input


def table_keys(name: str) -> set[str] | None:
    """The keys a recipe table ``[name]`` may hold: a params section's fields, and for a method name the fields its
    parts read beyond the general ones (``[fedlamb] beta2``); None when ``name`` is neither."""
    specs.load()
    keys: set[str] | None = None
    if name in SECTIONS:
        keys = {f.name for f in dataclasses.fields(SECTIONS[name])}
    if name in specs.METHODS:
        general = {f.name for f in dataclasses.fields(GeneralConfig)}
        own = {n for s in specs.run_specs(name).values() for n in s.declared() if n not in general}
        keys = (keys or set()) | own
    return keys


def table_applies(name: str, algo: str, schedule: str = "", init: str = "") -> bool:
    """Whether the recipe table ``[name]`` concerns a run: ``name`` is its method, a params section its parts read, or
    one the engine reads for every run (``[system]``)."""
    return (
        name in EVERY_RUN
        or specs.METHODS.get(name, name) is specs.METHODS.get(algo)
        or name in specs.run_sections(algo, schedule, init)
    )


def key_line(text: str, key: str) -> int | None:
    pat = re.compile(rf"^[ \t]*{re.escape(key)}[ \t]*=", re.M)  # not \s: it would match the newlines before the key
    m = pat.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def read_recipe(path: str | Path) -> tuple[dict, str]:
    """The recipe's TOML as a dict, and its text. A regular file of at most RECIPE_LIMIT bytes (a FIFO or a device is
    refused before a byte is read: fedcli.userfiles); ConfigError (exit 2) naming the file otherwise."""
    path = Path(path)
    raw = read_input(
        path, "recipe", RECIPE_LIMIT, fail=lambda why: ConfigError(f"recipe {path}: cannot be read ({why})")
    )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"recipe {path}, line {line}: not UTF-8 text (byte 0x{e.object[e.start]:02x}); "
            f"expected a TOML file, which is UTF-8"
        ) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as read_text read it
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"recipe {path}: not valid TOML ({e})") from None
    return data, text


def where(path, text: str, key: str) -> str:
    line = key_line(text, key)
    return f"{path}, line {line}" if line else str(path)


def checked(name: str, value, loc: str):
    """A recipe value coerced to its config field's type and range-checked; errors start with ``loc``."""
    value = coerce(FIELDS[name], value, loc)
    try:
        check_value(FIELDS[name], value)
    except ConfigError as e:
        raise ConfigError(f"{loc}: {e}", key=name) from None
    return value


#: config keys whose relative values are paths, resolved against the recipe's root (see :func:`recipe_root`)
PATH_KEYS = ("data_dir", "partition_file", "system_trace", "availability_trace")


def recipe_root(path: str | Path, data: dict, text: str) -> Path:
    """The folder a recipe's relative paths (``data_dir``, ``partition_file``, ``model = "file.py:Factory"``) are
    resolved against, whatever the current folder: the recipe's own folder, or its top-level ``root`` key, a folder
    relative to the recipe's folder (the recipes of this repository say ``root = "../.."``, the checkout, so that
    ``../shared/datasets/...`` is the folder beside it)."""
    root = data.get("root", ".")
    if not isinstance(root, str) or not root:
        raise ConfigError(
            f"{where(path, text, 'root')}: key 'root' must be a folder (a string, relative to the recipe's folder)"
        )
    return Path(os.path.normpath(Path(path).absolute().parent / root))


def resolve_paths(values: dict, root: Path) -> dict:
    """``values`` with its relative paths made absolute against ``root`` (:func:`recipe_root`)."""
    out = dict(values)
    for key in PATH_KEYS:
        v = out.get(key)
        if isinstance(v, str) and v and not os.path.isabs(v):
            out[key] = os.path.normpath(root / v)
    model = out.get("model")
    if isinstance(model, str) and ":" in model:
        target, factory = model.rsplit(":", 1)
        if target.endswith(".py") and not os.path.isabs(target):
            out["model"] = f"{os.path.normpath(root / target)}:{factory}"
    return out


def train_values(path: str | Path, scale: str | None = None, overrides: dict | None = None) -> dict:
    """Config values of a recipe for ``fedcli train``, relative paths resolved against the recipe's root; a method
    table (``[fedlama] phi = 2``) gives its keys when the run's method reads them (``overrides``: the flags, which
    may choose another method). The levels are :func:`recipe_levels`'s, the ones every run of ``fedcli sweep`` starts
    from, merged by the same :func:`merge_levels`: one reading of a recipe for both commands."""
    data, text = read_recipe(path)
    root = recipe_root(path, data, text)
    levels = recipe_levels(path, data, text, scale or None, sweep=False)
    overrides = overrides or {}
    values, used = merge_levels(levels.chosen, overrides)
    # the top-level tables of a sweep recipe may be its [[runs]]' (fedcli sweep checks that some run reads each)
    checked = [lv for lv in levels.chosen if not (is_sweep_recipe(data) and lv is levels.top)]
    unused = unused_table(checked, used)
    if unused and not any(k in overrides for k in ("algo", "schedule", "init")):  # a flag's other method: tables idle
        name, loc = unused
        raise ConfigError(
            f"{loc}: [{name}] holds options this run does not read (the tables its method reads: "
            f"{', '.join(f'[{t}]' for t in run_tables(values, overrides))})"
        )
    return resolve_paths(values, root)


class RecipeLevels:
    """The levels of a recipe that come before a run's own: ``base`` ([base], or the whole file of a one-run recipe),
    ``top`` (the top-level method tables beside [base]), ``scales`` (each [scale.x], checked) and ``chosen`` (base,
    top and the chosen scale, in the order they apply)."""

    def __init__(self, base: Level, top: Level, scales: dict[str, Level], scale: str | None):
        self.base, self.top, self.scales = base, top, scales
        self.chosen = [base, top, *([scales[scale]] if scale is not None else [])]


def _check_recipe_top(path, data: dict, text: str, scale: str | None, layered: bool) -> dict:
    """Refuse an unknown top-level key of a layered recipe, [scale.x] entries that are not tables, or a ``scale``
    the recipe does not define; the [scale.x] tables."""
    for k, v in data.items():
        if layered and k not in SWEEP_TOP_KEYS and not (isinstance(v, dict) and table_keys(k) is not None):
            raise ConfigError(
                f"{where(path, text, k)}: unknown top-level key '{k}' (allowed: "
                f"{', '.join(sorted(SWEEP_TOP_KEYS))}, and a table of one method's options named "
                f"after it: [fedlama], [fedlamb], ...)"
            )
    scales = data.get("scale", {})
    if not isinstance(scales, dict) or any(not isinstance(v, dict) for v in scales.values()):
        raise ConfigError(f"{where(path, text, 'scale')}: [scale.<name>] must be tables of train keys")
    if scale is not None and scale not in scales:
        raise ConfigError(f"recipe {path}: no [scale.{scale}] table; it has: {', '.join(scales) or 'none'}")
    return scales


def _base_levels(path, data: dict, text: str, layered: bool, sweep: bool) -> tuple[Level, Level]:
    """The [base] level and the top-level method tables' level (a one-run recipe: its flat table, no top level)."""
    if layered:
        if not isinstance(data.get("base", {}), dict):
            raise ConfigError(f"{where(path, text, 'base')}: [base] must be a table of config keys")
        base = split_level(
            dict(data.get("base", {})),
            path,
            text,
            _table_span(text, "base"),
            "[base]",
            lambda t: _table_span(text, f"base.{t}"),
            sweep,
        )
        top = split_level(
            {k: v for k, v in data.items() if k not in SWEEP_TOP_KEYS},
            path,
            text,
            None,
            "the recipe",
            lambda t: _table_span(text, t),
            sweep,
        )  # [fedlama] at the top: as [base.fedlama]
    else:
        base = split_level(
            {k: v for k, v in data.items() if k not in ("root", "scale")},
            path,
            text,
            None,
            "the recipe",
            lambda t: _table_span(text, t),
            sweep,
        )
        top = Level({}, {})
    return base, top


def recipe_levels(path, data: dict, text: str, scale: str | None, sweep: bool) -> RecipeLevels:
    """The levels of a recipe that every run of it merges first (docs/sweeps.md: "A table applies at its level
    ([base] and the top-level tables, then [scale.x], then the run)"), for ``fedcli train --recipe`` and ``fedcli
    sweep`` alike. A recipe with [base] or [[runs]] holds its train keys in [base], method tables beside it and the
    report's keys at the top (any other top-level key is refused); a one-run recipe is a flat table of train keys and
    method tables. ``sweep``: ``seed`` and ``out`` are refused (the sweep chooses them)."""
    layered = "base" in data or is_sweep_recipe(data)
    scales = _check_recipe_top(path, data, text, scale, layered)
    base, top = _base_levels(path, data, text, layered, sweep)
    scaled = {
        name: split_level(
            dict(v),
            path,
            text,
            _table_span(text, f"scale.{name}"),
            f"[scale.{name}]",
            lambda t, name=name: _table_span(text, f"scale.{name}.{t}"),
            sweep,
        )
        for name, v in scales.items()
    }
    return RecipeLevels(base, top, scaled, scale)


# -------------------------------------------------------------------------------------- method tables in recipes
class Level:
    """One level of a recipe's values (``[base]``, ``[scale.x]``, one run): its keys and its method tables."""

    def __init__(self, keys: dict, tables: dict[str, tuple[dict, str]]):
        self.keys, self.tables = keys, tables  # tables: name -> (checked keys, "file, line N" of the table)


def split_level(
    values: dict, path, text: str, span, what: str, table_span=lambda name: None, sweep: bool = True
) -> Level:
    """Check one level's keys (:func:`check_keys_in`; ``sweep``: seed and out refused) and its sub-tables: each one
    names a method or a params section (``table_keys``: ``[fedlama]``, ``[fedlamb]``, ``[ala]``)
    and holds keys it reads."""
    plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
    tables = {}
    for name, sub in values.items():
        if not isinstance(sub, dict):
            continue
        inner = table_span(name) or span
        loc = (
            where_in(path, text, name, span)
            if inner is span
            else f"{path}, line {text.count(chr(10), 0, inner[0]) + 1}"
        )
        allowed = table_keys(name)
        if allowed is None:
            raise ConfigError(
                f"{loc}: unknown table [{name}] in {what}; a table holds one method's options and is named "
                f"after the method or its params section ({', '.join(sorted(all_tables()))})"
            )
        for k in sub:
            if RENAMED.get(k.replace("-", "_"), k.replace("-", "_")) not in allowed:
                raise ConfigError(
                    f"{where_in(path, text, k, inner)}: [{name}] has no key '{k}'; its keys: "
                    f"{', '.join(sorted(allowed)) or 'none'}"
                )
        tables[name] = (check_keys_in(dict(sub), path, text, inner, f"[{name}]"), loc)
    return Level(check_keys_in(plain, path, text, span, what, forbid=sweep), tables)


def unused_table(levels: list[Level], used: set[str]) -> tuple[str, str] | None:
    """(name, "file, line N") of the first table of ``levels`` that no run read (``used``: the names merged), or
    None."""
    return next(((name, loc) for lv in levels for name, (_, loc) in lv.tables.items() if name not in used), None)


def all_tables() -> set[str]:
    from fedcli.params import SECTIONS
    from fedcli.specs import METHODS

    return set(SECTIONS) | set(METHODS)


def _run_choice(values: dict) -> tuple[str, str, str] | None:
    """(method, schedule, init) of merged values, or None for an unknown method (validation reports it)."""
    from fedcli.method_names import resolve_method
    from fedcli.specs import method_labels

    try:
        algo = resolve_method(values.get("algo", FIELDS["algo"].default), method_labels())
    except ConfigError:
        return None
    return algo, values.get("schedule", ""), values.get("init", "")


def run_tables(values: dict, overrides: dict) -> list[str]:
    """The tables a run with these values reads: its method and its parts' params sections."""
    from fedcli.specs import run_sections

    parts = _run_choice({**values, **overrides})
    return [] if parts is None else list(dict.fromkeys([parts[0], *run_sections(*parts)]))


def merge_levels(levels: list[Level], overrides: dict) -> tuple[dict, set[str]]:
    """The levels' keys merged in order, each level's applicable tables at that level (a key given both plainly and in a
    table of one level is an error); the names of the tables used. A table applies when the run (``overrides`` last)
    has its method or reads its params section."""
    merged: dict = {}
    for lv in levels:
        merged.update(lv.keys)
    parts = _run_choice({**merged, **overrides})
    out, used = {}, set()
    for lv in levels:
        out.update(lv.keys)
        for name, (keys, loc) in lv.tables.items():
            if parts is None or not table_applies(name, *parts):
                continue
            both = sorted(set(keys) & set(lv.keys))
            if both:
                raise ConfigError(f"{loc}: '{both[0]}' is set both as a plain key and in [{name}] at the same level")
            out.update(keys)
            used.add(name)
    return out, used


def build_config(recipe: str | None, overrides: dict, scale: str | None = None) -> TrainConfig:
    if scale and not recipe:
        raise ConfigError(f"--scale {scale} needs --recipe (scales are tables of a recipe)")
    from fedcli.config import with_method_defaults

    values = train_values(recipe, scale, overrides) if recipe else {}
    from_recipe = set(values) - set(overrides)
    values.update(overrides)
    values = with_method_defaults(values)
    try:
        return with_partition_clients(TrainConfig(**values).validate(), values)
    except ConfigError as e:  # a rule between keys: name the recipe line of the key it is about (ConfigError.key)
        k = e.key
        # a sweep recipe whose [base] names no method runs the default one: say so, that may be the whole problem
        hint = (
            (
                "; the recipe's [base] sets no algo, so [base] alone is a run of the default method (its [[runs]] set "
                "their own: run them with fedcli sweep, or give --algo)"
            )
            if recipe and "algo" not in values and "runs" in read_recipe(recipe)[0]
            else ""
        )
        if k not in from_recipe or str(e).startswith(str(recipe)):
            if hint:
                raise ConfigError(f"{e}{hint}", key=k) from None
            raise
        text = read_recipe(recipe)[1]
        raise ConfigError(f"{where(recipe, text, k)}: {e}{hint}", key=k) from None


def with_partition_clients(cfg: TrainConfig, values: dict) -> TrainConfig:
    """``cfg`` with the ``clients`` of its ``partition_file`` (the file decides them; the run's config records them).

    ``values`` are the keys the user gave (flags and recipe keys, not defaults): a ``clients`` among them must agree
    with the file. An unreadable partition file is left to the data loader, which names what is wrong with it (exit
    3)."""
    import dataclasses
    import json

    path, clients = values.get("partition_file"), values.get("clients")
    if not path:
        return cfg
    try:  # a FIFO or a device is not read (fedcli.userfiles); the loader names what is wrong with it
        n = len(json.loads(read_input(path, "--partition-file", PARTITION_LIMIT)).get("train"))
    except (ConfigError, ValueError, AttributeError, TypeError):
        return cfg
    if clients is not None and n != clients:
        raise ConfigError(
            f"--clients {clients} differs from the {n} clients of --partition-file {path} (the file "
            f"decides them); drop --clients or give --clients {n}",
            key="clients",
        )
    return dataclasses.replace(cfg, clients=n)


# ---------------------------------------------------------------------------------------------
# Sweep recipes (``fedcli sweep``): [base] + [scale.<name>] + [[runs]] + report products.
#
#   title = "..."; paper = "FedLAMA AAAI 2023, Table 3"; fidelity = "..."; seeds = 3
#   [base]            train keys shared by every run (the paper's settings)
#   [scale.smoke]     train keys that override [base] at ``--scale smoke`` (and [scale.paper], ...)
#   [[runs]]          one grid row: ``name`` + train keys; ``scale.smoke = { tau = 2 }`` overrides
#                     that row at one scale only; ``scales = ["paper"]``: the row exists at those scales only;
#                     ``retime = [{ name = "...", uplink = "constant:3e6" }, ...]``: re-timed variants of the row,
#                     runs of the report read from its records under other system options, not trained
#   [[tables]]        report tables over the runs (see fedcli/reports/products.py)
#   [[figures]]       report figures over the runs
# [slurm]           what each job asks for under ``--executor slurm`` (fedcli/sweep/slurm.py; [slurm.scale.<name>]
# overrides)
#
# Values are merged base -> scale -> run -> run.scale. Errors name the file and the line of the key.

SWEEP_TOP_KEYS = {
    "title",
    "paper",
    "fidelity",
    "notes",
    "seeds",
    "base",
    "scale",
    "runs",
    "tables",
    "figures",
    "slurm",
    "root",
    "tune",
}  # [tune]: fedcli tune's search (fedcli/tune/space.py); other commands ignore it
SWEEP_FORBIDDEN = {"out": "each run's folder is chosen by fedcli sweep", "seed": "seeds come from `seeds` and --seeds"}
_HEADER = re.compile(r"^[ \t]*\[", re.M)


def _blocks(text: str, header: str) -> list[tuple[int, int]]:
    """(start, end) character spans of every ``[[header]]`` block (sub-tables ``[header.x]`` included)."""
    starts = [m.start() for m in re.finditer(rf"^[ \t]*\[\[[ \t]*{re.escape(header)}[ \t]*\]\]", text, re.M)]
    spans = []
    for s in starts:
        end = len(text)
        for m in _HEADER.finditer(text, s + 1):
            rest = text[m.end() :].lstrip()
            if rest.startswith("[") or not rest.startswith(f"{header}."):
                end = m.start()
                break
        spans.append((s, end))
    return spans


def _table_span(text: str, header: str) -> tuple[int, int] | None:
    m = re.search(rf"^[ \t]*\[[ \t]*{re.escape(header)}[ \t]*\]", text, re.M)
    if not m:
        return None
    n = _HEADER.search(text, m.end())
    return m.start(), (n.start() if n else len(text))


def line_in(text: str, key: str, span: tuple[int, int] | None = None) -> int | None:
    """Line (1-based) of ``key =`` inside ``span`` (also inside inline tables); None if absent."""
    lo, hi = span or (0, len(text))
    pat = re.compile(rf"(?:^|[ \t{{,.])(?P<k>{re.escape(key)})\s*=", re.M)
    for m in pat.finditer(text, lo, hi):
        pos = m.start("k")
        line_start = text.rfind("\n", 0, pos) + 1
        if "#" in text[line_start:pos]:
            continue
        return text.count("\n", 0, pos) + 1
    return None


def where_in(path, text: str, key: str, span=None) -> str:
    line = line_in(text, key, span)
    if line is None and span is not None:
        line = text.count("\n", 0, span[0]) + 1
    return f"{path}, line {line}" if line else str(path)


def check_keys_in(values: dict, path, text: str, span, what: str, forbid: bool = True) -> dict:
    """Coerce and range-check recipe values; errors name the key, the file and the line, found in ``span`` (one
    [[runs]] block, one [scale.x]; None: the whole file); ``forbid``: the keys a sweep chooses itself
    (:data:`SWEEP_FORBIDDEN`) are refused."""
    out = {}
    given = {k.replace("-", "_") for k in values}
    for k, v in values.items():
        name = RENAMED.get(k.replace("-", "_"), k.replace("-", "_"))  # an old name (``opt(was=...)``) is the field
        loc = where_in(path, text, k, span)
        if name != k.replace("-", "_") and name in given:
            raise ConfigError(f"{loc}: '{k}' is the old name of '{name}', which {what} sets too: set '{name}' only")
        if forbid and name in SWEEP_FORBIDDEN:
            raise ConfigError(f"{loc}: key '{k}' is not allowed in {what} ({SWEEP_FORBIDDEN[name]})")
        if name not in FIELDS:
            raise ConfigError(f"{loc}: unknown key '{k}' in {what}")
        out[name] = checked(name, v, loc)
    return out


class Retimed:
    """A re-timed variant of a sweep run (docs/sweeps.md, "Re-timed runs"): ``name`` (a run name of the report),
    ``of`` (the run it re-times) and ``options`` (the system options it is re-timed under, ``fedcli.fl.timing.OPTIONS``,
    checked as ``fedcli train`` checks them), ``line`` its line in the recipe."""

    def __init__(self, name: str, of: str, options: dict, line: int | None = None):
        self.name, self.of, self.options, self.line = name, of, options, line

    def to_dict(self) -> dict:
        """Its entry in ``sweep.json`` (``retimed``), where ``fedcli report`` reads it."""
        return {"name": self.name, "of": self.of, "options": dict(self.options)}


def _retime_options(v: dict, name: str, here: str) -> dict:
    """The system options of the re-timed run ``name``, each checked as ``fedcli train`` checks it; ConfigError for a
    key that is no option a run is re-timed under (``fedcli.fl.timing.OPTIONS``)."""
    from fedcli.fl.timing import OPTIONS
    from fedcli.specs.system import SystemParams

    options = {}
    for k, value in v.items():
        key = k.replace("-", "_")
        if key not in OPTIONS:
            why = (
                " (it decides who trains: a run trained with it is trained, not re-timed)"
                if key in {f.name for f in dataclasses.fields(SystemParams)}
                else ""
            )
            raise ConfigError(
                f"{here}: re-timed run '{name}': '{k}' is not an option a run is re-timed under{why}; "
                f"the options: {', '.join(OPTIONS)}"
            )
        options[key] = checked(key, value, here)
    return options


def retime_variants(raw, run: str, path, text: str, span, seen: dict, root: Path) -> list[Retimed]:
    """The ``retime`` list of the [[runs]] entry ``run``: one inline table per variant, its ``name`` (unique among the
    recipe's run names, ``seen``: name -> line, updated) and system options that price a round
    (``fedcli.fl.timing.OPTIONS``: speed, uplink, downlink, latency, system_trace, server_time); each value checked as
    ``fedcli train`` checks it, a trace's relative path resolved against the recipe's ``root``. ConfigError (exit 2)
    with the file and line otherwise."""
    from fedcli.fl.timing import OPTIONS
    from fedcli.specs.system import SystemParams

    if raw is None:
        return []
    loc = where_in(path, text, "retime", span)
    if not isinstance(raw, list) or not raw or not all(isinstance(v, dict) for v in raw):
        raise ConfigError(
            f"{loc}: run '{run}': `retime` must be a non-empty list of inline tables, each a `name` and the "
            f'system options it is re-timed under ({{ name = "{run} 3MBps", uplink = "constant:3e6" }})'
        )
    out = []
    for v in raw:
        v = dict(v)
        name = v.pop("name", None)
        if (
            not isinstance(name, str)
            or not name.strip()
            or any(c in name for c in "/\\")
            or any(ord(c) < 32 for c in name)
        ):
            raise ConfigError(
                f"{loc}: run '{run}': every `retime` entry needs a `name`, a run name on one line without / "
                f"or \\ (the name tables and figures give it)"
            )
        pos = text.find(f'"{name}"', *(span or (0, len(text))))
        line = text.count("\n", 0, pos) + 1 if pos >= 0 else None
        here = f"{path}, line {line}" if line else loc
        if name in seen:
            raise ConfigError(f"{here}: run name '{name}' is used twice (first at line {seen[name]})")
        if not v:
            raise ConfigError(
                f"{here}: re-timed run '{name}' sets no system option; give one or more of {', '.join(OPTIONS)}"
            )
        options = _retime_options(v, name, here)
        try:
            SystemParams(**{"system": True, **resolve_paths(options, root)}).check()
        except ConfigError as e:
            raise ConfigError(f"{here}: re-timed run '{name}': {e}", key=e.key) from None
        seen[name] = line or "?"
        out.append(Retimed(name, run, resolve_paths(options, root), line))
    return out


def is_sweep_recipe(data: dict) -> bool:
    return "runs" in data


class SweepRun:
    """One grid row of a sweep recipe, resolved at one scale (train values without seed and out).

    ``where`` holds (path, text, spans to search for a key's line: the run's block, [scale.x], [base])."""

    def __init__(
        self,
        name: str,
        values: dict,
        line: int | None,
        where: tuple | None = None,
        retimed: list[Retimed] | None = None,
    ):
        self.name, self.values, self.line, self.where = name, values, line, where
        self.retimed = list(retimed or [])  # the run's ``retime`` list: re-timed variants of it, not trainings

    def locate(self, key: str | None) -> str:
        """``file, line N`` of ``key`` as this run gets it (its block first, then the scale, then [base])."""
        if not self.where:
            return ""
        path, text, spans = self.where
        for span in spans:
            line = line_in(text, key, span) if key and span else None
            if line:
                return f"{path}, line {line}"
        return f"{path}, line {self.line}" if self.line else str(path)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"SweepRun({self.name!r}, {self.values!r})"


class SweepRecipe:
    """A parsed, validated sweep recipe at one scale."""

    def __init__(
        self, path: Path, text: str, data: dict, scale: str | None, runs: list[SweepRun], root: Path | None = None
    ):
        self.path, self.text, self.data, self.scale, self.runs = path, text, data, scale, runs
        self.root = root if root is not None else path.absolute().parent  # relative paths resolve here (recipe_root)
        self.title = str(data.get("title", path.stem))
        self.paper = str(data.get("paper", ""))
        self.fidelity = str(data.get("fidelity", ""))
        self.seeds = data.get("seeds", 1)
        self.scales = sorted(data.get("scale", {}))
        self.tables = list(data.get("tables", []))
        self.figures = list(data.get("figures", []))

    @property
    def run_names(self) -> list[str]:
        """The runs the sweep trains."""
        return [r.name for r in self.runs]

    @property
    def retimed(self) -> list[Retimed]:
        """The re-timed variants of the runs (their ``retime`` lists), in the recipe's order: runs a report reads from
        the records of the run they re-time, under their own system options, without training."""
        return [v for r in self.runs for v in r.retimed]

    @property
    def product_names(self) -> list[str]:
        """The names a table or figure may draw: the runs trained and their re-timed variants."""
        return self.run_names + [v.name for v in self.retimed]

    def block_span(self, kind: str, index: int):
        spans = _blocks(self.text, kind)
        return spans[index] if index < len(spans) else None

    def where(self, key: str, kind: str | None = None, index: int = 0) -> str:
        """``file, line N`` of ``key`` in the index-th [[kind]] block (or anywhere)."""
        span = self.block_span(kind, index) if kind else None
        return where_in(self.path, self.text, key, span)


def default_scale(data: dict) -> str | None:
    return "paper" if "paper" in data.get("scale", {}) else None


def _check_sweep_head(path: Path, data: dict, text: str) -> None:
    """Refuse a recipe without [[runs]], a non-string title/paper/fidelity/notes key, or a bad ``seeds``."""
    if not is_sweep_recipe(data):
        raise ConfigError(
            f"recipe {path}: not a sweep recipe (it has no [[runs]]); use `fedcli train --recipe` for a single run"
        )
    for k in ("title", "paper", "fidelity", "notes"):
        if k in data and not isinstance(data[k], str):
            raise ConfigError(f"{where(path, text, k)}: key '{k}' must be a string")
    seeds = data.get("seeds", 1)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"{where(path, text, 'seeds')}: key 'seeds' must be an integer >= 1, got {seeds!r}")


def _run_name(path: Path, text: str, row: dict, span, line, seen: dict) -> str:
    """Pop and check a [[runs]] entry's ``name`` (a one-line label, unique in the recipe); record its line in seen."""
    name = row.pop("name", None)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{path}, line {line}: every [[runs]] entry needs a `name` (a string label)")
    name_line = line_in(text, "name", span) or line
    bad = sorted({repr(c)[1:-1] for c in name if c == "/" or c == "\\" or ord(c) < 32 or ord(c) == 127})
    if bad:  # a name is a table label and (slugified) a folder: never rewritten silently into another name
        raise ConfigError(
            f"{path}, line {name_line}: run name {name!r} holds {', '.join(bad)}; a run name is a label on "
            f"one line and names the run's folder: use letters, digits, spaces and punctuation other "
            f"than / and \\"
        )
    if name in seen:
        raise ConfigError(f"{path}, line {name_line}: run name '{name}' is used twice (first at line {seen[name]})")
    seen[name] = name_line
    return name


def _run_scales(path: Path, text: str, row: dict, span, name: str, scales) -> tuple[dict, list | None]:
    """Pop and check a run's ``scale`` overrides (tables of defined scales) and ``scales`` list (its scales)."""
    row_scales = row.pop("scale", {})
    if not isinstance(row_scales, dict):
        raise ConfigError(
            f"{where_in(path, text, 'scale', span)}: run '{name}': `scale` must be a table of per-scale overrides"
        )
    for sname, over in row_scales.items():
        if sname not in scales:
            raise ConfigError(
                f"{where_in(path, text, sname, span)}: run '{name}' overrides scale '{sname}', "
                f"which the recipe does not define (add [scale.{sname}])"
            )
        if not isinstance(over, dict):
            raise ConfigError(
                f"{where_in(path, text, sname, span)}: run '{name}': scale.{sname} must be a table of train keys"
            )
    only = row.pop("scales", None)  # the scales this run exists at (default: all)
    if only is not None and (
        not isinstance(only, list) or not only or not all(isinstance(s, str) and s in scales for s in only)
    ):
        raise ConfigError(
            f"{where_in(path, text, 'scales', span)}: run '{name}': `scales` must be a non-empty list of "
            f"the recipe's scales ({', '.join(scales) or 'none'}), got {only!r}"
        )
    return row_scales, only


def _check_retimable(path: Path, text: str, span, name: str, values: dict) -> None:
    """Refuse re-timing a run whose training depended on the system model (docs/system-model.md, "Re-timing a run")."""
    from fedcli.fl.timing import refusal

    why = refusal(values)
    if why:
        raise ConfigError(
            f"{where_in(path, text, 'retime', span)}: run '{name}' cannot be re-timed: {why}; only a "
            f"run whose training did not depend on the system model can be (docs/system-model.md, "
            f'"Re-timing a run"): train one run per setting instead'
        )


def _refuse_unused(merged: list[Level], used: set[str]) -> None:
    """Refuse a method table that no run reads (a typo'd method, a lost run)."""
    unused = unused_table(merged, used)
    if unused:  # (the tables of other scales, and of runs absent at this one, were checked for their keys only)
        raise ConfigError(
            f"{unused[1]}: [{unused[0]}] sets options that no run of this recipe reads at this scale (a "
            f"run reads the table of its method and of its parts' params sections)"
        )


def read_sweep(path: str | Path, scale: str | None = None) -> SweepRecipe:
    """Parse and validate a sweep recipe at ``scale`` (default: ``paper`` if defined, else [base] only)."""
    path = Path(path)
    data, text = read_recipe(path)
    _check_sweep_head(path, data, text)
    root = recipe_root(path, data, text)
    scale = scale if scale is not None else default_scale(data)
    levels = recipe_levels(path, data, text, scale, sweep=True)
    scales, levels_first = levels.scales, levels.chosen  # [base], the top-level tables, [scale.x]
    merged: list[Level] = []  # the levels some run of this scale merged: their tables must each reach a run
    used: set[str] = set()
    runs_data = data.get("runs")
    if not isinstance(runs_data, list) or not runs_data:
        raise ConfigError(f"{where(path, text, 'runs')}: [[runs]] must list at least one run")
    spans = _blocks(text, "runs")
    runs, seen = [], {}
    for i, row in enumerate(runs_data):
        span = spans[i] if i < len(spans) else None
        line = text.count("\n", 0, span[0]) + 1 if span else None
        row = dict(row)
        name = _run_name(path, text, row, span, line, seen)
        row_scales, only = _run_scales(path, text, row, span, name, scales)
        variants = retime_variants(row.pop("retime", None), name, path, text, span, seen, root)
        own = split_level(row, path, text, span, f"run '{name}'")
        checked_scales = {
            s: split_level(dict(o), path, text, span, f"run '{name}' (scale {s})") for s, o in row_scales.items()
        }
        if only is not None and scale not in only:
            continue  # checked above, but not part of the grid at this scale
        run_levels = [*levels_first, own, *([checked_scales.get(scale, Level({}, {}))] if scale is not None else [])]
        values, run_used = merge_levels(run_levels, {})
        if variants:
            _check_retimable(path, text, span, name, values)
        used |= run_used
        merged += [lv for lv in run_levels if all(lv is not m for m in merged)]
        lookup = (span, _table_span(text, f"scale.{scale}") if scale else None, _table_span(text, "base"))
        runs.append(SweepRun(name, resolve_paths(values, root), line, (path, text, lookup), variants))
    _refuse_unused(merged, used)
    return SweepRecipe(path, text, data, scale, runs, root)


def run_config(run: SweepRun, seed: int, out: str | Path, extra: dict | None = None) -> TrainConfig:
    """The validated TrainConfig of one run of a sweep at one seed."""
    from fedcli.config import with_method_defaults

    values = dict(run.values)
    values.update(extra or {})
    values["seed"] = seed
    values["out"] = str(out)
    values = with_method_defaults(values)
    try:
        return with_partition_clients(TrainConfig(**values).validate(), run.values)
    except ConfigError as e:  # a rule between keys (or an unknown method): name the line of the key it is about
        loc = run.locate(e.key)
        raise ConfigError(f"{loc + ': ' if loc else ''}run '{run.name}': {e}", key=e.key) from None
