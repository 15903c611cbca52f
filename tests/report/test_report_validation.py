"""Runs trained with --val-fraction / --client-val-fraction in the report and in fedcli.load: "Final / Best val. acc."
and "Final personal val. acc." columns only when some run has them (— for one without), and typed val_loss, val_acc,
personal_val_acc columns in the metrics frame."""

from __future__ import annotations

import csv
import io

import pytest

from fedcli.cli.main import main
from simkit import cli, md_table

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
    "--workers",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("val")
    for name, extra in (
        ("val", ["--val-fraction", "0.2"]),
        ("plain", []),
        ("pval", ["--algo", "ditto", "--client-test-fraction", "0.2", "--client-val-fraction", "0.2"]),
    ):
        assert main(BASE + extra + ["--out", str(root / name)]) in (0, None)
    return root


def last(run_dir, column):
    with open(run_dir / "metrics.csv", newline="") as f:
        return float(list(csv.DictReader(f))[-1][column])


def test_comparison_table_has_validation_accuracy_when_present(runs, capsys, tmp_path):
    code, out, err = cli(["report", str(runs / "val"), str(runs / "plain")], capsys)
    assert code == 0, err
    rows = {r["Run"]: r for r in md_table(out)}
    assert rows["val"]["Final val. acc."] == f"{100 * last(runs / 'val', 'val_acc'):.2f}%"
    assert rows["plain"]["Final val. acc."] == "—" and "Best val. acc." in rows["plain"]
    assert "Val. acc.: the global model on the validation set" in out
    code, out, err = cli(["report", str(runs / "val"), str(runs / "plain"), "--format", "csv"], capsys)
    assert code == 0, err
    recs = {r["name"].rsplit("/", 1)[-1]: r for r in csv.DictReader(io.StringIO(out))}
    assert float(recs["val"]["final_val_acc"]) == pytest.approx(100 * last(runs / "val", "val_acc"))
    # runs without a validation split: no such column (two seeds, one row: a report of several runs draws no figures
    # unasked; one run's would draw six)
    assert main(BASE + ["--seed", "1", "--out", str(tmp_path / "plain-s1")]) in (0, None)
    code, out, _ = cli(["report", str(runs / "plain"), str(tmp_path / "plain-s1")], capsys)
    assert code == 0 and "val. acc." not in out and "(seeds 0, 1)" in out


def test_comparison_table_has_personal_validation_accuracy_when_present(runs, capsys):
    code, out, err = cli(["report", str(runs / "pval"), str(runs / "plain")], capsys)
    assert code == 0, err
    rows = {r["Run"]: r for r in md_table(out)}
    assert rows["pval"]["Final personal val. acc."] == f"{100 * last(runs / 'pval', 'personal_val_acc'):.2f}%"
    assert rows["plain"]["Final personal val. acc."] == "—" and "Final val. acc." not in rows["pval"]
    assert "Personal val. acc.: each client's model on its own validation samples" in out


def test_load_types_the_validation_columns(runs):
    import fedcli

    metrics = fedcli.load(runs).metrics
    assert str(metrics["val_acc"].dtype) == "float64" and str(metrics["val_loss"].dtype) == "float64"
    name = metrics["run"].map(lambda r: r.rsplit("/", 1)[-1])
    val, plain = metrics[name == "val"], metrics[name == "plain"]
    assert val["val_acc"].notna().all() and val["val_acc"].iloc[-1] == last(runs / "val", "val_acc")
    assert plain["val_acc"].isna().all()
    frame = fedcli.load(runs).runs  # the config's fraction, as recorded in each manifest
    assert {r.rsplit("/", 1)[-1]: v for r, v in zip(frame["run"], frame["val_fraction"])} == {
        "val": 0.2,
        "plain": 0.0,
        "pval": 0.0,
    }
    assert str(metrics["personal_val_acc"].dtype) == "float64"
    assert (
        metrics[name == "pval"]["personal_val_acc"].notna().all()
        and metrics[name != "pval"]["personal_val_acc"].isna().all()
    )


def test_a_sweeps_recipe_key_and_a_table_on_validation_accuracy(tmp_path, capsys):
    """The recipe key ``val_fraction`` (checked with file and line) and a sweep table whose ``metric = "val_acc"``
    shows the validation accuracy under its own header."""
    from fedcli.sweep.run import run_sweep
    from runkit import error_lines
    from sweepkit import RECIPE as SWEEP_RECIPE

    text = (
        SWEEP_RECIPE.replace("seeds = 2", "seeds = 1").replace(
            'trainer = "loop"\n', 'trainer = "loop"\nval_fraction = 0.2\n'
        )
        + '\n[[tables]]\nname = "v"\nlayout = "rows"\nruns = ["FedAvg x1", "FedLAMA phi=2"]\nmetric = "val_acc"\n'
        'accuracy = "final"\n'
    )
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(text.replace("val_fraction = 0.2", "val_fraction = 1.5"))
    code, _, err = cli(["sweep", str(recipe), "--scale", "smoke", "--dry-run"], capsys)
    assert (
        code == 2 and len(error_lines(err)) == 1 and "--val-fraction must be < 1" in err and f"{recipe}, line 15" in err
    ), err
    recipe.write_text(text)
    root = tmp_path / "sweep"
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)
    code, out, err = cli(["report", str(root), "--table", "v"], capsys)
    assert code == 0, err
    table = md_table(out)
    assert "Val. acc." in table[0] and "validation set held out of the training pool" in out
    finals = sorted(last(p.parent, "val_acc") for p in root.rglob("metrics.csv"))
    assert sorted(float(r["Val. acc."].rstrip("%")) for r in table) == pytest.approx(
        [100 * f for f in finals], abs=0.006
    )
