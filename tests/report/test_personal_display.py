"""Personalized runs are shown by ``personal_acc`` (each client's model on its local test split, the papers' metric)
wherever fedcli shows an accuracy: the sweep's "done" lines and every report layout (rows, paired, target, matrix)
and curve figure; traditional runs keep the global model's ``test_acc``. Matrix tables:
tests/report/test_report_fedala.py."""

import re

import pytest

from fedala_kit import make_sweep, md_rows
from fedcli.cli.main import main
from fedcli.reports.core import find_sweeps, make_table
from fedcli.reports.figures import _curve, y_label
from fedcli.reports.rundata import RunData

# the hand-made sweep of fedala_kit (2 seeds, evaluations at rounds 1-3, iterations 5, 10, 15):
#   "FedAvg | A": test_acc .50 .60 .55 / .52 .58 .57, no personal_acc -> best 59.00 ± 1.41
#   "FedALA | A": test_acc .3 everywhere; personal_acc .70 .90 .80 / .72 .86 .88 -> best 89.00 ± 1.41
#   "FedALA | B": personal_acc .80 .70 .70 / .70 .84 .70 -> best .80 / .84
ROWS = {"name": "rows", "layout": "rows", "columns": ["method", "acc"], "runs": ["FedAvg | A", "FedALA | A"]}
TARGET = {"name": "target", "layout": "target", "target": 0.85, "runs": ["FedALA | A", "FedAvg | A"]}
PAIRED = {"name": "paired", "layout": "paired", "rows": [["FedALA | B", "FedALA | A"]]}


def test_rows_table_shows_personal_acc(tmp_path):
    root = make_sweep(tmp_path / "s", [ROWS, {**ROWS, "name": "forced", "metric": "test_acc"}])
    md = make_table(find_sweeps(root), "rows", "md")
    assert md_rows(md)[1:] == [["FedAvg", "59.00 ± 1.41%"], ["FedALA", "89.00 ± 1.41%"]]  # not FedALA's 30.00
    assert "personal_acc" in md and "test_acc" in md  # the notes say which run shows which
    assert md_rows(make_table(find_sweeps(root), "forced", "md"))[2] == ["FedALA", "30.00 ± 0.00%"]
    only_avg = make_sweep(tmp_path / "t", [{**ROWS, "runs": ["FedAvg | A"]}])
    assert "personal" not in make_table(find_sweeps(only_avg), "rows", "md")  # FedLAMA-style tables read as before


def test_target_table_thresholds_personal_acc(tmp_path):
    # FedALA | A first reaches 85% personal accuracy at round 2 in both seeds (.90, .86); its test_acc (.30) never would
    md = make_table(find_sweeps(make_sweep(tmp_path / "s", [TARGET])), "target", "md")
    rows = md_rows(md)
    assert rows[1][:2] == ["FedALA", "2.0 ± 0.0"] and rows[2][:2] == ["FedAvg", "—"]


def test_paired_early_stop_compares_personal_acc(tmp_path):
    # left FedALA | B: best personal .80 / .84 (82.00 ± 2.83); right FedALA | A reaches them at round 2 (iteration 10)
    # with .90 / .86 -> ES acc 88.00 ± 2.83, 10 steps; right's full training 89.00 ± 1.41 (test_acc would give 30.00)
    rows = md_rows(make_table(find_sweeps(make_sweep(tmp_path / "s", [PAIRED])), "paired", "md"))
    cells = rows[-1]
    assert (
        cells[3] == "82.00 ± 2.83%"
        and cells[8] == "88.00 ± 2.83%"
        and cells[9].startswith("10")
        and cells[11] == "89.00 ± 1.41%"
    )


def test_curves_plot_personal_acc(tmp_path):
    root = make_sweep(tmp_path / "s", [])
    ala = {s: RunData(root / f"fedala-a/seed{s}") for s in (0, 1)}
    avg = {s: RunData(root / f"fedavg-a/seed{s}") for s in (0, 1)}
    assert _curve(ala, "rounds", "auto")[:2] == ([1, 2, 3], pytest.approx([71.0, 88.0, 84.0]))
    assert _curve(avg, "rounds", "auto")[:2] == ([1, 2, 3], pytest.approx([51.0, 59.0, 56.0]))
    assert _curve(ala, "rounds", "test_acc")[1] == pytest.approx([30.0, 30.0, 30.0])
    assert (
        y_label("auto", [ala]).startswith("Personal accuracy")
        and y_label("auto", [avg]) == "Test accuracy (%), global model"
    )
    assert "personal (pFL), else global" in y_label("auto", [ala, avg])


def test_legend_of_a_local_epochs_run_names_its_epochs(tmp_path):
    def legend(cfg):
        return RunData(tmp_path, {"config": cfg, "method": {"name": cfg["algo"]}}).legend()

    assert legend({"algo": "fedala", "tau": 5, "local_epochs": 1.0}) == "FedALA (E=1)"  # tau plays no part there
    assert legend({"algo": "fedavg", "tau": 20, "local_epochs": 0.0}) == "FedAvg (τ=20)"


RECIPE = """\
title = "tiny"
seeds = 1

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "32"
clients = 4
iterations = 8
eval_every = 4
threads = 1

[[runs]]
name = "C"
algo = "fedavg-c"

[[runs]]
name = "G"
algo = "fedavg"
"""


def test_sweep_done_lines_show_personal_acc(tmp_path, capsys):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    root = tmp_path / "sw"
    assert main(["sweep", str(recipe), "--out", str(root), "--in-process"]) == 0
    err = capsys.readouterr().err
    c, g = RunData(root / "c/seed0"), RunData(root / "g/seed0")
    assert c.personalized and c.accuracy("best", "personal_acc") != c.accuracy("best", "test_acc")
    line_c = next(ln for ln in err.splitlines() if "done" in ln and "C seed 0" in ln)
    line_g = next(ln for ln in err.splitlines() if "done" in ln and "G seed 0" in ln)
    assert (
        re.search(r"best personal acc +([\d.]+)%", line_c).group(1) == f"{100 * c.accuracy('best', 'personal_acc'):.2f}"
    )
    assert re.search(r"best acc +([\d.]+)%", line_g).group(1) == f"{100 * g.accuracy('best', 'test_acc'):.2f}"
