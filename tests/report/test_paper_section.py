"""``fedcli report DIR --paper NAME`` (issue 39): one paper's experiment section from a real, finished sweep.

The recipe below is a two-run sweep on digits stating a FedLAMA AAAI paper; the section must hold its table (booktabs,
``table*`` when wide), its figures (the PDFs included, a one-panel figure in one column, a two-panel one across both),
a paragraph naming the setting, the command and the versions, and name what is missing (the paper's recipes of this
repository that no sweep here ran). Where pdflatex is installed the section is compiled, with and without
``\\usepackage[T1]{fontenc}``; elsewhere the LaTeX is checked for its structure (environments balanced, booktabs rules).

Issue 47.2 and 48.3/4/6/7: nothing is written through a link (real links to real outside files, compared byte for
byte), an edited section is never replaced without ``--overwrite``, the text is true when a run is missing, and the
LaTeX is ready to paste (no Markdown backticks, ``--`` printed as two hyphens)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.reports.paper import COLUMN_IN, PAPERS, RECIPES, TEXT_IN, pdf_size
from simkit import cli
from sweepkit import RECIPE as SWEEP_RECIPE

# the sweep tests' two-run recipe on digits, stating a FedLAMA AAAI paper, with a figure of both runs
RECIPE = (
    SWEEP_RECIPE.replace('title = "tiny"', 'title = "Digits: FedAvg against FedLAMA (test recipe)"').replace(
        'paper = "a test"', 'paper = "FedLAMA AAAI 2023, Table 3 (a test\'s digits stand-in)"'
    )
    + """
[[figures]]
name = "t3-curves"
kind = "curves"
x = "params"
title = "Accuracy against communicated parameters"
runs = ["FedAvg x1", "FedLAMA phi=2"]

[[figures]]
name = "t3-panels"
kind = "curves"
title = "One panel per method"
panels = [{ title = "FedAvg", runs = ["FedAvg x1"] }, { title = "FedLAMA", runs = ["FedLAMA phi=2"] }]
"""
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    (root / "t3.toml").write_text(RECIPE)
    assert main(
        [
            "sweep",
            str(root / "t3.toml"),
            "--scale",
            "smoke",
            "--seeds",
            "1",
            "--out",
            str(root / "results" / "t3"),
            "--quiet",
            "--in-process",  # the report is the point, not the trainings' processes
        ]
    ) in (0, None)
    return root / "results"


@pytest.fixture(scope="module")
def section(results):
    """``fedcli report RESULTS --paper fedlama-aaai`` (into RESULTS/paper-fedlama-aaai), drawn once for the tests that
    read it: (exit code, stderr, the runs whose state it read, the tables it built)."""
    import contextlib
    import io

    import fedcli.reports.core as core
    import fedcli.reports.tables as tables

    reads, builds, err = [], [], io.StringIO()
    real_state, real_build = core.run_state, tables.build_table
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setattr(
            core, "run_state", lambda run_dir, *a, **k: reads.append(Path(run_dir).name) or real_state(run_dir, *a, **k)
        )
        mp.setattr(tables, "build_table", lambda *a, **k: builds.append(1) or real_build(*a, **k))
        try:
            code = main(["report", str(results), "--paper", "fedlama-aaai"]) or 0
        except SystemExit as e:
            code = e.code
    return code, err.getvalue(), reads, builds


def test_paper_section_from_a_finished_sweep(results, section):
    code, err, _, _ = section
    assert code == 0, err
    out = results / "paper-fedlama-aaai"
    tex, md = (out / "section.tex").read_text(), (out / "section.md").read_text()
    assert "\\usepackage{booktabs}" in tex.splitlines()[0]
    assert tex.count("\\begin{table") == tex.count("\\end{table") == 1 and "\\toprule" in tex and "\\bottomrule" in tex
    for env in ("table", "table*", "figure", "figure*", "tabular", "itemize"):
        assert tex.count(f"\\begin{{{env}}}") == tex.count(f"\\end{{{env}}}"), env
    # the figures: their PDFs included, written where the section says, each sized for its panels (48.7): one panel
    # drawn a column wide in a `figure`, two panels drawn both columns wide in a `figure*`, never enlarged
    figs = re.findall(
        r"\\begin\{(figure\*?)\}\[t\]\n\\centering\n%[^\n]*\n"
        r"\\includegraphics\[width=\\linewidth,height=([\d.]+)in,keepaspectratio\]\{([^}]*)\}",
        tex,
    )
    assert [(env, inc) for env, _, inc in figs] == [
        ("figure", "figures/t3/t3-curves.pdf"),
        ("figure*", "figures/t3/t3-panels.pdf"),
    ]
    for (env, height, inc), width in zip(figs, (COLUMN_IN, TEXT_IN)):
        assert (out / inc).is_file() and (out / inc).with_suffix(".png").is_file()
        w, h = pdf_size(out / inc)
        assert abs(w - width) < 0.1 and float(height) == pytest.approx(h, abs=0.01), (inc, w, h, height)
    # the paragraph: what was run, the command, the versions
    m = json.loads(next((results / "t3").glob("*/*/manifest.json")).read_text())
    assert "Digits: FedAvg against FedLAMA (test recipe)" in md and "seeds 0" in md
    # paths relative to the recipe's root (here the recipe's folder), never absolute (issue 57: a home folder in a
    # double-blind submission); --out where the folder is not the default one (results/t3-smoke)
    assert "Command: `fedcli sweep t3.toml --scale smoke --seeds 1 --out results/t3`" in md
    assert "in `results/t3` (paths relative to the recipe's root folder)" in md
    assert str(results.parent) not in tex and str(results.parent) not in md
    assert "## FedLAMA AAAI 2023, Table 3 (a test's digits stand-in) (smoke scale, seed 0)" in md
    assert "at scale smoke (a reduced setting that checks the pipeline, not the paper's numbers)" in md
    assert f"fedcli {m['versions']['fedcli']}" in md
    assert "\\texttt{fedcli sweep" in tex
    # the table in Markdown as fedcli report --table prints it (the paired layout: FedAvg's columns, then FedLAMA's)
    assert (
        "| LR | τ' | φ | Test acc. | C ratio |" in md and "Smoke scale of: t; ran digits/mlp." in tex
    )  # a caption starts upper-case
    # what is missing: this repository's FedLAMA AAAI recipes, each with the command to run it
    if RECIPES.is_dir():
        assert (
            "recipes/fedlama/aaai-table3.toml" in md
            and "fedcli sweep recipes/fedlama/aaai-table3.toml --scale smoke" in md
        )
        assert "Not in this section" in md
    assert "paper section ->" in err


def test_two_sweeps_of_one_recipe_have_their_own_labels_and_headings(results, tmp_path, capsys):
    """A smoke sweep and another of the same recipe (here: two seeds) under one folder (issue 57): each table and
    figure label defined once, each subsection heading saying which sweep it is (scale, seeds)."""
    both = tmp_path / "both"
    shutil.copytree(results / "t3", both / "t3")
    recipe = tmp_path / "t3.toml"
    recipe.write_text(RECIPE)
    assert main(
        [
            "sweep",
            str(recipe),
            "--scale",
            "smoke",
            "--seeds",
            "2",
            "--out",
            str(both / "t3-two"),
            "--quiet",
            "--in-process",
        ]
    ) in (0, None)
    code, _, err = cli(["report", str(both), "--paper", "fedlama-aaai"], capsys)
    assert code == 0, err
    tex = (both / "paper-fedlama-aaai" / "section.tex").read_text()
    labels = re.findall(r"\\label\{([^}]*)\}", tex)
    assert len(labels) == 6 and len(set(labels)) == 6, labels  # a table and two figures per sweep
    heads = re.findall(r"\\subsection\{([^\n]*)\}", tex)
    assert len(heads) == 2 and heads[0] != heads[1], heads
    assert any("seeds 0, 1)" in h for h in heads) and any("seed 0)" in h for h in heads)


def test_long_paths_in_typewriter_type_may_break():
    from fedcli.reports.tables import latex_text

    tex = latex_text("Command: `fedcli sweep recipes/fedlama/aaai-table3.toml --out results/a`.")
    assert (
        "\\texttt{fedcli sweep recipes/\\allowbreak{}fedlama/\\allowbreak{}aaai-table3.toml -{}-out "
        "results/\\allowbreak{}a}" in tex
    )


@pytest.mark.parametrize("fontenc", ["", "\\usepackage[T1]{fontenc}"], ids=["OT1", "T1"])
def test_paper_section_compiles_where_latex_is_installed(results, tmp_path, capsys, fontenc):
    latex = shutil.which("pdflatex")
    if latex is None:
        pytest.skip("no pdflatex here: the section's structure is checked by test_paper_section_from_a_finished_sweep")
    out = tmp_path / "sec"
    assert cli(["report", str(results), "--paper", "fedlama-aaai", "--output", str(out)], capsys)[0] == 0
    (out / "main.tex").write_text(
        f"\\documentclass[twocolumn]{{article}}\\usepackage{{booktabs}}\\usepackage{{graphicx}}{fontenc}"
        "\\begin{document}\\input{section}\\end{document}\n"
    )
    run = subprocess.run(
        [latex, "-interaction=nonstopmode", "-halt-on-error", "main.tex"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:]
    if shutil.which("pdftotext"):  # the commands print as typed: two hyphens (T1 made "--scale" "-scale"), no backticks
        text = subprocess.run(
            ["pdftotext", "main.pdf", "-"], cwd=out, capture_output=True, text=True, timeout=60
        ).stdout
        assert "--scale smoke" in text and "--seeds 1" in text and not re.search("[`\u2018](fedcli|recipes)", text)


def test_latex_text_is_paste_ready():
    from fedcli.reports.tables import latex_escape, latex_text

    # two ASCII hyphens stay two hyphens (not an en dash, nor one hyphen under T1); en and em dashes stay dashes
    assert latex_escape("--scale smoke -x a-b") == "-{}-scale smoke -x a-b" and latex_escape("---") == "-{}-{}-"
    assert latex_escape("a – b — c") == "a -- b --- c"
    # code between backticks is typewriter type, escaped; an opening quote is LaTeX's; an unpaired backtick a character
    assert latex_text("run `fedcli sweep a_b.toml --seeds 2`, then 'FedAvg x1' it's") == (
        "run \\texttt{fedcli sweep a\\_b.toml -{}-seeds 2}, then `FedAvg x1' it's"
    )
    assert latex_text("a ` b") == "a \\textasciigrave{} b"


def _tree(root: Path) -> dict:
    """Every path under ``root`` (links not followed): a link's target, a file's bytes, a folder's None."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            found[str(p.relative_to(root))] = (
                os.readlink(p) if p.is_symlink() else None if p.is_dir() else p.read_bytes()
            )
    return found


@pytest.mark.parametrize(
    "link",
    ["figures", "figures/t3", "figures/t3/t3-curves.pdf", "figures/t3/t3-panels.txt", "section.md", "section.tex"],
)
def test_no_write_through_a_link(results, tmp_path, capsys, link):
    """Issue 47.2: every path `--paper` writes (its figures folder, the sweep's folder in it, each figure file, the two
    texts) is checked before any is written: a link anywhere is refused (exit 2, naming it), and nothing changes,
    neither outside (the link's target, byte for byte) nor in the output folder."""
    outside = tmp_path / "outside"
    (outside / "t3").mkdir(parents=True)
    for f in (
        "t3/t3-curves.pdf",
        "t3/t3-curves.png",
        "t3/t3-panels.txt",
        "t3-curves.pdf",
        "t3-panels.txt",
        "section.md",
        "section.tex",
    ):
        (outside / f).write_bytes(f"outside {f}: not fedcli's\n".encode())
    out = tmp_path / "sec"
    target = {"figures": outside, "figures/t3": outside / "t3"}.get(link, outside / Path(link).name)
    (out / link).parent.mkdir(parents=True, exist_ok=True)
    (out / link).symlink_to(target)
    before_out, before_outside = _tree(out), _tree(outside)
    code, _, err = cli(["report", str(results), "--paper", "fedlama-aaai", "--output", str(out)], capsys)
    assert code == 2 and f"{out / link} is a symbolic link" in err and err.count("\n") == 1, err
    assert _tree(outside) == before_outside and _tree(out) == before_out


def test_hand_edits_are_never_lost(results, section, tmp_path, capsys):
    """Issue 48.3: section.tex and section.md carry the checksum of what fedcli wrote; an edited one (or one fedcli did
    not write) is kept and the command refuses, exit 2, before writing anything; --overwrite replaces it."""
    assert section[0] == 0, section[1]
    out = tmp_path / "sec"
    shutil.copytree(results / "paper-fedlama-aaai", out)  # the section as fedcli wrote it (the same in any folder)
    args = ["report", str(results), "--paper", "fedlama-aaai", "--output", str(out)]
    assert cli(args, capsys)[0] == 0  # unedited: written again
    tex = out / "section.tex"
    first = tex.read_text()
    assert "% fedcli-checksum " in first.splitlines()[1] and first.startswith("% fedcli report --paper")
    edited = first.replace("\\subsection{", "Our own sentence, added by hand.\n\n\\subsection{", 1)
    tex.write_text(edited)
    figure = out / "figures/t3/t3-curves.pdf"
    stamp = figure.stat().st_mtime_ns
    code, _, err = cli(args, capsys)
    assert code == 2 and str(tex) in err and "--overwrite" in err and err.count("\n") == 1, err
    assert tex.read_text() == edited and figure.stat().st_mtime_ns == stamp  # refused before anything was written
    # an edit to the Markdown, and a section.tex written by hand (no checksum), are kept alike
    md = out / "section.md"
    md.write_text(md.read_text() + "\nA note of ours.\n")
    code, _, err = cli(args, capsys)
    assert code == 2 and str(tex) in err and str(md) in err
    code, _, err = cli(args + ["--overwrite"], capsys)
    assert code == 0, err
    assert tex.read_text() == first and "A note of ours." not in md.read_text()
    tex.write_text("\\section{Mine}\n")
    assert cli(args, capsys)[0] == 2 and tex.read_text() == "\\section{Mine}\n"
    code, _, err = cli(["report", str(results), "--overwrite"], capsys)
    assert code == 2 and "--paper only" in err


def test_section_text_when_a_run_is_missing(results, tmp_path, capsys):
    """Issue 48.4/48.6: with a run gone the paragraph counts what is there, each product that cannot be made is named
    once (with the runs it lacks, once), only under its sweep, and the LaTeX has no Markdown left in it."""
    copy = tmp_path / "results"
    shutil.copytree(results, copy, ignore=shutil.ignore_patterns("paper-*"))
    m = json.loads((copy / "t3" / "sweep.json").read_text())
    gone = next(e for e in m["runs"] if e["name"] == "FedLAMA phi=2")
    shutil.rmtree(copy / "t3" / gone["dir"])
    out = tmp_path / "sec"
    code, _, err = cli(["report", str(copy), "--paper", "fedlama-aaai", "--output", str(out)], capsys)
    assert code == 0, err
    tex, md = (out / "section.tex").read_text(), (out / "section.md").read_text()
    assert "1 of its 2 training(s) finished" in md and "2 training(s) in" not in md
    (item,) = [l for l in md.splitlines() if "'FedLAMA phi=2' seed 0" in l]
    assert item == "- table 't', figure 't3-curves', figure 't3-panels': 'FedLAMA phi=2' seed 0 (missing)"
    for name in ("table 't'", "'t3-curves'", "'t3-panels'", "'FedLAMA phi=2' seed 0"):
        assert md.count(name) == 1 and tex.count(name.replace("'", "`", 1)) == 1, name
    if RECIPES.is_dir():  # the paper's recipes no sweep ran, and nothing else, under "Not in this section"
        rest = md.split("## Not in this section", 1)[1]
        assert "t3-curves" not in rest and "recipes/fedlama/aaai-table3.toml" in rest
    body = [l for l in tex.splitlines() if not l.startswith("%")]
    assert not any("`" in l.replace("`FedLAMA", "").replace("`t", "") for l in body)  # only LaTeX's opening quotes
    assert not [l for l in body if re.search(r"(?<![-{}])--[a-z]", l)]  # every CLI flag written -{}-
    assert "\\texttt{fedcli sweep" in tex and "-{}-scale smoke" in tex


def test_unknown_paper_and_no_sweep(results, tmp_path, capsys):
    code, _, err = cli(["report", str(results), "--paper", "fedlama-neurips"], capsys)
    assert code == 2 and all(p in err for p in PAPERS)
    (tmp_path / "empty").mkdir()
    code, _, err = cli(["report", str(tmp_path / "empty"), "--paper", "fedala-aaai"], capsys)
    assert code == 2 and "no sweep" in err
    # a paper none of whose sweeps is here: a section that says so, and names the recipes to run
    code, _, err = cli(["report", str(results), "--paper", "fedala-aaai", "--output", str(tmp_path / "ala")], capsys)
    assert code == 0, err
    assert "No sweep of FedALA (AAAI 2023) in this folder." in (tmp_path / "ala" / "section.md").read_text()


def test_a_one_column_figure_keeps_its_text_and_data_room(tmp_path):
    """Issue 48.7: inside ``printed`` a figure is saved at the column's width, legends included, its text at 8 pt; a
    legend that would sit right of the axes (bars) goes above them, the panel's title above it."""
    from fedcli.reports import style

    with style.printed(COLUMN_IN):
        fig, ax = style.plt().subplots(figsize=(6.4, 3.9))
        ax.bar([0, 1, 2], [80, 40, 80], width=0.4, label="FedAvg (τ=2)")
        ax.bar([0.4, 1.4, 2.4], [80, 80, 80], width=0.4, label="FedLAMA (τ′=2, φ=2)")
        ax.set_xticks([0, 1, 2], ["hidden.0.weight", "hidden.0.bias", "out.weight"], rotation=60)
        style.legend_right(ax)
        ax.set_title("a)")
        style.save(fig, tmp_path, "bars", "a caption")
    w, _ = pdf_size(tmp_path / "bars.pdf")
    assert abs(w - COLUMN_IN) < 0.05, w
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # saved and closed: laid out again as saved, to read where things are
    r = fig.canvas.get_renderer()
    axes, legend, title = ax.get_window_extent(r), ax.get_legend().get_window_extent(r), ax.title.get_window_extent(r)
    assert legend.y0 >= axes.y1 and title.y0 >= legend.y1 - 1 and axes.width > 0.6 * fig.bbox.width
    assert {t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()} == {8.0}


def test_the_section_checks_each_run_once(results, section):
    """The section's paragraph (trainings finished), its table (LaTeX and Markdown) and its two figures all read the
    same runs: each run's state (manifest, config, files: ``run_state``) is read once for the whole section, and the
    table is built once for both formats. Before: 16 reads of this sweep's 2 runs (8 each: the paragraph, the
    table's check and its two builds, each figure's check and its drawing) and two builds of the table."""
    code, err, reads, builds = section  # counted while the section was written
    assert code == 0, err
    sweep = json.loads((results / "t3" / "sweep.json").read_text())
    assert sorted(reads) == sorted(Path(e["dir"]).name for e in sweep["runs"])  # each run once
    assert len(builds) == len(sweep["tables"])


def test_paper_from_python_returns_the_captions_too(results, tmp_path, capsys):
    """``fedcli.report(..., paper=...)`` returned each figure's PNG and PDF but not the caption ``NAME.txt`` it wrote
    beside them, which docs/reports.md lists among the files it drew (issue 56, 16)."""
    import fedcli

    out = tmp_path / "section"
    table, figures = fedcli.report(results, paper="fedlama-aaai", output=out)
    assert table is None and all(f.is_file() for f in figures)
    drawn = sorted(p for p in (out / "figures").rglob("*") if p.is_file())
    assert sorted(figures) == drawn and {f.suffix for f in figures} == {".png", ".pdf", ".txt"}
    for png in (f for f in figures if f.suffix == ".png"):
        assert png.with_suffix(".txt") in figures and png.with_suffix(".pdf") in figures
