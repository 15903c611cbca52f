"""--val-fraction in whole runs: val_loss/val_acc in metrics.csv only when asked, the same on 1 and 2 worker
processes and across a resume (the split is keyed by the seed, not stored), refused values exit 2 in one line, and
the validation accuracy follows the test accuracy."""

import csv
import signal

import pytest

from fedcli.cli.main import main
from fedcli.results.rundir import METRICS_COLUMNS
from runkit import error_lines, interrupted, rows, run_main

SMALL = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "6",
    "--active-ratio",
    "0.5",
    "--algo",
    "fedlama",
    "--tau",
    "2",
    "--iterations",
    "24",
    "--batch-size",
    "16",
    "--lr",
    "0.1",
    "--eval-every",
    "4",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]
VAL = SMALL + ["--val-fraction", "0.1"]


def header(path):
    with open(path) as f:
        return next(csv.reader(f))


def test_columns_only_when_asked(tmp_path):
    assert main(SMALL + ["--workers", "1", "--out", str(tmp_path / "plain")]) == 0
    assert header(tmp_path / "plain" / "metrics.csv") == METRICS_COLUMNS
    assert main(VAL + ["--workers", "1", "--out", str(tmp_path / "val")]) == 0
    assert header(tmp_path / "val" / "metrics.csv") == METRICS_COLUMNS + ["val_loss", "val_acc"]
    assert all(
        0.0 <= float(r["val_acc"]) <= 1.0 and float(r["val_loss"]) > 0 for r in rows(tmp_path / "val" / "metrics.csv")
    )


def test_workers_1_and_2_give_the_same_validation_metrics(tmp_path):
    for w in (1, 2):
        assert main(VAL + ["--workers", str(w), "--out", str(tmp_path / f"w{w}")]) == 0
    assert rows(tmp_path / "w1" / "metrics.csv") == rows(tmp_path / "w2" / "metrics.csv")


@pytest.mark.timeout(300)
def test_resume_is_bitwise_with_a_validation_split(tmp_path, monkeypatch, capsys):
    args = VAL + ["--workers", "1", "--checkpoint-every", "2"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0
    assert interrupted(monkeypatch, capsys, run, 3, signal.SIGINT, args)[0] == 130
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert rows(ref / "metrics.csv") == rows(run / "metrics.csv")
    assert (ref / "model.pt").read_bytes() == (run / "model.pt").read_bytes()


@pytest.mark.parametrize(
    "value, message",
    [
        ("1", "--val-fraction must be < 1"),
        ("-0.1", "--val-fraction must be >= 0"),
        ("0.9999", "holds out every training sample of class"),
        ("nan", "--val-fraction must be a finite number"),
        ("1e-300", "holds out no sample of the"),
    ],
)
def test_bad_fractions_exit_2_in_one_line(tmp_path, capsys, value, message):
    """1e-300 held out ceil(F N) = 0 samples: a traceback (ZeroDivisionError) at the first evaluation, a folder left."""
    code, _, err = run_main(SMALL + ["--val-fraction", value, "--out", str(tmp_path / "r")], capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "r").exists()


def test_validation_accuracy_learns_with_the_test_accuracy(tmp_path):
    out = tmp_path / "run"
    assert (
        main(["train", "--val-fraction", "0.1", "--iterations", "200", "--quiet", "--workers", "1", "--out", str(out)])
        == 0
    )
    r = rows(out / "metrics.csv")
    first, last = r[0], r[-1]
    assert float(last["val_acc"]) > float(first["val_acc"]) + 0.3
    assert float(last["val_acc"]) > 0.8 and abs(float(last["val_acc"]) - float(last["test_acc"])) < 0.1


PERSONAL = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "6",
    "--active-ratio",
    "0.5",
    "--algo",
    "ditto",
    "--tau",
    "2",
    "--iterations",
    "24",
    "--batch-size",
    "16",
    "--lr",
    "0.1",
    "--eval-every",
    "4",
    "--client-test-fraction",
    "0.2",
    "--client-val-fraction",
    "0.2",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


def test_personal_validation_on_1_and_2_workers_and_across_a_resume(tmp_path, monkeypatch, capsys):
    for w in (1, 2):
        assert main(PERSONAL + ["--workers", str(w), "--out", str(tmp_path / f"w{w}")]) == 0
    assert header(tmp_path / "w1" / "metrics.csv") == METRICS_COLUMNS + ["personal_val_acc"]
    assert rows(tmp_path / "w1" / "metrics.csv") == rows(tmp_path / "w2" / "metrics.csv")
    accs = [float(r["personal_val_acc"]) for r in rows(tmp_path / "w1" / "metrics.csv")]
    assert all(0.0 <= a <= 1.0 for a in accs) and accs[-1] > accs[0]
    args = PERSONAL + ["--workers", "1", "--checkpoint-every", "2"]
    run = tmp_path / "run"
    assert interrupted(monkeypatch, capsys, run, 3, signal.SIGINT, args)[0] == 130
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert rows(tmp_path / "w1" / "metrics.csv") == rows(run / "metrics.csv")


def test_client_validation_needs_a_personalized_method(tmp_path, capsys):
    code, _, err = run_main(SMALL + ["--client-val-fraction", "0.2", "--out", str(tmp_path / "r")], capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and "--client-val-fraction measures each client's own model" in lines[0], err


def test_the_summary_says_the_validation_accuracy(tmp_path, capsys):
    code = main([a for a in VAL if a != "--quiet"] + ["--workers", "1", "--out", str(tmp_path / "r")])
    said = capsys.readouterr()
    text = said.out + said.err
    final = float(rows(tmp_path / "r" / "metrics.csv")[-1]["val_acc"])
    assert code == 0 and "validation accuracy" in text and f"{100 * final:.2f}% final" in text
