"""Build Typer options from the fields of a config dataclass (one source of truth for names and help)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Optional

import typer

from fedcli.config import field_type, flag
from fedcli.params import group_rank


#: what an empty-string default means, per field (shown as the option's default)
EMPTY_DEFAULTS = {"schedule": "the method's", "init": "the method's", "data_dir": "data/<dataset>",
                  "partition_file": "none: an inline --partition", "lr_decay_at": "none", "phi_bounds": "none: phi(a) = a",
                  "out": "results/<algo>-<dataset>-s<seed>-<time>"}
#: fields whose default a method preset may replace (the help says so)
PRESET_FIELDS = ("lr", "client_test_fraction", "active_ratio", "server_lr")


def default_text(f) -> str:
    """The config default of a field as the help shows it."""
    if f.default == "" or f.default is None:
        value = EMPTY_DEFAULTS.get(f.name, "none")
    elif isinstance(f.default, bool):
        value = "on" if f.default else "off"
    else:
        value = f"{f.default:g}" if isinstance(f.default, float) else str(f.default)
    if f.name in PRESET_FIELDS:
        value += "; method presets may set their own, see --list-algos"
    return f"[default: {value}]"


def help_text(f) -> str:
    """The field's help with its choices and default; escaped so that rich does not read [brackets] as markup."""
    from rich.markup import escape

    choices = f.metadata.get("choices")
    listed = f" [choices: {', '.join(map(str, choices))}]" if choices else ""
    return escape(f"{f.metadata['help']}{listed} {default_text(f)}")


def config_parameters(cls, panel_prefix: str = "") -> list[inspect.Parameter]:
    """One keyword parameter per field, default None (so explicit flags can be told from defaults).

    The help shows the config default, and the choices of a choice field; help panels in ``GROUPS`` order."""
    params = []
    for f in sorted(dataclasses.fields(cls), key=group_rank):
        t = field_type(f)
        m = f.metadata
        kw = {"help": help_text(f), "rich_help_panel": panel_prefix + m["group"], "show_default": False}
        if m.get("choices"):
            kw["metavar"] = "<choice>"
        elif m.get("multiple"):
            kw["metavar"] = "NAME"
        names = flag(f.name) + "/" + flag("no_" + f.name) if t is bool else flag(f.name)
        info = typer.Option(None, names, **kw)
        ann = Optional[list[t]] if m.get("multiple") else Optional[t]  # a repeatable flag, joined by ``given``
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=ann))
    return params


def with_parameters(func, extra: list[inspect.Parameter]):
    """Give ``func(**kwargs)`` an explicit signature that Typer can read."""
    sig = inspect.Signature(extra)
    func.__signature__ = sig
    func.__annotations__ = {p.name: p.annotation for p in extra}
    return func


def given(kwargs: dict, cls) -> dict:
    """The config values the user set on the command line."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: ",".join(v) if isinstance(v, (list, tuple)) else v for k, v in kwargs.items()
            if k in names and v is not None and v != [] and v != ()}
