"""One truth about a run's state (issue 29, family 3): ``fedcli sweep``, ``fedcli sweep --dry-run`` and
``fedcli report`` decide a run's state with one function (fedcli/results/runstate.py) and say it in the same words;
a sweep's run replaced by a ``fedcli train --overwrite`` with another learning rate is stale for all of them."""

import json
import shutil

import pytest

from fedcli.cli.main import main
from fedcli.results.runstate import config_diff, run_state
from fedcli.sweep.run import run_sweep
from sweepkit import RECIPE


def run_main(args, capsys):
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_config_diff_by_hand():
    assert config_diff({"lr": 0.1, "tau": 2, "out": "a"}, {"lr": 0.5, "tau": 2, "out": "b"}) == ["lr"]
    assert config_diff({"lr": 0.1, "new": 1}, {"lr": 0.1}) == []  # a field added after the run
    assert config_diff({"clients": 4, "partition_file": "p.json"}, {"clients": 5}) == []


@pytest.mark.timeout(300)
def test_report_refuses_a_stale_run_with_the_sweeps_verdict(tmp_path, capsys):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    root = tmp_path / "sweep"
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)
    code, table, err = run_main(["report", str(root), "--table", "t"], capsys)
    assert code == 0 and "FedLAMA" in table, err  # control: the table builds from the sweep as it ran

    # the FedLAMA run replaced by a train --overwrite with another learning rate (a real run, completed)
    run = root / "fedlama-phi-2" / "seed0"
    man = json.loads((run / "manifest.json").read_text())
    cfg = man["config"]
    assert cfg["lr"] == 0.2
    args = [
        "train",
        "--out",
        str(run),
        "--overwrite",
        "--quiet",
        "--algo",
        "fedlama",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "32",
        "--clients",
        "4",
        "--active-ratio",
        "0.5",
        "--iterations",
        "8",
        "--eval-every",
        "2",
        "--tau",
        "1",
        "--phi",
        "2",
        "--lr",
        "0.5",
        "--threads",
        "1",
        "--trainer",
        "loop",
        "--seed",
        "0",
    ]
    assert run_main(args, capsys)[0] == 0
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"

    # the one function: stale, naming the flag
    sweep_json = json.loads((root / "sweep.json").read_text())
    entry = next(e for e in sweep_json["runs"] if e["name"] == "FedLAMA phi=2")
    st = run_state(run, entry["config"])
    assert st.state == "stale" and "--lr 0.5 where 0.2 is expected" in st.reason
    assert run_state(run, expected_hash=entry["config_hash"]).state == "stale"  # an older sweep.json: by hash

    # sweep --dry-run says stale (it would run it again) ...
    code, out, err = run_main(
        ["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root), "--dry-run"], capsys
    )
    assert code == 0, err
    row = next(line for line in out.splitlines() if "FedLAMA" in line)
    assert "stale" in row, out
    # ... and the report refuses it with the same verdict, in the same words, and builds nothing
    code, table, err = run_main(["report", str(root), "--table", "t"], capsys)
    assert code == 2 and table == "" and "Traceback" not in err, err
    assert "FedLAMA phi=2' seed 0 (" + st.words()[:60] in " ".join(err.split()), err
    assert "%" not in table


TRACE = "client,speed,uplink,downlink,latency\n" + "".join(f"{c},{2e6 * (c + 1):g},1e6,2e6,0.05\n" for c in range(4))


@pytest.mark.timeout(300)
def test_a_completed_run_whose_trace_changed_is_stale(tmp_path, capsys, monkeypatch):
    """A sweep run again after its ``--system-trace`` file was edited (same path, other values) trains the run again:
    the run read other values than the file holds now, as a run of another option would have. Before, only ``train
    --resume`` compared the manifest's sha256, and the sweep kept the run as done. The dry run says stale and why; the
    sweep trains it again, and its manifest then records the file's new sha256."""
    import fedcli.userfiles

    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    recipe = tmp_path / "traced.toml"
    one_run = RECIPE.split("[[runs]]")[0] + '[[runs]]\nname = "FedAvg x1"\nalgo = "fedavg"\ntau = 2\n'
    recipe.write_text(
        one_run.replace('trainer = "loop"\n', f'trainer = "loop"\nsystem = true\nsystem_trace = "{trace}"\n')
    )
    root = tmp_path / "sweep"
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)
    run = root / "fedavg-x1" / "seed0"
    entry = json.loads((root / "sweep.json").read_text())["runs"][0]
    first = json.loads((run / "manifest.json").read_text())["system"]["trace"]["sha256"]
    assert run_state(run, entry["config"]).state == "done"  # control: the file it read

    trace.write_text(TRACE.replace("2e+06,1e6", "9e+06,1e6"))  # client 0 four and a half times faster
    st = run_state(run, entry["config"])
    assert st.state == "stale" and "--system-trace" in st.reason and str(trace) in st.reason, st
    code, out, err = run_main(
        ["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root), "--dry-run"], capsys
    )
    assert code == 0 and "stale" in next(line for line in out.splitlines() if "FedAvg" in line), out + err
    # stopped early with a checkpoint, the same: trained again, not resumed (train --resume refuses a changed trace)
    stopped = tmp_path / "stopped"
    shutil.copytree(run, stopped)
    man = json.loads((stopped / "manifest.json").read_text())
    (stopped / "manifest.json").write_text(json.dumps({**man, "status": "interrupted"}))
    (stopped / "checkpoints").mkdir(exist_ok=True)
    (stopped / "checkpoints" / "round-000002.pt").write_bytes(b"")
    st = run_state(stopped, entry["config"])
    assert st.state == "stale" and not st.resumable, st
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)
    again = json.loads((run / "manifest.json").read_text())["system"]["trace"]["sha256"]
    assert again != first and run_state(run, entry["config"]).state == "done"

    # cheap: a config without a trace reads no file
    read = []
    monkeypatch.setattr(fedcli.userfiles, "read_input", lambda *a, **k: read.append(a))
    no_trace = {k: v for k, v in entry["config"].items() if k != "system_trace"}
    assert run_state(run, no_trace).state == "done" and read == []
