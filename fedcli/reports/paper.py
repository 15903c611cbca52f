"""``fedcli report DIR --paper NAME``: every table and figure of one paper's recipes that the sweeps under DIR can
produce, assembled into one LaTeX section (booktabs tables, ``table*`` where wide, the figures' PDFs included, each
figure drawn for the width it prints at: one panel a column, several both columns) and the same in Markdown, each
product introduced by a paragraph naming the setting, the command that ran it, the versions and what is missing.

Nothing is written through a link and no edit is lost: every path the section would write is checked before the
first is written (:func:`planned`, :func:`check_targets`), and ``section.tex`` / ``section.md`` carry a checksum of
what fedcli wrote (:func:`stamp`): a file edited since (or not written by fedcli) is kept, and the command refuses
(exit 2) unless ``--overwrite``.

A sweep belongs to a paper by the ``paper`` its recipe states (recorded in ``sweep.json``): :data:`PAPERS` maps each
paper's name to the start of that string (:data:`fedcli.papers.PAPERS`). The paper's recipes in this repository's
``recipes/`` that have no sweep
under DIR are named as missing, with the command that would run them.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.papers import PAPERS

#: this repository's recipes (the paper's recipes that no sweep under DIR ran are listed from here)
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def paper_of(name: str) -> tuple[str, str]:
    if name not in PAPERS:
        from fedcli.method_names import suggest

        raise ConfigError(
            f"--paper {name}: not a paper fedcli has recipes for; {suggest(name, list(PAPERS))}choose one of "
            f"{', '.join(PAPERS)}"
        )
    return PAPERS[name]


def recipe_paper(path: Path) -> str:
    """The ``paper`` a recipe file states at its top level ("" if none or unreadable)."""
    try:
        return str(tomllib.loads(path.read_text()).get("paper", ""))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return ""


@dataclass
class Part:
    """One product of the section: its LaTeX and Markdown, or the runs it lacks (``"'FedLAMA' seed 1 (missing)"``)."""

    latex: str = ""
    md: str = ""
    lacks: list[str] = field(default_factory=list)


def _versions(sweep) -> str:
    """fedcli, torch and python of the sweep's first run that recorded them (its manifest ``versions``)."""
    from fedcli.reports.rundata import read_manifest

    for e in sweep.manifest.get("runs", []):
        _, m = read_manifest(sweep.root / e["dir"])
        v = (m or {}).get("versions") if isinstance(m, dict) else None
        if v:
            return ", ".join(f"{k} {val}" for k, val in v.items() if isinstance(val, (str, int, float)))
    return "not recorded"


def _finished(sweep) -> tuple[int, int]:
    """(trainings finished, trainings the sweep holds): completed runs, and runs the divergence guard stopped."""
    from fedcli.results.runstate import DONE

    states = [sweep.state(e["name"], int(e["seed"])) for e in sweep.manifest.get("runs", [])]
    return sum(1 for st in states if st is not None and (st.state == DONE or st.diverged)), len(states)


def _base(sweep, out: Path) -> tuple[Path, str]:
    """The folder the section's paths of ``sweep`` are relative to, and its name for the reader: the recipe's root
    (its ``root`` key: for this repository's recipes, the checkout; the folder ``fedcli sweep RECIPE`` is typed in)
    when the sweep folder lies inside it, else the section's own folder ``out``. Never an absolute path in a section:
    it would print the user's home folder into a double-blind submission."""
    from fedcli.recipes import recipe_root
    from fedcli.results.sweepdir import recipe_of

    recipe = recipe_of(sweep.manifest, sweep.root)
    if recipe is not None:
        try:
            text = recipe.read_text()
            root = recipe_root(recipe, tomllib.loads(text), text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ConfigError):
            root = None
        if root is not None and Path(sweep.root).resolve().is_relative_to(root.resolve()):
            return root.resolve(), "the recipe's root folder"
    return Path(out).resolve(), "this section's folder"


def relative(path: str | Path, base: Path) -> str:
    """``path`` relative to ``base`` (``..`` where it lies outside), in the section's POSIX form."""
    return Path(os.path.relpath(Path(path).resolve(), base)).as_posix()


def section_command(sweep, base: Path) -> str:
    """``fedcli sweep RECIPE --scale S --seeds N [--out DIR]``, typed in ``base`` (:func:`_base`): the recipe and the
    sweep folder relative to it, and ``--out`` only where the folder is not the one ``fedcli sweep`` picks by default
    (``results/<recipe name>-<scale>``)."""
    import shlex

    from fedcli.results.sweepdir import default_out, recipe_of

    m = sweep.manifest
    found = recipe_of(m, sweep.root)
    recipe = relative(found, base) if found is not None else Path(str(m.get("recipe", "RECIPE"))).name
    seeds = [int(s) for s in m.get("seeds") or [0]]
    folder = relative(sweep.root, base)
    tuned = m.get("tuned") if isinstance(m.get("tuned"), dict) else None
    default_folder = default_out(found, sweep.scale) if found is not None else None
    if tuned and default_folder is not None:  # fedcli sweep --tuned's own default folder
        default_folder = default_folder.with_name(default_folder.name + "-tuned")
    default = default_folder is not None and folder == default_folder.as_posix()
    return " ".join(
        [
            "fedcli sweep",
            shlex.quote(recipe),
            *([f"--scale {shlex.quote(str(sweep.scale))}"] if sweep.scale else []),
            f"--seeds {len(seeds) if seeds == list(range(len(seeds))) else ','.join(map(str, seeds))}",
            *([f"--tuned {shlex.quote(relative(tuned['dir'], base))}"] if tuned and tuned.get("dir") else []),
            *([] if default else [f"--out {shlex.quote(folder)}"]),
        ]
    )


def _space(bounds) -> str:
    """A search range of ``tune.json`` in words: ``log [0.01, 1]``, ``{5, 10, 20}``."""
    if isinstance(bounds, dict):
        if "choices" in bounds:
            return (
                "{"
                + ", ".join(
                    f"{c:g}" if isinstance(c, (int, float)) and not isinstance(c, bool) else str(c)
                    for c in bounds["choices"]
                )
                + "}"
            )
        for kind in ("log", "float", "int"):
            if isinstance(bounds.get(kind), list) and len(bounds[kind]) == 2:
                lo, hi = bounds[kind]
                step = f" step {bounds['step']:g}" if isinstance(bounds.get("step"), (int, float)) else ""
                return f"{'log ' if kind == 'log' else ''}[{lo:g}, {hi:g}]{step}"
    return str(bounds)


def tuned_paragraph(sweep, out: Path) -> str | None:
    """ "Hyper-parameter selection" (issue 58): for a sweep run with ``fedcli sweep --tuned DIR``, how each row's values
    were chosen: the study folder, the spaces, sampler, pruner, trials, the split selected on, the confirmation seeds
    and the chosen values, from the ``tuned`` record ``sweep.json`` keeps (fedcli/tune/confirm.py). None otherwise."""
    tuned = sweep.manifest.get("tuned")
    if not isinstance(tuned, dict) or not isinstance(tuned.get("rows"), dict):
        return None
    base, _ = _base(sweep, out)
    objs = " and ".join(
        f"{o.get('metric')} ({o.get('reduce')}, {o.get('direction')})" for o in tuned.get("objectives") or []
    )
    rows = tuned["rows"]
    splits = sorted({f"{100 * float(r['val_fraction']):g}%" for r in rows.values() if r.get("val_fraction")})
    if tuned.get("select_on") == "test":
        split = "the test set (optimistic: the reported test accuracy is not held out from the selection)"
    else:
        split = (
            f"a validation split held out of the training pool ({', '.join(splits)} of it, stratified, never "
            f"trained on)"
            if splits
            else "a validation split held out of the training pool"
        )
    trials = sorted({int(r.get("trials") or 0) for r in rows.values()})
    seeds = tuned.get("confirm_seeds") or []
    text = (
        f"Hyper-parameter selection. Each row's hyper-parameters were tuned by `fedcli tune` (study folder "
        f"`{relative(tuned.get('dir', ''), base)}`): one study per row, {'/'.join(map(str, trials))} trials each, "
        f"sampler {tuned.get('sampler')}, pruner {tuned.get('pruner')}, seed {tuned.get('seed')}, objective {objs} "
        f"on {split}. The best configurations of each study were re-run over seeds "
        f"{', '.join(map(str, seeds)) or 'n/a'}, "
        f"and each row uses the one with the best mean objective. "
    )
    parts = []
    for name, r in rows.items():
        space = "; ".join(f"{k} in {_space(v)}" for k, v in (r.get("space") or {}).items())
        chosen = ", ".join(
            f"{k} = {v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k} = {v}"
            for k, v in (r.get("params") or {}).items()
        )
        mean = r.get("confirmed_mean")
        parts.append(
            f"{name}: {space or 'no space'}; chosen {chosen or 'the recipe own values'} (trial {r.get('trial')}"
            + (f", mean {mean:.4g} over {r.get('confirmed_seeds')} seed(s)" if isinstance(mean, (int, float)) else "")
            + ")"
        )
    return text + "Spaces and chosen values: " + "; ".join(parts) + "."


def _paragraph(sweep, out: Path) -> tuple[str, str]:
    """What was run: the recipe, its paper and scale, seeds, how many trainings finished, fidelity notes, the command,
    the versions (Markdown, code between backticks); every path relative (:func:`_base`), the paragraph says to what."""
    m = sweep.manifest
    scale = sweep.scale or "base"
    base, said = _base(sweep, out)
    command = section_command(sweep, base)
    done, total = _finished(sweep)
    count = f"{total} training(s)" if done == total else f"{done} of its {total} training(s) finished"
    if sweep.retimed():  # runs of the recipe's `retime` lists: read from a training's records, not trained
        count += (
            f" and {len(sweep.retimed())} run(s) re-timed from their records under other system options (not "
            f'trained; docs/system-model.md, "Re-timing a run")'
        )
    text = (
        f"{m.get('title', '')} ({m.get('paper', '')}). Recipe `{command.split()[2]}` at scale {scale}"
        + (
            " (a reduced setting that checks the pipeline, not the paper's numbers)"
            if sweep.scale not in (None, "paper")
            else ""
        )
        + f", seeds {', '.join(map(str, sweep.seeds))}; {count} in `{relative(sweep.root, base)}` (paths relative to "
        f"{said}). "
    )
    if m.get("fidelity"):
        text += f"Fidelity: {m['fidelity']}. "
    text += f"Versions: {_versions(sweep)}."
    return text, command


def heading(sweep, mine: list | None = None) -> str:
    """A sweep's subsection heading: its paper (or title), then which sweep it is, ``(smoke scale, seeds 0, 1)``, and
    its folder's name where another of the section's sweeps ``mine`` would read the same: two sweeps of one recipe (a
    smoke and a paper sweep) never share a heading."""

    def plain(s) -> str:
        head = str(s.manifest.get("paper") or s.manifest.get("title") or s.root.name)
        return (
            f"{head} ({s.scale or 'base'} scale, seed{'s' if len(s.seeds) != 1 else ''} {', '.join(map(str, s.seeds))}"
        )

    head = plain(sweep)
    twin = any(other is not sweep and plain(other) == head for other in mine or [])
    return head + (f", folder {sweep.root.name})" if twin else ")")


def labels_apart(mine: list) -> dict:
    """``{(sweep folder, product name): label}`` for the section's tables and figures: the product's name, and where two
    sweeps have a product of one name (a smoke and a paper sweep of one recipe), the sweep folder's name after it
    (``aaai-table3-aaai-table3-smoke``), so that no ``\\label`` is defined twice."""
    names = [(s.root, p.name) for s in mine for p in (*s.tables(), *s.figures())]
    taken: set[str] = set()
    out = {}
    for root, name in names:
        label = name if sum(n == name for _, n in names) == 1 else f"{name}-{root.name}"
        base, k = label, 2
        while label in taken:
            label, k = f"{base}-{k}", k + 1
        taken.add(label)
        out[root, name] = re.sub(r"[^A-Za-z0-9.:-]+", "-", label)
    return out


#: the width (inches) a figure is drawn for: one panel a paper's column (AAAI's 3.3 in), several both columns (7 in)
COLUMN_IN, TEXT_IN = 3.3, 7.0


def pdf_size(pdf: Path) -> tuple[float, float] | None:
    """(width, height) in inches of a PDF's first page (its ``/MediaBox``, as matplotlib writes it); None if not
    found."""
    m = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", pdf.read_bytes())
    if not m:
        return None
    x0, y0, x1, y1 = (float(v) for v in m.groups())
    return (x1 - x0) / 72, (y1 - y0) / 72


def _figure(sweep, figure_def, out_dir: Path, rel: str, x, label: str) -> Part:
    """One figure, drawn for the width it prints at (:func:`fedcli.reports.style.printed`): one panel a single-column
    ``figure``, several panels a ``figure*``; included at most at that size (text near the caption's), smaller only
    where the line is narrower."""
    from fedcli.reports import style
    from fedcli.reports.core import make_figures
    from fedcli.reports.tables import latex_text

    wide = len(figure_def.panels) > 1
    with style.printed(TEXT_IN if wide else COLUMN_IN):
        files = make_figures([sweep], out_dir, [figure_def.name], x=x)
    pdf = next(f for f in files if f.suffix == ".pdf")
    txt = next((f for f in files if f.suffix == ".txt"), None)
    caption = figure_def.name
    if txt:  # read back from the folder it was written to, never through a link planted there since
        from fedcli.safefs import open_dir

        with open_dir(txt.parent) as folder:
            caption = folder.read_text(txt.name).strip()
    env = "figure*" if wide else "figure"
    size = pdf_size(pdf)
    if size:  # keepaspectratio: the largest size within both, so never above the drawn size (its text at 8 pt)
        include = [
            f"% drawn {size[0]:.2f} x {size[1]:.2f} in, text at 8 pt: included at that size, or smaller to "
            f"fit the line",
            f"\\includegraphics[width=\\linewidth,height={size[1]:.2f}in,keepaspectratio]{{{rel}/{pdf.name}}}",
        ]
    else:
        include = [f"\\includegraphics[width=\\linewidth]{{{rel}/{pdf.name}}}"]
    latex = "\n".join(
        [
            f"\\begin{{{env}}}[t]",
            "\\centering",
            *include,
            f"\\caption{{{latex_text(caption)}}}",
            f"\\label{{fig:{label}}}",
            f"\\end{{{env}}}",
            "",
        ]
    )
    md = f"![{figure_def.name}]({rel}/{pdf.stem}.png)\n\n*{caption}*\n"
    return Part(latex, md)


def _table(sweep, table_def, label: str) -> Part:
    import dataclasses

    from fedcli.reports.core import sweep_table
    from fedcli.reports.tables import render

    _, table = sweep_table([sweep], table_def.name)  # built once, written in both formats
    return Part(render(dataclasses.replace(table, name=label), "latex"), render(table, "md"))


def _product(sweep, product, out: Path, x, label: str | None = None) -> Part:
    """A table or figure of ``sweep``, or (its runs missing, incomplete or damaged) the runs it lacks; ``label``: its
    LaTeX label after ``tab:`` / ``fig:`` (:func:`labels_apart`; default its name)."""
    from fedcli.reports.products import TableDef

    _, problems = sweep.status(product.run_names())
    if problems:
        return Part(lacks=problems)
    if isinstance(product, TableDef):
        return _table(sweep, product, label or product.name)
    rel = f"figures/{sweep.root.name}"
    return _figure(sweep, product, out / rel, rel, x, label or product.name)


def _lacking(products: list, parts: list[Part]) -> list[str]:
    """ "Missing here" items, one per set of lacking runs: "table 'T', figure 'F': 'FedLAMA' seed 1 (missing)" (each
    product named once, the runs once for the products that lack the same ones)."""
    from fedcli.reports.products import TableDef

    groups: dict[tuple, list[str]] = {}
    for product, piece in zip(products, parts):
        if piece.lacks:
            kind = "table" if isinstance(product, TableDef) else "figure"
            groups.setdefault(tuple(piece.lacks), []).append(f"{kind} '{product.name}'")
    return [f"{', '.join(names)}: {', '.join(lacks)}" for lacks, names in groups.items()]


def paper_sweeps(sweeps: list, name: str) -> list:
    """The sweeps of paper ``name`` (by the ``paper`` their recipe states), in the order the section shows them."""
    _, prefix = paper_of(name)
    mine = [s for s in sweeps if str(s.manifest.get("paper", "")).startswith(prefix)]
    return sorted(mine, key=lambda s: (str(s.manifest.get("recipe", "")), str(s.root)))


def _itemize(items: list[str]) -> tuple[list[str], list[str]]:
    """``items`` (code between backticks) as a LaTeX itemize (set ragged right by the caller: commands in typewriter
    type are not stretched to the column) and a Markdown list."""
    from fedcli.reports.tables import latex_text

    return (
        ["\\begin{itemize}", *(f"\\item {latex_text(i)}" for i in items), "\\end{itemize}"],
        [*(f"- {i}" for i in items), ""],
    )


def _unrun_recipes(ran: set[str], prefix: str) -> list[str]:
    """The shipped recipes of the paper (``prefix``) that no sweep here ran, each with the command that runs it."""
    unrun = []
    if RECIPES.is_dir():
        for r in sorted(RECIPES.glob("*/*.toml")):
            if r.name not in ran and recipe_paper(r).startswith(prefix):
                unrun.append(f"{recipe_paper(r)}: `fedcli sweep recipes/{r.parent.name}/{r.name} --scale smoke`")
    return unrun


def _sweep_part(s, mine: list, out: Path, x: str | None, labels: dict) -> tuple[list[str], list[str], list[str]]:
    """(LaTeX lines, Markdown lines, gaps) of one sweep's subsection: its paragraph and command, the tuned selection,
    the products it could not make and those it made."""
    from fedcli.reports.tables import latex_escape, latex_text

    text, command = _paragraph(s, out)
    head = heading(s, mine)
    said = f"Command: `{command}`."  # ragged: a long command in typewriter type, not stretched to the column
    tex = [
        f"\\subsection{{{latex_escape(head)}}}",
        latex_text(text),
        "",
        f"{{\\raggedright {latex_text(said)}\\par}}",
        "",
    ]
    md = [f"## {head}", "", f"{text} {said}", ""]
    gaps = []
    selection = tuned_paragraph(s, out)
    if selection:
        tex += [latex_text(selection), ""]
        md += [selection, ""]
    products = [*s.tables(), *s.figures()]
    parts = [_product(s, product, out, x, labels[s.root, product.name]) for product in products]
    lacking = _lacking(products, parts)
    if lacking:
        intro = "Missing here (not produced: runs they need are missing, incomplete or damaged):"
        t, m = _itemize(lacking)
        rerun = f"(Re-)run them with `{command}`."  # _paragraph's: the same section_command
        tex += ["{\\raggedright", f"\\noindent {latex_escape(intro)}", *t, f"{latex_text(rerun)}\\par}}", ""]
        md += [intro, "", *m, rerun, ""]
        gaps += [f"{s.root}: {g}" for g in lacking]
    for p in parts:
        if p.latex:
            tex.append(p.latex)
            md.append(p.md)
    return tex, md, gaps


def _unrun_part(unrun: list[str], gaps: list[str]) -> tuple[list[str], list[str]]:
    """(LaTeX lines, Markdown lines) of the closing list of the paper's recipes no sweep here ran."""
    from fedcli.reports.tables import latex_text

    intro = (
        "The paper's recipes that no sweep here ran, each with the command that runs it (`--scale paper` for "
        "the paper's setting)"
        + ("; the products of the sweeps above that could not be made are named under their sweep" if gaps else "")
        + ":"
    )
    t, m = _itemize(unrun)
    tex = ["{\\raggedright", "\\paragraph{Not in this section.}", latex_text(intro), *t, "\\par}", ""]
    return tex, ["## Not in this section", "", intro, "", *m]


def build_section(sweeps: list, name: str, out: Path, x: str | None = None) -> tuple[str, str, list[str]]:
    """(LaTeX, Markdown, missing) of paper ``name`` from ``sweeps``; figures go to ``out``/figures/<sweep folder>/.
    ``missing``: each product not produced ("ROOT: table 'T': runs") and each recipe of the paper no sweep ran."""
    from fedcli.reports.tables import latex_escape

    title, prefix = paper_of(name)
    mine = [s.settled() for s in paper_sweeps(sweeps, name)]  # each run's state read once for the whole section
    unrun = _unrun_recipes({Path(str(s.manifest.get("recipe", ""))).name for s in mine}, prefix)
    tex = [
        "% fedcli report --paper " + name + ": needs \\usepackage{booktabs} and \\usepackage{graphicx} in the preamble",
        f"\\section{{Experiments: {latex_escape(title)}}}",
        "",
    ]
    md = [f"# Experiments: {title}", ""]
    if not mine:
        tex.append(f"No sweep of {latex_escape(title)} in this folder.\n")
        md.append(f"No sweep of {title} in this folder.\n")
    gaps = []
    labels = labels_apart(mine)
    for s in mine:
        t, m, g = _sweep_part(s, mine, out, x, labels)
        tex, md, gaps = tex + t, md + m, gaps + g
    if unrun:
        t, m = _unrun_part(unrun, gaps)
        tex, md = tex + t, md + m
    return "\n".join(tex) + "\n", "\n".join(md) + "\n", gaps + unrun


# ------------------------------------------------------------------------------------------------ writing safely

SECTION_FILES = ("section.tex", "section.md")
#: the line that records the checksum of what fedcli wrote into section.tex / section.md
STAMP = "fedcli-checksum"
_STAMP_LINE = re.compile(rf"^(?:% |<!-- ){STAMP} ([0-9a-f]{{16}})\b.*\n?", re.M)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stamp(text: str, latex: bool) -> str:
    """``text`` with a line recording its checksum (after the LaTeX's first line; first in the Markdown, a comment
    that does not render), so that a later run can tell an edited file from its own (:func:`unedited`)."""
    words = (
        f"{STAMP} {_digest(text)}: written by fedcli report --paper, which replaces this file only while it is "
        f"unedited (else --overwrite)"
    )
    if latex:
        first, _, rest = text.partition("\n")
        return f"{first}\n% {words}\n{rest}"
    return f"<!-- {words} -->\n{text}"


def unedited(path: Path) -> bool:
    """Whether ``path`` holds exactly what :func:`stamp` wrote (its checksum line, the rest unchanged); a file without
    that line (written by hand, or by a fedcli before checksums) is not."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    m = _STAMP_LINE.search(text)
    return bool(m) and _digest(text[: m.start()] + text[m.end() :]) == m.group(1)


def planned(mine: list, out: Path) -> list[Path]:
    """Every path the section of sweeps ``mine`` writes under ``out`` (``out`` itself, the user's choice, excepted):
    section.tex, section.md and, where a sweep has figures, ``figures/``, ``figures/<sweep folder>/`` and each figure's
    PNG, PDF and caption."""
    paths = [out / f for f in SECTION_FILES]
    with_figures = [s for s in mine if s.figures()]
    if with_figures:
        paths.append(out / "figures")
    for s in with_figures:
        folder = out / "figures" / s.root.name
        paths += [folder, *(folder / f"{f.name}.{ext}" for f in s.figures() for ext in ("png", "pdf", "txt"))]
    return paths


def check_targets(paths: list[Path], overwrite: bool = False) -> None:
    """Before anything is written: no path in ``paths`` is a link (:class:`fedcli.safefs.LinkRefused`, exit 2), and
    section.tex / section.md, where they exist, are as fedcli wrote them (or ``overwrite``), else exit 2 naming them."""
    from fedcli.safefs import refuse_link

    for p in paths:
        refuse_link(p)
    edited = [p for p in paths if p.name in SECTION_FILES and p.exists() and not unedited(p)]
    if edited and not overwrite:
        raise ConfigError(
            f"{' and '.join(map(str, edited))} changed since fedcli report --paper wrote "
            f"{'them' if len(edited) > 1 else 'it'} (edited by hand, or not written by it) and "
            f"{'are' if len(edited) > 1 else 'is'} kept: pass --overwrite to replace "
            f"{'them' if len(edited) > 1 else 'it'} (the edits are lost), or --output another folder"
        )


def write_section(sweeps: list, name: str, out: Path, x: str | None = None, overwrite: bool = False) -> list[Path]:
    """Write ``out``/section.tex, ``out``/section.md and the figures under ``out``/figures/; returns the two texts'
    paths.
    Every path is checked first (:func:`check_targets`): a link, or an edited section without ``overwrite``, refuses
    before anything is written."""
    from fedcli.safefs import open_dir

    check_targets(planned(paper_sweeps(sweeps, name), out), overwrite)
    tex, md, _ = build_section(sweeps, name, out, x)
    with open_dir(out) as folder:  # by a descriptor: a link planted while the figures were drawn changes nothing
        folder.atomic_write("section.tex", stamp(tex, latex=True))
        folder.atomic_write("section.md", stamp(md, latex=False))
    return [out / f for f in SECTION_FILES]
