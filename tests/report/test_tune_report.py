"""``fedcli report DIR`` on a study folder of ``fedcli tune`` (fedcli/reports/tune.py, issue 58 section 3): trials by
state, the compute spent against the budget and the full grid (numbers worked out by hand), the best configurations
with their run directories and the baseline marked, the Pareto set with two objectives, the validity notes, the
figures. The folders are built from real ``fedcli train`` runs in the contract's layout (tests/tunekit.py)."""

import csv
import json
import shutil

import pytest

from runkit import error_lines
from simkit import cli as run_main
from tunekit import TWO, build_study, report_text
from tunekit import last2 as _last2


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Two studies: 'fedavg' with 5 trials (one pruned at iteration 4; every lr on an edge of [0.1, 0.5] on the log
    scale: 0.1 and 0.105 at the bottom, 0.48 and 0.5 at the top), 'prox' with 2 trials (an unequal budget)."""
    root = tmp_path_factory.mktemp("treport") / "study"
    return build_study(
        root,
        {
            "fedavg": [
                {"params": {"lr": 0.1}},
                {"params": {"lr": 0.5}},
                {"params": {"lr": 0.2}, "prune_at": 4},
                {"params": {"lr": 0.48}},
                {"params": {"lr": 0.105}},
            ],
            "prox": [{"params": {"lr": 0.1}}, {"params": {"lr": 0.5}}],
        },
        space={"lr": {"log": [0.1, 0.5]}},
        grid_size=6,
    )


def test_report_of_a_study(study, capsys):
    code, out, err = run_main(["report", str(study)], capsys)
    assert code == 0, err
    # trials by state; compute: 4 x 8 + 4 = 36 of 5 x 8 = 40 (90.0%), the grid 6 x 8 = 48 (75.0%)
    assert "Trials: 4 COMPLETE, 1 PRUNED (5 of 5 planned)." in out
    assert (
        "Compute: 36 local iterations spent of a budget of 40 (5 trials x 8 local iterations, 90.0%); the "
        "full grid of 6 "
        "configurations would take 48 (75.0% of it spent)."
    ) in out
    assert "Compute: 16 local iterations spent of a budget of 16 (2 trials x 8 local iterations, 100.0%)" in out
    # the best first, by the mean of the last two val_acc read here from each run's metrics.csv
    done = {n: _last2(study / f"fedavg/trial-{n:04d}") for n in (0, 1, 3, 4)}
    order = sorted(done, key=lambda n: (-done[n], n))
    table = out.split("## Study 'fedavg'")[1].split("## Study 'prox'")[0]
    lines = [l for l in table.splitlines() if l.startswith("| ") and not l.startswith("| rank")]
    assert [l.split(" | ")[1].split()[0] for l in lines] == [str(n) for n in order]
    assert "| 0 (baseline) |" in table
    assert str(study / f"fedavg/trial-{order[0]:04d}") in lines[0]
    best_lr = {0: 0.1, 1: 0.5, 3: 0.48, 4: 0.105}[order[0]]
    side = "bottom" if best_lr < 0.2 else "top"
    assert (
        f"study 'fedavg': the best val_acc (trial {order[0]}) has lr = {best_lr:g} at the {side} of its range "
        f"[0.1, 0.5]: widen it"
    ) in out
    assert "Spearman rank correlation" in out and "over 4 completed trials" in out
    assert (
        "Unequal tuning budgets across the studies ('fedavg' 5 trials x 8 local iterations, 'prox' 2 "
        "trials x 8 local iterations)" in out
    )
    assert "Selected on the test set" not in out
    figs = sorted(p.name for p in (study / "figures").glob("*.png"))
    # 'prox' has two completed trials: too few for importances (three needed), so no importance figure of it
    assert figs == sorted(
        ["history-fedavg.png", "curves-fedavg.png", "importance-fedavg.png", "history-prox.png", "curves-prox.png"]
    )
    assert all((study / "figures" / f).stat().st_size > 10_000 for f in figs)


def test_report_of_a_study_as_csv_and_refusals(study, capsys, tmp_path):
    code, out, err = run_main(["report", str(study), "--format", "csv", "--figures", str(tmp_path / "f")], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [(r["study"], r["number"], r["state"]) for r in rows][:3] == [
        ("fedavg", "0", "COMPLETE"),
        ("fedavg", "1", "COMPLETE"),
        ("fedavg", "2", "PRUNED"),
    ]
    assert rows[2]["pruned_iteration"] == "4" and len(rows) == 7
    assert (tmp_path / "f" / "history-fedavg.png").is_file()
    for args, word in ((["--format", "latex"], "md or csv"), (["--table", "t"], "--table")):
        code, out, err = run_main(["report", str(study), *args], capsys)
        assert code == 2 and len(error_lines(err)) == 1 and word in err


def test_selected_on_test_is_said(study, tmp_path):
    """The report's text (what ``fedcli report DIR`` prints: the same functions as its ``_study``, without drawing the
    figures, which test_report_of_a_study does through the command) says a study selected on the test set is
    optimistic, in its notes and its summary."""
    root = tmp_path / "s"
    shutil.copytree(study, root, ignore=shutil.ignore_patterns("figures"))
    rec = json.loads((root / "tune.json").read_text())
    rec["select_on"] = "test"
    (root / "tune.json").write_text(json.dumps(rec))
    out = report_text(root)
    assert "Selected on the test set (optimistic)" in out and "selected on the test set (optimistic)" in out


def test_two_objectives_report_the_pareto_set_and_draw_the_front(tmp_path, capsys):
    root = build_study(
        tmp_path / "two",
        {"lama": [{"params": {"tau": t}} for t in (2, 1, 4)]},
        objectives=TWO,
        space={"tau": {"choices": [1, 2, 4]}},
        rungs=[],
    )
    code, out, err = run_main(["report", str(root)], capsys)
    assert code == 0, err
    assert "Pareto set (" in out and "| val_acc (final, maximize) | comm_bytes (final, minimize) |" in out
    assert (root / "figures" / "pareto-lama.png").is_file()
