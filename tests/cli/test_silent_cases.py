"""Where the contract was silent (issue 29, family 6), the decisions, each with a test:

- a finite blow-up (``--lr 5``: train loss 968,405 at chance accuracy) is divergence: ``--diverge-factor`` (default
  100) x ln(classes), exit 4, reported as diverged; ``--diverge-factor 0`` lets it run;
- ``fedcli report DIR`` reports the runs it can read and names each one it cannot (one damaged manifest does not hide
  the good runs);
- non-finite accuracy cells are flagged "(k nan)", never left out silently;
- a sweep of more than 500 trainings is said before it runs (also with --quiet and --dry-run);
- run names with '/', '\\', newlines, NUL or other control characters are refused (exit 2, file and line), not
  rewritten.
"""

import json
import math
import shutil

import pytest

from fedcli.cli.main import main
from fedcli.reports.aggregate import mean_std
from fedcli.reports.tables import fmt_acc
from runkit import error_lines

TINY = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--active-ratio",
    "0.5",
    "--iterations",
    "8",
    "--tau",
    "2",
    "--eval-every",
    "2",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


def run_main(args, capsys):
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.timeout(300)
def test_a_finite_blow_up_is_divergence(tmp_path, capsys):
    out = tmp_path / "blown"
    code, _, err = run_main(["train", "--lr", "5", "--iterations", "30", "--out", str(out), "--quiet"], capsys)
    lines = error_lines(err)
    assert code == 4 and len(lines) == 1 and "Traceback" not in err, err
    # 100 x ln(10) = 230.26: the threshold, worked out by hand
    assert (
        "more than --diverge-factor 100 times ln(10) = 2.303" in lines[0]
        and "training diverged in round 1 " in lines[0]
    ), lines[0]
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and man["error"].startswith("DivergenceError")
    first = (out / "metrics.csv").read_text().splitlines()[1].split(",")
    assert float(first[2]) > 230.26  # the blow-up row is written (the report shows it)
    # the same run with the rule off completes: what used to happen silently
    code, _, err = run_main(
        [
            "train",
            "--lr",
            "5",
            "--iterations",
            "30",
            "--out",
            str(tmp_path / "off"),
            "--quiet",
            "--diverge-factor",
            "0",
        ],
        capsys,
    )
    assert code == 0, err
    # a sane run is far from the threshold (control)
    assert run_main(TINY + ["--out", str(tmp_path / "sane")], capsys)[0] == 0


@pytest.mark.timeout(300)
def test_report_lists_the_runs_it_can_read_and_names_the_others(tmp_path, capsys):
    root = tmp_path / "results"
    for seed in (0, 1):
        assert run_main(TINY + ["--seed", str(seed), "--out", str(root / f"good{seed}")], capsys)[0] == 0
    shutil.copytree(root / "good0", root / "bad")
    (root / "bad" / "manifest.json").write_text("{ not json")
    code, table, err = run_main(["report", str(root)], capsys)
    assert code == 0, err
    assert "good0" in table and "good1" in table and "bad" not in table.replace("badge", "")
    assert f"left out {root / 'bad'}" in err and "not a readable run manifest" in err
    assert "2 run(s) reported, 1 left out" in err
    # named explicitly, a damaged run is still refused (exit 3)
    assert run_main(["report", str(root / "bad")], capsys)[0] == 3


def test_nan_accuracy_is_flagged_not_dropped_silently():
    s = mean_std([0.5, float("nan"), 0.7])
    assert s.n == 2 and s.dropped == 1 and s.mean == pytest.approx(0.6) and s.std == pytest.approx(math.sqrt(0.02))
    assert fmt_acc(s).text == "60.00 ± 14.14% (1 nan)"
    assert fmt_acc(mean_std([float("nan")])).text == "n/a (1 nan)"
    assert fmt_acc(mean_std([0.5, 0.7])).text == "60.00 ± 14.14%"  # control: no flag without nan


@pytest.mark.timeout(300)
def test_a_run_with_nan_accuracy_cells_is_flagged_in_the_report(tmp_path, capsys):
    run = tmp_path / "run"
    assert run_main(TINY + ["--out", str(run)], capsys)[0] == 0
    lines = (run / "metrics.csv").read_text().splitlines()
    head = lines[0].split(",")
    cells = lines[2].split(",")
    cells[head.index("test_acc")] = "nan"
    lines[2] = ",".join(cells)
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    # beside a FedAvg run: a report of several runs draws no figures unless asked (one run's would draw six, 3 s)
    assert run_main(TINY + ["--algo", "fedavg", "--out", str(tmp_path / "other")], capsys)[0] == 0
    code, table, err = run_main(["report", str(run), str(tmp_path / "other")], capsys)
    assert code == 0, err
    assert "(1 nan)" in table and "test_acc that is not a number" in table
    assert table.count("(1 nan)") == 1  # the damaged run's row alone


RECIPE = """\
title = "names"
seeds = 1

[base]
dataset = "digits"
model = "mlp"
iterations = 4

[[runs]]
name = "fedavg"
algo = "fedavg"

[[runs]]
name = NAME
algo = "fedavg"
tau = 2
"""


@pytest.mark.parametrize(
    "name, shown", [('"a/b"', "/"), ('"two\\nlines"', "\\n"), ('"nul\\u0000"', "\\x00"), ('"back\\\\slash"', "\\\\")]
)
def test_run_names_that_would_be_rewritten_are_refused(tmp_path, capsys, name, shown):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.replace("NAME", name))
    code, _, err = run_main(["sweep", str(recipe), "--dry-run", "--out", str(tmp_path / "s")], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert f"{recipe}, line 14: run name" in err and shown in err, err


@pytest.mark.timeout(300)
def test_a_large_grid_is_said_before_it_runs(tmp_path, capsys):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.replace("NAME", '"fedavg tau 2"'))
    code, _, err = run_main(
        ["sweep", str(recipe), "--dry-run", "--seeds", "251", "--out", str(tmp_path / "s"), "--quiet"], capsys
    )
    assert code == 0, err
    assert "warning: 502 trainings to run" in err and "more than 500" in err
    code, _, err = run_main(
        ["sweep", str(recipe), "--dry-run", "--seeds", "250", "--out", str(tmp_path / "s"), "--quiet"], capsys
    )
    assert code == 0 and "warning" not in err  # control: 500 is not "more than 500"


def test_report_leaves_out_an_unreadable_sweep_among_readable_ones(tmp_path, capsys):
    good, bad = tmp_path / "all" / "good", tmp_path / "all" / "bad"
    for s in (good, bad):
        s.mkdir(parents=True)
    (good / "sweep.json").write_text(
        json.dumps(
            {
                "fedcli_sweep": 1,
                "recipe": "r.toml",
                "title": "good one",
                "seeds": [0],
                "runs": [],
                "tables": [],
                "figures": [],
            }
        )
    )
    (bad / "sweep.json").write_text("{ cut")
    code, out, err = run_main(["report", str(tmp_path / "all")], capsys)
    assert code == 0, err
    assert f"left out {bad}" in err and "not a readable sweep manifest" in err
    assert "good one" in " ".join(
        out.split()
    )  # the console wraps long lines where the temporary path's length puts them
