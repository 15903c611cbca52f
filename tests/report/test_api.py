"""``fedcli.load(path)``: run directories as pandas DataFrames (issue 39), torch-free; ``examples/notebook.py`` runs.

The frames are checked against the runs' own CSV files and manifests, read here with the csv module."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedcli
from fedcli.cli.main import main
from fedcli.api import flags
from fedcli.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--dataset", "digits", "--mlp-hidden", "16", "--clients", "4", "--iterations", "20", "--eval-every", "10",
        "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("api") / "results"
    for name, extra in (("lama/s0", ["--algo", "fedlama", "--tau", "2", "--seed", "0"]),
                        ("lama/s1", ["--algo", "fedlama", "--tau", "2", "--seed", "1"]),
                        ("avg", ["--algo", "fedavg"])):
        assert main(["train", *ARGS, *extra, "--out", str(root / name)]) in (0, None)
    return root


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_load_a_folder_of_runs_as_dataframes(results):
    r = fedcli.load(results)
    assert len(r) == 3 and sorted(r.runs_by_name) == ["avg", "lama/s0", "lama/s1"]
    m = r.metrics
    for name in r.runs_by_name:
        mine = m[m.run == name].sort_values("iteration")
        want = read(results / name / "metrics.csv")
        assert list(mine.iteration) == [int(w["iteration"]) for w in want]
        assert list(mine.test_acc) == pytest.approx([float(w["test_acc"]) for w in want])
    # the seeds of one experiment share its name; the other run is its own
    assert dict(zip(r.runs.run, r.runs.experiment)) == {"avg": "avg", "lama/s0": "lama", "lama/s1": "lama"}
    assert set(m[m.run == "lama/s1"].seed) == {1} and set(m.method) == {"FedAvg (τ=5)", "FedLAMA (τ′=2, φ=2)"}
    # an empty CSV cell (personal_acc of a global-model run) is NaN in a float column, not text
    assert m.test_acc.dtype.kind == "f"
    # layers and intervals: one row per layer (per adjustment), as in the files
    assert len(r.layers) == sum(len(read(results / n / "layers.csv")) for n in r.runs_by_name)
    lama = read(results / "lama/s0" / "intervals.csv")
    iv = r.intervals[r.intervals.run == "lama/s0"]
    assert list(iv.interval) == [int(x["interval"]) for x in lama] and "avg" not in set(r.intervals.run)
    # one row per run: its config and summary (prefixed), as its manifest holds them
    man = json.loads((results / "avg" / "manifest.json").read_text())
    row = r.runs.set_index("run").loc["avg"]
    assert row["tau"] == man["config"]["tau"] and row["summary.comm_params"] == man["summary"]["comm_params"]
    assert r.clients.empty


def test_load_one_run_and_what_cannot_be_read(results, tmp_path):
    one = fedcli.load(results / "avg")
    assert list(one.runs_by_name) == ["avg"] and one.run("avg").config["algo"] == "fedavg"
    bad = tmp_path / "bad"
    (bad / "x").mkdir(parents=True)
    (bad / "x" / "manifest.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no run directory"):
        fedcli.load(tmp_path / "empty")
    r = fedcli.load(bad)
    assert len(r) == 0 and "x" in r.skipped and "not a readable run manifest" in r.skipped["x"]
    with pytest.raises(DataError, match="not a readable run manifest"):
        fedcli.load(bad, strict=True)
    with pytest.raises(ConfigError, match="no such folder"):
        fedcli.load(tmp_path / "nowhere")


def test_import_fedcli_and_load_stay_torch_free(results):
    code = ("import sys, fedcli; r = fedcli.load(sys.argv[1]); r.metrics; r.layers; r.runs; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(results)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    bare = subprocess.run([sys.executable, "-c", "import sys, fedcli; print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert bare.stdout.strip() == "[]"


def test_flags_from_keywords():
    assert flags(algo="fedlama", tau=5, ala_trace=True, quiet=False, phi=None) == \
        ["--algo", "fedlama", "--tau", "5", "--ala-trace"]


def test_notebook_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook.py"), str(tmp_path / "nb")], capture_output=True,
                         text=True, timeout=280, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<fedcli results: 4 run(s)" in out.stdout and "FedLAMA (τ′=2, φ=2)" in out.stdout
    assert "fedavg (seeds 0, 1)" in out.stdout  # the report's table: one row per experiment
    assert (tmp_path / "nb" / "figures" / "curves-params.png").is_file()


def test_fedcli_report_is_callable_and_still_the_package(results, tmp_path, capsys):
    """``fedcli.report(...)`` runs the report command (the issue's notebook API); its modules import as before."""
    import fedcli.report.tables as tables

    assert callable(fedcli.report) and fedcli.report.tables is tables
    fedcli.report(results / "lama" / "s0", results / "lama" / "s1", figures=tmp_path / "fig")
    assert "seeds 0, 1" in capsys.readouterr().out
    assert (tmp_path / "fig" / "curves.pdf").is_file() and (tmp_path / "fig" / "curves-params.pdf").is_file()
