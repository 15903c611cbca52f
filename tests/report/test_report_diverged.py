"""A run that diverged (exit 4) is a result in reports: its evaluations before the divergence count, a note
names it; any other failed run still blocks the product (fedcli/reports/core.py)."""

import json

import pytest

from fedcli.reports.core import MissingRuns, find_sweeps, make_figures, make_table
from fedcli.reports.products import parse_figure, parse_table, product_to_dict
from fedcli.results.rundir import METRICS_COLUMNS
from simkit import write_csv


def loc(key):
    return f"recipes/test.toml: {key}"


TARGET = {"name": "reach", "layout": "target", "target": 0.9, "columns": ["method", "lr"], "runs": ["AMS", "LAMB"]}
FIGURE = {"name": "curves", "kind": "curves", "x": "round", "runs": ["AMS", "LAMB"]}
# run -> seed -> (status, error, [(round, test_acc)])
RUNS = {
    "AMS": {
        0: (
            "failed",
            "DivergenceError: training diverged in round 2, local step 7: every client of the cohort has a "
            "non-finite loss or update",
            [(1, 0.50), (2, 0.10)],
        ),
        1: ("completed", None, [(1, 0.80), (2, 0.91), (3, 0.93)]),
    },
    "LAMB": {
        0: ("completed", None, [(1, 0.90), (2, 0.95), (3, 0.96)]),
        1: ("completed", None, [(1, 0.85), (2, 0.92), (3, 0.95)]),
    },
}


def make(root, runs=RUNS):
    entries = []
    for name, per_seed in runs.items():
        for seed, (status, error, evals) in per_seed.items():
            rel = f"{name.lower()}/seed{seed}"
            (root / rel).mkdir(parents=True)
            algo = {"AMS": "fedams", "LAMB": "fedlamb"}[name]
            m = {
                "status": status,
                "config": {"algo": algo, "lr": 0.01, "seed": seed},
                "method": {"name": algo, "schedule": "periodic"},
                "seed": seed,
                **({"error": error} if error else {"summary": {"comm_params": 100, "comm_bytes": 3e6}}),
            }
            (root / rel / "manifest.json").write_text(json.dumps(m))
            write_csv(
                root / rel / "metrics.csv",
                METRICS_COLUMNS,
                [
                    {
                        "round": r,
                        "iteration": 7 * r,
                        "test_acc": a,
                        "comm_params": 10 * r,
                        "comm_bytes": 1e6 * r,
                        "train_loss": 1.0,
                        "wall_s": 1.0 * r,
                        "test_loss": 1.0,
                    }
                    for r, a in evals
                ],
            )
            entries.append({"name": name, "seed": seed, "dir": rel, "status": status})
    sweep = {
        "fedcli_sweep": 1,
        "recipe": "recipes/test.toml",
        "scale": "cpu",
        "seeds": [0, 1],
        "title": "t",
        "paper": "p",
        "tables": [product_to_dict(parse_table(TARGET, loc, "cpu"))],
        "figures": [product_to_dict(parse_figure(FIGURE, loc, "cpu"))],
        "runs": entries,
    }
    (root / "sweep.json").write_text(json.dumps(sweep))
    return root


def test_diverged_seed_counts_as_not_reaching_the_target(tmp_path):
    sweeps = find_sweeps(make(tmp_path / "s"))
    md = make_table(sweeps, "reach", "md")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
    assert rows[1] == [
        "Fed-AMS",
        "0.01",
        "2 (1/2) (1 diverged)",
        "14",
        "2.00",
    ]  # seed 0 diverged at 50% then 10%: never reached
    assert rows[2] == ["Fed-LAMB", "0.01", "1.5 ± 0.7", "10.5 ± 4.9", "1.50 ± 0.71"]  # 7 iterations a round
    assert "Diverged (exit 4)" in md and "'AMS' seed 0 (training diverged in round 2" in md
    assert (
        len(make_figures(sweeps, tmp_path / "figs")) == 3
    )  # PNG, PDF, caption; the curve of the diverged seed ends where it stopped


def test_other_failures_still_block(tmp_path):
    runs = {**RUNS, "AMS": {**RUNS["AMS"], 0: ("failed", "RuntimeError: out of memory", [(1, 0.5)])}}
    with pytest.raises(MissingRuns, match=r"'AMS' seed 0 \(failed: RuntimeError: out of memory\)"):
        make_table(find_sweeps(make(tmp_path / "s", runs)), "reach", "md")


ROWS = {"name": "acc", "layout": "rows", "columns": ["method", "acc"], "runs": ["AMS", "LAMB"]}


def test_a_run_the_guard_stopped_is_recorded_and_reported_as_diverged(tmp_path, capsys):
    """Issue 47, point 4: `fedcli train --lr 5` stopped by --diverge-factor (exit 4) was `failed` in its manifest and
    in every report, with no word of divergence. The manifest keeps the contract's status (`failed`) and says
    `reason: diverged`; the single-run report, a report of its seeds and `fedcli.load(...).runs` show `diverged`."""
    import fedcli
    from simkit import cli

    run = tmp_path / "run"
    code, _, err = cli(
        ["train", "--lr", "5", "--iterations", "200", "--eval-every", "20", "--quiet", "--out", str(run)], capsys
    )
    assert code == 4 and "training diverged" in err
    m = json.loads((run / "manifest.json").read_text())
    assert (m["status"], m["reason"]) == ("failed", "diverged")
    code, out, _ = cli(["report", str(run), "--figures", str(tmp_path / "figs")], capsys)
    status = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| run ")]
    assert code == 0 and status and status[0][3] == "diverged", out
    assert list(fedcli.load(run).runs["status"]) == ["diverged"]
    # two seeds of one experiment: the group's row counts the diverged one
    import shutil

    from fedcli.reports.single import comparison_table, load_run
    from fedcli.reports.tables import render

    shutil.copytree(run, tmp_path / "s1")
    (tmp_path / "s1" / "manifest.json").write_text(json.dumps(dict(m, seed=1, config=dict(m["config"], seed=1))))
    md = render(comparison_table([load_run(run), load_run(tmp_path / "s1")]), "md")
    assert "0/2 completed, 2 diverged" in md, md


def test_table_cells_and_the_paper_section_mark_a_diverged_seed(tmp_path):
    """A table's accuracy cell (and a target table's rounds) says how many of its seeds diverged, in Markdown and in
    LaTeX, and so does the `--paper` section that holds the table."""
    from fedcli.reports.paper import build_section

    root = make(tmp_path / "s")
    sweep = json.loads((root / "sweep.json").read_text())
    sweep["tables"].append(product_to_dict(parse_table(ROWS, loc, "cpu")))
    sweep["paper"] = "Fed-LAMB, a test"
    (root / "sweep.json").write_text(json.dumps(sweep))
    sweeps = find_sweeps(root)
    for fmt in ("md", "latex"):
        text = make_table(sweeps, "acc", fmt)
        ams = next(line for line in text.splitlines() if "AMS" in line)
        assert "(1 diverged)" in ams and "LAMB" not in ams, text
    assert "(1 diverged)" not in next(
        line for line in make_table(sweeps, "acc", "md").splitlines() if "Fed-LAMB" in line
    )
    tex, md, _ = build_section(sweeps, "fedlamb", tmp_path / "paper")
    assert tex.count("(1 diverged)") == 2 and md.count("(1 diverged)") == 2  # the target table and the rows table
