"""``fedcli report``: seeds aggregated by hand, early-stopping columns, missing runs, figures.

The run directories here are written by hand (manifest.json, metrics.csv, layers.csv, intervals.csv),
so every number in the expected tables can be worked out on paper.
"""

import csv
import json
import math

import pytest

import simkit
from fedcli.cli.main import main
from fedcli.errors import ConfigError
from fedcli.reports.aggregate import early_stop, first_reach, mean_std
from fedcli.reports.core import MissingRuns, find_sweeps, listing, make_figures, make_table
from fedcli.reports.figures import cross_point, delta_lambda_curves
from fedcli.reports.products import parse_figure, parse_table, product_to_dict
from fedcli.reports.rundata import RunData
from fedcli.results.rundir import INTERVALS_COLUMNS, LAYERS_COLUMNS, METRICS_COLUMNS


def loc(key):
    return f"test, key {key}"


def write_csv(path, columns, rows):
    simkit.write_csv(path, columns, rows, fill=0)


def fake_run(path, *, algo, tau, lr, seed, evals, comm, phi=1, status="completed", layers=None, intervals=None):  # noqa: PLR0913
    """A run directory: ``evals`` is [(iteration, test_acc, cumulative comm_params)]."""
    path.mkdir(parents=True, exist_ok=True)
    schedule = "lama" if algo == "fedlama" else "periodic"
    cfg = {
        "algo": algo,
        "tau": tau,
        "phi": phi,
        "lr": lr,
        "seed": seed,
        "dataset": "digits",
        "active_ratio": 0.25,
        "partition": "dirichlet",
        "alpha": 0.1,
        "clients": 8,
        "batch_size": 32,
        "iterations": evals[-1][0],
        "schedule": "",
    }
    manifest = {
        "status": status,
        "config": cfg,
        "method": {"name": algo, "schedule": schedule},
        "seed": seed,
        "clients": 8,
        "summary": {"comm_params": comm, "comm_bytes": 8.0 * comm},
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    write_csv(
        path / "metrics.csv",
        METRICS_COLUMNS,
        [
            {
                "round": i,
                "iteration": it,
                "test_acc": acc,
                "comm_params": c,
                "comm_bytes": 8 * c,
                "train_loss": 1.0,
                "test_loss": 1.0,
                "personal_acc": "",
            }
            for i, (it, acc, c) in enumerate(evals)
        ],
    )  # "": not personalized, as fedcli writes it
    write_csv(
        path / "layers.csv",
        LAYERS_COLUMNS,
        layers
        or [
            {
                "layer": 0,
                "name": "w",
                "kind": "kernel",
                "numel": 90,
                "syncs": comm // 100,
                "comm_params": 90 * (comm // 100),
                "interval": tau,
            },
            {
                "layer": 1,
                "name": "b",
                "kind": "bias",
                "numel": 10,
                "syncs": comm // 100,
                "comm_params": 10 * (comm // 100),
                "interval": tau,
            },
        ],
    )
    if intervals:
        write_csv(path / "intervals.csv", INTERVALS_COLUMNS, intervals)


# ------------------------------------------------------------------------------------------------ a fake sweep
# Baseline "FedAvg x1" (comm 1000 per seed), "FedAvg x2" (comm 500) and "FedLAMA phi=2" (comm 600), 2 seeds.
#   FedAvg x1 best acc: seed 0: 0.80, seed 1: 0.84          -> 82.00 +- 2.83 %
#   FedAvg x2 best acc: seed 0: 0.70, seed 1: 0.72          -> 71.00 +- 1.41 %
#   FedLAMA evals seed 0: (10, .50, 200) (20, .71, 300) (30, .75, 600)
#                 seed 1: (10, .60, 200) (20, .715, 300) (30, .73, 600)
#   early stopping, target = the same seed's FedAvg x2 accuracy (0.70, 0.72):
# seed 0 reaches 0.70 at iteration 20 (acc .71, comm 300 = 30 %); seed 1 reaches 0.72 at 30 (acc .73, comm 600 = 60 %)
#     -> acc 72.00 +- 1.41 %, steps 25 +- 7, C ratio 45.00 %
# target = the mean of FedAvg x2 (0.71): seed 1 reaches it at 20 (.715, 30 %) -> acc 71.25 +- 0.35 %, steps 20, C ratio
# 30.00 %
#   full training FedLAMA: best 0.75, 0.73 -> 74.00 +- 1.41 %, comm 600/1000 = 60.00 %

EVALS = {
    ("FedAvg x1", 0): (dict(algo="fedavg", tau=2, lr=0.1), [(10, 0.5, 500), (20, 0.80, 1000)], 1000),
    ("FedAvg x1", 1): (dict(algo="fedavg", tau=2, lr=0.1), [(10, 0.84, 500), (20, 0.83, 1000)], 1000),
    ("FedAvg x2", 0): (dict(algo="fedavg", tau=4, lr=0.1), [(12, 0.6, 300), (20, 0.70, 500)], 500),
    ("FedAvg x2", 1): (dict(algo="fedavg", tau=4, lr=0.1), [(12, 0.72, 300), (20, 0.71, 500)], 500),
    ("FedLAMA phi=2", 0): (
        dict(algo="fedlama", tau=2, phi=2, lr=0.2),
        [(10, 0.50, 200), (20, 0.71, 300), (30, 0.75, 600)],
        600,
    ),
    ("FedLAMA phi=2", 1): (
        dict(algo="fedlama", tau=2, phi=2, lr=0.2),
        [(10, 0.60, 200), (20, 0.715, 300), (30, 0.73, 600)],
        600,
    ),
}


def make_sweep(root, tables, figures=(), skip=(), status=None, evals=None):
    entries = []
    for (name, seed), (kw, evals, comm) in {**EVALS, **(evals or {})}.items():
        rel = f"{name.lower().replace(' ', '-').replace('=', '-')}/seed{seed}"
        entries.append({"name": name, "seed": seed, "dir": rel, "status": "completed"})
        if (name, seed) in skip:
            continue
        st = (status or {}).get((name, seed), "completed")
        intervals = None
        if kw["algo"] == "fedlama":
            intervals = [
                {
                    "round": r,
                    "iteration": 4 * (r + 1),
                    "layer": l,
                    "name": n,
                    "numel": numel,
                    "eligible": 1,
                    "d": d,
                    "interval": 2,
                }
                for r in (0, 1)
                for l, n, numel, d in ((0, "a", 10, 1.0), (1, "b", 80, 0.1), (2, "c", 10, 0.5))
            ]
        fake_run(root / rel, seed=seed, evals=evals, comm=comm, status=st, intervals=intervals, **kw)
    manifest = {
        "fedcli_sweep": 1,
        "recipe": "recipes/test.toml",
        "scale": "smoke",
        "seeds": [0, 1],
        "title": "t",
        "paper": "Test paper",
        "tables": [product_to_dict(parse_table(t, loc)) for t in tables],
        "figures": [product_to_dict(parse_figure(f, loc)) for f in figures],
        "runs": entries,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps(manifest))
    return root


PAIRED = {
    "name": "paired",
    "layout": "paired",
    "baseline": "FedAvg x1",
    "paper": "AAAI-like",
    "rows": [["FedAvg x1", "FedAvg x1"], ["FedAvg x2", "FedLAMA phi=2"]],
}
ROWS = {
    "name": "rows",
    "columns": ["lr", "tau", "phi", "acc", "comm"],
    "runs": ["FedAvg x1", "FedAvg x2", "FedLAMA phi=2"],
}
FIGURES = [
    {"name": "curves", "kind": "curves", "runs": ["FedAvg x1", "FedLAMA phi=2"]},
    {"name": "syncs", "kind": "layer-syncs", "runs": ["FedAvg x1", "FedLAMA phi=2"]},
    {"name": "size", "kind": "layer-size", "runs": ["FedAvg x1", "FedLAMA phi=2"], "log": True},
    {"name": "dl", "kind": "delta-lambda", "panels": [{"title": "a)", "run": "FedLAMA phi=2"}]},
]


# ------------------------------------------------------------------------------------------------ pure helpers


def test_mean_std_by_hand():
    s = mean_std([0.80, 0.82, 0.84])
    assert s.n == 3 and s.mean == pytest.approx(0.82)
    assert s.std == pytest.approx(0.02)  # sqrt((0.02^2 + 0 + 0.02^2) / (3 - 1))
    assert math.isnan(mean_std([5.0]).std) and mean_std([5.0]).mean == 5.0  # one value: no sample std (issue 57)
    assert mean_std([1.0, float("nan"), 3.0]).n == 2  # non-finite values are left out
    assert mean_std([]).n == 0 and not mean_std([]).ok


def test_first_reach_and_early_stop_by_hand(tmp_path):
    root = make_sweep(tmp_path / "s", [PAIRED])
    runs = {
        name: {
            seed: RunData(root / f"{name.lower().replace(' ', '-').replace('=', '-')}/seed{seed}") for seed in (0, 1)
        }
        for name in ("FedAvg x1", "FedAvg x2", "FedLAMA phi=2")
    }
    assert first_reach(runs["FedLAMA phi=2"][0].metrics, 0.70)["iteration"] == 20
    assert first_reach(runs["FedLAMA phi=2"][0].metrics, 0.99) is None
    es = early_stop(runs["FedLAMA phi=2"], runs["FedAvg x2"], 1000.0, "best", "seed")
    assert (es.reached, es.n) == (2, 2)
    assert es.steps.mean == pytest.approx(25) and es.steps.std == pytest.approx(math.sqrt(50))
    assert es.acc.mean == pytest.approx(0.72) and es.acc.std == pytest.approx(math.sqrt(2 * 0.01**2))
    assert es.comm_pct.mean == pytest.approx(45.0)
    es = early_stop(runs["FedLAMA phi=2"], runs["FedAvg x2"], 1000.0, "best", "mean")
    assert (
        es.steps.mean == pytest.approx(20)
        and es.acc.mean == pytest.approx(0.7125)
        and es.comm_pct.mean == pytest.approx(30.0)
    )
    # the baseline against itself stops where each seed first reaches its own best accuracy
    es = early_stop(runs["FedAvg x1"], runs["FedAvg x1"], 1000.0, "best", "seed")
    assert es.steps.mean == pytest.approx(15) and es.comm_pct.mean == pytest.approx(75.0)
    # final accuracy as the target: FedAvg x2's last evaluations are 0.70 and 0.71
    es = early_stop(runs["FedLAMA phi=2"], runs["FedAvg x2"], 1000.0, "final", "seed")
    assert es.steps.mean == pytest.approx(20) and es.reached == 2


def test_paired_table_md_latex_csv(tmp_path):
    root = make_sweep(tmp_path / "s", [PAIRED, ROWS])
    sweeps = find_sweeps(root)
    md = make_table(sweeps, "paired", "md")
    lines = [l for l in md.splitlines() if l.startswith("| ")]
    # the header says what the notes say is measured: the global model on the test set (48.17: not "Validation acc.")
    assert lines[0].startswith("| LR | τ' | φ | Test acc. | C ratio | LR | τ' | φ | ES: Test acc. | ES: # of steps")
    assert "(global model, test set)" in md
    row1 = [c.strip() for c in lines[1].strip("|").split("|")]
    assert row1 == [
        "0.1",
        "2",
        "1",
        "82.00 ± 2.83%",
        "100.00%",
        "0.1",
        "2",
        "1",
        "82.00 ± 2.83%",
        "15 ± 7",
        "75.00 ± 35.36%",
        "82.00 ± 2.83%",
        "100.00%",
    ]
    row2 = [c.strip() for c in lines[2].strip("|").split("|")]
    assert row2 == [
        "0.1",
        "4",
        "1",
        "71.00 ± 1.41%",
        "50.00%",
        "0.2",
        "2",
        "2",
        "72.00 ± 1.41%",
        "25 ± 7",
        "45.00 ± 21.21%",
        "74.00 ± 1.41%",
        "60.00%",
    ]
    assert "Mean ± sample std over 2 seeds" in md and "Scale 'smoke'" in md
    tex = make_table(sweeps, "paired", "latex")
    assert "\\multicolumn{5}{c}{FedAvg (Periodic Full Avg.)}" in tex and "\\multicolumn{6}{c}{Early stopping}" in tex
    assert "$82.00 \\pm 2.83$\\%" in tex and "\\end{tabular}" in tex
    rows = list(csv.DictReader(md_csv := make_table(sweeps, "paired", "csv").splitlines()))
    assert len(rows) == 2 and md_csv
    assert float(rows[1]["es_steps_mean"]) == pytest.approx(25) and float(rows[1]["es_comm_mean"]) == pytest.approx(45)
    # the ES C ratio shows the spread its csv holds (seeds stop at 30% and 60%), in every format (48.17)
    assert float(rows[1]["es_comm_std"]) == pytest.approx(math.sqrt(450)) and "$45.00 \\pm 21.21$\\%" in tex
    assert float(rows[1]["full_acc_std"]) == pytest.approx(100 * math.sqrt(2e-4))
    assert rows[1]["right_run"] == "FedLAMA phi=2"


def test_rows_table(tmp_path):
    root = make_sweep(tmp_path / "s", [ROWS])
    md = make_table(find_sweeps(root), "rows", "md")
    lines = [l for l in md.splitlines() if l.startswith("| ")]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["LR", "τ'", "φ", "Test acc.", "Comm. cost"]
    assert [c.strip() for c in lines[3].strip("|").split("|")] == ["0.2", "2", "2 (FedLAMA)", "74.00 ± 1.41%", "60.00%"]
    assert [c.strip() for c in lines[2].strip("|").split("|")][2] == "1 (FedAvg)"


def test_early_stop_not_reached_and_partial(tmp_path):
    # FedLAMA seed 1 never reaches 0.99: only seed 0 counts, marked (1/2); a table with no seed reaching says so
    table = {"name": "p", "layout": "paired", "rows": [["FedAvg x1", "FedLAMA phi=2"]]}
    root = make_sweep(tmp_path / "s", [table])
    md = make_table(find_sweeps(root), "p", "md")
    row = [c.strip() for c in [l for l in md.splitlines() if l.startswith("| ")][1].strip("|").split("|")]
    # FedLAMA never reaches FedAvg x1 (0.80 / 0.84): its three early-stopping cells say so alike (not "n/a" in one)
    assert row[8] == row[9] == row[10] == "not reached"
    # seed 0 reaches 0.80 at iteration 20 (acc 0.85, comm 300 = 30 %); seed 1 never reaches 0.84
    lama0 = (dict(algo="fedlama", tau=2, phi=2, lr=0.2), [(10, 0.5, 200), (20, 0.85, 300)], 600)
    root = make_sweep(tmp_path / "s2", [table], evals={("FedLAMA phi=2", 0): lama0})
    md = make_table(find_sweeps(root), "p", "md")
    row = [c.strip() for c in [l for l in md.splitlines() if l.startswith("| ")][1].strip("|").split("|")]
    assert row[9] == "20 (1/2)" and row[8] == "85.00%" and row[10] == "30.00%"


def test_missing_and_incomplete_runs_exit_2(tmp_path, capsys):
    root = make_sweep(
        tmp_path / "s", [PAIRED, ROWS], FIGURES, skip={("FedAvg x2", 1)}, status={("FedLAMA phi=2", 0): "failed"}
    )
    with pytest.raises(MissingRuns) as e:
        make_table(find_sweeps(root), "paired", "md")
    msg = str(e.value)
    assert "'FedAvg x2' seed 1 (missing)" in msg and "'FedLAMA phi=2' seed 0 (failed)" in msg and "fedcli sweep" in msg
    with pytest.raises(SystemExit) as ex:
        main(["report", str(root), "--table", "rows"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1 and "FedAvg x2' seed 1 (missing)" in err
    # the listing says which products are ready
    rows = {r["name"]: r for r in listing(find_sweeps(root))}
    assert rows["paired"]["missing"] == 2 and rows["curves"]["missing"] == 1 and rows["dl"]["missing"] == 1
    # figures fail the same way, before writing anything
    with pytest.raises(MissingRuns):
        make_figures(find_sweeps(root), tmp_path / "figs")
    assert not (tmp_path / "figs").exists()


def test_report_cli_list_unknown_and_format(tmp_path, capsys):
    root = make_sweep(tmp_path / "results" / "s", [PAIRED, ROWS], FIGURES)
    assert main(["report", str(tmp_path / "results")]) == 0  # the parent folder: sweeps are found below it
    out = capsys.readouterr().out
    assert "paired" in out and "rows" in out and "delta-lambda" in out
    for args, needle in (
        (["--table", "nope"], "no table named 'nope'"),
        (["--table", "paired", "--format", "docx"], "--format"),
        (["--table", "curves"], "is a figure"),
    ):
        with pytest.raises(SystemExit) as ex:
            main(["report", str(root), *args])
        assert ex.value.code == 2 and needle in capsys.readouterr().err
    with pytest.raises(ConfigError):
        find_sweeps(tmp_path / "nothing-here")
    # an unknown name: the closest one, and only the products of the kind asked for (issue 48, 18: --table listed the
    # figures as tables, --figure the tables as figures)
    for args, said in (
        (["--table", "pared"], "no table named 'pared' here; did you mean paired? the tables here: paired, rows ("),
        (
            ["--figures", str(tmp_path / "f"), "--figure", "curvs"],
            "no figure named 'curvs' here; did you mean curves? the figures here: curves, dl, size, syncs (",
        ),
    ):
        with pytest.raises(SystemExit) as ex:
            main(["report", str(root), *args])
        assert ex.value.code == 2 and said in capsys.readouterr().err


def test_report_cli_points_at_what_to_run(tmp_path, capsys):
    """Issue 48, 18: a recipe given to `fedcli report` points at `fedcli sweep` (it said "no such folder"), a misspelt
    --paper gets "did you mean", and --paper names a figures folder only where it wrote one."""
    recipe = tmp_path / "aaai-table3.toml"
    recipe.write_text('title = "t"\n')
    (tmp_path / "notes.txt").write_text("x")
    for arg, said in (
        (
            recipe,
            f"{recipe} is a recipe, not a folder of results; run it with `fedcli sweep {recipe} "
            f"--scale smoke --out DIR`, then `fedcli report DIR`",
        ),
        (tmp_path / "notes.txt", "notes.txt is a file; give a run directory"),
        (tmp_path / "nowhere", "nowhere: no such folder"),
    ):
        with pytest.raises(SystemExit) as ex:
            main(["report", str(arg)])
        assert ex.value.code == 2 and said in capsys.readouterr().err
    root = make_sweep(tmp_path / "results" / "s", [PAIRED], FIGURES)
    with pytest.raises(SystemExit) as ex:
        main(["report", str(root), "--paper", "fedlama-aaa"])
    assert (
        ex.value.code == 2
        and "--paper fedlama-aaa: not a paper fedcli has recipes for; did you mean fedlama-aaai"
        in capsys.readouterr().err
    )
    # no sweep of Fed-LAMB here: the section says so, and no figures folder is named (none is made)
    out = tmp_path / "paper"
    assert main(["report", str(tmp_path / "results"), "--paper", "fedlamb", "--output", str(out)]) in (0, None)
    err = capsys.readouterr().err
    assert f"paper section -> {out / 'section.tex'}" in err and "figures ->" not in err
    assert not (out / "figures").exists()


def test_figures_png_pdf(tmp_path):
    root = make_sweep(tmp_path / "s", [PAIRED], FIGURES)
    files = make_figures(find_sweeps(root), tmp_path / "figs")
    names = sorted(f.name for f in files)
    assert names == sorted(
        f"{n}.{e}" for n in ("curves", "syncs", "size", "dl") for e in ("png", "pdf", "txt")
    )  # txt: caption
    import matplotlib.image

    for f in (f for f in files if f.suffix != ".txt"):
        assert f.stat().st_size > 1000
        if f.suffix == ".png":
            img = matplotlib.image.imread(f)
            assert img.shape[0] > 200 and img.shape[1] > 200
        else:
            assert f.read_bytes()[:5] == b"%PDF-"


def test_delta_lambda_by_hand(tmp_path):
    # d = [1.0, 0.1, 0.5], numel = [10, 80, 10]: order by d = [1, 2, 0]; d*numel = 8, 5, 10 (sum 23)
    # delta = 8/23, 13/23, 1; lambda = 0.8, 0.9, 1.0 -> 1 - lambda = 0.2, 0.1, 0; the curves cross at l = 1
    root = make_sweep(tmp_path / "s", [PAIRED])
    run = RunData(root / "fedlama-phi-2/seed0")
    deltas, one_minus, order, rnd, it = delta_lambda_curves(run, -1)
    assert order == [1, 2, 0] and rnd == 1 and it == 8
    assert deltas == pytest.approx([8 / 23, 13 / 23, 1.0]) and one_minus == pytest.approx([0.2, 0.1, 0.0])
    assert cross_point(deltas, one_minus) == 1
    assert cross_point([0.1, 0.2], [0.9, 0.1]) == 2 and cross_point([0.0], [1.0]) is None
    with pytest.raises(ValueError):
        delta_lambda_curves(run, 7)


def test_spec_errors():
    with pytest.raises(ConfigError, match="layout"):
        parse_table({"name": "x", "layout": "wide", "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="pairs"):
        parse_table({"name": "x", "layout": "paired", "rows": [["a"]]}, loc)
    with pytest.raises(ConfigError, match="unknown column"):
        parse_table({"name": "x", "columns": ["acc", "bogus"], "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="unknown key 'colums'"):
        parse_table({"name": "x", "colums": ["acc"], "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="kind"):
        parse_figure({"name": "f", "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="one FedLAMA run"):
        parse_figure({"name": "f", "kind": "delta-lambda", "runs": ["a", "b"]}, loc)
    t = parse_table({"name": "x", "layout": "paired", "rows": [["a", "b"], ["c", "d"]]}, loc)
    assert t.groups[0].baseline == "a" and t.run_names() == ["a", "b", "c", "d"]


# ------------------------------------------------------------------------------------------------ rounds to a target
# accuracy
# Fed-LAMB (Section 5): "Fed-AMS requires 20 rounds to achieve 90% accuracy, while Fed-LAMB only takes 5 rounds".
# Three seeds, target 0.80; evals are (round, test_acc, cumulative comm_bytes). Iterations differ between seeds
# (4 + seed local steps per round, as with --local-epochs), so only rounds line the seeds up.
#   "SGD"  (algo fedsgd): seed 0 first >= .80 at round 2 (2.0 MB), seed 1 at round 3 (exactly .80; 3.0 MB),
#          seed 2 at round 1 (1.0 MB) -> rounds 2, 3, 1: 2.0 ± 1.0; MB 2, 3, 1: 2.00 ± 1.00
#   "LAMB" (algo fedlamb): seed 0 at round 1 (1.5 MB), seed 1 at round 3 (4.5 MB), seed 2 never (best .79)
#          -> rounds 1, 3: 2.0 ± 1.4 (2/3) (std sqrt(2)); MB 1.5, 4.5: 3.00 ± 2.12 (std 3/sqrt(2))
#   "Mime" (algo mime): never -> — and —
#   "AMS"  (algo fedams): only seed 1, at round 3 (2.5 MB) -> 3 (1/3) and 2.50
#   "Adp"  (algo adp-fed, the registry's fedadam): every seed at round 1 (0.5 MB) -> 1.0 ± 0.0 and 0.50 ± 0.00
REACH_EVALS = {
    "SGD": (
        "fedsgd",
        "fedavg",
        {
            0: [(1, 0.50, 1e6), (2, 0.82, 2e6), (3, 0.85, 3e6)],
            1: [(1, 0.60, 1e6), (2, 0.79, 2e6), (3, 0.80, 3e6)],
            2: [(1, 0.81, 1e6), (2, 0.70, 2e6), (3, 0.90, 3e6)],
        },
    ),
    "LAMB": (
        "fedlamb",
        "fedlamb",
        {
            0: [(1, 0.80, 1.5e6), (2, 0.85, 3e6), (3, 0.86, 4.5e6)],
            1: [(1, 0.40, 1.5e6), (2, 0.60, 3e6), (3, 0.95, 4.5e6)],
            2: [(1, 0.40, 1.5e6), (2, 0.60, 3e6), (3, 0.79, 4.5e6)],
        },
    ),
    "Mime": ("mime", "mime", {s: [(1, 0.30, 2e6), (2, 0.50, 4e6), (3, 0.70, 6e6)] for s in (0, 1, 2)}),
    "AMS": (
        "fedams",
        "fedams",
        {
            0: [(1, 0.3, 1e6), (2, 0.5, 2e6), (3, 0.6, 3e6)],
            1: [(1, 0.3, 1e6), (2, 0.5, 2e6), (3, 0.8, 2.5e6)],
            2: [(1, 0.3, 1e6), (2, 0.5, 2e6), (3, 0.7, 3e6)],
        },
    ),
    "Adp": ("adp-fed", "fedadam", {s: [(1, 0.9, 0.5e6), (2, 0.91, 1e6)] for s in (0, 1, 2)}),
}


def make_round_sweep(root, tables, figures=(), scale="smoke"):
    """A sweep of 3 seeds written by hand: manifest.json + metrics.csv per run directory."""
    entries = []
    for name, (algo, method, per_seed) in REACH_EVALS.items():
        for seed, evals in per_seed.items():
            rel = f"{name.lower()}/seed{seed}"
            path = root / rel
            path.mkdir(parents=True)
            cfg = {
                "algo": algo,
                "lr": 0.1,
                "seed": seed,
                "tau": 1,
                "dataset": "mnist",
                "clients": 20,
                "local_epochs": 1.0,
            }
            manifest = {
                "status": "completed",
                "config": cfg,
                "method": {"name": method, "schedule": "periodic"},
                "seed": seed,
                "summary": {"comm_params": 1000, "comm_bytes": evals[-1][2]},
            }
            (path / "manifest.json").write_text(json.dumps(manifest))
            write_csv(
                path / "metrics.csv",
                METRICS_COLUMNS,
                [
                    {
                        "round": rnd,
                        "iteration": rnd * (4 + seed),
                        "test_acc": acc,
                        "comm_params": 100 * rnd,
                        "comm_bytes": b,
                        "train_loss": 1.0,
                        "test_loss": 1.0,
                        "personal_acc": "",
                    }
                    for rnd, acc, b in evals
                ],
            )
            entries.append({"name": name, "seed": seed, "dir": rel, "status": "completed"})
    manifest = {
        "fedcli_sweep": 1,
        "recipe": "recipes/test.toml",
        "scale": scale,
        "seeds": [0, 1, 2],
        "title": "t",
        "paper": "Fed-LAMB-like",
        "tables": [product_to_dict(parse_table(t, loc, scale)) for t in tables],
        "figures": [product_to_dict(parse_figure(f, loc, scale)) for f in figures],
        "runs": entries,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps(manifest))
    return root


TARGET = {
    "name": "reach",
    "layout": "target",
    "target": 0.9,
    "scale": {"smoke": {"target": 0.8}},
    "groups": [{"label": "one", "runs": ["SGD", "LAMB", "Mime"]}, {"label": "two", "runs": ["AMS", "Adp"]}],
}


def md_rows(md):
    return [[c.strip() for c in l.strip("|").split("|")] for l in md.splitlines() if l.startswith("| ")]


def test_rounds_to_target_by_hand(tmp_path):
    root = make_round_sweep(tmp_path / "s", [TARGET])
    sweeps = find_sweeps(root)
    md = make_table(sweeps, "reach", "md")
    rows = md_rows(md)
    assert rows[0] == ["Method", "Rounds to 80%", "Iterations to 80%", "Comm. to 80% (MB)"]  # the smoke target (0.8)
    assert rows[1] == [
        "Fed-SGD",
        "2.0 ± 1.0",
        "9.7 ± 4.7",
        "2.00 ± 1.00",
    ]  # fedsgd: the registry's fedavg, labelled as the recipe names it
    assert rows[2] == [
        "Fed-LAMB",
        "2.0 ± 1.4 (2/3)",
        "9.5 ± 7.8",
        "3.00 ± 2.12",
    ]  # seeds 0 and 1: round 1 of 4 iterations (4), round 3 of 5 (15)
    assert rows[3] == ["Mime", "—", "—", "—"]
    assert rows[4] == rows[0]  # second group: its own header
    assert rows[5] == ["Fed-AMS", "3 (1/3)", "15", "2.50"]
    assert rows[6] == ["Adp-Fed", "1.0 ± 0.0", "5.0 ± 1.0", "0.50 ± 0.00"]
    assert "A round is 4 to 6 local iterations for Fed-SGD (E=1), Fed-LAMB (E=1)" in md  # local epochs: per seed
    assert "**one**" in md and "**two**" in md and "at least 80%" in md and "(k/n)" in md
    recs = {r["run"]: r for r in csv.DictReader(make_table(sweeps, "reach", "csv").splitlines())}
    assert float(recs["LAMB"]["rounds_mean"]) == pytest.approx(2.0) and float(
        recs["LAMB"]["rounds_std"]
    ) == pytest.approx(math.sqrt(2))
    assert float(recs["LAMB"]["comm_mb_std"]) == pytest.approx(3 / math.sqrt(2))
    assert (recs["LAMB"]["rounds_reached"], recs["LAMB"]["rounds_n"]) == ("2", "3")
    assert recs["Mime"]["rounds_mean"] == "" and recs["Mime"]["rounds_reached"] == "0"
    tex = make_table(sweeps, "reach", "latex")
    assert "$2.0 \\pm 1.4$ (2/3)" in tex and "Rounds to 80\\%" in tex
    # without the scale, the table's own target (0.9): only Adp reaches it (round 1); SGD seed 2 reaches .90 at round 3
    root = make_round_sweep(tmp_path / "p", [TARGET], scale="paper")
    rows = md_rows(make_table(find_sweeps(root), "reach", "md"))
    assert (
        rows[0][1] == "Rounds to 90%"
        and rows[1][1:] == ["3 (1/3)", "18", "3.00"]
        and rows[2][1:] == ["3 (1/3)", "15", "4.50"]
    )
    assert rows[6][1:] == ["1.0 ± 0.0", "5.0 ± 1.0", "0.50 ± 0.00"]


def test_target_columns_and_metric(tmp_path):
    table = {
        "name": "reach",
        "layout": "target",
        "target": 0.8,
        "columns": ["name", "lr", "acc"],
        "runs": ["SGD", "Mime"],
    }
    root = make_round_sweep(tmp_path / "s", [table])
    md = make_table(find_sweeps(root), "reach", "md")
    rows = md_rows(md)
    assert rows[0] == ["Run", "LR", "Test acc.", "Rounds to 80%", "Iterations to 80%", "Comm. to 80% (MB)"]
    assert rows[1][:2] == ["SGD", "0.1"] and rows[2][3:] == ["—", "—", "—"]
    assert "Mean ± sample std over 3 seeds" in md and "at least 80%" in md  # both notes: accuracy and reach


def test_target_spec_errors():
    with pytest.raises(ConfigError, match="needs `target`"):
        parse_table({"name": "x", "layout": "target", "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="fraction"):
        parse_table({"name": "x", "layout": "target", "target": 90, "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="is for layout"):
        parse_table({"name": "x", "target": 0.9, "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="metric"):
        parse_table({"name": "x", "layout": "target", "target": 0.9, "metric": "train_loss", "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="list its runs"):
        parse_table({"name": "x", "layout": "target", "target": 0.9, "rows": [["a", "b"]]}, loc)
    with pytest.raises(ConfigError, match="does not define"):
        parse_table(
            {"name": "x", "layout": "target", "target": 0.9, "runs": ["a"], "scale": {"tiny": {"target": 0.5}}},
            loc,
            "smoke",
            ["paper", "smoke"],
        )
    with pytest.raises(ConfigError, match="unknown key 'tagret'"):
        parse_table(
            {"name": "x", "layout": "target", "target": 0.9, "runs": ["a"], "scale": {"smoke": {"tagret": 0.5}}}, loc
        )
    with pytest.raises(ConfigError, match="fraction"):  # an override is checked like the key itself
        parse_table(
            {"name": "x", "layout": "target", "target": 0.9, "runs": ["a"], "scale": {"smoke": {"target": 2}}},
            loc,
            "smoke",
        )
    t = parse_table(
        {
            "name": "x",
            "layout": "target",
            "target": 0.9,
            "metric": "personal_acc",
            "runs": ["a"],
            "scale": {"smoke": {"target": 0.5}},
        },
        loc,
        "paper",
        ["paper", "smoke"],
    )
    assert (t.target, t.metric, t.columns) == (0.9, "personal_acc", ["method"])
    assert (
        parse_figure({"name": "f", "kind": "curves", "runs": ["a"], "x": "round"}, loc).x == "rounds"
    )  # the older spelling
    assert parse_figure({"name": "f", "kind": "curves", "runs": ["a"], "x": "bytes"}, loc).x == "bytes"
    assert (
        parse_figure({"name": "f", "kind": "curves", "runs": ["a"], "scale": {"smoke": {"x": "round"}}}, loc, "smoke").x
        == "rounds"
    )
    with pytest.raises(ConfigError, match="x must be one of iterations, rounds, params, bytes"):
        parse_figure({"name": "f", "kind": "curves", "runs": ["a"], "x": "epoch"}, loc)


def test_method_labels_from_the_recipe_algo(tmp_path):
    for algo, method, label in (
        ("fedsgd", "fedavg", "Fed-SGD"),
        ("fedavg", "fedavg", "FedAvg"),
        ("adp-fed", "fedadam", "Adp-Fed"),
        ("fedadam", "fedadam", "Adp-Fed"),
        ("fedams", "fedams", "Fed-AMS"),
        ("mime", "mime", "Mime"),
        ("mimelamb", "mimelamb", "Mime-LAMB"),
        ("fedlamb", "fedlamb", "Fed-LAMB"),
    ):
        run = RunData(tmp_path, {"config": {"algo": algo}, "method": {"name": method, "schedule": "periodic"}})
        assert run.method_label() == label, algo
    run = RunData(tmp_path, {"config": {"algo": "fedprox", "schedule": "lama"}, "method": {"name": "fedprox"}})
    assert run.method_label() == "FedProx + FedLAMA"


def test_round_axis_figure(tmp_path):
    from fedcli.reports.figures import _curve

    fig = {
        "name": "acc-rounds",
        "kind": "curves",
        "x": "round",
        "runs": ["SGD", "LAMB", "Mime", "AMS"],
        "title": "accuracy vs rounds",
    }
    root = make_round_sweep(tmp_path / "s", [], [fig])
    runs = find_sweeps(root)[0].need(parse_figure(fig, loc))
    xs, means, stds = _curve(runs["SGD"], "rounds", "test_acc")
    assert xs == [1, 2, 3] and means == pytest.approx([100 * 1.91 / 3, 100 * 2.31 / 3, 100 * 2.55 / 3])
    assert _curve(runs["SGD"], "iterations", "test_acc")[0] == []  # seeds share no iteration: only rounds line them up
    files = make_figures(find_sweeps(root), tmp_path / "figs")
    assert sorted(f.name for f in files) == ["acc-rounds.pdf", "acc-rounds.png", "acc-rounds.txt"]
    import matplotlib.image

    img = matplotlib.image.imread(tmp_path / "figs" / "acc-rounds.png")
    assert img.shape[0] > 200 and img.shape[1] > 200


@pytest.mark.parametrize("stem", ["fig2-iid", "fig3-noniid", "fig4-table1-cifar10", "fig5-skip-sync"])
def test_fedlamb_recipes_products(stem):
    from pathlib import Path

    from fedcli.recipes import read_sweep
    from fedcli.reports.products import parse_products

    path = Path(__file__).resolve().parents[2] / "recipes" / "fedlamb" / f"{stem}.toml"
    targets = {}
    for scale in ("paper", "smoke"):
        tables, figures = parse_products(read_sweep(path, scale))
        assert figures and all(f.x == "rounds" for f in figures if f.kind == "curves")
        assert "switch to x" not in path.read_text()
        targets[scale] = [t.target for t in tables if t.layout == "target"]
    if stem in ("fig2-iid", "fig3-noniid"):
        assert targets["paper"] and all(0 < t <= 1 for t in targets["paper"] + targets["smoke"])
