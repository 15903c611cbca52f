"""A run that diverged (exit 4) is a result in reports: its evaluations before the divergence count, a note
names it; any other failed run still blocks the product (fedcli/report/core.py)."""

import json

import pytest

from fedcli.report.core import MissingRuns, find_sweeps, make_figures, make_table
from fedcli.report.spec import parse_figure, parse_table, spec_to_dict
from fedcli.results.rundir import METRICS_COLUMNS
from simkit import write_csv

def loc(key):
    return f"recipes/test.toml: {key}"


TARGET = {"name": "reach", "layout": "target", "target": 0.9, "columns": ["method", "lr"], "runs": ["AMS", "LAMB"]}
FIGURE = {"name": "curves", "kind": "curves", "x": "round", "runs": ["AMS", "LAMB"]}
# run -> seed -> (status, error, [(round, test_acc)])
RUNS = {"AMS": {0: ("failed", "DivergenceError: training diverged in round 2, local step 7: every client of the cohort has a "
                              "non-finite loss or update", [(1, 0.50), (2, 0.10)]),
                1: ("completed", None, [(1, 0.80), (2, 0.91), (3, 0.93)])},
        "LAMB": {0: ("completed", None, [(1, 0.90), (2, 0.95), (3, 0.96)]),
                 1: ("completed", None, [(1, 0.85), (2, 0.92), (3, 0.95)])}}


def make(root, runs=RUNS):
    entries = []
    for name, per_seed in runs.items():
        for seed, (status, error, evals) in per_seed.items():
            rel = f"{name.lower()}/seed{seed}"
            (root / rel).mkdir(parents=True)
            algo = {"AMS": "fedams", "LAMB": "fedlamb"}[name]
            m = {"status": status, "config": {"algo": algo, "lr": 0.01, "seed": seed}, "method": {"name": algo, "schedule": "periodic"},
                 "seed": seed, **({"error": error} if error else {"summary": {"comm_params": 100, "comm_bytes": 3e6}})}
            (root / rel / "manifest.json").write_text(json.dumps(m))
            write_csv(root / rel / "metrics.csv", METRICS_COLUMNS,
                      [{"round": r, "iteration": 7 * r, "test_acc": a, "comm_params": 10 * r, "comm_bytes": 1e6 * r, "train_loss": 1.0, "wall_s": 1.0 * r,
                        "test_loss": 1.0} for r, a in evals])
            entries.append({"name": name, "seed": seed, "dir": rel, "status": status})
    sweep = {"fedcli_sweep": 1, "recipe": "recipes/test.toml", "scale": "cpu", "seeds": [0, 1], "title": "t", "paper": "p",
             "tables": [spec_to_dict(parse_table(TARGET, loc, "cpu"))], "figures": [spec_to_dict(parse_figure(FIGURE, loc, "cpu"))],
             "runs": entries}
    (root / "sweep.json").write_text(json.dumps(sweep))
    return root


def test_diverged_seed_counts_as_not_reaching_the_target(tmp_path):
    sweeps = find_sweeps(make(tmp_path / "s"))
    md = make_table(sweeps, "reach", "md")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
    assert rows[1] == ["Fed-AMS", "0.01", "2 (1/2)", "2.00"]       # seed 0 diverged at 50% then 10%: never reached
    assert rows[2] == ["Fed-LAMB", "0.01", "1.5 ± 0.7", "1.50 ± 0.71"]
    assert "Diverged (exit 4)" in md and "'AMS' seed 0 (training diverged in round 2" in md
    assert len(make_figures(sweeps, tmp_path / "figs")) == 3  # PNG, PDF, caption; the curve of the diverged seed ends where it stopped


def test_other_failures_still_block(tmp_path):
    runs = {**RUNS, "AMS": {**RUNS["AMS"], 0: ("failed", "RuntimeError: out of memory", [(1, 0.5)])}}
    with pytest.raises(MissingRuns, match=r"'AMS' seed 0 \(failed: RuntimeError: out of memory\)"):
        make_table(find_sweeps(make(tmp_path / "s", runs)), "reach", "md")
