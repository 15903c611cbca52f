"""``fedcli report --paper system`` (issue 57): the system-model recipes (recipes/system/: the bandwidth sweep of
FedLAMA
vs FedAvg, FedProx's stragglers) get a section like the papers' (it answered "not a paper fedcli has recipes for"),
with relative paths only; and the bandwidth recipe trains each method once and re-times it at four uplinks."""

from __future__ import annotations

import re
from pathlib import Path

from simkit import cli
from sweepkit import SYSTEM_BASE

ROOT = Path(__file__).resolve().parents[2]

RECIPE = (
    """\
title = "stragglers, tiny"
paper = "FedProx (Li et al., MLSys 2020), Section 5.2 and Figure 1, on fedcli's system model (a test)"
seeds = 1

"""
    + SYSTEM_BASE
    + """\
iterations = 8

[base.system]
system = true

[[runs]]
name = "FedAvg"
algo = "fedavg"
tau = 2

[[runs]]
name = "FedProx"
algo = "fedprox"
tau = 2

[[tables]]
name = "acc"
columns = ["name", "final_acc"]
runs = ["FedAvg", "FedProx"]

[[figures]]
name = "curves-time"
kind = "curves"
x = "time"
runs = ["FedAvg", "FedProx"]
"""
)


def test_paper_system_is_a_section_of_the_system_recipes(tmp_path, capsys):
    recipe = tmp_path / "stragglers.toml"
    recipe.write_text(RECIPE)
    results = tmp_path / "results"
    code, _, err = cli(["sweep", str(recipe), "--in-process", "--quiet", "--out", str(results / "stragglers")], capsys)
    assert code == 0, err
    code, _, err = cli(["report", str(results), "--paper", "system"], capsys)
    assert code == 0, err
    tex = (results / "paper-system" / "section.tex").read_text()
    assert "\\section{Experiments: Simulated time on fedcli's system model" in tex
    assert "\\label{tab:acc}" in tex and "\\label{fig:curves-time}" in tex
    assert (
        "{figures/stragglers/curves-time.pdf}" in tex
        and (results / "paper-system/figures/stragglers/curves-time.pdf").is_file()
    )
    # the recipe of the other system sweep, not run here, is named with its command
    assert "recipes/\\allowbreak{}system/\\allowbreak{}bandwidth-fedlama-vs-fedavg.toml" in tex
    assert str(tmp_path) not in tex and not re.search(r"(?<![\w.])/(tmp|home|work|root|Users)/", tex)


def test_the_bandwidth_recipe_trains_two_runs_and_retimes_them_at_four_uplinks():
    from fedcli.recipes import read_sweep
    from fedcli.reports.products import parse_products

    r = read_sweep(ROOT / "recipes/system/bandwidth-fedlama-vs-fedavg.toml", "smoke")
    assert r.run_names == ["FedAvg", "FedLAMA"]
    assert [(v.name, v.of, v.options) for v in r.retimed][:2] == [
        ("FedAvg 30KBps", "FedAvg", {"uplink": "constant:3e4"}),
        ("FedAvg 300KBps", "FedAvg", {"uplink": "constant:3e5"}),
    ]
    assert len(r.retimed) == 8 and {v.options["uplink"] for v in r.retimed} == {
        "constant:3e4",
        "constant:3e5",
        "constant:3e6",
        "constant:3e7",
    }
    tables, figures = parse_products(r)
    assert len(tables[0].run_names()) == 8 and not set(tables[0].run_names()) & set(r.run_names)
    summary = next(f for f in figures if f.kind == "time-to-target")
    assert (
        summary.along == "uplink"
        and summary.target == 0.9
        and [line.title for line in summary.lines] == ["FedAvg", "FedLAMA"]
    )
    curves = next(f for f in figures if f.kind == "curves")
    assert curves.target == 0.9 and curves.sharex
