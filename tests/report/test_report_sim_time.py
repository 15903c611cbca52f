"""The comparison table of run directories and the tidy CSV (issue 57): a "Sim. time" column for runs trained with
``--system`` (unrounded ``sim_time_s`` in ``--format csv``), ``--x time`` on a run without simulated time refused
before anything is printed, and no ``*_std = 0.0`` for a value of one seed."""

from __future__ import annotations

import csv
import io

import pytest

from fedcli.cli.main import main
from runkit import error_lines
from simkit import cli, md_table
from sweepkit import RECIPE as SWEEP_RECIPE

BASE = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "4",
    "--iterations",
    "8",
    "--tau",
    "2",
    "--eval-every",
    "4",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("simtime")
    for name, extra in (
        ("timed", ["--system", "--uplink", "constant:3e4"]),
        ("timed-s1", ["--system", "--uplink", "constant:3e4", "--seed", "1"]),
        ("plain", []),
        ("plain-s1", ["--seed", "1"]),
    ):
        assert main(BASE + extra + ["--out", str(root / name)]) in (0, None)
    return root


def last_sim_time(run_dir) -> str:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))[-1]["sim_time_s"]


def test_comparison_table_has_simulated_time_when_runs_were_simulated(runs, capsys):
    code, out, err = cli(["report", str(runs / "timed"), str(runs / "plain")], capsys)
    assert code == 0, err
    rows = {r["Run"]: r for r in md_table(out)}
    said = float(last_sim_time(runs / "timed"))
    assert rows["timed"]["Sim. time"] == f"{said:,.2f} s" and rows["plain"]["Sim. time"] == "—"
    assert "Sim. time: the simulated seconds" in out
    # --format csv: the simulated seconds unrounded, as metrics.csv holds them; empty for the run without them
    code, out, err = cli(["report", str(runs / "timed"), str(runs / "plain"), "--format", "csv"], capsys)
    assert code == 0, err
    recs = {r["name"].rsplit("/", 1)[-1]: r for r in csv.DictReader(io.StringIO(out))}  # name: the run's path
    assert (
        float(recs["timed"]["sim_time_s"]) == float(last_sim_time(runs / "timed")) and recs["plain"]["sim_time_s"] == ""
    )
    # runs never simulated: no such column (two seeds, one row: a report of several runs draws no figures unasked)
    code, out, _ = cli(["report", str(runs / "plain"), str(runs / "plain-s1")], capsys)
    assert code == 0 and "Sim. time" not in out and "(seeds 0, 1)" in out


def test_seeds_of_simulated_runs_give_mean_and_std(runs, capsys):
    code, out, err = cli(["report", str(runs / "timed"), str(runs / "timed-s1"), "--format", "csv"], capsys)
    assert code == 0, err
    (rec,) = csv.DictReader(io.StringIO(out))
    secs = [float(last_sim_time(runs / n)) for n in ("timed", "timed-s1")]
    assert float(rec["sim_time_s_mean"]) == pytest.approx(sum(secs) / 2) and rec["sim_time_s_n"] == "2"


def test_x_time_on_a_run_without_simulated_time_refuses_before_printing(runs, capsys):
    """It printed the whole table, then refused (exit 2) when it came to draw."""
    for args in ([str(runs / "plain")], [str(runs / "timed"), str(runs / "plain"), "--figures", str(runs / "f")]):
        code, out, err = cli(["report", *args, "--x", "time"], capsys)
        lines = error_lines(err)
        assert code == 2 and out == "" and len(lines) == 1 and "has no simulated time" in lines[0], (out, err)
    assert not (runs / "f").exists()


@pytest.mark.long(
    reason="a report drawing a FedLAMA run's six figures (3 s) as the control; make test holds it in "
    "tests/report/test_system_report.py::test_x_time_draws_accuracy_against_simulated_time (a --system run's --x time "
    "report draws curves-time)"
)
def test_x_time_on_a_run_with_simulated_time_draws_it(runs, capsys):
    code, out, err = cli(["report", str(runs / "timed"), "--x", "time"], capsys)
    assert code == 0 and (runs / "timed" / "figures" / "curves-time.png").is_file(), err


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The tiny two-run sweep, one seed, trained without --system."""
    root = tmp_path_factory.mktemp("sweep")
    recipe = root / "tiny.toml"
    recipe.write_text(
        SWEEP_RECIPE + '\n[[figures]]\nname = "c"\nkind = "curves"\nruns = ["FedAvg x1", "FedLAMA phi=2"]\n'
    )
    assert main(
        ["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root / "s"), "--quiet", "--in-process"]
    ) in (
        0,
        None,
    )
    return root / "s"


def test_x_time_on_a_sweep_without_simulated_time_refuses_before_printing(sweep, tmp_path, capsys):
    """The sweep's table was printed, then its figure refused (the same cause as for run directories)."""
    for args in (["--table", "t"], ["--figure", "c"], []):
        code, out, err = cli(["report", str(sweep), *args, "--figures", str(tmp_path / "f"), "--x", "time"], capsys)
        lines = error_lines(err)
        assert code == 2 and out == "" and len(lines) == 1 and "has no simulated time" in lines[0], (args, out, err)
        assert not (tmp_path / "f").exists()
    code, out, err = cli(["report", str(sweep), "--table", "t", "--figures", str(tmp_path / "f")], capsys)
    assert code == 0 and "FedLAMA" in out and (tmp_path / "f" / "c.png").is_file(), err


def test_csv_of_one_seed_leaves_std_empty(sweep, capsys):
    """A sweep of one seed wrote ``*_std = 0.0`` in --format csv (a sample std needs two values): empty."""
    out_dir = sweep
    code, out, err = cli(["report", str(out_dir), "--table", "t", "--format", "csv"], capsys)
    assert code == 0, err
    recs = list(csv.DictReader(io.StringIO(out)))
    stds = {k: v for r in recs for k, v in r.items() if k.endswith("_std")}
    assert stds and set(stds.values()) == {""}, stds
    means = [k for k in recs[0] if k.endswith("_mean") and recs[0][k] != ""]
    assert means  # the means are there
