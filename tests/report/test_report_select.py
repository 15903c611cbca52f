"""``select = "best"`` in a rows or target table (Fed-LAMB, Section 5: lambda tuned over {0, 0.01, 0.1}, the best one
reported): one row per set of runs differing only in the grid key, picked by hand-worked numbers."""

from __future__ import annotations

import csv
import json

import pytest

from fedcli.errors import ConfigError
from fedcli.reports.products import parse_table, product_from_dict, product_to_dict
from fedcli.reports.rundata import RunData
from fedcli.reports.tables import build_table, grid_sets, render

METRICS = ["round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes", "personal_acc"]


def loc(key):
    return f"[[tables]] {key}"


def run(path, *, algo, wd, seed, accs, lr=0.01):
    """A run directory: ``accs`` the test accuracy after rounds 1, 2, ..."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = {
        "algo": algo,
        "lr": lr,
        "weight_decay": wd,
        "seed": seed,
        "out": str(path),
        "dataset": "mnist",
        "clients": 10,
    }
    manifest = {
        "status": "completed",
        "config": cfg,
        "method": {"name": algo},
        "seed": seed,
        "summary": {"comm_params": 100 * len(accs), "comm_bytes": 800.0 * len(accs)},
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    with open(path / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, METRICS)
        w.writeheader()
        for i, a in enumerate(accs, 1):
            w.writerow(
                {
                    "round": i,
                    "iteration": 10 * i,
                    "train_loss": 1,
                    "test_loss": 1,
                    "test_acc": a,
                    "comm_params": 100 * i,
                    "comm_bytes": 1e6 * i,
                    "personal_acc": "",
                }
            )
    return RunData(path)


# Fed-LAMB lambda 0 / 0.01 / 0.1 and Fed-AMS lambda 0 / 0.01, two seeds each (test_acc per round):
#   LAMB 0:    seed 0 (.80, .90, .88)  seed 1 (.82, .86, .86)   best .90/.86 -> 88.0   last .88/.86 -> 87.0
#   LAMB 0.01: seed 0 (.85, .91, .90)  seed 1 (.83, .89, .89)   best .91/.89 -> 90.0   last .90/.89 -> 89.5
#   LAMB 0.1:  seed 0 (.70, .95, .80)  seed 1 (.75, .87, .80)   best .95/.87 -> 91.0   last .80/.80 -> 80.0
#   AMS 0:     seed 0 (.90, .91, .91)  seed 1 (.70, .90, .92)   best .91/.92 -> 91.5   last .91/.92 -> 91.5
#   AMS 0.01:  seed 0 (.60, .95, .93)  seed 1 (.91, .92, .88)   best .95/.92 -> 93.5   last .93/.88 -> 90.5
# best accuracy: LAMB picks 0.1 (91.0), AMS 0.01 (93.5); last accuracy: LAMB 0.01 (89.5), AMS 0 (91.5)
# rounds to 90%: LAMB 0: seed 0 round 2, seed 1 never (1/2); 0.01: 2, never (1/2); 0.1: 2, never (1/2) -> tie: the first
# (0)
#                AMS 0: 1, 2 (2/2, mean 1.5); 0.01: 2, 1 (2/2, mean 1.5) -> tie: the first (0)
ACCS = {
    ("fedlamb", 0.0): [(0.80, 0.90, 0.88), (0.82, 0.86, 0.86)],
    ("fedlamb", 0.01): [(0.85, 0.91, 0.90), (0.83, 0.89, 0.89)],
    ("fedlamb", 0.1): [(0.70, 0.95, 0.80), (0.75, 0.87, 0.80)],
    ("fedams", 0.0): [(0.90, 0.91, 0.91), (0.70, 0.90, 0.92)],
    ("fedams", 0.01): [(0.60, 0.95, 0.93), (0.91, 0.92, 0.88)],
}
NAMES = {
    ("fedlamb", 0.0): "LAMB",
    ("fedlamb", 0.01): "LAMB l0.01",
    ("fedlamb", 0.1): "LAMB l0.1",
    ("fedams", 0.0): "AMS",
    ("fedams", 0.01): "AMS l0.01",
}


@pytest.fixture
def runs(tmp_path):
    return {
        NAMES[k]: {s: run(tmp_path / f"{NAMES[k]}-{s}", algo=k[0], wd=k[1], seed=s, accs=a) for s, a in enumerate(v)}
        for k, v in ACCS.items()
    }


def table(**kw):
    d = {
        "name": "t",
        "columns": ["method", "weight_decay", "acc"],
        "runs": list(NAMES.values()),
        "select": "best",
        "select_by": "weight_decay",
    } | kw
    return parse_table(d, loc)


def rows(t, runs):
    md = render(build_table(t, runs, [0, 1]), "md")
    return [[c.strip() for c in l.strip("|").split("|")] for l in md.splitlines() if l.startswith("| ")][1:], md


def test_grid_sets_group_by_everything_but_the_grid_key_seed_and_folder(runs):
    names = list(NAMES.values())
    assert grid_sets(names, runs, ["weight_decay"]) == [["LAMB", "LAMB l0.01", "LAMB l0.1"], ["AMS", "AMS l0.01"]]
    assert grid_sets(names, runs, ["lr"]) == [[n] for n in names]  # weight_decay then separates them all


def test_best_accuracy_picks_per_method(runs):
    got, md = rows(table(), runs)
    assert got == [["Fed-LAMB", "0.1", "91.00 ± 5.66%"], ["Fed-AMS", "0.01", "93.50 ± 2.12%"]]
    assert (
        "picked 'LAMB l0.1' (weight_decay 0.1) of 'LAMB', 'LAMB l0.01', 'LAMB l0.1'; 'AMS l0.01' (weight_decay 0.01) "
        "of 'AMS', 'AMS l0.01'."
    ) in md
    assert "the highest mean best accuracy over the seeds" in md
    recs = list(csv.DictReader(render(build_table(table(), runs, [0, 1]), "csv").splitlines()))
    assert [(r["run"], r["picked_from"]) for r in recs] == [
        ("LAMB l0.1", "LAMB; LAMB l0.01; LAMB l0.1"),
        ("AMS l0.01", "AMS; AMS l0.01"),
    ]


def test_final_accuracy_picks_otherwise(runs):
    got, _ = rows(table(accuracy="final"), runs)  # select_on acc = the table's accuracy, here the last
    assert got == [["Fed-LAMB", "0.01", "89.50 ± 0.71%"], ["Fed-AMS", "0", "91.50 ± 0.71%"]]
    got, _ = rows(table(select_on="final_acc"), runs)  # shown: best accuracy, picked by the last one
    assert got == [["Fed-LAMB", "0.01", "90.00 ± 1.41%"], ["Fed-AMS", "0", "91.50 ± 0.71%"]]


def test_rounds_to_target_picks_most_seeds_then_fewest_rounds_first_on_a_tie(runs):
    t = table(layout="target", target=0.9, columns=["method", "weight_decay"])
    assert t.select_on == "rounds"
    got, _ = rows(t, runs)
    assert [r[:3] + r[4:] for r in got] == [
        ["Fed-LAMB", "0", "2 (1/2)", "2.00"],
        ["Fed-AMS", "0", "1.5 ± 0.7", "1.50 ± 0.71"],
    ]


def test_select_all_is_every_row_and_the_table_def_round_trips(runs):
    got, md = rows(
        parse_table({"name": "t", "columns": ["method", "weight_decay", "acc"], "runs": list(NAMES.values())}, loc),
        runs,
    )
    assert [r[1] for r in got] == ["0", "0.01", "0.1", "0", "0.01"] and "Best over" not in md
    t = table()
    assert product_from_dict(product_to_dict(t)) == t
    old = product_to_dict(t)
    for k in ("select", "select_by", "select_on"):  # a sweep.json written before the option: every row
        old.pop(k)
    assert product_from_dict(old).select == "all"


def test_select_errors():
    with pytest.raises(ConfigError, match="needs `select_by`"):
        parse_table({"name": "t", "columns": ["method", "acc"], "runs": ["a"], "select": "best"}, loc)
    with pytest.raises(ConfigError, match="add 'weight_decay' to the `columns`"):
        parse_table(
            {"name": "t", "columns": ["method", "acc"], "runs": ["a"], "select": "best", "select_by": "weight_decay"},
            loc,
        )
    with pytest.raises(ConfigError, match='is for select = "best"'):
        parse_table({"name": "t", "columns": ["method", "acc"], "runs": ["a"], "select_by": "lr"}, loc)
    with pytest.raises(ConfigError, match='for layout = "target"'):
        parse_table(
            {
                "name": "t",
                "columns": ["lr", "acc"],
                "runs": ["a"],
                "select": "best",
                "select_by": "lr",
                "select_on": "rounds",
            },
            loc,
        )
    with pytest.raises(ConfigError, match="select must be one of all, best"):
        parse_table({"name": "t", "runs": ["a"], "select": "top"}, loc)
    with pytest.raises(ConfigError, match='for layout = "rows" or "target"'):
        parse_table({"name": "t", "layout": "paired", "rows": [["a", "b"]], "select": "best", "select_by": "lr"}, loc)
