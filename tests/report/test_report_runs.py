"""``fedcli report RUN_DIR [RUN_DIR...]`` and bare ``fedcli report``: single `fedcli train` runs.

Runs are real (digits, a small MLP, a few iterations); every number in the table is checked against the run's own
files, worked out independently here (layers.csv, the manifest's summary)."""

import csv
import io
import json
import shutil

import pytest

from fedcli.cli.main import main
from fedcli.reports.single import load_run, method_label
from simkit import cli
from simkit import md_table as md_rows

ARGS = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--iterations",
    "20",
    "--tau",
    "2",
    "--threads",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "results"
    for name, extra in (
        ("lama", ["--algo", "fedlama", "--phi", "2"]),
        ("avg", ["--algo", "fedavg"]),
        ("pers", ["--algo", "fedavg-c", "--client-test-fraction", "0.25", "--active-ratio", "1"]),
    ):
        assert main(["train", *ARGS, *extra, "--out", str(root / name)]) in (0, None)
    return root


def test_one_run_table_and_figures(runs, capsys, tmp_path):
    run = tmp_path / "lama"
    shutil.copytree(runs / "lama", run)
    code, out, err = cli(["report", str(run)], capsys)
    assert code == 0, err
    (row,) = md_rows(out)
    m = json.loads((run / "manifest.json").read_text())
    assert row["Run"] == "lama" and row["Method"] == "FedLAMA (τ′=2, φ=2)" and row["Status"] == "completed"
    assert row["Data / model"] == "digits/mlp" and row["Iterations (rounds)"].startswith("20 (")
    with open(run / "metrics.csv", newline="") as f:
        metrics = list(csv.DictReader(f))
    accs = [float(r["test_acc"]) for r in metrics]
    assert row["Final acc."] == f"{100 * accs[-1]:.2f}%"
    best = max(range(len(accs)), key=lambda i: accs[i])
    assert row["Best acc. (iteration)"] == f"{100 * accs[best]:.2f}% ({metrics[best]['iteration']})"
    # no FedAvg run given: against FedAvg with the run's cohort, tau and budget, by hand: every layer synchronized
    # 20 / 2 times; in bytes those parameters x the cohort's clients x 8 (32 bits up, 32 down)
    with open(run / "layers.csv", newline="") as f:
        layers = list(csv.DictReader(f))
    fedavg = sum(int(r["numel"]) for r in layers) * 20 // 2
    assert (
        row["Comm. vs FedAvg (computed) (params)"]
        == f"{100 * sum(int(r['comm_params']) for r in layers) / fedavg:.2f}%"
    )
    cohort = m["active_clients"]
    assert (
        row["Comm. vs FedAvg (computed) (bytes)"] == f"{100 * m['summary']['comm_bytes'] / (fedavg * cohort * 8):.2f}%"
    )
    assert row["Data moved (MB)"] == f"{m['summary']['comm_bytes'] / 1e6:,.2f}"
    names = sorted(p.name for p in (run / "figures").iterdir())
    assert names == sorted(
        f"{n}.{e}"
        for n in ("curves", "curves-params", "layer-syncs", "layer-size", "intervals", "delta-lambda")
        for e in ("png", "pdf", "txt")
    )
    assert all((run / "figures" / n).stat().st_size > 1000 for n in names if not n.endswith(".txt"))


@pytest.mark.long(
    reason="a report drawing a FedAvg run's four figures (2 s); make test holds it in "
    "tests/report/test_paper_figures.py::test_communication_figure_by_default_and_truetype_fonts (a FedAvg run's "
    "figures: the same four, against bytes)"
)
def test_periodic_run_has_no_delta_lambda_or_intervals_figure(runs, tmp_path, capsys):
    out = tmp_path / "figs"
    assert cli(["report", str(runs / "avg"), "--figures", str(out)], capsys)[0] == 0
    assert sorted(p.stem for p in out.glob("*.png")) == ["curves", "curves-params", "layer-size", "layer-syncs"]


def test_several_runs_compare_with_personal_accuracy(runs, capsys):
    code, out, err = cli(["report", str(runs / "lama"), str(runs / "avg"), str(runs / "pers"), "-f", "csv"], capsys)
    assert code == 0, err
    rows = {r["name"].rsplit("/", 1)[-1]: r for r in csv.DictReader(io.StringIO(out))}
    assert set(rows) == {"lama", "avg", "pers"}
    assert float(rows["avg"]["comm"]) == pytest.approx(100.0)  # the FedAvg run is the baseline of every row
    assert float(rows["avg"]["comm_pct_bytes"]) == pytest.approx(100.0)
    assert rows["avg"]["method"] == "FedAvg (τ=2)" and rows["pers"]["method"] == "FedAvg-C (τ=2)"
    m = json.loads((runs / "pers" / "manifest.json").read_text())
    assert float(rows["pers"]["best_personal_acc"]) == pytest.approx(100 * m["summary"]["best_personal_acc"])
    assert rows["avg"]["best_personal_acc"] == ""  # not personalized
    assert "add --figures OUTDIR" in err  # several runs: figures only on request


@pytest.mark.long(
    reason="a second report drawing every figure of a FedLAMA and a FedAvg run (3 s); make test holds it in "
    "tests/report/test_figure_style.py::test_accuracy_against_communicated_parameters"
)
def test_several_runs_are_drawn_on_request(runs, capsys, tmp_path):
    figs = tmp_path / "cmp"
    assert cli(["report", str(runs / "lama"), str(runs / "avg"), "--figures", str(figs)], capsys)[0] == 0
    assert (figs / "curves.png").exists() and (figs / "delta-lambda.png").exists()


def test_labels_come_from_the_manifest(runs, tmp_path):
    run = tmp_path / "renamed"
    shutil.copytree(runs / "avg", run)
    m = json.loads((run / "manifest.json").read_text())
    m["method"]["name"], m["method"]["label"] = "my-method", "My-Method"
    m["config"]["init"] = "ala"
    m["method"]["init"] = "ala"
    (run / "manifest.json").write_text(json.dumps(m))
    assert method_label(load_run(run)) == "My-Method + ALA (τ=2)"


def test_bare_report_reads_results(runs, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(runs.parent)
    code, out, err = cli(["report"], capsys)
    assert code == 0, err
    assert sorted(r["Run"] for r in md_rows(out)) == ["avg", "lama", "pers"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    code, _, err = cli(["report"], capsys)
    assert code == 2 and "no sweep (sweep.json) and no run directory (manifest.json)" in err


def test_report_errors(runs, capsys, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    code, _, err = cli(["report", str(bad)], capsys)
    assert code == 3 and f"{bad / 'manifest.json'}: not a readable run manifest" in err
    code, _, err = cli(["report", str(runs / "avg"), "--table", "x"], capsys)
    assert code == 2 and "is a run directory" in err
    code, _, err = cli(["report", str(tmp_path / "nope")], capsys)
    assert code == 2 and "no such folder" in err
    code, _, err = cli(["report", str(runs), "--figure", "x"], capsys)
    assert code == 2 and "--figure needs --figures OUTDIR" in err
    holder = tmp_path / "holder"
    (holder / "sweep-a").mkdir(parents=True)
    (holder / "sweep-a" / "sweep.json").write_text("{broken")
    code, _, err = cli(["report", str(holder)], capsys)  # a broken sweep manifest is said, not skipped
    assert code == 2 and "not a readable sweep manifest" in err
