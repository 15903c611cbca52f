"""The command line: one-line errors with the exit codes of docs/usage.md, partition summary, default run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import error_lines

ROOT = Path(__file__).resolve().parents[2]


def run_main(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["train", "--tau", "0"], 2, "--tau"),
        (["train", "--phi", "0"], 2, "--phi"),
        (["train", "--alpha", "0"], 2, "--alpha"),
        (["train", "--lr", "-1"], 2, "--lr"),
        (["train", "--active-ratio", "1.5"], 2, "--active-ratio"),
        (["train", "--algo", "nope"], 2, "--algo"),
        (["train", "--tau", "x"], 2, "tau"),
        (["train", "--no-such-flag"], 2, "no-such-flag"),
        (["train", "--dataset", "mnist", "--data-dir", "/nonexistent/dir"], 3, "/nonexistent/dir"),
        (["train", "--partition", "pathological", "--classes-per-client", "11"], 2, "classes"),
        (["train", "--clients", "5000"], 2, "clients"),
        (["train", "--partition-file", "/nonexistent/part.json"], 3, "part.json"),
        (["partition", "--clients", "4"], 2, "--out"),
    ],
)
def test_bad_input_one_line_exit_code(args, code, needle, capsys, tmp_path):
    got, out, err = run_main(args + ["--out", str(tmp_path / "run")] if args[0] == "train" else args, capsys)
    assert got == code, err
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert lines[0].startswith("fedcli: error:") and needle in lines[0], lines[0]
    assert "Traceback" not in err


def test_recipe_errors_name_file_and_line(tmp_path, capsys):
    r = tmp_path / "r.toml"
    r.write_text('dataset = "digits"\n# comment\ntau = 0\n')
    code, _, err = run_main(["train", "--recipe", str(r)], capsys)
    assert code == 2 and f"{r}, line 3" in err and "--tau" in err
    r.write_text('dataset = "digits"\nbogus_key = 1\n')
    code, _, err = run_main(["train", "--recipe", str(r)], capsys)
    assert code == 2 and "line 2" in err and "bogus_key" in err
    r.write_text('tau = "ten"\n')
    code, _, err = run_main(["train", "--recipe", str(r)], capsys)
    assert code == 2 and "line 1" in err and "int" in err


def test_partition_file_roundtrip_and_summary(tmp_path, capsys):
    pf = tmp_path / "p.json"
    assert (
        main(
            [
                "partition",
                "--clients",
                "6",
                "--partition",
                "pathological",
                "--classes-per-client",
                "2",
                "--out",
                str(pf),
                "--summary",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "1437 of 1437" in out and "classes" in out.lower() and pf.exists()
    run = tmp_path / "run"
    assert (
        main(["train", "--partition-file", str(pf), "--iterations", "10", "--tau", "5", "--quiet", "--out", str(run)])
        == 0
    )
    man = json.loads((run / "manifest.json").read_text())
    assert man["clients"] == 6 and man["partition"]["scheme"] == "pathological"
    # a tampered partition file is refused with exit 3
    pf.write_text(pf.read_text().replace("[0,", "[1,", 1) if "[0," in pf.read_text() else pf.read_text()[:-20])
    code, _, err = run_main(["train", "--partition-file", str(pf), "--out", str(tmp_path / "r2")], capsys)
    assert code == 3 and str(pf) in err


def test_existing_out_dir_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("x\n")
    code, _, err = run_main(["train", "--out", str(run)], capsys)
    assert code == 2 and "--overwrite" in err


def test_overwrite_leaves_none_of_the_previous_runs_rows(tmp_path, capsys):
    """--overwrite over a personalized run: every CSV the run appends to starts again (clients.csv kept the first
    run's 32 rows before the second run's, 65 lines where 33 belong)."""
    run = tmp_path / "run"
    args = ["train", "--algo", "ditto", "--iterations", "20", "--eval-every", "10", "--out", str(run), "--quiet"]
    assert main(args) == 0
    first = {f: (run / f).read_text().splitlines() for f in ("metrics.csv", "clients.csv", "layers.csv")}
    assert main([*args, "--overwrite"]) == 0
    again = {f: (run / f).read_text().splitlines() for f in first}
    assert (
        again["clients.csv"] == first["clients.csv"] and len(first["clients.csv"]) == 33
    )  # the same seed: the same rows
    assert again["layers.csv"] == first["layers.csv"] and len(again["metrics.csv"]) == len(first["metrics.csv"]) == 3


def test_overwrite_refuses_a_folder_that_is_not_a_run_directory(tmp_path, capsys):
    """Issue 56, item 1: --overwrite on the user's own folder (no manifest.json) deleted every file whose name a run
    uses (clients.csv, system.csv, trackers.log, wandb/, checkpoints/round-*.pt, client-state/...) and trained there;
    now exit 2 in one line, nothing deleted or written. A manifest.json that is not a run's does not make it one."""
    mine = tmp_path / "mine"
    names = [
        "clients.csv",
        "system.csv",
        "ala.csv",
        "local_loss.csv",
        "trackers.log",
        "notes.txt",
        "wandb/run.txt",
        "tensorboard/events",
        "checkpoints/round-000001.pt",
        "client-state/g0/r0/x.bin",
    ]
    for name in names:
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text(name)
    before = sorted(str(p.relative_to(mine)) for p in mine.rglob("*"))
    for manifest in (None, '{"name": "my web app"}', "not json"):
        if manifest is not None:
            (mine / "manifest.json").write_text(manifest)
        listed = sorted(str(p.relative_to(mine)) for p in mine.rglob("*"))
        code, _, err = run_main(["train", "--iterations", "4", "--quiet", "--out", str(mine), "--overwrite"], capsys)
        lines = error_lines(err)
        assert code == 2 and len(lines) == 1 and f"--out {mine} is not a run directory" in lines[0], err
        assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == listed
        assert all((mine / n).read_text() == n for n in names)
    assert listed == sorted([*before, "manifest.json"])


def test_overwrite_of_a_run_directory_keeps_the_users_other_files(tmp_path, capsys):
    """--overwrite on a run directory removes what the previous run wrote, nothing else: a user's notes beside the
    run's files stay."""
    run = tmp_path / "run"
    args = ["train", "--iterations", "4", "--eval-every", "2", "--quiet", "--out", str(run)]
    assert main(args) == 0
    (run / "notes.txt").write_text("mine")
    (run / "plots").mkdir()
    (run / "plots" / "a.png").write_text("mine")
    assert main([*args, "--overwrite"]) == 0
    assert (run / "notes.txt").read_text() == "mine" and (run / "plots" / "a.png").read_text() == "mine"
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"


def test_default_train_runs_offline_and_leaves_complete_run_dir(tmp_path, monkeypatch):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "fedcli", "train"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert p.returncode == 0, p.stderr
    assert "fedlama" in p.stderr and "final accuracy" in p.stdout and "of FedAvg" in p.stdout
    runs = list((tmp_path / "results").iterdir())
    assert len(runs) == 1
    files = {f.name for f in runs[0].iterdir()}
    assert {"manifest.json", "metrics.csv", "layers.csv", "intervals.csv"} <= files
    man = json.loads((runs[0] / "manifest.json").read_text())
    assert man["status"] == "completed" and man["summary"]["final_acc"] > 0.8
    # the README's headline: FedLAMA's defaults save communication (about 63% of FedAvg(tau')) and learn as well
    # as FedAvg with the same budget and interval (the same cohorts and initial model: the seed keys them)
    assert man["summary"]["comm_pct_of_fedavg"] < 70
    fedavg = tmp_path / "fedavg"
    # the reference in this process (the command as a process is the default run's above)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", "fedavg", "--json", "--out", str(fedavg)]) in (0, None)
    avg = json.loads((fedavg / "manifest.json").read_text())["summary"]
    assert avg["comm_pct_of_fedavg"] == 100.0
    assert man["summary"]["final_acc"] >= avg["final_acc"] - 0.01, (man["summary"]["final_acc"], avg["final_acc"])


def test_commands_that_need_no_model_do_not_import_torch(tmp_path):
    """Only the invoked command's module is loaded: ``--version``, ``report --help`` and ``train --help`` do not pay for
    torch (``train --help`` reads the torch-free specs); nor does the report of a FedLAMA run, whose figures replay
    Algorithm 1 from intervals.csv (``fedcli.fl.layerwise``)."""
    import subprocess
    import sys

    probe = "import sys; from fedcli.cli.main import main; main({args!r}); print('TORCH', 'torch' in sys.modules)"
    run = tmp_path / "run"
    assert main(["train", "--algo", "fedlama", "--iterations", "40", "--out", str(run), "--quiet"]) == 0
    cases = (
        (["--version"], False),
        (["report", "--help"], False),
        (["report", str(run)], False),
        (["train", "--help"], False),
    )
    for args, torch_loaded in cases:
        out = subprocess.run(
            [sys.executable, "-c", probe.format(args=args)], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert f"TORCH {torch_loaded}" in out.stdout, (args, out.stdout[-200:])
    assert (run / "figures" / "delta-lambda.png").is_file(), sorted(p.name for p in (run / "figures").iterdir())
