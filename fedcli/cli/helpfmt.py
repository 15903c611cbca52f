"""``fedcli COMMAND --help`` drawn as Typer's rich help draws it (the usage, the command's help, one box per option
panel: name, short name, negative name, type, help with its default), without rich's layout engine.

``fedcli train --help`` has 28 panels and ~140 options; rich measured and wrapped every cell of every panel's table
(1.5-2.3 s on 2 busy cores, ~85% in ``typer.rich_utils._print_options_panel``; issue 48, 19). Here each panel is plain
string work: columns as wide as their widest entry, the help wrapped into the rest of the width (``textwrap``), the
box drawn with the same characters, and colours (the same styles) only on a terminal. What is shown comes from the
same places Typer's renderer reads (each parameter's names, ``display_type_rich``, help, default string), so the
two list the same options in the same panels (``tests/cli/test_help.py`` compares them line by line);
``FEDCLI_RICH_HELP=1`` draws with Typer's renderer (``make bench-help`` times the two).
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import textwrap

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

#: the environment variable that selects Typer's own (rich) renderer
RICH_HELP = "FEDCLI_RICH_HELP"
#: Typer's styles (typer.rich_utils), as ANSI SGR codes
STYLES = {
    "option": "1;36",
    "negative": "1;35",
    "type": "1;33",
    "border": "2",
    "usage": "1",
    "dim": "2",
    "required": "31",
}


def plain_flags(params: list) -> list:
    """``params`` with every flag (``--dry-run``, ``--help``: an option that takes no value) shown as a plain flag in
    both renderers: Typer draws a flag's type as ``<bool>``, as if it took a value, unless it has a metavar; an empty
    one says "no value" (a counted flag, ``-v -v``, and an option with its own metavar are left as they are)."""
    for p in params:
        if getattr(p, "is_flag", False) and not getattr(p, "count", False) and p.metavar is None:
            p.metavar = ""
    return params


class PlainFlagsGroup(TyperGroup):
    """The ``fedcli`` group: its own flags (``--version``, ``--help``) shown without a type (:func:`plain_flags`)."""

    def get_params(self, ctx) -> list:
        return plain_flags(super().get_params(ctx))


class PanelHelpCommand(TyperCommand):
    """A Typer command whose ``--help`` is :func:`render` (Typer's renderer with ``FEDCLI_RICH_HELP=1``), its flags
    shown without a type in both (:func:`plain_flags`)."""

    def get_params(self, ctx) -> list:
        return plain_flags(super().get_params(ctx))

    def format_help(self, ctx, formatter) -> None:
        if os.environ.get(RICH_HELP):
            return super().format_help(ctx, formatter)
        try:
            text = render(self, ctx, width(), colour())
        except AttributeError:  # a Typer whose parameters lack the methods its renderer reads here: its renderer
            return super().format_help(ctx, formatter)
        formatter.write(text)


def width() -> int:
    """The width rich would draw at: ``TERMINAL_WIDTH`` (Typer's), else ``COLUMNS``, else the terminal's, else 80."""
    given = os.environ.get("TERMINAL_WIDTH")
    if given and given.isdigit():
        return int(given)
    return shutil.get_terminal_size((80, 24)).columns


def colour() -> bool:
    """Whether to colour: a terminal, unless ``NO_COLOR`` or ``TERM=dumb``; ``FORCE_COLOR`` forces it (rich's rules)."""
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


def plain(markup: str) -> str:
    """Rich markup (``\\[default: x]``, ``[red]...[/]``) as the text rich shows."""
    from rich.markup import render as from_markup

    return from_markup(markup).plain


def paint(text: str, style: str, on: bool) -> str:
    return f"\x1b[{STYLES[style]}m{text}\x1b[0m" if on and text else text


def option_row(param, ctx) -> tuple[list[tuple[str, str]], str]:
    """A parameter's cells (text, style): long names, short names (an argument's name), negative long and short names,
    type; and its help with its default and required marks (``typer.rich_utils._print_options_panel``'s columns)."""
    is_arg = isinstance(param, TyperArgument)
    display = None
    if is_arg:
        display = param.display_name_raw + ("..." if param.metavar is None and param.nargs != 1 else "")
    longs = [o for o in param.opts if "--" in o]
    shorts = [display or o for o in param.opts if "--" not in o]
    neg_longs = [o for o in param.secondary_opts if "--" in o]
    neg_shorts = [o for o in param.secondary_opts if "--" not in o]
    kind = param.display_type_rich(ctx=ctx) or ""
    if span := param._get_number_range_help_str():
        kind += f" [{span}]"
    cells = [
        (",".join(longs), "option"),
        (",".join(shorts), "option"),
        (",".join(neg_longs), "negative"),
        (",".join(neg_shorts), "negative"),
        (kind, "type"),
    ]
    words = []
    if param.help:
        paragraphs = [
            p.replace("\n", " ").strip() if not p.startswith("\b") else p.strip("\b\n") + "\n"
            for p in param.help.split("\n\n")
        ]
        words.append(plain("\n".join(paragraphs).strip()))
    default = param._extract_default_help_str(ctx=ctx)
    as_text = isinstance(param.show_default, str)
    if as_text or (default is not None and (param.show_default or ctx.show_default)):
        shown = param._get_default_string(ctx=ctx, show_default_is_str=as_text, default_value=default)
        if shown:
            words.append(f"[default: {shown}]")
    if param.required:
        words.append("[required]")
    return cells, " ".join(words)


def panel(
    title: str, rows: list[tuple[list[tuple[str, str]], str]], required: list[bool], total: int, on: bool
) -> list[str]:
    """One box: ``╭─ title ─╮``, a line per wrapped row, ``╰─╯``; columns that are empty in every row take no space."""
    inner = total - 4  # "│ " ... " │"
    cols = len(rows[0][0])
    widths = [max(len(r[0][i][0]) for r in rows) for i in range(cols)]
    keep = [i for i in range(cols) if widths[i]]
    mark = any(required)
    fixed = sum(widths[i] + 2 for i in keep) + (2 if mark else 0)
    room = max(20, inner - fixed)
    head = f"─ {title} "
    out = [paint("╭" + (head + "─" * max(0, total - 2 - len(head)))[: total - 2] + "╮", "border", on)]
    bar = paint("│", "border", on)
    for (cells, text), req in zip(rows, required):
        lines = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
        for n, piece in enumerate(lines):
            left = ("*" if req and n == 0 else " ") + " " if mark else ""
            left = paint(left, "required", on) if req and n == 0 else left
            for i in keep:
                cell, style = cells[i] if n == 0 else ("", "")
                left += paint(cell, style, on) + " " * (widths[i] - len(cell) + 2)
            pad = max(0, room - len(piece))
            out.append(f"{bar} {left}{piece}{' ' * pad} {bar}")
    out.append(paint("╰" + "─" * (total - 2) + "╯", "border", on))
    return out


def render(command, ctx, total: int = 80, on: bool = False) -> str:
    """The help of ``command``: its usage, its help text, then its arguments and options by panel (the default panels
    "Arguments" and "Options" first, then the others in the order their first parameter comes)."""
    lines = ["", " " + paint(command.get_usage(ctx), "usage", on), ""]
    if command.help:
        first, *rest = inspect.cleandoc(command.help).partition("\f")[0].split("\n\n")
        lines += [" " + ln for ln in textwrap.wrap(plain(first.replace("\n", " ").strip()), total - 2)]
        for para in rest:
            lines += [""] + [
                " " + paint(ln, "dim", on) for ln in textwrap.wrap(plain(para.replace("\n", " ").strip()), total - 2)
            ]
        lines.append("")
    panels: dict[tuple[int, str], list] = {(0, "Arguments"): [], (1, "Options"): []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or not isinstance(param, (TyperArgument, TyperOption)):
            continue
        kind = 0 if isinstance(param, TyperArgument) else 1
        name = getattr(param, "rich_help_panel", None) or ("Arguments" if kind == 0 else "Options")
        panels.setdefault((kind, name), []).append(param)
    for (kind, name), params in sorted(
        panels.items(), key=lambda kv: (kv[0][0], kv[0][1] not in ("Arguments", "Options"))
    ):
        if params:
            lines += panel(name, [option_row(p, ctx) for p in params], [bool(p.required) for p in params], total, on)
    return "\n".join(lines) + "\n"
