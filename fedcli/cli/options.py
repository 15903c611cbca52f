"""Build Typer options from the config's fields (one source of truth for names and help).

The fields come from :mod:`fedcli.cli.catalog` (plain data, cached), so building the options, showing ``--help`` and
reporting a bad argument never import torch. ``--help`` lists the core options first (what a first run sets),
then the general panels, then each method's own options, one panel per params section (its recipe table).
"""

from __future__ import annotations

import inspect
from typing import Optional

import typer

from fedcli.params import GROUPS, current_names

#: what an empty-string default means, per field (shown as the option's default)
EMPTY_DEFAULTS = {
    "schedule": "the method's",
    "init": "the method's",
    "data_dir": "data/<dataset>",
    "partition_file": "none: an inline --partition",
    "lr_decay_at": "none",
    "scaling_bounds": "none: phi(a) = a",
    "out": "results/<algo>-<dataset>-s<seed>-<time>",
}
#: the options a first run sets, shown first in ``fedcli train --help`` (panel "core")
CORE = (
    "algo",
    "dataset",
    "data_dir",
    "model",
    "clients",
    "active_ratio",
    "partition",
    "iterations",
    "rounds",
    "tau",
    "phi",
    "lr",
    "batch_size",
    "seed",
    "eval_every",
    "out",
    "device",
)
#: the panels after "core", in order: the general ones, then the methods' own options
PANELS = tuple(g for g in GROUPS if g not in ("method", "personalized")) + ("method", "personalized")
TYPES = {"str": str, "int": int, "float": float, "bool": bool}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def show(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def preset_defaults(f: dict, methods: dict) -> str:
    """The presets that run with another value of field ``f`` than its default: ``fedprox 0.001, fedlamb 0.01``;
    a value every personalized preset shares is one entry."""
    own, personal = {}, {}
    name = f["name"]
    for alias, m in methods.items():
        if alias != m["name"] or name not in m["defaults"] or m["defaults"][name] == f["default"]:
            continue
        (personal if m["personalized"] else own)[alias] = m["defaults"][name]
    parts = [f"{k} {show(v)}" for k, v in sorted(own.items())]
    values = set(map(show, personal.values()))
    everyone = sum(m["personalized"] and alias == m["name"] for alias, m in methods.items())
    if len(values) == 1 and len(personal) == everyone > 1:
        parts.append(f"personalized presets {values.pop()}")
    else:
        parts += [f"{k} {show(v)}" for k, v in sorted(personal.items())]
    return ", ".join(parts)


def default_text(f: dict, methods: dict | None = None) -> str:
    """The config default of a field as the help shows it, with the presets that set their own."""
    value = EMPTY_DEFAULTS.get(f["name"], "none") if f["default"] in ("", None) else show(f["default"])
    others = preset_defaults(f, methods or {})
    if others:
        value += f"; presets: {others}"
    return f"[default: {value}]"


def help_text(f: dict, methods: dict | None = None) -> str:
    """The field's help with its choices and default; escaped so that rich does not read [brackets] as markup."""
    from rich.markup import escape

    choices = f.get("choices")
    listed = f" [choices: {', '.join(map(str, choices))}]" if choices else ""
    searched = f" [tune: {search_text(f['search'])}]" if f.get("search") else ""
    return escape(f"{f['help']}{listed} {default_text(f, methods)}{searched}")


def search_text(rng: dict) -> str:
    """A default search range (``fedcli.params.opt(search=...)``) as ``--help`` shows it: ``log 0.001..1``,
    ``choices 1, 2, 4``, ``int 1..8 step 2``."""
    kind = next(k for k in ("log", "int", "float", "choices") if k in rng)
    vals = rng[kind]
    body = (
        ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vals)
        if kind == "choices"
        else "..".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vals)
    )
    return f"{kind} {body}" + (f" step {rng['step']:g}" if rng.get("step") is not None else "")


def panel_of(f: dict) -> str:
    """The ``--help`` panel of a field: core, its general group, or its method's params section (``[fedlama]
    options``)."""
    return "core" if f["name"] in CORE else f.get("panel") or f["group"]


def panel_rank(f: dict) -> tuple:
    if f["name"] in CORE:
        return (-1, "")
    if f.get("panel"):  # the methods' own options, after the general panels, one panel per params section
        return (len(PANELS), f["panel"])
    return (PANELS.index(f["group"]) if f["group"] in PANELS else len(PANELS) + 1, "")


def config_parameters(catalog: dict, names=None) -> list[inspect.Parameter]:
    """One keyword parameter per field of ``catalog`` (fedcli.cli.catalog) or of ``names`` only, default None (so
    explicit flags can be told from defaults). Core options first, in ``CORE`` order, then the panels."""
    fields = [f for f in catalog["fields"] if names is None or f["name"] in names]
    fields.sort(key=lambda f: (panel_rank(f), CORE.index(f["name"]) if f["name"] in CORE else 0))
    params = []
    for f in fields:
        t = TYPES[f["type"]]
        panel = panel_of(f)
        kw = {"help": help_text(f, catalog["methods"]), "rich_help_panel": panel, "show_default": False}
        if f.get("choices"):
            kw["metavar"] = "<choice>"
        elif f.get("multiple"):
            kw["metavar"] = "NAME"
        names_ = flag(f["name"]) + "/" + flag("no_" + f["name"]) if t is bool else flag(f["name"])
        info = typer.Option(None, names_, **kw)
        ann = Optional[list[t]] if f.get("multiple") else Optional[t]  # a repeatable flag, joined by ``given``
        params.append(inspect.Parameter(f["name"], inspect.Parameter.KEYWORD_ONLY, default=info, annotation=ann))
    return params + old_name_parameters(fields)


def old_name_parameters(fields: list[dict]) -> list[inspect.Parameter]:
    """A hidden flag for each old name of a field (``fedcli.params.opt(was=...)``: ``--phi-bounds`` for
    ``--scaling-bounds``), so that a command line written before the rename still works; :func:`given` reads it as
    the field."""
    params = []
    for f in fields:
        t = TYPES[f["type"]]
        for old in f.get("was") or ():
            names_ = flag(old) + "/" + flag("no_" + old) if t is bool else flag(old)
            ann = Optional[list[t]] if f.get("multiple") else Optional[t]
            params.append(
                inspect.Parameter(
                    old, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=typer.Option(None, names_, hidden=True)
                )
            )
    return params


def with_parameters(func, extra: list[inspect.Parameter]):
    """Give ``func(**kwargs)`` an explicit signature that Typer can read."""
    sig = inspect.Signature(extra)
    func.__signature__ = sig
    func.__annotations__ = {p.name: p.annotation for p in extra}
    return func


def given(kwargs: dict, catalog: dict) -> dict:
    """The config values the user set on the command line, a field's old name (a hidden flag) read as the field."""
    names = {f["name"] for f in catalog["fields"]} | {old for f in catalog["fields"] for old in f.get("was") or ()}
    return current_names(
        {
            k: ",".join(v) if isinstance(v, (list, tuple)) else v
            for k, v in kwargs.items()
            if k in names and v is not None and v != [] and v != ()
        },
        flags=True,
    )
