"""--tracker tensorboard|mlflow|wandb against the real libraries and their real local stores, read back with their own
readers: TensorBoard's EventAccumulator, MlflowClient on a SQLite store (MLFLOW_TRACKING_URI), W&B's offline run file
parsed into wandb's own protocol buffers. Every evaluation of metrics.csv must be there, the config as parameters and
the manifest and figures as artifacts; a sweep is one experiment; a resume continues the same tracker run; a tracker
that cannot write warns once and the run completes; --version and report --help load no tracker library."""

import csv
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import FEDCLI, run_forked
from simkit import cli

ROOT = Path(__file__).resolve().parents[2]
TRAIN = [
    "train",
    "--iterations",
    "100",
    "--eval-every",
    "20",
    "--clients",
    "8",
    "--mlp-hidden",
    "32",
    "--threads",
    "1",
    "--workers",
    "1",
    "--quiet",
]
LIBS = ("tensorboard", "mlflow", "wandb")


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """No tracker settings from the machine: no W&B key or netrc, MLflow on a SQLite file in tmp_path."""
    for k in [k for k in os.environ if k.startswith(("WANDB_", "MLFLOW_", "SLURM_")) or k == "FEDCLI_TRACKER_WAIT"]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def finished(run: Path, timeout: float = 240) -> dict:
    """Wait for the trackers' process of ``run`` (it finishes its end work after ``fedcli train`` returned); its
    state."""
    import time

    from fedcli.trackers import state

    deadline = time.monotonic() + timeout
    while not (state.read(run).get("phase") == "done" and state.finishing(run) is None):
        assert time.monotonic() < deadline, (
            f"the trackers of {run} were still at work after {timeout} s: {state.read(run)}"
        )
        time.sleep(0.2)
    return state.read(run)


def state_of(run: Path) -> dict:
    from fedcli.trackers import state

    return state.read(run)


def metrics_rows(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


def layer_names(run: Path) -> list[str]:
    with open(run / "layers.csv") as f:
        return [r["name"] for r in csv.DictReader(f)]


def mlflow_client(tmp_path):
    """A reader of the test's SQLite store; opened as the trackers open it (a new store's schema migration may be
    under way in the trackers' process: the reader then waits for it instead of failing a migration of its own)."""
    from mlflow.tracking import MlflowClient

    from fedcli.trackers.mlflow_run import connect

    return connect(MlflowClient, f"sqlite:///{tmp_path / 'mlflow.db'}")


def tensorboard_events(logdir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def wandb_records(run_file: Path) -> list:
    """Every record of a W&B run file: a 7-byte header (":W&B", magic, version), then LevelDB-log blocks of 32 KiB
    whose chunks (crc32c 4 bytes, length 2, type 1: full, first, middle, last) carry wandb_internal_pb2.Record bytes."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, records, parts = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(parts)
            records.append(rec)
    return records


def wandb_run(run: Path) -> dict:
    """The offline runs of RUN_DIR/wandb: their history (step -> {key: value}), config, run record, files folder."""
    out = {"history": {}, "config": {}, "runs": [], "files": []}
    for f in sorted((run / "wandb").glob("offline-run-*/run-*.wandb")):
        out["files"].append(f.parent / "files")
        for rec in wandb_records(f):
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                step = rec.history.step.num
                assert step not in out["history"], f"step {step} twice"
                out["history"][step] = {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item
                }
            elif kind == "run":
                out["runs"].append(rec.run)
                out["config"].update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
            elif kind == "config":
                out["config"].update({i.key: json.loads(i.value_json) for i in rec.config.update})
    return out


def test_tensorboard_and_mlflow_hold_every_evaluation_config_and_figures(clean_env):
    tmp = clean_env
    assert main([*TRAIN, "--algo", "fedlama", "--tracker", "tensorboard", "--tracker", "mlflow", "--out", "D"]) == 0
    run = tmp / "D"
    assert finished(run)["status"] == "completed"
    rows = metrics_rows(run)
    assert [int(r["iteration"]) for r in rows] == [20, 40, 60, 80, 100]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["tracker"] == "tensorboard,mlflow" and manifest["status"] == "completed"
    names = layer_names(run)
    with open(run / "layers.csv") as f:
        final_syncs = {r["name"]: float(r["syncs"]) for r in csv.DictReader(f)}

    acc = tensorboard_events(run / "tensorboard")
    for key in ("test_acc", "test_loss", "train_loss", "comm_params", "comm_bytes"):
        events = acc.Scalars(key)
        assert [e.step for e in events] == [int(r["iteration"]) for r in rows], key
        assert [e.value for e in events] == pytest.approx([float(r[key]) for r in rows], rel=1e-6), (
            key
        )  # float32 in events
    # FedLAMA: comm so far as % of FedAvg's (fedavg: every layer every tau = 5 iterations), per-layer syncs and
    # intervals
    numel = sum(int(r["numel"]) for r in csv.DictReader(open(run / "layers.csv")))
    assert acc.Scalars("comm_pct_of_fedavg")[-1].value == pytest.approx(
        100 * float(rows[-1]["comm_params"]) / (numel * 100 / 5), rel=1e-6
    )
    assert {n: acc.Scalars(f"syncs/{n}")[-1].value for n in names} == final_syncs
    assert {e.value for n in names for e in acc.Scalars(f"interval/{n}")} <= {5.0, 10.0}
    with open(run / "intervals.csv") as f:  # FedLAMA's interval adjustments (Alg. 1), d and the interval per layer
        adjust = [r for r in csv.DictReader(f) if r["name"] == names[0]]
    assert len(adjust) >= 5
    assert [(e.step, e.value) for e in acc.Scalars(f"adjust/d/{names[0]}")] == [
        (int(r["iteration"]), pytest.approx(float(r["d"]), rel=1e-6)) for r in adjust
    ]
    assert [e.value for e in acc.Scalars(f"adjust/interval/{names[0]}")] == [float(r["interval"]) for r in adjust]
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.HParamsPluginData.FromString(
        acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    )
    hp = start.session_start_info.hparams
    assert (
        hp["algo"].string_value == "fedlama"
        and hp["iterations"].number_value == 100
        and hp["part_schedule"].string_value == "lama"
    )
    assert set(manifest["config"]) <= set(hp)
    assert {"figures/curves", "figures/layer-syncs"} <= set(acc.Tags()["images"])
    assert acc.Tensors("status")[0].tensor_proto.string_val == [b"completed"]

    client = mlflow_client(tmp)
    exp = client.get_experiment_by_name("fedcli")
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.status == "FINISHED" and r.info.run_name == "D"
    assert r.data.tags["method"] == "fedlama" and r.data.tags["seed"] == "0"
    for key in ("test_acc", "test_loss", "comm_params"):
        hist = client.get_metric_history(r.info.run_id, key)
        assert [(m.step, m.value) for m in hist] == [(int(x["iteration"]), float(x[key])) for x in rows], key
    assert {k: str(v) for k, v in manifest["config"].items()}.items() <= r.data.params.items()
    arts = {a.path for a in client.list_artifacts(r.info.run_id)}
    assert {"manifest.json", "metrics.csv", "layers.csv", "intervals.csv", "figures"} <= arts
    figs = {a.path for a in client.list_artifacts(r.info.run_id, "figures")}
    assert {"figures/curves.png", "figures/curves.pdf"} <= figs
    local = Path(client.download_artifacts(r.info.run_id, "metrics.csv", str(tmp / "dl")))
    assert local.read_bytes() == (run / "metrics.csv").read_bytes()


def test_wandb_without_api_key_runs_offline_with_every_evaluation(clean_env):
    tmp = clean_env
    assert main([*TRAIN, "--algo", "fedavg", "--tracker", "wandb", "--out", "W"]) == 0
    run = tmp / "W"
    rows = metrics_rows(run)
    assert finished(run)["trackers"]["wandb"]["mode"] == "offline"
    wb = wandb_run(run)
    assert len(wb["runs"]) == 1 and wb["runs"][0].project == "fedcli" and wb["runs"][0].display_name == "W"
    assert "method:fedavg" in wb["runs"][0].tags
    steps = sorted(wb["history"])
    assert steps == [int(r["iteration"]) for r in rows]
    for r in rows:
        h = wb["history"][int(r["iteration"])]
        assert h["test_acc"] == float(r["test_acc"]) and h["comm_params"] == float(r["comm_params"])
        assert h["round"] == float(r["round"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert {k: v for k, v in wb["config"].items() if k in manifest["config"]} == manifest["config"]
    assert wb["config"]["part_server"] == "average"
    files = wb["files"][0]
    assert json.loads((files / "manifest.json").read_text())["status"] == "completed"
    assert (files / "metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()
    assert (files / "figures" / "curves.png").stat().st_size > 0


SWEEP = """\
title = "tiny tracked"
seeds = 2

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "16"
clients = 4
active_ratio = 0.5
iterations = 8
eval_every = 4
threads = 1
workers = 1

[scale.smoke]
lr = 0.1

[[runs]]
name = "FedAvg"
algo = "fedavg"
tau = 2

[[runs]]
name = "FedLAMA"
algo = "fedlama"
tau = 1
"""


@pytest.mark.long(
    reason="four tracked runs (16 s); make test keeps MLflow's every logged value of one run "
    "(test_tensorboard_and_mlflow_hold_every_evaluation_config_and_figures)"
)
def test_sweep_is_one_mlflow_experiment_with_one_tagged_run_per_run_and_seed(clean_env):
    from fedcli.sweep.run import run_sweep

    tmp = clean_env
    (tmp / "tiny.toml").write_text(SWEEP)
    res = run_sweep(tmp / "tiny.toml", "smoke", out=tmp / "swp", in_process=True, tracker="mlflow")
    assert len(res.ran) == 4
    for slug in ("fedavg", "fedlama"):
        for seed in (0, 1):
            finished(tmp / "swp" / slug / f"seed{seed}")
    client = mlflow_client(tmp)
    exps = [e for e in client.search_experiments() if e.name != "Default"]
    assert [e.name for e in exps] == ["swp"]
    runs = client.search_runs([exps[0].experiment_id])
    got = {(r.data.tags["run"], r.data.tags["seed"]): r for r in runs}
    assert sorted(got) == [("FedAvg", "0"), ("FedAvg", "1"), ("FedLAMA", "0"), ("FedLAMA", "1")]
    for (name, seed), r in got.items():
        slug = {"FedAvg": "fedavg", "FedLAMA": "fedlama"}[name]
        assert r.info.run_name == f"{slug}/seed{seed}" and r.info.status == "FINISHED"
        assert r.data.tags["method"] == slug and r.data.tags["scale"] == "smoke" and r.data.tags["sweep"] == "swp"
        rows = metrics_rows(tmp / "swp" / slug / f"seed{seed}")
        hist = client.get_metric_history(r.info.run_id, "test_acc")
        assert [(m.step, m.value) for m in hist] == [(int(x["iteration"]), float(x["test_acc"])) for x in rows]
    # adding a tracker changes nothing a run computes: a second call runs nothing
    assert run_sweep(tmp / "tiny.toml", "smoke", out=tmp / "swp", in_process=True).ran == []


# SIGKILL inside round 10 of 16 (a metrics row every round, a checkpoint every 3 rounds), then --resume
KILLED = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "8",
    "--algo",
    "fedlama",
    "--tau",
    "2",
    "--phi",
    "2",
    "--iterations",
    "64",
    "--batch-size",
    "16",
    "--eval-every",
    "4",
    "--checkpoint-every",
    "3",
    "--threads",
    "1",
    "--workers",
    "1",
    "--quiet",
    "--tracker",
    "mlflow",
    "--tracker",
    "tensorboard",
]
# SIGKILL in round 10, once the trackers hold the 10th evaluation (iteration 40): the training hands its messages to
# the trackers' process from a thread, so a kill right after an evaluation may come before that row is handed over
# (the trackers then miss it; the run directory holds it): a loaded machine did that once (36 == 40)
KILLER = """
import os, signal, sys, time
from pathlib import Path
from fedcli.fl import engine
from fedcli.trackers import state
orig = engine.Simulation.synchronize
def synchronize(self, cohort, layers, step, *a, **k):
    if cohort.round_idx == 10 and step == 2:
        run, deadline = Path(self.cfg.out), time.monotonic() + 200
        while min((t.get("last_step", -1) for t in state.read(run).get("trackers", {}).values()), default=-1) < 40:
            assert time.monotonic() < deadline, state.read(run)
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(self, cohort, layers, step, *a, **k)
engine.Simulation.synchronize = synchronize
from fedcli.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(600)
def test_resume_continues_the_same_tracker_run_without_duplicate_steps(clean_env):
    from fedcli.trackers import state

    tmp = clean_env
    p = run_forked(KILLER, [*KILLED, "--out", "K"], env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=240)
    assert p.returncode == -9, p.stderr
    run = tmp / "K"
    assert len(metrics_rows(run)) == 10
    # the killed training's trackers' process outlives it: it sends the 10 rows and closes its runs as interrupted
    killed = finished(run)
    assert killed["status"] == "interrupted" and killed["trackers"]["mlflow"]["last_step"] == 40
    client = mlflow_client(tmp)
    run_id = killed["trackers"]["mlflow"]["run_id"]
    assert client.get_run(run_id).info.status == "KILLED"
    assert [m.step for m in client.get_metric_history(run_id, "test_acc")] == list(range(4, 44, 4))
    # the resume starts while that process would still be at work (the test holds its lock in its stead): the resume's
    # trackers' process waits for it (the training does not), then continues the same runs
    from fedcli.results.lock import FileLock

    held = FileLock(run / state.LOCK_FILE)
    assert held.acquire()
    try:
        assert main(["train", "--resume", "K", "--quiet"]) == 0
        assert (
            client.get_run(run_id).info.status == "KILLED" and state.read(run)["status"] == "interrupted"
        )  # untouched
        assert state.describe(run)[0] == "working"
    finally:
        held.release()
    data = finished(run)
    assert data["status"] == "completed" and data["trackers"]["mlflow"]["last_step"] == 64
    rows = metrics_rows(run)
    assert len(rows) == 16  # the checkpoint was at round 9: round 9's row was written again by the resume
    exp = client.get_experiment_by_name("fedcli")
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.run_id == run_id == data["trackers"]["mlflow"]["run_id"] and r.info.status == "FINISHED"
    hist = client.get_metric_history(r.info.run_id, "test_acc")
    assert [(m.step, m.value) for m in hist] == [(int(x["iteration"]), float(x["test_acc"])) for x in rows]
    events = tensorboard_events(run / "tensorboard").Scalars("test_acc")
    assert [e.step for e in events] == [int(x["iteration"]) for x in rows]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2
    assert state.finishing(run) is None and not (run / state.LOCK_FILE).exists()


# in round 8 (after the trackers hold iteration 16), the trackers' process is killed (SIGKILL); the training completes
# (KILL_ROUND, KILL_STEP: another round and step)
TRACKERS_KILLER = """
import os, signal, sys, time
from pathlib import Path
from fedcli.fl import engine
from fedcli.trackers import state
orig = engine.Simulation.run_round
ROUND, STEP = int(os.environ.get("KILL_ROUND", "8")), int(os.environ.get("KILL_STEP", "16"))
def run_round(self, st):
    if st.round_idx == ROUND:
        run, deadline = Path(self.cfg.out), time.monotonic() + 200
        while min((t.get("last_step", -1) for t in state.read(run).get("trackers", {}).values()), default=-1) < STEP:
            assert time.monotonic() < deadline, state.read(run)
            time.sleep(0.05)
        os.kill(state.read(run)["pid"], signal.SIGKILL)
    return orig(self, st)
engine.Simulation.run_round = run_round
from fedcli.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.long(
    reason="a run whose trackers' process is killed, its report, then a resume (16 s); make test keeps "
    "the tracker resume after a kill "
    "(test_resume_continues_the_same_tracker_run_without_duplicate_steps)"
)
@pytest.mark.timeout(600)
def test_resume_of_a_completed_run_sends_its_cut_off_trackers_the_rest_and_trains_nothing(clean_env, capsys):
    """issue 41: `fedcli report` of a completed run whose trackers' process was killed says `fedcli train --resume RUN`
    sends the rest; it does (the same tracker runs, every evaluation once, closed as completed), exit 0, and no file of
    the run but the trackers' changes (before: exit 2, "the run already completed; nothing to resume")."""
    from fedcli.trackers import state

    tmp = clean_env
    args = [a for a in KILLED if a not in ("--checkpoint-every", "3")]
    p = run_forked(TRACKERS_KILLER, [*args, "--out", "C"], env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "the trackers' process ended with exit code -9" in p.stderr
    run = tmp / "C"
    rows = metrics_rows(run)
    assert len(rows) == 16 and json.loads((run / "manifest.json").read_text())["status"] == "completed"
    cut = state.read(run)
    assert cut["phase"] == "logging" and 16 <= cut["trackers"]["mlflow"]["last_step"] < 64
    said = "".join(cli(["report", "C"], capsys)[1:])
    assert "their process ended before it was done (phase logging)" in said
    assert "`fedcli train --resume C` sends the rest" in said

    def files():  # every file of the run but the trackers' own, with its bytes
        own = (*state.FILES, state.LOCK_FILE, state.PENDING_FILE, ".fedcli.lock")
        return {
            str(f.relative_to(run)): f.read_bytes()
            for f in sorted(run.rglob("*"))
            if f.is_file() and f.relative_to(run).parts[0] not in own
        }

    kept = files()
    assert {"manifest.json", "metrics.csv", "layers.csv", "intervals.csv", "model.pt"} <= set(kept)

    done = run_cli(["train", "--resume", "C"], dict(os.environ), tmp)
    assert done.returncode == 0, done.stderr
    assert "its trackers' process had been cut off" in done.stdout and "nothing was trained" in done.stdout
    assert "trackers (mlflow, tensorboard): done, run completed" in done.stdout
    assert files() == kept
    data = state.read(run)
    assert data["phase"] == "done" and data["status"] == "completed" and state.finishing(run) is None
    assert data["trackers"]["mlflow"]["run_id"] == cut["trackers"]["mlflow"]["run_id"]
    client = mlflow_client(tmp)
    (r,) = client.search_runs([client.get_experiment_by_name("fedcli").experiment_id])
    assert r.info.run_id == cut["trackers"]["mlflow"]["run_id"] and r.info.status == "FINISHED"
    for key in ("test_acc", "train_loss", "comm_params"):
        hist = client.get_metric_history(r.info.run_id, key)
        assert [(m.step, m.value) for m in hist] == [(int(x["iteration"]), float(x[key])) for x in rows], key
    names = layer_names(run)
    with open(run / "layers.csv") as f:
        final_syncs = {r["name"]: float(r["syncs"]) for r in csv.DictReader(f)}
    assert {n: client.get_metric_history(r.info.run_id, f"syncs/{n}")[-1].value for n in names} == final_syncs
    with open(run / "intervals.csv") as f:
        adjust = [x for x in csv.DictReader(f) if x["name"] == names[0]]
    assert [m.step for m in client.get_metric_history(r.info.run_id, f"adjust/d/{names[0]}")] == [
        int(x["iteration"]) for x in adjust
    ]
    assert {"manifest.json", "metrics.csv", "figures"} <= {a.path for a in client.list_artifacts(r.info.run_id)}
    acc = tensorboard_events(run / "tensorboard")
    assert [e.step for e in acc.Scalars("test_acc")] == [int(x["iteration"]) for x in rows]
    assert acc.Tensors("status")[-1].tensor_proto.string_val == [b"completed"]
    # once done, a resume of the completed run is refused as before: nothing is left to send
    code, _, err = cli(["train", "--resume", "C"], capsys)
    assert code == 2 and "the run already completed; nothing to resume" in err


@pytest.mark.timeout(600)
def test_the_command_returns_before_the_trackers_end_and_a_later_process_waits_for_them(clean_env, capsys):
    """The end work is not waited for: with the run's trackers lock held (here by the test, standing for the trackers'
    process of an earlier attempt still at work), `fedcli train` completes; its trackers' process, left behind,
    waits for the lock with every message, then logs them all; `fedcli report` says which of the two it is."""
    from fedcli.results.lock import FileLock
    from fedcli.trackers import state

    tmp = clean_env
    run = tmp / "B"
    run.mkdir()
    held = FileLock(run / state.LOCK_FILE)
    assert held.acquire()
    try:
        p = run_cli([*TRAIN, "--tracker", "tensorboard", "--out", str(run), "--overwrite"], dict(os.environ), tmp)
        assert p.returncode == 0, p.stderr
        assert len(metrics_rows(run)) == 5 and json.loads((run / "manifest.json").read_text())["status"] == "completed"
        assert not (run / "tensorboard").exists() and not (run / state.STATE_FILE).exists()  # nothing sent yet
        waiting = run_cli(["report", str(run)], dict(os.environ), tmp)
        assert waiting.returncode == 0
        assert state.finishing(run) is not None  # the test's own lock: the left-behind process has not taken it
    finally:
        held.release()
    data = finished(run)
    assert data["status"] == "completed" and data["trackers"]["tensorboard"]["last_step"] == 100
    assert [e.step for e in tensorboard_events(run / "tensorboard").Scalars("test_acc")] == [20, 40, 60, 80, 100]
    code, _, err = cli(["report", str(run)], capsys)
    assert code == 0 and f"{run}: trackers (tensorboard): done, run completed" in err, err


def test_overwrite_removes_the_previous_runs_tracker_files_never_through_a_link(clean_env):
    tmp = clean_env
    run = tmp / "O"
    assert main([*TRAIN, "--tracker", "wandb", "--tracker", "tensorboard", "--out", str(run)]) == 0
    first = finished(run)["trackers"]["wandb"]["id"]
    assert main([*TRAIN, "--tracker", "wandb", "--out", str(run), "--overwrite"]) == 0
    data = finished(run)
    assert list(data["trackers"]) == ["wandb"] and data["trackers"]["wandb"]["id"] != first
    offline = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and offline[0].endswith(data["trackers"]["wandb"]["id"])  # the first run's folder is gone
    assert not (run / "tensorboard").exists()
    assert sorted(s for s, h in wandb_run(run)["history"].items() if "test_acc" in h) == [20, 40, 60, 80, 100]
    # the tracker folder is a link to a folder outside the run: --overwrite removes the link, nothing it points to
    outside = tmp / "elsewhere"
    (run / "wandb").rename(outside)
    (run / "wandb").symlink_to(outside, target_is_directory=True)
    (run / "tensorboard").symlink_to(outside, target_is_directory=True)
    assert main([*TRAIN, "--out", str(run), "--overwrite"]) == 0
    assert not any(os.path.lexists(run / n) for n in ("wandb", "tensorboard", "trackers.json", "trackers.log"))
    assert [p.name for p in outside.glob("offline-run-*")] == offline and (outside / offline[0] / "files").is_dir()


def test_overwrite_waits_for_the_previous_runs_trackers_then_refuses_clearly(clean_env, monkeypatch, capsys):
    from fedcli.results.lock import FileLock
    from fedcli.trackers import state

    tmp = clean_env
    run = tmp / "L"
    assert main([*TRAIN, "--tracker", "tensorboard", "--out", str(run)]) == 0
    finished(run)
    monkeypatch.setattr(state, "OVERWRITE_WAIT_S", 0.5)
    held = FileLock(run / state.LOCK_FILE)  # stands for the previous run's trackers' process, still at work
    assert held.acquire()
    try:
        with pytest.raises(SystemExit) as e:
            main([*TRAIN, "--out", str(run), "--overwrite"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--overwrite: the trackers of the previous run in" in err and "are still finishing" in err, err
        assert (run / "tensorboard").is_dir() and (run / "trackers.json").is_file()  # nothing removed: the run's files
        assert (run / "manifest.json").is_file() and (run / "metrics.csv").is_file()  # neither (it stays a run)
    finally:
        held.release()
    assert main([*TRAIN, "--out", str(run), "--overwrite"]) == 0
    assert not (run / "tensorboard").exists() and not (run / "trackers.json").exists()


def run_cli(args, env, cwd, timeout=240):
    """``fedcli ARGS`` in a process of its own with ``env`` in ``cwd``: forked from this one (runkit.run_forked), whose
    trackers' process outlives it as a new ``fedcli``'s would."""
    return run_forked(FEDCLI, args, env={**env, "PYTHONPATH": str(ROOT)}, cwd=cwd, timeout=timeout)


def test_a_tracker_that_cannot_write_warns_once_and_the_run_completes(clean_env):
    """The command waiting for its trackers (FEDCLI_TRACKER_WAIT, as under Slurm): the failure is said once."""
    tmp = clean_env
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "FEDCLI_TRACKER_WAIT": "240",
    }
    run = tmp / "F"
    p = run_cli([*TRAIN, "--tracker", "mlflow", "--tracker", "wandb", "--out", str(run)], env, tmp)
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "tracker mlflow failed to start" in warnings[0], p.stderr
    assert len(metrics_rows(run)) == 5 and json.loads((run / "manifest.json").read_text())["status"] == "completed"
    assert state_of(run)["phase"] == "done"  # the command waited
    history = wandb_run(run)["history"]  # the tracker that works is unaffected
    assert sorted(s for s, h in history.items() if "test_acc" in h) == [20, 40, 60, 80, 100]


def test_failures_after_the_command_returned_are_in_the_log_and_the_report(clean_env, capsys):
    """The default: the command does not wait. Its trackers' process is held back (the test holds their lock, as an
    earlier attempt's process would) until the command has returned; then the TensorBoard folder is a file and the
    MLflow server is unreachable: each failure lands once in trackers.log and trackers.json, `fedcli report` says
    it, the command's stderr pointed there, and the CSVs are whole."""
    from fedcli.results.lock import FileLock
    from fedcli.trackers import state

    tmp = clean_env
    env = {**os.environ, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    run = tmp / "F"
    run.mkdir()
    held = FileLock(run / state.LOCK_FILE)
    assert held.acquire()
    try:
        p = run_cli(
            [
                *TRAIN,
                "--tracker",
                "mlflow",
                "--tracker",
                "tensorboard",
                "--tracker",
                "wandb",
                "--out",
                str(run),
                "--overwrite",
            ],
            env,
            tmp,
        )
        assert p.returncode == 0, p.stderr
        warnings = [line for line in p.stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1 and "were still starting when the run ended" in warnings[0], p.stderr
        assert f"fedcli report {run}" in warnings[0]
        (run / "tensorboard").write_text("a file where the event folder would go\n")  # cannot be written (even by root)
    finally:
        held.release()
    data = finished(run)
    assert {n: bool(s.get("failed")) for n, s in data["trackers"].items()} == {
        "mlflow": True,
        "tensorboard": True,
        "wandb": False,
    }
    log = (run / "trackers.log").read_text()
    assert log.count("tracker mlflow failed to start") == 1 and log.count("tracker tensorboard failed to start") == 1, (
        log
    )
    assert len(metrics_rows(run)) == 5 and json.loads((run / "manifest.json").read_text())["status"] == "completed"
    _, _, err = cli(["report", str(run)], capsys)
    assert "trackers (mlflow, tensorboard, wandb): done, run completed; mlflow, tensorboard failed" in err, err
    history = wandb_run(run)["history"]
    assert sorted(s for s, h in history.items() if "test_acc" in h) == [20, 40, 60, 80, 100]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_tracker_folder_warns_once(clean_env):
    """A read-only TensorBoard folder (made after --overwrite's clean-up, while the test holds the trackers back)."""
    from fedcli.results.lock import FileLock
    from fedcli.trackers import state

    tmp = clean_env
    run = tmp / "R"
    run.mkdir()
    held = FileLock(run / state.LOCK_FILE)
    assert held.acquire()
    try:
        p = run_cli([*TRAIN, "--tracker", "tensorboard", "--out", str(run), "--overwrite"], dict(os.environ), tmp)
        (run / "tensorboard").mkdir()
        (run / "tensorboard").chmod(0o555)
        held.release()
        data = finished(run)
    finally:
        held.release()
        (run / "tensorboard").chmod(0o755)
    assert p.returncode == 0, p.stderr
    assert data["trackers"]["tensorboard"]["failed"] is True
    assert (run / "trackers.log").read_text().count("tracker tensorboard failed") == 1
    assert len(metrics_rows(run)) == 5


def test_unknown_or_uninstalled_tracker_is_a_usage_error(clean_env, capsys):
    with pytest.raises(SystemExit) as e:
        main([*TRAIN, "--tracker", "neptune", "--out", "X"])
    assert e.value.code == 2
    assert "--tracker: unknown tracker 'neptune'; choose one of: mlflow, tensorboard, wandb" in capsys.readouterr().err


def test_recipe_key_and_repeated_flag(tmp_path):
    from fedcli.recipes import build_config

    (tmp_path / "r.toml").write_text('[base]\ntracker = ["TensorBoard", "mlflow", "mlflow"]\n')
    assert build_config(str(tmp_path / "r.toml"), {}).tracker == "tensorboard,mlflow"
    from fedcli.cli import catalog
    from fedcli.cli.options import given

    assert given({"tracker": ["wandb", "mlflow"], "lr": None}, catalog.load()) == {"tracker": "wandb,mlflow"}


# each command of the JSON list in turn, in one process; after each, the tracker libraries loaded so far
PROBE = """
import json, sys
from fedcli.cli.main import main
for args in json.loads(sys.argv[1]):
    try:
        main(args)
    except SystemExit:
        pass
    print("LOADED", sorted({m.split('.')[0] for m in sys.modules} & {"tensorboard", "mlflow", "wandb", "tbparse"}))
"""


def test_version_and_help_import_no_tracker_library():
    """One fresh interpreter runs the three in turn: a module once imported stays in ``sys.modules``, so none loaded
    after the last means none was loaded by any of them."""
    commands = [["--version"], ["report", "--help"], ["train", "--help"]]
    p = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(commands)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert [line for line in p.stdout.splitlines() if line.startswith("LOADED")] == ["LOADED []"] * len(commands)


def test_how_long_the_command_waits_for_its_trackers(monkeypatch):
    from fedcli.trackers.hook import finish_wait_s

    for k in ("FEDCLI_TRACKER_WAIT", "SLURM_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    assert finish_wait_s() == 0.0  # detached: the command's wall time is the training's
    monkeypatch.setenv("SLURM_JOB_ID", "17")  # a job step's processes end with it: wait (bounded)
    assert finish_wait_s() == 120.0
    monkeypatch.setenv("FEDCLI_TRACKER_WAIT", "2.5")
    assert finish_wait_s() == 2.5
    monkeypatch.setenv("FEDCLI_TRACKER_WAIT", "0")
    assert finish_wait_s() == 0.0


def test_a_state_file_written_before_the_phases_still_resumes_its_tracker_runs(tmp_path):
    from fedcli.trackers import state

    (tmp_path / "trackers.json").write_text(
        json.dumps(
            {"mlflow": {"run_id": "abc", "last_step": 40}, "tensorboard": {"logdir": "tensorboard", "last_step": 40}}
        )
    )
    assert state.read(tmp_path) == {
        "phase": "done",
        "status": None,
        "trackers": {
            "mlflow": {"run_id": "abc", "last_step": 40},
            "tensorboard": {"logdir": "tensorboard", "last_step": 40},
        },
    }
    assert state.describe(tmp_path) == (
        "done",
        "trackers (mlflow, tensorboard): done",
    )  # the command waited for them then
    (tmp_path / "trackers.json").write_text(
        json.dumps({"phase": "finishing", "status": "completed", "trackers": {"wandb": {}}})
    )
    kind, line = state.describe(tmp_path)  # finishing, but no process holds the lock: it ended before it was done
    assert kind == "ended-early" and line.startswith(
        "trackers (wandb): their process ended before it was done (phase finishing)"
    )
    assert state.describe(tmp_path / "nothing") is None


def mlflow_steps(tmp_path, run):
    from fedcli.trackers import state

    client = mlflow_client(tmp_path)
    return [m.step for m in client.get_metric_history(state.read(run)["trackers"]["mlflow"]["run_id"], "test_acc")]


def tensorboard_steps(tmp_path, run):
    return [e.step for e in tensorboard_events(run / "tensorboard").Scalars("test_acc")]


@pytest.mark.parametrize("name,steps", [("mlflow", mlflow_steps), ("tensorboard", tensorboard_steps)])
def test_a_step_logged_but_not_recorded_before_a_kill_is_not_sent_twice(tmp_path, monkeypatch, name, steps):
    """The trackers' process records a logged step in trackers.json right after the tracker has it; killed in between,
    the resume's process asks the tracker's own store for its last step (MLflow's run, TensorBoard's event files) and
    sends only what comes after (before: step 24 or 32 twice in the store, seen as a flaky failure of the
    completed-run resume test above)."""
    from fedcli.trackers import state
    from fedcli.trackers.worker import Worker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = tmp_path / "run"
    run.mkdir()
    start = {
        "op": "start",
        "info": {"run_dir": str(run), "name": "run", "experiment": "fedcli", "tags": {}, "params": {}},
    }
    first = Worker(run, name, resume=False, warn=lambda *a, **k: None)
    first.handle(start)
    for step in (8, 16, 24):
        first.handle({"op": "log", "step": step, "values": {"test_acc": step / 100}})
    data = state.read(run)
    assert data["trackers"][name]["last_step"] == 24
    data["trackers"][name]["last_step"] = 16  # killed after the tracker took step 24, before trackers.json said so
    state.write(run, data)

    again = Worker(run, name, resume=True, warn=lambda *a, **k: None)
    again.handle(start)
    assert again.channels[0].last_step == 24
    for step in (24, 32):
        again.handle({"op": "log", "step": step, "values": {"test_acc": step / 100}})
    assert sorted(steps(tmp_path, run)) == [8, 16, 24, 32]
    assert state.read(run)["trackers"][name]["last_step"] == 32


# Issue 47, point 3: the trackers' process SIGKILLed early. A run of 60 iterations, an evaluation every 20: the three
# evaluations the trackers must end up holding, whenever their process died.
EARLY = [
    "train",
    "--iterations",
    "60",
    "--eval-every",
    "20",
    "--clients",
    "8",
    "--mlp-hidden",
    "16",
    "--threads",
    "1",
    "--workers",
    "1",
    "--quiet",
    "--tracker",
    "tensorboard",
]


def _kill_at_launch(monkeypatch):
    """The trackers' process SIGKILLed as soon as it exists (right after its Popen), before it writes anything."""
    import signal

    from fedcli.trackers.hook import TrackerHook

    launch = TrackerHook.launch

    def killing(self, info):
        launch(self, info)
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    monkeypatch.setattr(TrackerHook, "launch", killing)


def _worker_pids(run: Path) -> list[int]:
    """The live trackers' processes of ``run`` (``python -m fedcli.trackers.worker RUN ...``), from /proc."""
    pids = []
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fedcli.trackers.worker" in argv and str(run).encode() in argv:
            pids.append(int(p.name))
    return pids


EARLY_LONG = pytest.mark.long(
    reason="the trackers' process SIGKILLed at another moment, then the report and the resume (15 "
    "to 20 s on a loaded machine); make test keeps the kill before its first write"
)


@pytest.mark.parametrize(
    "moment",
    [
        "before its first write",
        pytest.param("while it writes", marks=EARLY_LONG),
        pytest.param("after the run ended", marks=EARLY_LONG),
    ],
)
@pytest.mark.timeout(600)
def test_a_trackers_process_killed_early_is_reported_and_resume_sends_what_they_lack(
    clean_env, monkeypatch, capsys, moment
):
    """Before: killed as soon as it existed, the training said "see RUN/trackers.log" (there was none), `fedcli report`
    said nothing of the trackers and `fedcli train --resume` answered "already completed" (exit 2): the three
    evaluations could never reach TensorBoard. Now the report says what they lack, the resume sends it, and what the
    training says points at something that exists."""
    import signal
    import time

    from fedcli.results.lock import FileLock
    from fedcli.trackers import state

    tmp = clean_env
    run = tmp / "E"
    monkeypatch.setenv("FEDCLI_TRACKER_WAIT", "0")
    held = None
    if moment == "while it writes":  # SIGKILL once the trackers hold the first evaluation (iteration 20), at the start
        # of round 4 of FedLAMA's 6 rounds of phi x tau' = 10 iterations, before the second: trackers.json says logging
        p = run_forked(
            TRACKERS_KILLER,
            [*EARLY, "--out", str(run)],
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT), "KILL_ROUND": "3", "KILL_STEP": "20"},
        )
        code, err = p.returncode, p.stderr
    else:
        with monkeypatch.context() as m:
            if moment == "before its first write":
                _kill_at_launch(m)
            else:  # the trackers' process waits for the trackers lock (as for an earlier attempt's) until the run ended
                run.mkdir()
                held = FileLock(run / state.LOCK_FILE)
                assert held.acquire()
            code, _, err = cli([*EARLY, "--out", str(run), *(["--overwrite"] if held else [])], capsys)
    assert code == 0, err
    if held is not None:
        (pid,) = _worker_pids(run)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _worker_pids(run):  # the SIGKILL takes effect (a dead process, even unreaped, has no cmdline)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        held.release()
    assert len(metrics_rows(run)) == 3 and json.loads((run / "manifest.json").read_text())["status"] == "completed"
    said = " ".join(err.split())
    if "trackers.log" in said and "ended before writing trackers.log" not in said:
        assert (run / state.LOG_FILE).is_file(), said  # the training never points at a log that is not there
    if moment == "before its first write":
        assert f"`fedcli report {run}` says what they lack" in said and not (run / state.LOG_FILE).exists(), said
    code, _, report = cli(["report", str(run), "--figures", str(tmp / "figs")], capsys)
    report = " ".join(report.split())
    assert code == 0 and "trackers (tensorboard): their process ended before" in report, report
    lack = {"while it writes": "they hold 1 of the run's 3 evaluations"}.get(
        moment, "they hold 0 of the run's 3 evaluations"
    )
    assert lack in report and f"`fedcli train --resume {run}` sends the rest" in report, report
    code, out, err = cli(["train", "--resume", str(run)], capsys)
    assert code == 0, err
    assert "nothing was trained" in out and "trackers (tensorboard): done, run completed" in out, out
    assert [e.step for e in tensorboard_events(run / "tensorboard").Scalars("test_acc")] == [20, 40, 60]
    code, _, err = cli(["train", "--resume", str(run)], capsys)  # now nothing is left to send
    assert code == 2 and "the run already completed; nothing to resume" in err


def test_wandb_copies_no_file_through_a_link_planted_at_its_files_folder(tmp_path):
    """The end of a W&B run copies the manifest, CSVs and figures into its files folder (RUN_DIR/wandb/.../files). A
    link planted at ``files/figures`` while it copies (here after the manifest, before the first figure) must get
    nothing: the folders are opened from the run folder without following a link and the link is refused. Before, the
    folder was made with mkdir by path and the figure copied through the link, outside the run."""
    from types import SimpleNamespace

    from fedcli.safefs import LinkRefused
    from fedcli.trackers.wandb_run import WandbRun

    run = tmp_path / "run"
    files_dir = run / "wandb" / "offline-run-x" / "files"
    files_dir.mkdir(parents=True)
    (run / "manifest.json").write_text("{}\n")
    (run / "curves.png").write_bytes(b"png")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("do not touch\n")
    tracker = WandbRun()
    tracker.run_dir = run
    tracker.run = SimpleNamespace(dir=str(files_dir), summary={}, finish=lambda **k: None)

    def files():
        yield run / "manifest.json"
        (files_dir / "figures").symlink_to(outside, target_is_directory=True)
        yield run / "curves.png"

    with pytest.raises(LinkRefused, match="symbolic link"):
        tracker.finish("completed", files())
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (files_dir / "manifest.json").read_text() == "{}\n"
