"""What a table's LaTeX and notes say (issue 57, small items): text columns set left, numbers right; the notes name
which evaluation each accuracy column shows (the stragglers table said "accuracy: best evaluation" above its Final and
Best columns); captions start upper-case and write powers of ten as math."""

from __future__ import annotations

import json
import re

from fedcli.reports.products import parse_table
from fedcli.reports.rundata import RunData
from fedcli.reports.tables import build_table, latex_escape, render
from simkit import write_csv

METRICS = ["round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes"]


def run(path, accs):
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "seed": 0,
                "method": {"name": "fedavg", "label": "FedAvg", "style": ["#4D4D4D", "o"]},
                "config": {
                    "algo": "fedavg",
                    "seed": 0,
                    "tau": 5,
                    "dataset": "digits",
                    "model": "mlp",
                    "out": str(path),
                },
            }
        )
    )
    write_csv(
        path / "metrics.csv",
        METRICS,
        [
            {
                "round": i,
                "iteration": 5 * i,
                "train_loss": 1,
                "test_loss": 1,
                "test_acc": a,
                "comm_params": i,
                "comm_bytes": i,
            }
            for i, a in enumerate(accs, 1)
        ],
    )
    return {0: RunData(path)}


def stragglers_like(tmp_path):
    runs = {
        "FedAvg drop 50%": run(tmp_path / "a", (0.5, 0.6, 0.55)),
        "FedNova partial 50%": run(tmp_path / "n", (0.6, 0.7, 0.7)),
    }
    t = parse_table(
        {
            "name": "stragglers",
            "title": "smoke scale of: final and best accuracy",
            "columns": ["name", "final_acc", "best_acc"],
            "runs": list(runs),
        },
        lambda k: k,
    )
    return build_table(t, runs, [0])


def test_text_columns_are_left_aligned_and_numbers_right(tmp_path):
    tex = render(stragglers_like(tmp_path), "latex")
    assert "\\begin{tabular}{lrr}" in tex, tex  # Run (text) left, Final and Best acc. right; was {rrr}


def test_notes_name_the_evaluation_of_each_accuracy_column(tmp_path):
    table = stragglers_like(tmp_path)
    notes = " ".join(table.notes)
    assert "last evaluation of each run in Final acc., best evaluation of each run in Best acc." in notes
    assert "accuracy: best evaluation of each run (" not in notes  # never one word above two columns that differ
    cap = re.search(r"\\caption\{(.*)\}", render(table, "latex")).group(1)
    assert cap.startswith("Smoke scale of: final and best accuracy.")


def test_powers_of_ten_are_math_and_code_keeps_its_characters():
    assert latex_escape("1 MB = 10^6 bytes") == "1 MB = 10$^{6}$ bytes"
    assert latex_escape("x^2 and 2^-3") == "x\\textasciicircum{}2 and 2$^{-3}$"  # only a number's power
