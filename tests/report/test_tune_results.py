"""Reading a study folder of ``fedcli tune`` back (fedcli/tune/results.py, issue 58 section 3): the reductions, the
rank correlation, the importances and the edge rule on numbers worked out by hand; the run directories winning over
trials.csv; the ``trials`` frame of ``fedcli.load``; with two objectives, the Pareto set against the brute-force
non-dominated set of the completed trials' values read from their run directories. The folders are built from real
``fedcli train`` runs in the contract's layout (tests/tunekit.py)."""

import csv
import itertools
import json

import pytest

import fedcli
from fedcli.reports.paired import signed_ranks as ranks
from fedcli.tune.results import (
    Objective,
    Study,
    Trial,
    dominates,
    importances,
    on_edge,
    pareto_set,
    ranked,
    read_study,
    reduce_rows,
    spearman,
)
from tunekit import TWO, build_study, read_trials_csv, write_trials_csv

ROWS = [
    {"iteration": "2", "val_acc": "0.1", "comm_bytes": "100"},
    {"iteration": "4", "val_acc": "0.3", "comm_bytes": "200"},
    {"iteration": "6", "val_acc": "0.2", "comm_bytes": "300"},
    {"iteration": "8", "val_acc": "0.4", "comm_bytes": "400"},
]


@pytest.mark.parametrize(
    "reduce, direction, want",
    [
        ("final", "maximize", 0.4),
        ("last3", "maximize", (0.3 + 0.2 + 0.4) / 3),
        ("last10", "maximize", 1.0 / 4),
        ("best", "maximize", 0.4),
        ("best", "minimize", 0.1),
        ("to_target(0.25)", "minimize", 4.0),
        ("to_target(0.5)", "minimize", None),
    ],
)
def test_reductions_by_hand(reduce, direction, want):
    got = reduce_rows(ROWS, Objective("val_acc", reduce, direction))
    assert got == pytest.approx(want) if want is not None else got is None


def test_to_target_of_a_cost_is_its_value_when_the_accuracy_first_reaches_the_target_and_empty_cells_are_left_out():
    """The bytes spent to reach 25% validation accuracy: val_acc first reaches 0.25 at iteration 4 (0.3), where
    comm_bytes is 200; 50% is never reached (None). An empty or nan val_acc cell is skipped."""
    assert reduce_rows(ROWS, Objective("comm_bytes", "to_target(0.25)", "minimize")) == 200.0
    assert reduce_rows(ROWS, Objective("comm_bytes", "to_target(0.5)", "minimize")) is None
    rows = [*ROWS, {"iteration": "10", "val_acc": ""}, {"iteration": "12", "val_acc": "nan"}]
    assert reduce_rows(rows, Objective("val_acc", "final", "maximize")) == 0.4
    assert reduce_rows([], Objective("val_acc", "final", "maximize")) is None


def test_spearman_by_hand():
    """ranks of [1, 2, 3, 4] and [1, 3, 2, 4]: d = 0, 1, 1, 0; rho = 1 - 6 * 2 / (4 * 15) = 0.8. Ties share their mean
    rank; a constant side or fewer than three pairs gives None."""
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert ranks([5, 1, 5, 2]) == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2], [1, 2]) is None


def _trial(number, params, value):
    return Trial("s", number, "COMPLETE", params, [value], f"s/trial-{number:04d}", None, "completed")


def test_importances_by_hand():
    """Objective 1, 3, 1, 3 (mean 2, total sum of squares 4). tau (choices) groups {1, 1} and {3, 3}: between-group
    sum of squares 2*1 + 2*1 = 4, eta^2 = 1. lr (a range: by value, ranks 0..3 in three bins of equal count, rank * 3 //
    4 = 0, 0, 1, 2) groups {1, 3}, {1}, {3}: between 2*0 + 1*1 + 1*1 = 2, eta^2 = 0.5."""
    s = Study("s", {"tau": {"choices": [1, 2]}, "lr": {"log": [0.01, 1.0]}}, [], None, None, 8, {}, 4)
    s.trials = [
        _trial(0, {"tau": 1, "lr": 0.1}, 1.0),
        _trial(1, {"tau": 2, "lr": 0.2}, 3.0),
        _trial(2, {"tau": 1, "lr": 0.3}, 1.0),
        _trial(3, {"tau": 2, "lr": 0.4}, 3.0),
    ]
    assert importances(s, 0) == pytest.approx({"tau": 1.0, "lr": 0.5})


def test_edge_rule_by_hand():
    """log [0.01, 1]: 0.9 sits at (ln 0.9 - ln 0.01) / (ln 1 - ln 0.01) = 0.977 of it (top), 0.1 at 0.5 (inside),
    0.011 at 0.021 (bottom); linear [0, 10]: 9.5 at 0.95 (top); choices {5, 10, 20}: 20 is the largest."""
    assert on_edge(0.9, {"log": [0.01, 1.0]}) == "top"
    assert on_edge(0.1, {"log": [0.01, 1.0]}) is None
    assert on_edge(0.011, {"log": [0.01, 1.0]}) == "bottom"
    assert on_edge(9.5, {"float": [0, 10]}) == "top"
    assert on_edge(20, {"choices": [5, 10, 20]}) == "top"
    assert on_edge(10, {"choices": [5, 10, 20]}) is None
    assert on_edge(2, {"choices": [1, 2]}) is None  # two choices: no inside to move into


def test_dominates_by_hand():
    objs = [Objective(**o) for o in TWO]  # val_acc up, comm_bytes down
    assert dominates([0.5, 10], [0.4, 10], objs)
    assert not dominates([0.5, 10], [0.5, 10], objs)
    assert not dominates([0.5, 20], [0.4, 10], objs)


def _by_hand(rows, k=2):
    vals = [float(r["val_acc"]) for r in rows][-k:]
    return sum(vals) / len(vals)


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune") / "study"
    return build_study(
        root,
        {
            "fedavg": [
                {"params": {"lr": 0.1}},
                {"params": {"lr": 0.5}},
                {"params": {"lr": 0.02}, "prune_at": 4},
                {"params": {"lr": 0.9}},
                {"params": {"lr": 1000.0}, "diverges": True},
            ]
        },
        grid_size=6,
    )


def test_values_are_recomputed_from_metrics_and_the_run_directory_wins(one, tmp_path):
    import shutil

    root = tmp_path / "study"
    shutil.copytree(one, root)
    lines = read_trials_csv(root)
    lines[1]["state"] = "RUNNING"  # the coordinator's index lags: the run completed meanwhile
    lines[3]["value"] = "0.999"  # and a value that is not its metrics'
    write_trials_csv(root, lines[:3] + lines[3:])
    write_trials_csv(root, [l for l in lines if l["number"] != "0"])  # trial 0 not indexed yet
    folder = read_study(root)
    by = {t.number: t for t in folder.trials}
    assert [by[n].state for n in range(5)] == ["COMPLETE", "COMPLETE", "PRUNED", "COMPLETE", "COMPLETE"]
    # trial 4 diverged at its first evaluation (iteration 2): COMPLETE, shown as diverged, never ranked
    assert by[4].run_status == "diverged" and not by[4].usable and by[4].iterations == 2
    assert 4 not in [t.number for t in ranked(folder.trials, folder.objectives[0])]
    for n in (0, 1, 3):
        rows = list(csv.DictReader(open(root / f"fedavg/trial-{n:04d}/metrics.csv")))
        assert by[n].values[0] == pytest.approx(_by_hand(rows))
        assert by[n].iterations == 8
    assert by[2].iterations == 4 and by[2].pruned["iteration"] == 4 and by[2].run_status == "pruned"
    assert by[0].baseline and not by[1].baseline
    assert by[1].params == {"lr": 0.5}
    notes = " | ".join(folder.notes)
    assert "trial 1 of study 'fedavg': trials.csv says RUNNING, its run directory says completed" in notes
    assert "trial 3 of study 'fedavg': trials.csv gives value 0.999" in notes
    assert "trial 0 of study 'fedavg': not in trials.csv" in notes


def test_trials_frame_typed_and_named_as_optuna(one):
    t = fedcli.load(one).trials
    assert list(t.columns[:5]) == ["number", "state", "params_lr", "value", "run"]
    assert list(t.columns[5:7]) == ["pareto", "study"]
    assert str(t["number"].dtype) == "Int64" and str(t["value"].dtype) == "float64"
    assert str(t["pareto"].dtype) == "boolean" and t["pareto"].isna().all()  # one objective: no Pareto set
    assert list(t["state"]) == ["COMPLETE", "COMPLETE", "PRUNED", "COMPLETE", "COMPLETE"]
    assert list(t["run_status"]) == ["completed", "completed", "pruned", "completed", "diverged"]
    assert list(t["run"]) == [f"fedavg/trial-{n:04d}" for n in range(5)]
    assert t["value"].isna().tolist() == [False, False, False, False, True]  # diverged: no value
    runs = fedcli.load(one)
    assert set(t["run"]) <= set(runs.runs["run"])  # joins the runs frame on the run's name
    assert t.loc[2, "pruned_iteration"] == 4 and int(t["iterations"].sum()) == 8 + 8 + 4 + 8 + 2
    for n in (0, 1, 3):
        rows = list(csv.DictReader(open(one / f"fedavg/trial-{n:04d}/metrics.csv")))
        assert t.loc[n, "value"] == pytest.approx(_by_hand(rows))


def test_trials_frame_of_a_plain_run_is_empty_and_typed(one):
    t = fedcli.load(one / "fedavg" / "trial-0000").trials
    assert len(t) == 0 and list(t.columns[:3]) == ["number", "state", "value"] and str(t["number"].dtype) == "Int64"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune2") / "study"
    grid = [{"lr": lr, "tau": tau} for lr, tau in ((0.1, 2), (0.5, 1), (0.5, 4), (0.9, 2), (0.05, 4), (0.3, 1))]
    return build_study(
        root,
        {"lama": [{"params": p} for p in grid[:5]] + [{"params": grid[5], "prune_at": 4}]},
        objectives=TWO,
        space={"lr": {"log": [0.01, 1.0]}, "tau": {"choices": [1, 2, 4]}},
        rungs=[],
    )


def test_pareto_set_is_the_brute_force_non_dominated_set(two):
    """The completed trials' (final val_acc, final comm_bytes) read from their run directories with the csv module;
    a trial is non-dominated when no other is at least as good in both and better in one."""
    pts = {}
    for d in sorted((two / "lama").glob("trial-*")):
        m = json.loads((d / "manifest.json").read_text())
        if m["status"] != "completed":
            continue
        last = list(csv.DictReader(open(d / "metrics.csv")))[-1]
        pts[m["tune"]["number"]] = (float(last["val_acc"]), float(last["comm_bytes"]))
    assert len(pts) == 5
    brute = {
        n
        for n, (a, b) in pts.items()
        if not any((a2 >= a and b2 <= b) and (a2 > a or b2 < b) for m2, (a2, b2) in pts.items() if m2 != n)
    }
    folder = read_study(two)
    got = {t.number for t in pareto_set(folder.trials, folder.objectives)}
    assert got == brute and brute
    assert len({b for _, b in pts.values()}) == 3  # three taus: three communication costs, a real trade-off
    t = fedcli.load(two).trials
    assert list(t.columns[:6]) == ["number", "state", "params_lr", "params_tau", "values_0", "values_1"]
    assert set(t.loc[t["pareto"].fillna(False).astype(bool), "number"]) == brute
    assert not t.loc[t["state"] == "PRUNED", "pareto"].any()
    for a, b in itertools.permutations(sorted(brute), 2):
        assert not dominates(list(pts[a]), list(pts[b]), folder.objectives)
