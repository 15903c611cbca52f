"""Build Typer options from the fields of a config dataclass (one source of truth for names and help)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Optional

import typer

from fedcli.config import field_type, flag


def config_parameters(cls, panel_prefix: str = "") -> list[inspect.Parameter]:
    """One keyword parameter per field, default None (so explicit flags can be told from defaults)."""
    params = []
    for f in dataclasses.fields(cls):
        t = field_type(f)
        m = f.metadata
        help_text = m["help"] + (f" [default: {f.default}]" if f.default not in ("", None) else "")
        if t is bool:
            info = typer.Option(None, flag(f.name) + "/" + flag("no_" + f.name), help=help_text, rich_help_panel=panel_prefix + m["group"], show_default=False)
        else:
            info = typer.Option(None, flag(f.name), help=help_text, rich_help_panel=panel_prefix + m["group"], show_default=False)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=Optional[t]))
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
    return {k: v for k, v in kwargs.items() if k in names and v is not None}
