"""``fedcli report DIR --paper NAME`` (issue 39): one paper's experiment section from a real, finished sweep.

The recipe below is a two-run sweep on digits stating a FedLAMA AAAI paper; the section must hold its table (booktabs,
``table*`` when wide), its figure (the PDF included), a paragraph naming the setting, the command and the versions,
and name what is missing (the paper's recipes of this repository that no sweep here ran). No LaTeX is installed on
the test machines: the LaTeX is checked for its structure (environments balanced, booktabs rules) here."""

import json
import re
import shutil
import subprocess

import pytest

from fedcli.cli.main import main
from fedcli.report.paper import PAPERS, RECIPES
from simkit import cli
from sweepkit import RECIPE as SWEEP_RECIPE

# the sweep tests' two-run recipe on digits, stating a FedLAMA AAAI paper, with a figure of both runs
RECIPE = SWEEP_RECIPE.replace('title = "tiny"', 'title = "Digits: FedAvg against FedLAMA (test recipe)"').replace(
    'paper = "a test"', 'paper = "FedLAMA AAAI 2023, Table 3 (a test\'s digits stand-in)"') + """
[[figures]]
name = "t3-curves"
kind = "curves"
x = "params"
title = "Accuracy against communicated parameters"
runs = ["FedAvg x1", "FedLAMA phi=2"]
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    (root / "t3.toml").write_text(RECIPE)
    assert main(["sweep", str(root / "t3.toml"), "--scale", "smoke", "--seeds", "1", "--out", str(root / "results" / "t3"), "--quiet"]) in (0, None)
    return root / "results"


def test_paper_section_from_a_finished_sweep(results, capsys):
    code, _, err = cli(["report", str(results), "--paper", "fedlama-aaai"], capsys)
    assert code == 0, err
    out = results / "paper-fedlama-aaai"
    tex, md = (out / "section.tex").read_text(), (out / "section.md").read_text()
    assert "\\usepackage{booktabs}" in tex.splitlines()[0]
    assert tex.count("\\begin{table") == tex.count("\\end{table") == 1 and "\\toprule" in tex and "\\bottomrule" in tex
    for env in ("table", "table*", "figure*", "tabular"):
        assert tex.count(f"\\begin{{{env}}}") == tex.count(f"\\end{{{env}}}"), env
    # the figure: its PDF included, written where the section says
    (inc,) = re.findall(r"\\includegraphics\[width=\\textwidth\]\{([^}]*)\}", tex)
    assert inc == "figures/t3/t3-curves.pdf" and (out / inc).is_file() and (out / "figures/t3/t3-curves.png").is_file()
    # the paragraph: what was run, the command, the versions
    m = json.loads(next((results / "t3").glob("*/*/manifest.json")).read_text())
    assert "Digits: FedAvg against FedLAMA (test recipe)" in md and "seeds 0" in md
    assert f"Command: `fedcli sweep {results.parent / 't3.toml'} --scale smoke --seeds 1 --out {results / 't3'}`" in md
    assert "at scale smoke (a reduced setting that checks the pipeline, not the paper's numbers)" in md
    assert f"fedcli {m['versions']['fedcli']}" in md
    assert "\\texttt{fedcli sweep" in tex
    # the table in Markdown as fedcli report --table prints it (the paired layout: FedAvg's columns, then FedLAMA's)
    assert "| LR | τ' | φ | Validation acc. | C ratio |" in md and "smoke scale of: t; ran digits/mlp." in tex
    # what is missing: this repository's FedLAMA AAAI recipes, each with the command to run it
    if RECIPES.is_dir():
        assert "recipes/fedlama/aaai-table3.toml" in md and "fedcli sweep recipes/fedlama/aaai-table3.toml --scale smoke" in md
        assert "Not in this section" in md
    assert "paper section ->" in err


def test_paper_section_compiles_where_latex_is_installed(results, tmp_path, capsys):
    latex = shutil.which("pdflatex")
    if latex is None:
        pytest.skip("no pdflatex here: the section's structure is checked by test_paper_section_from_a_finished_sweep")
    out = tmp_path / "sec"
    assert cli(["report", str(results), "--paper", "fedlama-aaai", "--output", str(out)], capsys)[0] == 0
    (out / "main.tex").write_text("\\documentclass[twocolumn]{article}\\usepackage{booktabs}\\usepackage{graphicx}"
                                  "\\begin{document}\\input{section}\\end{document}\n")
    run = subprocess.run([latex, "-interaction=nonstopmode", "-halt-on-error", "main.tex"], cwd=out, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]


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
