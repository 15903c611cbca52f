"""``fedcli report DIR --paper NAME``: every table and figure of one paper's recipes that the sweeps under DIR can
produce, assembled into one LaTeX section (booktabs tables, ``table*`` where wide, the figures' PDFs included) and the
same in Markdown, each product introduced by a paragraph naming the setting, the command that ran it, the versions
and what is missing.

A sweep belongs to a paper by the ``paper`` its recipe states (recorded in ``sweep.json``): :data:`PAPERS` maps each
paper's name to the start of that string (:data:`fedcli.papers.PAPERS`). The paper's recipes in this repository's ``recipes/`` that have no sweep
under DIR are named as missing, with the command that would run them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.papers import PAPERS
from fedcli.results.sweepdir import recipe_shown, rerun_command

#: this repository's recipes (the paper's recipes that no sweep under DIR ran are listed from here)
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def paper_of(name: str) -> tuple[str, str]:
    if name not in PAPERS:
        raise ConfigError(f"--paper {name}: not a paper fedcli has recipes for; choose one of {', '.join(PAPERS)}")
    return PAPERS[name]


def recipe_paper(path: Path) -> str:
    """The ``paper`` a recipe file states at its top level ("" if none or unreadable)."""
    try:
        return str(tomllib.loads(path.read_text()).get("paper", ""))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return ""


@dataclass
class Part:
    """One product of the section: its LaTeX and Markdown, or why it is missing."""

    latex: str = ""
    md: str = ""
    missing: list[str] = field(default_factory=list)


def _versions(sweep) -> str:
    """fedcli, torch and python of the sweep's first run that recorded them (its manifest ``versions``)."""
    from fedcli.report.rundata import read_manifest

    for e in sweep.manifest.get("runs", []):
        _, m = read_manifest(sweep.root / e["dir"])
        v = (m or {}).get("versions") if isinstance(m, dict) else None
        if v:
            return ", ".join(f"{k} {val}" for k, val in v.items() if isinstance(val, (str, int, float)))
    return "not recorded"


def _paragraph(sweep) -> tuple[str, str]:
    """What was run: the recipe, its paper and scale, seeds, fidelity notes, the command, the versions."""
    m = sweep.manifest
    scale = sweep.scale or "base"
    recipe = recipe_shown(m, sweep.root)  # the command's own form of the path (absolute: it works from any folder)
    text = (f"{m.get('title', '')} ({m.get('paper', '')}). Recipe {recipe} at scale {scale}"
            + (" (a reduced setting that checks the pipeline, not the paper's numbers)" if sweep.scale not in (None, "paper") else "")
            + f", seeds {', '.join(map(str, sweep.seeds))}; {len(m.get('runs', []))} training(s) in {sweep.root}. ")
    if m.get("fidelity"):
        text += f"Fidelity: {m['fidelity']}. "
    command = rerun_command(m, sweep.root)
    text += f"Versions: {_versions(sweep)}."
    return text, command


def _figure(sweep, spec, out_dir: Path, rel: str, x) -> Part:
    from fedcli.report.core import MissingRuns, make_figures
    from fedcli.report.tables import latex_escape

    try:
        files = make_figures([sweep], out_dir, [spec.name], x=x)
    except MissingRuns as e:
        return Part(missing=[f"figure '{spec.name}': {e}"])
    pdf = next(f for f in files if f.suffix == ".pdf")
    txt = next((f for f in files if f.suffix == ".txt"), None)
    caption = txt.read_text().strip() if txt else spec.name
    latex = "\n".join(["\\begin{figure*}[t]", "\\centering", f"\\includegraphics[width=\\textwidth]{{{rel}/{pdf.name}}}",
                       f"\\caption{{{latex_escape(caption)}}}", f"\\label{{fig:{spec.name}}}", "\\end{figure*}", ""])
    md = f"![{spec.name}]({rel}/{pdf.stem}.png)\n\n*{caption}*\n"
    return Part(latex, md)


def _table(sweep, spec) -> Part:
    from fedcli.report.core import MissingRuns, make_table

    try:
        return Part(make_table([sweep], spec.name, "latex"), make_table([sweep], spec.name, "md"))
    except MissingRuns as e:
        return Part(missing=[f"table '{spec.name}': {e}"])


def build_section(sweeps: list, name: str, out: Path, x: str | None = None) -> tuple[str, str, list[str]]:
    """(LaTeX, Markdown, missing) of paper ``name`` from ``sweeps``; figures go to ``out``/figures/<sweep folder>/."""
    from fedcli.report.tables import latex_escape

    title, prefix = paper_of(name)
    mine = [s for s in sweeps if str(s.manifest.get("paper", "")).startswith(prefix)]
    ran = {Path(str(s.manifest.get("recipe", ""))).name for s in mine}
    missing = []
    if RECIPES.is_dir():
        for r in sorted(RECIPES.glob("*/*.toml")):
            if r.name not in ran and recipe_paper(r).startswith(prefix):
                missing.append(f"recipe recipes/{r.parent.name}/{r.name} ({recipe_paper(r)}): no sweep here; run "
                               f"`fedcli sweep recipes/{r.parent.name}/{r.name} --scale smoke` (or the paper's scale)")
    tex = ["% fedcli report --paper " + name + ": needs \\usepackage{booktabs} and \\usepackage{graphicx} in the preamble",
           f"\\section{{Experiments: {latex_escape(title)}}}", ""]
    md = [f"# Experiments: {title}", ""]
    if not mine:
        tex.append(f"No sweep of {latex_escape(title)} in this folder.\n")
        md.append(f"No sweep of {title} in this folder.\n")
    for s in sorted(mine, key=lambda s: (str(s.manifest.get("recipe", "")), str(s.root))):
        text, command = _paragraph(s)
        head = str(s.manifest.get("paper") or s.manifest.get("title") or s.root.name)
        tex += [f"\\subsection{{{latex_escape(head)}}}", f"{latex_escape(text)} Command: \\texttt{{{latex_escape(command)}}}.", ""]
        md += [f"## {head}", "", f"{text} Command: `{command}`.", ""]
        parts = [_table(s, t) for t in s.tables()]
        rel = f"figures/{s.root.name}"
        parts += [_figure(s, f, out / rel, rel, x) for f in s.figures()]
        gaps = [g for p in parts for g in p.missing]
        if gaps:
            said = "Missing here (not produced): " + "; ".join(gaps)
            tex += [latex_escape(said), ""]
            md += [said, ""]
            missing += [f"{s.root}: {g}" for g in gaps]
        for p in parts:
            if p.latex:
                tex.append(p.latex)
                md.append(p.md)
    if missing:
        tex += ["\\paragraph{Not in this section.}", latex_escape("; ".join(missing)) + ".", ""]
        md += ["## Not in this section", "", *(f"- {m}" for m in missing), ""]
    return "\n".join(tex) + "\n", "\n".join(md) + "\n", missing


def write_section(sweeps: list, name: str, out: Path, x: str | None = None) -> list[Path]:
    """Write ``out``/section.tex, ``out``/section.md and the figures under ``out``/figures/; returns the two texts' paths."""
    from fedcli.results.rundir import atomic_write
    from fedcli.results.safefs import make_dir

    make_dir(out)
    tex, md, _ = build_section(sweeps, name, out, x)
    atomic_write(out / "section.tex", tex)
    atomic_write(out / "section.md", md)
    return [out / "section.tex", out / "section.md"]
