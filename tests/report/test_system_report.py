"""The report of runs trained with the system model (docs/system-model.md): ``fedcli report --x time`` draws accuracy
against simulated time, and a target table gives the simulated time to the target beside rounds and megabytes."""

from __future__ import annotations

import csv
import io
import json

from fedcli.cli.main import main
from fedcli.reports.products import parse_table
from fedcli.reports.rundata import RunData
from fedcli.reports.tables import build_table, render
from runkit import error_lines
from simkit import cli, write_csv
from sweepkit import RECIPE as SWEEP_RECIPE

METRICS = ["round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes", "sim_time_s"]


def run(path, *, algo, seed, accs, secs, per_round=10, config=None):
    """A run directory: ``accs`` the test accuracy and ``secs`` the simulated time after rounds 1, 2, ...
    (``per_round`` local iterations each)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "method": {"name": algo},
                "seed": seed,
                "config": {
                    "algo": algo,
                    "seed": seed,
                    "out": str(path),
                    "dataset": "mnist",
                    "clients": 10,
                    "system": True,
                    **(config or {}),
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
                "iteration": per_round * i,
                "train_loss": 1,
                "test_loss": 1,
                "test_acc": a,
                "comm_params": 100 * i,
                "comm_bytes": 1e6 * i,
                "sim_time_s": t,
            }
            for i, (a, t) in enumerate(zip(accs, secs), 1)
        ],
    )
    return RunData(path)


def test_time_to_target_by_hand(tmp_path):
    # FedAvg reaches 90% at round 2 in both seeds, at 20 s and 30 s: 25.0 ± 7.1 s; FedLAMA at round 3 (seed 0, 12 s)
    # and never (seed 1): 12.0 s, over the one seed that reaches it (rounds: "3 (1/2)")
    runs = {
        "avg": {
            0: run(tmp_path / "a0", algo="fedavg", seed=0, accs=(0.8, 0.9, 0.95), secs=(10, 20, 30)),
            1: run(tmp_path / "a1", algo="fedavg", seed=1, accs=(0.8, 0.92, 0.95), secs=(15, 30, 45)),
        },
        "lama": {
            0: run(tmp_path / "l0", algo="fedlama", seed=0, accs=(0.5, 0.8, 0.9), secs=(4, 8, 12)),
            1: run(tmp_path / "l1", algo="fedlama", seed=1, accs=(0.5, 0.8, 0.85), secs=(4, 8, 12)),
        },
    }
    t = parse_table(
        {"name": "t", "layout": "target", "target": 0.9, "columns": ["method"], "runs": ["avg", "lama"]}, lambda k: k
    )
    md = render(build_table(t, runs, [0, 1]), "md")
    got = [[c.strip() for c in l.strip("|").split("|")] for l in md.splitlines() if l.startswith("| ")]
    assert got[0] == ["Method", "Rounds to 90%", "Iterations to 90%", "Comm. to 90% (MB)", "Time to 90% (s)"]
    assert got[1] == ["FedAvg", "2.0 ± 0.0", "20.0 ± 0.0", "2.00 ± 0.00", "25.0 ± 7.1"]
    assert got[2] == ["FedLAMA", "3 (1/2)", "30", "3.00", "12.0"]
    assert "and the simulated seconds so far (sim_time_s" in md


def test_target_table_compares_iterations_and_says_what_a_round_is(tmp_path):
    """Rounds of different lengths (issue 57, item 3): FedAvg (tau 6) reaches 90% at round 4 = 24 iterations, FedLAMA
    (tau' 6, phi 2: 12 iterations a round) at round 3 = 36 iterations; the table gives both, the note says what a
    round is for each row and that values read off the evaluation grid are upper bounds (one interval late at most)."""
    runs = {
        "avg": {
            0: run(
                tmp_path / "a0",
                algo="fedavg",
                seed=0,
                accs=(0.5, 0.6, 0.8, 0.9),
                secs=(1, 2, 3, 4),
                per_round=6,
                config={"tau": 6},
            )
        },
        "lama": {
            0: run(
                tmp_path / "l0",
                algo="fedlama",
                seed=0,
                accs=(0.5, 0.8, 0.9),
                secs=(1, 2, 3),
                per_round=12,
                config={"tau": 6, "phi": 2},
            )
        },
    }
    t = parse_table(
        {"name": "t", "layout": "target", "target": 0.9, "columns": ["name"], "runs": ["avg", "lama"]}, lambda k: k
    )
    table = build_table(t, runs, [0])
    md = render(table, "md")
    got = [[c.strip() for c in l.strip("|").split("|")] for l in md.splitlines() if l.startswith("| ")]
    assert got[0] == ["Run", "Rounds to 90%", "Iterations to 90%", "Comm. to 90% (MB)", "Time to 90% (s)"]
    assert got[1][:3] == ["avg", "4", "24"] and got[2][:3] == ["lama", "3", "36"]
    notes = " ".join(table.notes)
    assert (
        "a round is 6 local iterations for FedAvg (τ=6); 12 local iterations for FedLAMA (τ′=6, φ=2), φ × τ′" in notes
    )
    assert "upper bounds" in notes and "(evaluations 6 to 12 local iterations apart)" in notes
    recs = {r["run"]: r for r in csv.DictReader(io.StringIO(render(table, "csv")))}
    assert float(recs["avg"]["iters_mean"]) == 24 and float(recs["lama"]["iters_mean"]) == 36
    tex = render(table, "latex")
    assert "Iterations to 90\\%" in tex and "10$^{6}$ bytes" in tex and "textasciicircum" not in tex


def test_x_time_draws_accuracy_against_simulated_time(tmp_path, capsys):
    base = [
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
        "--device",
        "cpu",
        "--threads",
        "1",
        "--quiet",
    ]
    timed, plain = tmp_path / "timed", tmp_path / "plain"
    assert main(base + ["--out", str(timed), "--system"]) == 0
    assert main(base + ["--out", str(plain)]) == 0
    figs = tmp_path / "figs"
    code, _, err = cli(["report", str(timed), "--x", "time", "--figures", str(figs)], capsys)
    assert code == 0, err
    assert (figs / "curves-time.png").exists() and "simulated time" in (figs / "curves-time.txt").read_text().lower()
    code, _, err = cli(["report", str(plain), "--x", "time", "--figures", str(tmp_path / "f2")], capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and "has no simulated time" in lines[0] and "--system" in lines[0], err


def test_x_time_on_a_sweep_without_simulated_time_is_one_line(tmp_path, capsys):
    """A sweep's curves with --x time, its runs trained without --system: exit 2 naming a run, nothing drawn (the
    shared curve code read sim_time_s and ended in a KeyError traceback)."""
    from fedcli.sweep.run import run_sweep

    recipe = tmp_path / "tiny.toml"
    recipe.write_text(
        SWEEP_RECIPE.replace("seeds = 2", "seeds = 1")
        + '\n[[figures]]\nname = "c"\nkind = "curves"\nruns = ["FedAvg x1", "FedLAMA phi=2"]\n'
    )
    root = tmp_path / "sweep"
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)
    figs = tmp_path / "figs"
    code, _, err = cli(["report", str(root), "--figures", str(figs), "--x", "time"], capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and "has no simulated time" in lines[0] and "Traceback" not in err, err
    assert not figs.exists() or not list(figs.glob("*.png"))
