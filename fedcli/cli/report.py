"""``fedcli report``: the papers' tables and figures from a sweep's run directories."""

from __future__ import annotations

import typer

from fedcli.cli.console import err_console, out_console


def report(
    folder: str = typer.Argument(..., metavar="DIR", help="A sweep folder (with sweep.json), or a folder holding sweep folders (e.g. results)."),
    table: str = typer.Option(None, "--table", "-t", help="Table to print (without it: list what DIR can produce)."),
    fmt: str = typer.Option("md", "--format", "-f", help="Table format: md, latex or csv."),
    figures: str = typer.Option(None, "--figures", help="Write figures (PNG and PDF) into this folder: those of the table's sweep, or all."),
    figure: list[str] = typer.Option(None, "--figure", help="Only this figure (repeatable)."),
    output: str = typer.Option(None, "--output", "-o", help="Write the table to this file instead of stdout."),
):
    """Print a paper table (mean +- std over seeds, communication %, early stopping) and write figures from a sweep."""
    from pathlib import Path

    from fedcli.errors import ConfigError
    from fedcli.report.core import FORMATS, find_sweeps, listing, make_figures, make_table, pick

    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    if output and Path(output).is_dir():
        raise ConfigError(f"--output {output} is a folder; expected a file to write the table to")
    if figures is not None and Path(figures).exists() and not Path(figures).is_dir():
        raise ConfigError(f"--figures {figures} is a file; expected a folder to write the figures into")
    if output and table is None:
        raise ConfigError("--output writes a table: give --table NAME")
    sweeps = find_sweeps(folder)
    if table is None and figures is None:
        if figure:
            raise ConfigError("--figure needs --figures OUTDIR (the folder to write it to)")
        _print_listing(folder, sweeps, listing(sweeps))
        return
    if table is not None:
        text = make_table(sweeps, table, fmt)
        if output:
            from fedcli.errors import os_error
            from fedcli.results.rundir import atomic_write

            try:
                Path(output).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise os_error(e, Path(output).parent, "create") from None
            atomic_write(Path(output), text)
            err_console.print(f"fedcli report: table {table} -> {output}", markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, end="")
    if figures is not None:
        scope = sweeps
        if table is not None and not figure:
            scope = [pick(sweeps, table, "table")[0]]
        files = make_figures(scope, figures, list(figure) if figure else None)
        if not files:
            err_console.print(f"fedcli report: no figures defined in {folder}", markup=False, highlight=False)
        for f in files:
            err_console.print(f"fedcli report: figure -> {f}", markup=False, highlight=False, soft_wrap=True)


def _print_listing(folder, sweeps, rows) -> None:
    from rich.table import Table

    for s in sweeps:
        m = s.manifest
        t = Table(title=f"{s.root}: {m.get('paper') or m.get('title')} (recipe {m.get('recipe')}, scale {s.scale or 'base'}, "
                        f"seeds {', '.join(map(str, s.seeds))})", title_justify="left")
        for c in ("product", "kind", "reproduces", "runs"):
            t.add_column(c, overflow="fold")
        for r in (r for r in rows if r["sweep"] == str(s.root)):
            ready = f"{r['runs']} ready" if not r["missing"] else f"[red]{r['missing']} of {r['runs']} missing[/]"
            t.add_row(r["name"], r["kind"], r["paper"] or r["title"], ready)
        out_console.print(t)
    out_console.print(f"Print a table with `fedcli report {folder} --table NAME [--format md|latex|csv]`; "
                      f"write figures with `--figures OUTDIR`.", highlight=False, markup=False)
