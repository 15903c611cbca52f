"""``fedcli.load(path)``: run directories as pandas DataFrames (issue 39), torch-free; ``examples/notebook.py`` runs.

The frames are checked against the runs' own CSV files and manifests, read here with the csv module."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedcli
from fedcli.api import flags
from fedcli.cli.main import main
from fedcli.errors import ConfigError, DataError, FedcliError
from runkit import run_forked
from sweepkit import RECIPE as SWEEP_RECIPE

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook.py"
ARGS = [
    "--dataset",
    "digits",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--iterations",
    "20",
    "--eval-every",
    "10",
    "--threads",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("api") / "results"
    for name, extra in (
        ("lama/s0", ["--algo", "fedlama", "--tau", "2", "--seed", "0"]),
        ("lama/s1", ["--algo", "fedlama", "--tau", "2", "--seed", "1"]),
        ("avg", ["--algo", "fedavg"]),
    ):
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
    code = (
        "import sys, fedcli; r = fedcli.load(sys.argv[1]); r.metrics; r.layers; r.runs; r.system; r.experiments; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(results)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    bare = subprocess.run(
        [sys.executable, "-c", "import sys, fedcli; print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert bare.stdout.strip() == "[]"


def test_flags_from_keywords():
    assert flags(algo="fedlama", tau=5, ala_trace=True, quiet=False, phi=None) == [
        "--algo",
        "fedlama",
        "--tau",
        "5",
        "--ala-trace",
    ]


def test_notebook_example_runs(tmp_path):
    """``python examples/notebook.py OUT`` as a forked child (runkit.run_forked: its own process and streams, torch and
    pandas already imported) running the file as ``__main__``."""
    script = f"import runpy, sys; sys.argv[0] = {str(NOTEBOOK)!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    out = run_forked(script, [str(tmp_path / "nb")], timeout=280, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<fedcli results: 4 run(s)" in out.stdout and "FedLAMA (τ′=2, φ=2)" in out.stdout
    # the report's table, returned as a DataFrame: one row per experiment (and not printed: issue 57)
    assert re.search(r"^\d+\s+fedavg\s+[\d.]+\s+[\d.]+\s+2$", out.stdout, re.M) and "| Run |" not in out.stdout
    assert (tmp_path / "nb" / "figures" / "curves-params.png").is_file()


def test_fedcli_report_is_the_api_function_and_the_package_is_reports(results, tmp_path, capsys):
    """``fedcli.report(...)`` runs the report command (the issue's notebook API) and returns what it printed and drew
    (issue 48, 16: it returned None); it is fedcli/api.py's ``write_report``, and importing the report package
    (``fedcli.reports``) leaves it so (issue 60: no callable module)."""
    import fedcli.reports.tables as tables

    assert fedcli.report is fedcli.write_report and fedcli.reports.tables is tables
    table, figures = fedcli.report(results / "lama" / "s0", results / "lama" / "s1", figures=tmp_path / "fig")
    assert capsys.readouterr().out == ""  # returned, not printed (issue 57: it printed the whole table)
    assert (tmp_path / "fig" / "curves.pdf").is_file() and (tmp_path / "fig" / "curves-params.pdf").is_file()
    # the table as a DataFrame (the tidy CSV of --format csv): one row per experiment, its numbers as numbers
    runs = fedcli.load(results / "lama").runs
    assert len(table) == 1 and table.final_acc_mean.dtype.kind == "f" and table.final_acc_n.item() == 2
    assert table.final_acc_mean.item() == pytest.approx(100 * runs["summary.final_acc"].mean())
    assert tmp_path / "fig" / "curves.pdf" in figures and all(f.is_file() for f in figures)
    assert {f.suffix for f in figures} >= {".png", ".pdf"}
    again, _ = fedcli.report(
        results / "lama" / "s0", results / "lama" / "s1", print=True
    )  # asked: printed as the CLI does
    out = capsys.readouterr().out
    assert "(seeds 0, 1) |" in out and "| Run |" in out and again.equals(table)


def test_train_and_report_raise_the_commands_error(tmp_path, capsys):
    """``fedcli.train(algo="fedlamma")`` raised a FedcliError saying only "exited with code 2 (its message is above)"
    (issue 48, 16): the exception carries the command's one-line message, its class and its exit code."""
    with pytest.raises(ConfigError) as e:
        fedcli.train(tmp_path / "typo", algo="fedlamma", dataset="digits")
    assert "unknown method 'fedlamma'; did you mean fedlama" in str(e.value) and e.value.exit_code == 2
    assert "exited with code" not in str(e.value) and not (tmp_path / "typo").exists()
    with pytest.raises(ConfigError, match="No such option: --no-such-flag") as e:  # the parser's own errors too
        fedcli.train(tmp_path / "typo", no_such_flag=3)
    assert e.value.exit_code == 2
    with pytest.raises(ConfigError, match="nowhere: no such folder") as e:
        fedcli.report(tmp_path / "nowhere")
    assert e.value.exit_code == 2


#: the system model with slow clients that miss a deadline and are dropped: system.csv lists their ids
SYSTEM = ["--system", "--speed", "lognormal:1e7,2", "--deadline", "0.5", "--on-deadline", "drop"]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """A global-model run (global/avg, trained with --system) and a personalized one (personal/pc): metrics.csv's
    personal_acc is empty in the first, clients.csv is the second's only, system.csv the first's only."""
    root = tmp_path_factory.mktemp("kinds")
    for name, algo, extra in (("global/avg", "fedavg", SYSTEM), ("personal/pc", "fedavg-c", [])):
        assert main(["train", *ARGS, "--algo", algo, *extra, "--out", str(root / name)]) in (0, None)
    bad = root / "none" / "x"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text("{not json")
    return root


#: the dtypes the frames have whatever is loaded (issue 48, 14), written out here, not read from fedcli.api
IDENTITY = {
    "run": "object",
    "experiment": "object",
    "method": "object",
    "seed": "Int64",
    "dataset": "object",
    "model": "object",
    "sweep": "object",
    "recipe_run": "object",
    "scale": "object",
}
DTYPES = {
    "metrics": {
        **IDENTITY,
        "round": "Int64",
        "iteration": "Int64",
        "train_loss": "float64",
        "test_loss": "float64",
        "test_acc": "float64",
        "comm_params": "Int64",
        "comm_bytes": "float64",
        "wall_s": "float64",
        "current_lr": "float64",
        "skipped_clients": "Int64",
        "personal_acc": "float64",
    },
    "layers": {
        **IDENTITY,
        "layer": "Int64",
        "name": "object",
        "kind": "object",
        "numel": "Int64",
        "syncs": "Int64",
        "comm_params": "Int64",
        "comm_bytes": "float64",
        "interval": "Int64",
    },
    "intervals": {
        **IDENTITY,
        "round": "Int64",
        "iteration": "Int64",
        "layer": "Int64",
        "name": "object",
        "numel": "Int64",
        "eligible": "Int64",
        "d": "float64",
        "interval": "Int64",
    },
    "clients": {
        **IDENTITY,
        "round": "Int64",
        "iteration": "Int64",
        "client": "Int64",
        "train_samples": "Int64",
        "test_samples": "Int64",
        "personal_loss": "float64",
        "personal_acc": "float64",
        "global_loss": "float64",
        "global_acc": "float64",
    },
    "system": {
        **IDENTITY,
        "round": "Int64",
        "iteration": "Int64",
        "round_s": "float64",
        "sim_time_s": "float64",
        "sampled": "Int64",
        "participants": "Int64",
        "unavailable": "Int64",
        "dropped": "Int64",
        "partial": "Int64",
        "dropped_clients": "object",
        "partial_clients": "object",
        "wait_s": "float64",
    },
}


@pytest.mark.parametrize("which", ["global", "personal", ".", "none"])
def test_frames_have_one_schema_whatever_is_loaded(kinds, which):
    """Only global-model runs, only personalized ones, both, none readable: the same columns and dtypes. Before,
    personal_acc was text holding '' when no personalized run was loaded (``.mean()`` raised), runs.schedule was the
    config's '' and an empty clients frame was all object."""
    r = fedcli.load(kinds / which)
    assert len(r) == {"global": 1, "personal": 1, ".": 2, "none": 0}[which]
    for attr, want in DTYPES.items():
        frame = getattr(r, attr)
        assert {c: str(d) for c, d in frame.dtypes.items() if c in want} == want, attr
        assert list(frame.columns[: len(want)]) == list(want), attr
    m = r.metrics
    personal = m[m.run.str.startswith("personal") | (m.run == "pc")] if len(m) else m
    assert m.personal_acc.isna().sum() == len(m) - len(personal)  # empty cells: NaN, not ''
    if len(personal):
        assert m.personal_acc.mean() == pytest.approx(personal.personal_acc.mean()) and 0 < m.personal_acc.mean() <= 1
        assert len(r.clients) == 4 * len(personal)  # 4 clients per evaluation
    runs = r.runs
    assert (
        str(runs.dtypes["lr"]) == "float64"
        and str(runs.dtypes["seed"]) == "Int64"
        and str(runs.dtypes["schedule"]) == "object"
    )
    assert str(runs.dtypes["download"]) == "boolean" and str(runs.dtypes["lr_decay_at"]) == "object"
    assert set(runs.schedule) <= {"periodic"}  # the schedule the run used, not the config's '' ("the method's")
    assert runs.lr_decay_at.isna().all()  # an empty text value is missing, as an empty CSV cell


def test_sweep_runs_carry_their_recipe_name_sweep_and_scale(tmp_path):
    """A sweep's table names its runs as the recipe does (``left_run = "FedAvg x1"``): the frames carry that name,
    the sweep and the scale, so the table joins the frames without a hand-made mapping (issue 48, 15)."""
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(SWEEP_RECIPE)
    out = tmp_path / "results" / "tiny-smoke"
    # in this process (no worker to spawn): a pool's runs equal in-process ones (test_sweep.py's
    # test_worker_pool_matches_in_process), both by execute_inline on the same config
    code = main(["sweep", str(recipe), "--scale", "smoke", "--seeds", "2", "--out", str(out), "--in-process"])
    assert code in (0, None)
    r = fedcli.load(tmp_path / "results")
    runs = r.runs.set_index("run")
    assert runs.loc["tiny-smoke/fedavg-x1/seed0", ["sweep", "recipe_run", "scale"]].tolist() == [
        str(out),
        "FedAvg x1",
        "smoke",
    ]
    assert set(r.metrics.recipe_run) == {"FedAvg x1", "FedLAMA phi=2"} and set(r.layers.scale) == {"smoke"}
    table, figures = fedcli.report(out, table="t")
    assert figures == [] and set(table.sweep) == {str(out)}
    # the join docs/reports.md shows: one row per table row (with runs, each came once per seed: issue 57)
    assert len(table.merge(r.runs, left_on=["sweep", "right_run"], right_on=["sweep", "recipe_run"])) == 2 * len(table)
    joined = table.merge(
        r.experiments, left_on=["sweep", "right_run"], right_on=["sweep", "recipe_run"], validate="many_to_one"
    )
    assert list(joined.right_run) == ["FedAvg x1", "FedLAMA phi=2"] and len(joined) == len(table)
    assert list(joined.seeds) == ["0, 1", "0, 1"] and list(joined.n_runs) == [2, 2] and list(joined.completed) == [2, 2]
    assert (
        list(joined.phi) == [2, 2]
        and "seed" not in r.experiments.columns
        and list(joined.schedule) == ["periodic", "lama"]
    )
    # the table's full-training accuracy of each right run: the mean over its seeds of each seed's best evaluation
    best = r.metrics.groupby(["recipe_run", "seed"]).test_acc.max().groupby("recipe_run").mean()
    assert list(joined.full_acc_mean) == pytest.approx([100 * best[n] for n in joined.right_run])
    # a run of `fedcli train` has none of the three
    avg = fedcli.load(tmp_path / "results" / "tiny-smoke" / "fedavg-x1" / "seed0").runs
    assert avg.recipe_run.tolist() == ["FedAvg x1"]  # one run directory of a sweep still knows it
    assert main(["train", *ARGS, "--out", str(tmp_path / "own")]) in (0, None)
    assert fedcli.load(tmp_path / "own").runs[["sweep", "recipe_run", "scale"]].isna().all(axis=None)


def test_system_frame_per_round(kinds):
    """``fedcli.load`` had no frame of system.csv (issue 57): one row per round of each run trained with --system, its
    counts as integers, its seconds as floats and the dropped clients' ids as the text the file holds ("0 2")."""
    r = fedcli.load(kinds / ".")
    sysf = r.system
    want = read(kinds / "global" / "avg" / "system.csv")
    assert set(sysf.run) == {"global/avg"} and len(sysf) == len(want) == 4
    assert list(sysf.participants) == [int(w["participants"]) for w in want]
    assert list(sysf.round_s) == pytest.approx([float(w["round_s"]) for w in want])
    assert list(sysf.dropped_clients.fillna("")) == [w["dropped_clients"] for w in want]
    assert sysf.dropped.sum() > 0 and all(isinstance(v, str) for v in sysf.dropped_clients.dropna())
    assert (sysf.participants + sysf.dropped + sysf.partial <= sysf.sampled).all()


def test_frames_merge_with_runs_without_suffixes(kinds):
    """metrics.csv's ``lr`` and the config's ``lr`` met in a merge as ``lr_x`` / ``lr_y`` (issue 57): the metrics
    frame names it ``current_lr`` (the learning rate at the evaluation), and no frame shares a column with ``runs``
    beyond the run's identity."""
    from fedcli.api import ID_COLUMNS, TABLES

    r = fedcli.load(kinds / ".")
    for attr in TABLES:
        merged = getattr(r, attr).merge(r.runs, on=list(ID_COLUMNS))
        assert not [c for c in merged.columns if c.endswith(("_x", "_y"))], attr
    m = r.metrics.merge(r.runs, on=list(ID_COLUMNS))
    assert "lr" not in r.metrics.columns and (m.current_lr == m.lr).all()  # no decay: the config's lr throughout
    want = read(kinds / "global" / "avg" / "metrics.csv")
    assert list(r.metrics[r.metrics.run == "global/avg"].current_lr) == pytest.approx([float(w["lr"]) for w in want])


def test_run_by_a_name_it_lacks_says_which_it_has(results):
    """``results.run("lama/s9")`` raised a bare KeyError (issue 57): a ConfigError naming the closest runs."""
    r = fedcli.load(results)
    with pytest.raises(
        ConfigError,
        match=r"no run named 'lama/s9' in these results; did you mean lama/s1 or lama/s0\? "
        r"the runs here: avg, lama/s0, lama/s1",
    ) as e:
        r.run("lama/s9")
    assert e.value.exit_code == 2 and r.run("lama/s1").seed == 1


@pytest.mark.parametrize("out", [None, "", 3, ["a"]])
def test_train_refuses_an_out_that_is_not_a_path_before_anything_runs(out, tmp_path, monkeypatch):
    """``fedcli.train(None, iterations=20)`` trained a whole run into ``./None``, then raised TypeError (issue 56):
    an ``out`` that is no path is a ConfigError (exit 2) and nothing is written; so are the other arguments."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"fedcli.train: out must be a path") as e:
        fedcli.train(out, iterations=20)
    assert e.value.exit_code == 2 and list(tmp_path.iterdir()) == []


def test_the_api_refuses_values_it_would_pass_on_as_their_str(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"fedcli.load: path must be a path.*got None") as e:
        fedcli.load(None)
    with pytest.raises(ConfigError, match=r"fedcli.report: each path must be a path.*got None"):
        fedcli.report(None)
    with pytest.raises(ConfigError, match=r"fedcli.train: lr=\{'a': 1\} is not a flag's value") as e:
        fedcli.train(tmp_path / "r", lr={"a": 1})
    assert e.value.exit_code == 2
    assert list(tmp_path.iterdir()) == []
    # a list is a repeatable flag (it was passed on as "['a', 'b']"); numbers of numpy are numbers
    import numpy as np

    assert flags(figure=["a", tmp_path / "b"], lr=np.float32(0.5), clients=np.int64(4)) == [
        "--figure",
        "a",
        "--figure",
        str(tmp_path / "b"),
        "--lr",
        "0.5",
        "--clients",
        "4",
    ]
