"""Re-timed runs of a sweep recipe (issue 57; docs/sweeps.md, "Re-timed runs"): a [[runs]] entry's ``retime`` list
names runs the report reads from that run's records under other system options, without training them. A re-timed
run gives the table and the simulated times that training the run with those options gives (to 1e-9 relative), the
plan says how many trainings are re-timed at how many settings, and a run whose training depended on the system
model (a deadline, availability) cannot be re-timed: exit 2 in one line, nothing written."""

from __future__ import annotations

import csv
import io
import math

import pytest

from runkit import error_lines
from simkit import cli
from sweepkit import SYSTEM_BASE

SLOW, FAST = "constant:3e4", "constant:3e6"

RECIPE = (
    """\
title = "re-timed"
paper = "a test of re-timed runs"
seeds = 1

"""
    + SYSTEM_BASE
    + """\
iterations = 24
lr = 0.1

[base.system]
system = true
uplink = "constant:3e4"
latency = "constant:0.01"

[[runs]]
name = "FedAvg"
algo = "fedavg"
tau = 2
retime = [
  { name = "FedAvg slow", uplink = "constant:3e4" },
  { name = "FedAvg fast", uplink = "constant:3e6" },
]

[[runs]]
name = "FedLAMA"
algo = "fedlama"
tau = 2
phi = 2
retime = [
  { name = "FedLAMA slow", uplink = "constant:3e4" },
  { name = "FedLAMA fast", uplink = "constant:3e6" },
]

[[runs]]
name = "FedAvg trained fast"
algo = "fedavg"
tau = 2
uplink = "constant:3e6"

[[runs]]
name = "FedLAMA trained fast"
algo = "fedlama"
tau = 2
phi = 2
uplink = "constant:3e6"

[[tables]]
name = "to-target"
layout = "target"
target = 0.2
columns = ["name", "uplink"]
runs = ["FedAvg fast", "FedAvg trained fast", "FedLAMA fast", "FedLAMA trained fast", "FedAvg slow", "FedLAMA slow"]

[[figures]]
name = "summary"
kind = "time-to-target"
target = 0.2
along = "uplink"
lines = [
  { title = "FedAvg", runs = ["FedAvg slow", "FedAvg fast"] },
  { title = "FedLAMA", runs = ["FedLAMA slow", "FedLAMA fast"] },
]

[[figures]]
name = "curves-time"
kind = "curves"
x = "time"
target = 0.2
sharex = true
panels = [
  { title = "slow", runs = ["FedAvg slow", "FedLAMA slow"] },
  { title = "fast", runs = ["FedAvg fast", "FedLAMA fast"] },
]
"""
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from fedcli.cli.main import main

    root = tmp_path_factory.mktemp("retimed-sweep")
    recipe = root / "recipe.toml"
    recipe.write_text(RECIPE)
    assert main(["sweep", str(recipe), "--in-process", "--quiet", "--out", str(root / "out")]) in (0, None)
    return root


def sim_times(run) -> list[float]:
    return [float(m["sim_time_s"]) for m in run.metrics]


def test_a_retimed_run_is_the_run_trained_with_its_options(swept):
    """The re-timed "FedAvg fast" (trained at 30 KB/s, re-timed at 3 MB/s) has the simulated times of the run trained at
    3 MB/s, to 1e-9 relative, at every evaluation; so does FedLAMA's; re-timed at its own options a run is itself."""
    from fedcli.reports.core import find_sweeps

    sweep = find_sweeps(swept / "out")[0]
    runs, problems = sweep.status(
        [
            "FedAvg",
            "FedAvg slow",
            "FedAvg fast",
            "FedAvg trained fast",
            "FedLAMA",
            "FedLAMA fast",
            "FedLAMA trained fast",
        ]
    )
    assert not problems
    for algo in ("FedAvg", "FedLAMA"):
        trained, retimed = sim_times(runs[f"{algo} trained fast"][0]), sim_times(runs[f"{algo} fast"][0])
        assert len(trained) == len(retimed) == 6 and trained != sim_times(runs[algo][0])
        assert retimed == pytest.approx(trained, rel=1e-9, abs=0), algo
        assert runs[f"{algo} fast"][0].config["uplink"] == FAST  # the table's uplink column shows the re-timed value
    assert sim_times(runs["FedAvg slow"][0]) == pytest.approx(sim_times(runs["FedAvg"][0]), rel=1e-9, abs=0)
    # the run it re-times is left as trained
    assert runs["FedAvg"][0].config["uplink"] == SLOW


def test_fedcli_load_gives_the_retimed_runs_too(swept):
    """``fedcli.load`` on the sweep: each re-timed run once more beside the trained ones, named ``<run> [<entry>]``
    with its recipe name, its metrics' ``sim_time_s`` those of the run trained at its options (1e-9 relative); the
    trained runs unchanged."""
    import fedcli

    res = fedcli.load(swept / "out")
    runs = res.runs.set_index("run")
    retimed = runs[runs.index.str.endswith("[FedAvg fast]")]
    assert len(retimed) == 1 and retimed["recipe_run"].iloc[0] == "FedAvg fast"
    m = res.metrics
    by = {name: list(m[m["run"] == name]["sim_time_s"]) for name in m["run"].unique()}
    fast = by[retimed.index[0]]
    trained_fast = next(v for k, v in by.items() if runs.loc[k, "recipe_run"] == "FedAvg trained fast")
    trained = next(v for k, v in by.items() if runs.loc[k, "recipe_run"] == "FedAvg")
    assert len(fast) == 6 and fast == pytest.approx(trained_fast, rel=1e-9, abs=0) and fast != trained


def test_the_table_of_retimed_runs_is_the_table_of_trained_ones(swept, capsys):
    """`fedcli report --table --format csv`: the re-timed run's row equals the trained run's, cell for cell (the
    rounds, iterations and bytes exactly, the time to the target within 1e-9 relative)."""
    code, out, err = cli(["report", str(swept / "out"), "--table", "to-target", "--format", "csv"], capsys)
    assert code == 0, err
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(out))}
    for algo in ("FedAvg", "FedLAMA"):
        a, b = rows[f"{algo} fast"], rows[f"{algo} trained fast"]
        assert a["uplink"] == b["uplink"] == FAST
        assert a["rounds_reached"] == b["rounds_reached"] == "1", (a, b)  # the target is reached: a real comparison
        for col in ("rounds_mean", "iters_mean", "comm_mb_mean"):
            assert a[col] == b[col], (algo, col)
        x, y = float(a["time_s_mean"]), float(b["time_s_mean"])
        assert math.isfinite(x) and abs(x - y) <= 1e-9 * abs(y), (algo, x, y)
        assert float(rows[f"{algo} slow"]["time_s_mean"]) > 1.5 * y  # 30 KB/s: slower


def test_the_plan_says_what_is_trained_and_what_is_retimed(tmp_path, capsys):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE)
    code, out, err = cli(["sweep", str(recipe), "--dry-run", "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert "4 runs x 1 seed = 4 trainings" in err
    assert (
        "re-timed: 2 of the 4 trainings (FedAvg, FedLAMA) re-timed at 2 uplink bandwidths (constant:3e4, "
        "constant:3e6), 2 each: 4 runs of the report from their records, not trained"
    ) in err, err
    assert not (tmp_path / "out").exists()
    # --quiet: the table alone, a row for each re-timed run
    code, out, err = cli(["sweep", str(recipe), "--dry-run", "--quiet", "--out", str(tmp_path / "out")], capsys)
    flat = " ".join(out.replace("│", " ").split())  # the table's cells may wrap at a narrow terminal
    assert code == 0 and flat.count("re-timed") == 4 and "FedAvg slow" in flat, out


def test_the_summary_figure_is_a_paper_column_with_type42_fonts(swept, capsys):
    """The time-to-target figure: 3.3 in wide (a paper column), TrueType (Type 42) fonts in the PDF, never Type 3; its
    caption says the ratio; the curves figure marks the target and shares its time axis."""
    from fedcli.reports.paper import pdf_size

    out = swept / "figs"
    code, _, err = cli(["report", str(swept / "out"), "--figures", str(out)], capsys)
    assert code == 0, err
    w, h = pdf_size(out / "summary.pdf")
    assert 3.0 <= w <= 3.35 and h < 4.2, (w, h)
    pdf = (out / "summary.pdf").read_bytes()
    assert b"/Type3" not in pdf and b"/FontFile2" in pdf  # the TrueType font program itself
    caption = (out / "summary.txt").read_text()
    assert "divided by FedAvg's at the same uplink bandwidth" in caption and "log axes" in caption
    curves = (out / "curves-time.txt").read_text()
    assert "The dashed line marks the target, 20%" in curves and "The panels share one x axis" in curves


def test_crossing_where_the_advantage_flips_by_hand():
    """Ratios 0.5 at 1e4 and 2 at 1e6 cross 1 halfway in log x and log ratio: at 1e5; no crossing without a sign
    change of log ratio; a ratio of exactly 1 is its own crossing."""
    from fedcli.reports.summary import crossings, human

    assert crossings([1e4, 1e6], [0.5, 2.0]) == pytest.approx([1e5], rel=1e-12)
    assert crossings([1e4, 1e5, 1e6], [0.5, 0.7, 0.9]) == []
    assert crossings([1e4, 1e5], [0.5, 1.0]) == [1e5]
    assert human(3e4, "B/s") == "30 KB/s" and human(3e7, "B/s") == "30 MB/s" and human(0.05, "s") == "50 ms"


@pytest.mark.parametrize(
    "change, said",
    [
        ('uplink = "constant:3e4"\nlatency', "cannot be re-timed: it was trained with --deadline 5"),
        (
            'retime = [\n  { name = "FedAvg slow", uplink = "constant:3e4" },',
            "'deadline' is not an option a run is re-timed under",
        ),
        ('retime = [\n  { name = "FedAvg slow", uplink = "constant:3e4" },', "run name 'FedAvg' is used twice"),
        ('retime = [\n  { name = "FedAvg slow", uplink = "constant:3e4" },', "--uplink"),
    ],
)
def test_bad_retime_is_one_line_exit_2_nothing_written(tmp_path, capsys, change, said):
    text = RECIPE
    if said.startswith("cannot"):  # a deadline: training depended on the system model
        text = text.replace(change, 'uplink = "constant:3e4"\ndeadline = 5.0\nlatency', 1)
    elif said.startswith("'deadline'"):
        text = text.replace(change, 'retime = [\n  { name = "FedAvg slow", deadline = 2.0 },', 1)
    elif said.startswith("run name"):
        text = text.replace(change, 'retime = [\n  { name = "FedAvg", uplink = "constant:3e4" },', 1)
    else:  # a value train refuses
        text = text.replace(change, 'retime = [\n  { name = "FedAvg slow", uplink = "constant:-1" },', 1)
    assert text != RECIPE
    recipe = tmp_path / "r.toml"
    recipe.write_text(text)
    code, out, err = cli(["sweep", str(recipe), "--dry-run", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and said in err, err
    assert len(error_lines(err)) == 1 and "Traceback" not in err and "r.toml, line " in err, err
    assert not (tmp_path / "out").exists()


def test_a_retimed_run_lacks_what_its_training_lacks(tmp_path, capsys):
    """A re-timed run whose training is missing is named with it: "'FedAvg fast' seed 0 (re-timed from 'FedAvg':
    missing)"."""
    from fedcli.cli.main import main

    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE)
    assert main(["sweep", str(recipe), "--dry-run", "--out", str(tmp_path / "out")]) in (0, None)
    from fedcli.recipes import read_sweep
    from fedcli.results.sweepdir import SweepManifest
    from fedcli.sweep.run import plan, products_of

    r = read_sweep(recipe)
    (tmp_path / "out").mkdir()
    SweepManifest(tmp_path / "out", r, [0], plan(r, tmp_path / "out", [0]), products_of(r)).write()
    code, out, err = cli(["report", str(tmp_path / "out"), "--table", "to-target"], capsys)
    assert code == 2 and "'FedAvg fast' seed 0 (re-timed from 'FedAvg': missing" in err, err
