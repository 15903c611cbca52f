"""``fedcli report``: the papers' tables and figures from a sweep's run directories; reports of single runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer

from fedcli.cli.console import err_console, out_console
from fedcli.papers import PAPERS


@dataclass
class Output:
    """What ``fedcli report`` made, for ``fedcli.report(...)`` in Python (fedcli/api.py): the table it printed (a
    :class:`fedcli.reports.tables.Table`; ``sweep``: the folder of a sweep's table) and the figure files it wrote."""

    table: object = None
    sweep: str | None = None
    figures: list = field(default_factory=list)


def report(  # noqa: PLR0913
    folders: list[str] = typer.Argument(
        None,
        metavar="DIR",
        help="Run directories of `fedcli train`, sweep folders (with sweep.json), or folders holding them. "
        "\\[default: results]",
    ),
    table: str = typer.Option(
        None,
        "--table",
        "-t",
        help="Table of a sweep to print (without it: list what the sweeps can produce, and compare the runs).",
    ),
    fmt: str = typer.Option("md", "--format", "-f", help="Table format: md, latex or csv."),
    figures: str = typer.Option(
        None,
        "--figures",
        help="Write figures (PNG and PDF) into this folder: those of the table's sweep, or all; for run "
        "directories their curves and per-layer figures. \\[default: RUN_DIR/figures for one run directory]",
    ),
    figure: list[str] = typer.Option(None, "--figure", help="Only this figure of a sweep (repeatable)."),
    output: str = typer.Option(None, "--output", "-o", help="Write the table to this file instead of stdout."),
    x: str = typer.Option(
        None,
        "--x",
        metavar="<choice>",
        help="X axis of the curves: local iterations, communication rounds, communicated parameters (Eq. 8), "
        "bytes moved both ways, or simulated seconds (runs trained with --system). \\[choices: iterations, "
        "rounds, params, bytes, time] \\[default: a sweep figure's own `x`; run directories: both `curves` "
        "against iterations (rounds when every run has a round budget) and `curves-params` against "
        "parameters; --x picks the axis of one of the two]",
    ),
    paper: str = typer.Option(
        None,
        "--paper",
        metavar="NAME",
        help="Assemble one paper's experiment section from the sweeps of its recipes under DIR: every table and "
        "figure they can produce, in LaTeX (section.tex, booktabs) and Markdown (section.md), with the "
        "figures, into --output DIR. "
        f"\\[choices: {', '.join(PAPERS)}] \\[default --output: DIR/paper-NAME]",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="With --paper: replace section.tex and section.md even where they changed since fedcli wrote them "
        "(hand edits are lost). Without it an edited section is kept and the command refuses (exit 2).",
    ),
    baseline: str = typer.Option(
        None,
        "--baseline",
        metavar="RUN",
        help="The run that the comparison table of run directories measures communication against, in "
        "parameters and bytes (its folder or path). \\[default: the first FedAvg run given; none: FedAvg "
        "with each run's cohort, tau and budget, computed]",
    ),
    **system_options,
):
    """Report runs and sweeps: a paper table (mean +- std over seeds, communication %, early stopping) and figures from a
    sweep; curves, per-layer communication and Algorithm 1 figures of `fedcli train` runs, and a table comparing them."""  # noqa: E501 - `fedcli --help` lists it line for line
    from pathlib import Path

    from fedcli.errors import ConfigError
    from fedcli.reports.core import FORMATS, find_sweeps
    from fedcli.reports.single import is_run_dir

    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    retime = _retiming(x, system_options, paper is not None or table is not None or bool(figure))
    if paper is not None:
        return _paper(paper, list(folders or ["results"]), output, x, table, figure, figures, overwrite)
    from fedcli.tune.results import is_study

    if any(is_study(f) for f in folders or []):
        return _study(list(folders), fmt, output, figures, table, figure, baseline, x)
    if overwrite:
        raise ConfigError(
            "--overwrite applies to --paper only (it replaces a section.tex or section.md edited by hand)"
        )
    asked = _Asked(fmt, output, figures, table, figure, x, baseline, retime)
    _check_outputs(asked)
    folders = list(folders or ["results"])
    explicit = [f for f in folders if is_run_dir(Path(f))]
    holders = [f for f in folders if f not in explicit]
    sweeps = [s for f in holders for s in _sweeps_in(f, find_sweeps)]
    if figure and figures is None:
        raise ConfigError("--figure needs --figures OUTDIR (the folder to write it to)")
    if table is not None or figure:
        if explicit:
            raise ConfigError(
                f"--table and --figure name products of a sweep; {explicit[0]} is a run directory "
                f"(`fedcli report {explicit[0]}` reports it)"
            )
        if not sweeps:
            find_sweeps(holders[0])  # raises: no sweep here
    if table is None and not figure:
        return _report_found(asked, explicit, holders, sweeps)
    return _report_products(asked, holders, sweeps)


def _retiming(x: str | None, system_options: dict, products: bool) -> dict:
    """The ``--x`` axis checked, and the system options given (``--uplink ...``: re-time the run directories), refused
    for a sweep's products (``products``: --paper, --table or --figure asked for)."""
    from fedcli.errors import ConfigError
    from fedcli.reports.style import X_AXES

    if x is not None and x not in X_AXES:
        raise ConfigError(f"--x must be one of {', '.join(X_AXES)}, got '{x}'")
    retime = {k: v for k, v in system_options.items() if v is not None}
    if retime:
        from fedcli.reports import retime as retiming

        retiming.check(retime)
        if products:
            raise ConfigError(
                f"{retiming.describe(retime)}: re-timing applies to run directories compared (fedcli report "
                f"RUN... --x time), not to a sweep's tables, figures or paper section"
            )
    return retime


@dataclass
class _Asked:
    """What ``fedcli report`` was asked for: its flags (``retime``: the ``--uplink ...`` options given)."""

    fmt: str
    output: str | None
    figures: str | None
    table: str | None
    figure: list | None
    x: str | None
    baseline: str | None
    retime: dict


def _check_outputs(asked: _Asked) -> None:
    """``--output`` names a file and ``--figures`` a folder (exit 2 otherwise, before anything is read)."""
    from pathlib import Path

    from fedcli.errors import ConfigError

    output, figures = asked.output, asked.figures
    if figures is not None and Path(figures).suffix.lower() in (".png", ".pdf", ".svg", ".jpg"):
        raise ConfigError(
            f"--figures takes a folder to write every figure into (PNG, PDF and a caption each), got the "
            f"file name {figures}"
        )
    if output and Path(output).is_dir():
        raise ConfigError(f"--output {output} is a folder; expected a file to write the table to")
    if figures is not None and Path(figures).exists() and not Path(figures).is_dir():
        raise ConfigError(f"--figures {figures} is a file; expected a folder to write the figures into")


def _report_found(asked: _Asked, explicit: list[str], holders: list[str], sweeps: list) -> Output:
    """``fedcli report DIR...`` without --table or --figure: the run directories named (``explicit``) and found in the
    folders ``holders`` compared in a table, the sweeps found listed, and with ``--figures`` their figures drawn."""
    from pathlib import Path

    from fedcli.errors import ConfigError
    from fedcli.reports.core import check_time_axis, listing
    from fedcli.reports.single import find_runs, load_run

    output, figures, x, retime = asked.output, asked.figures, asked.x, asked.retime
    made = Output()
    loose = [p for f in holders for p in find_runs(Path(f), [s.root for s in sweeps])]
    if not sweeps and not explicit and not loose:
        raise ConfigError(
            f"{', '.join(holders)}: no sweep (sweep.json) and no run directory (manifest.json) here; "
            f"run `fedcli train` or `fedcli sweep RECIPE` first"
        )
    if output and not (explicit or loose):
        raise ConfigError("--output writes a table: give --table NAME (a sweep's table) or run directories to compare")
    runs = [load_run(p) for p in explicit]  # a run named on the command line must be readable
    runs += _readable(loose, load_run)  # runs found in a folder: the readable ones, the others named
    if retime:  # every run re-timed (or the one that cannot be refused) before anything is printed or written
        from fedcli.reports import retime as retiming

        if not runs or (sweeps and figures is not None):
            raise ConfigError(
                f"{retiming.describe(retime)}: re-timing applies to run directories of `fedcli train`; "
                f"give them (a sweep's runs are in its folders: SWEEP/<run>/seed<k>)"
            )
        retiming.apply(runs, retime)
    if runs and x == "time" and (explicit or not sweeps):  # runs whose curves --x time draws: one without
        # simulated time is refused before anything is printed or written
        from fedcli.reports.figures import check_simulated_time

        check_simulated_time(runs)
    if sweeps and figures is not None:  # so are the sweeps' figures drawn against time
        check_time_axis(sweeps, None, x)
    if sweeps and figures is None:
        _print_listing(" ".join(holders), sweeps, listing(sweeps))
    if runs:
        made = _report_runs(
            runs, explicit, asked.fmt, output, figures if explicit or not sweeps else None, x, asked.baseline
        )
    if sweeps and figures is not None:
        made.figures += _write_figures(sweeps, figures, None, holders[0], x)
    return made


def _report_products(asked: _Asked, holders: list[str], sweeps: list) -> Output:
    """``--table NAME`` / ``--figure NAME``: a sweep's table printed (or written to ``--output``) and its figures drawn
    into ``--figures``; figures against time whose runs lack it are refused before the table is printed."""
    from fedcli.reports.core import check_time_axis, pick, sweep_table
    from fedcli.reports.tables import render

    table, figure, figures, x = asked.table, asked.figure, asked.figures, asked.x
    made = Output()
    if figures is not None:  # figures drawn against time whose runs lack it: refused before the table is printed
        check_time_axis(
            [pick(sweeps, table, "table")[0]] if table is not None and not figure else sweeps,
            list(figure) if figure else None,
            x,
        )
    if table is not None:
        sweep, made.table = sweep_table(sweeps, table)
        made.sweep = str(sweep.root)
        _emit(render(made.table, asked.fmt), asked.output, f"table {table}")
    if figures is not None:
        scope = sweeps
        if table is not None and not figure:
            scope = [pick(sweeps, table, "table")[0]]
        made.figures += _write_figures(scope, figures, list(figure) if figure else None, holders[0], x)
    return made


def _paper(
    name: str, folders: list[str], output: str | None, x: str | None, table, figure, figures, overwrite: bool = False
) -> Output:
    """``--paper NAME``: the paper's section from the sweeps under ``folders`` (fedcli/reports/paper.py)."""
    from pathlib import Path

    from fedcli.errors import ConfigError
    from fedcli.reports.core import find_sweeps
    from fedcli.reports.paper import paper_of, write_section

    paper_of(name)  # an unknown paper: exit 2 naming the known ones, before anything is read
    if table is not None or figure or figures is not None:
        raise ConfigError(
            "--paper assembles every table and figure of the paper's sweeps; leave out --table, --figure "
            "and --figures (--output DIR says where the section goes)"
        )
    if output and Path(output).exists() and not Path(output).is_dir():
        raise ConfigError(
            f"--output {output} is a file; with --paper it names the folder for section.tex, section.md and the figures"
        )
    sweeps = [s for f in folders for s in _sweeps_in(f, find_sweeps)]
    if not sweeps:
        raise ConfigError(
            f"{', '.join(folders)}: no sweep (sweep.json) here; run the paper's recipes with `fedcli sweep "
            f"RECIPE --scale smoke` first"
        )
    out = Path(output) if output else Path(folders[0]) / f"paper-{name}"
    from fedcli.safefs import writing_into

    try:  # the folder named (--output, else DIR) may be a link; nothing below it is written through one
        with writing_into(output or folders[0]):
            files = write_section(sweeps, name, out, x, overwrite)
    except OSError as e:
        from fedcli.errors import os_error

        raise os_error(e, e.filename or out) from None
    for f in files:
        err_console.print(f"fedcli report: paper section -> {f}", markup=False, highlight=False, soft_wrap=True)
    drawn = (
        sorted(p for p in (out / "figures").rglob("*") if p.suffix in (".png", ".pdf"))
        if (out / "figures").is_dir()
        else []
    )
    if drawn:  # a folder named only where figures were written into it (a paper whose sweeps draw none: no folder)
        err_console.print(f"fedcli report: figures -> {out / 'figures'}", markup=False, highlight=False, soft_wrap=True)
    captions = {p.with_suffix(".txt") for p in drawn if p.with_suffix(".txt").is_file()}  # each figure's NAME.txt
    return Output(figures=sorted([*drawn, *captions]))


#: how many of a study's best configurations ``fedcli report DIR`` lists (one objective)
TOP = 5


def _study(folders: list[str], fmt: str, output: str | None, figures: str | None, table, figure, baseline, x) -> Output:
    """``fedcli report DIR`` on a study folder of ``fedcli tune`` (fedcli/reports/tune.py): its trials, compute, best
    configurations or Pareto set and validity notes (Markdown; ``--format csv``: the trials, one row each, as
    ``fedcli.load(DIR).trials`` gives them), and its figures (``--figures``, default DIR/figures)."""
    from pathlib import Path

    from fedcli.errors import ConfigError
    from fedcli.reports import tune as tune_report
    from fedcli.safefs import writing_into
    from fedcli.tune.results import read_study, summary, trial_records

    if len(folders) != 1:
        raise ConfigError(f"{', '.join(folders)}: report one study folder of `fedcli tune` at a time")
    if table is not None or figure or baseline is not None or x is not None:
        raise ConfigError(
            "--table, --figure, --baseline and --x apply to sweeps and run directories; a study folder's "
            "report takes --format md|csv, --output and --figures"
        )
    if fmt == "latex":
        raise ConfigError("--format latex applies to a sweep's tables; a study folder's report is md or csv")
    from fedcli.tune.confirm import confirmed

    folder = read_study(folders[0])
    report = summary(folder, TOP, confirmed(folder.root))
    if fmt == "csv":
        import csv
        import io

        rows = trial_records(folder)
        buf = io.StringIO()
        if rows:
            w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
        text = buf.getvalue()
    else:
        text = tune_report.render_md(report, TOP)
    _emit(text if text.endswith("\n") or not text else text + "\n", output, f"study report of {folders[0]}")
    root = figures or folders[0]
    target = figures or str(Path(folders[0]) / "figures")
    with writing_into(root):
        files = tune_report.write_figures(report, target)
    for f in files:
        err_console.print(f"fedcli report: figure -> {f}", markup=False, highlight=False, soft_wrap=True)
    return Output(figures=files)


def _readable(paths, load_run) -> list:
    """The run directories found in a folder that can be read; each one that cannot is named on stderr with the reason
    (one damaged manifest does not hide the others). None readable: the first error (exit 2 or 3)."""
    from fedcli.errors import FedcliError

    runs, errors = [], []
    for p in paths:
        try:
            runs.append(load_run(p))
        except FedcliError as e:
            errors.append(e)
            err_console.print(f"fedcli report: left out {p}: {e}", markup=False, highlight=False, soft_wrap=True)
    if errors and not runs:
        raise errors[0]
    if errors:
        err_console.print(
            f"fedcli report: {len(runs)} run(s) reported, {len(errors)} left out (named above)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return runs


def _emit(text: str, output: str | None, what: str) -> None:
    """A table to stdout, or to ``--output FILE`` (its folder may be a link; the file may not)."""
    from fedcli.safefs import write_named

    if not output:
        print(text, end="")
        return
    write_named(output, text)
    err_console.print(f"fedcli report: {what} -> {output}", markup=False, highlight=False, soft_wrap=True)


def _sweeps_in(folder: str, find_sweeps) -> list:
    """The sweeps in ``folder`` (none is fine here: it may hold run directories only)."""
    from pathlib import Path

    from fedcli.errors import ConfigError
    from fedcli.results.sweepdir import MANIFEST

    root = Path(folder)
    if root.suffix == ".toml" and root.is_file():  # a recipe: `fedcli report` reads the folder its sweep writes
        raise ConfigError(
            f"{folder} is a recipe, not a folder of results; run it with `fedcli sweep {folder} --scale "
            f"smoke --out DIR`, then `fedcli report DIR`"
        )
    if root.exists() and not root.is_dir():
        raise ConfigError(
            f"{folder} is a file; give a run directory of `fedcli train`, a sweep folder or a folder holding them"
        )
    if not root.is_dir():
        raise ConfigError(f"{folder}: no such folder")
    if any(next(root.glob(pat), None) for pat in (MANIFEST, f"*/{MANIFEST}", f"*/*/{MANIFEST}")):
        return find_sweeps(
            folder,
            warn=lambda msg: err_console.print(f"fedcli report: {msg}", markup=False, highlight=False, soft_wrap=True),
        )
    return []


def _warn(msg: str) -> None:
    err_console.print(f"fedcli report: warning: {msg}", markup=False, highlight=False, soft_wrap=True)


def _write_figures(sweeps, out_dir: str, names, folder, x: str | None = None) -> list:
    from fedcli.reports.core import make_figures
    from fedcli.safefs import writing_into

    with writing_into(out_dir):  # --figures DIR may be a link; nothing below it is written through one
        files = make_figures(sweeps, out_dir, names, x=x, warn=_warn)
    if not files:
        err_console.print(f"fedcli report: no figures defined in {folder}", markup=False, highlight=False)
    for f in files:
        err_console.print(f"fedcli report: figure -> {f}", markup=False, highlight=False, soft_wrap=True)
    return files


def _report_runs(
    runs,
    explicit: list[str],
    fmt: str,
    output: str | None,
    figures: str | None,
    x: str | None = None,
    baseline: str | None = None,
) -> Output:
    """The comparison table of ``fedcli train`` runs, and their figures (one run given: in RUN_DIR/figures by
    default)."""
    from pathlib import Path

    from fedcli.reports import style
    from fedcli.reports.single import comparison_table, run_names, write_figures
    from fedcli.reports.tables import render

    made = Output(comparison_table(runs, baseline=baseline))
    _emit(render(made.table, fmt), output, f"table of {len(runs)} run(s)")
    _tracker_notes(runs)
    _killed_notes(runs)
    root = figures  # the folder the user named: --figures DIR, else the run directory (figures/ is fedcli's)
    if figures is None and len(explicit) == 1 and len(runs) == 1:
        figures, root = str(Path(explicit[0]) / "figures"), explicit[0]
    if figures is None and (msg := style.data_warning(runs, run_names(runs))):  # with figures: their warning says it
        _warn(msg)
    if figures is None:
        err_console.print(
            f"fedcli report: `fedcli report RUN_DIR` draws a run's curves and per-layer figures; add --figures OUTDIR "
            f"to draw {'it' if len(runs) == 1 else f'these {len(runs)} runs together'}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return made
    from fedcli.safefs import writing_into

    with writing_into(root):
        made.figures = write_figures(runs, figures, x=x, warn=_warn)
    for f in made.figures:
        err_console.print(f"fedcli report: figure -> {f}", markup=False, highlight=False, soft_wrap=True)
    return made


def _tracker_notes(runs) -> None:
    """Where the runs had ``--tracker``: whether their trackers' end work (figures, artifacts) is still under way in
    the background, done, or ended early (``fedcli.trackers.state``; no tracker library is imported)."""
    from fedcli.trackers.state import describe

    said = [(run.path, got) for run in runs if (got := describe(run.path, run.manifest)) is not None]
    for path, (kind, line) in said:
        if kind != "done" or len(said) == 1:
            err_console.print(f"fedcli report: {path}: {line}", markup=False, highlight=False, soft_wrap=True)
    done = sum(kind == "done" for _, (kind, _) in said)
    if done and len(said) > 1:
        err_console.print(
            f"fedcli report: trackers done for {done} of {len(said)} run(s) with trackers",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _killed_notes(runs) -> None:
    """A run whose manifest still says running though its process is gone (killed with its watchdog): what happened
    and how to go on (``fedcli.results.runstate.killed_note``), instead of a bare "running" in the table."""
    from fedcli.results.runstate import killed_note

    for run in runs:
        said = killed_note(run.path, run.manifest)
        if said:
            err_console.print(f"fedcli report: {run.path}: {said}", markup=False, highlight=False, soft_wrap=True)


def _print_listing(folder, sweeps, rows) -> None:
    from rich.table import Table

    for s in sweeps:
        m = s.manifest
        t = Table(
            title=f"{s.root}: {m.get('paper') or m.get('title')} (recipe {m.get('recipe')}, scale {s.scale or 'base'}, "
            f"seeds {', '.join(map(str, s.seeds))})",
            title_justify="left",
        )
        for c in ("product", "kind", "reproduces", "runs"):
            t.add_column(c, overflow="fold")
        for r in (r for r in rows if r["sweep"] == str(s.root)):
            ready = f"{r['runs']} ready" if not r["missing"] else f"[red]{r['missing']} of {r['runs']} missing[/]"
            t.add_row(r["name"], r["kind"], r["paper"] or r["title"], ready)
        out_console.print(t)
    out_console.print(
        f"Print a table with `fedcli report {folder} --table NAME [--format md|latex|csv]`; "
        f"write figures with `--figures OUTDIR`.",
        highlight=False,
        markup=False,
    )


def retiming_parameters() -> list:
    """The Typer parameters of the re-timing options (``fedcli.reports.retime``), from ``fedcli train``'s declarations
    of them (their help; the default: the run's own)."""
    import inspect
    from typing import Optional

    from rich.markup import escape

    from fedcli.cli.options import TYPES, flag, show
    from fedcli.reports.retime import fields

    out = []
    for f in fields().values():
        kind = TYPES[f.type if isinstance(f.type, str) else f.type.__name__]
        default = show(f.default) if f.default not in ("", None) else "none"
        text = escape(
            f"Re-time the run directories with: {f.metadata['help']} [default: the run's own (trained with "
            f"--system), else {default}]"
        )
        option = typer.Option(None, flag(f.name), help=text, rich_help_panel=RETIMING_PANEL, show_default=False)
        out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=Optional[kind]))
    return out


RETIMING_PANEL = "re-timing run directories (system model: docs/system-model.md)"


def _with_retiming() -> None:
    """``fedcli report``'s parameters: its own and the system model's re-timing options."""
    import inspect

    from fedcli.cli.options import with_parameters

    own = [p for p in inspect.signature(report).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    with_parameters(report, own + retiming_parameters())


_with_retiming()
