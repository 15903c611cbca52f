"""fedcli.results.run_directory.RunDirectory: a run directory's life in its order (open and lock, clean, begin,
guard, close, release), each step refused out of order, and ``--overwrite``'s clean that never follows a link."""

import json
import os

import pytest

from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl.engine import Simulation
from fedcli.results.lock import RUN_LOCK, RunLocked
from fedcli.results.run_directory import RunDirectory, RunDirectoryOrder
from fedcli.results.rundir import RunClosed
from fedcli.runtime import early


def tiny_sim():
    return Simulation(
        TrainConfig(dataset="digits", model="mlp", mlp_hidden="16", clients=4, rounds=1, threads=1).validate()
    ).setup()


def test_a_run_directory_goes_through_its_life_in_order(tmp_path):
    out = tmp_path / "run"
    rd = RunDirectory.open(out, overwrite=False, resume=False)
    assert (out / RUN_LOCK).exists() and rd.phase == "locked" and rd.status is None
    with pytest.raises(RunLocked):  # one writer: a second open is refused while the first holds the lock
        RunDirectory.open(out, overwrite=True, resume=False)
    for step in (lambda: rd.close("completed"), lambda: rd.guard(None, [os.getpid()])):
        with pytest.raises(RunDirectoryOrder):  # nothing to close or guard before the manifest exists
            step()
    sim = tiny_sim()
    assert rd.begin(sim, {"pids": [os.getpid()]}, manifest={"tune": {"number": 3}}) == []
    assert json.loads((out / "manifest.json").read_text())["status"] == "running" and rd.status == "running"
    with pytest.raises(RunDirectoryOrder):  # begun once: neither begun nor cleaned again
        rd.begin(sim, {})
    with pytest.raises(RunDirectoryOrder):
        rd.clean()
    rd.rows.append_metrics({"round": 1, "iteration": 5})
    rd.close("completed", summary={"final_acc": 0.5})
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["summary"], manifest["tune"]) == (
        "completed",
        {"final_acc": 0.5},
        {"number": 3},
    )
    with pytest.raises(RunClosed):  # the manifest says how the run ended: no row after it
        rd.rows.append_metrics({"round": 2, "iteration": 10})
    with pytest.raises(RunClosed):
        rd.rows.write_layers([])
    assert (out / "metrics.csv").read_text().splitlines()[1:] == ["1,5,,,,,,,,,"]  # the one row, none after the close
    rd.release()
    assert not (out / RUN_LOCK).exists() and rd.phase == "released"
    assert rd.lock.fd is None
    rd.release()  # twice: nothing more
    with pytest.raises(ConfigError, match="already holds files"):  # a finished run is not written over unasked
        RunDirectory.open(out, overwrite=False, resume=False)
    assert not (out / RUN_LOCK).exists()


def test_a_refused_open_leaves_nothing_behind(tmp_path):
    out = tmp_path / "new"
    (tmp_path / "elsewhere").mkdir()
    out.mkdir()
    os.symlink(tmp_path / "elsewhere", out / "checkpoints")  # a planted link: refused before anything is written
    before = len(early.registered())
    with pytest.raises(ConfigError, match="checkpoints"):
        RunDirectory.open(out, overwrite=False, resume=False)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints"]  # no lock file left, the link untouched
    assert len(early.registered()) == before  # no stop-signal handler left registered for the folder


def test_a_run_never_begun_leaves_no_folder_it_created(tmp_path):
    out = tmp_path / "a" / "run"
    rd = RunDirectory.open(out, overwrite=False, resume=False)
    rd.release()  # an error in the setup: the manifest was never written
    assert not out.exists() and (tmp_path / "a").is_dir()


TINY = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--active-ratio",
    "0.5",
    "--iterations",
    "4",
    "--batch-size",
    "16",
    "--eval-every",
    "2",
    "--checkpoint-every",
    "1",
    "--client-state",
    "disk",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


def test_overwrite_removes_links_in_the_run_dir_never_what_they_point_to(tmp_path):
    run, victim = tmp_path / "run", tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    assert main(TINY + ["--out", str(run)]) == 0
    deep = run / "client-state" / "g1" / "r0" / "deeper"  # below the depth refuse_links checks: removed as a link
    deep.mkdir(parents=True)
    os.symlink(victim, deep / "link")
    os.symlink(victim / "keep.txt", deep / "file-link")
    assert main(TINY + ["--out", str(run), "--overwrite"]) == 0
    assert (victim / "keep.txt").read_text() == "mine" and sorted(os.listdir(victim)) == ["keep.txt"]
    assert not (run / "client-state" / "g1" / "r0" / "deeper").exists()  # the previous run's client state went
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"


def previous_run(folder):
    """A previous run's files, as --overwrite finds them (a stop request, a checkpoint, client state)."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "client-state" / "g1").mkdir(parents=True)
    for name in (
        "manifest.json",
        "metrics.csv",
        "layers.csv",
        "model.pt",
        "stop.json",
        "checkpoints/round-000001.pt",
        "checkpoints/notes.txt",
        "client-state/g1/t.bin",
        "user.txt",
    ):
        (folder / name).write_text("{}" if name == "manifest.json" else name)


def test_clean_works_on_the_folder_it_locked_even_when_a_link_replaces_it(tmp_path):
    run, moved, victim = tmp_path / "run", tmp_path / "moved", tmp_path / "victim"
    previous_run(run)
    (run / "manifest.json").write_text(json.dumps({"config": {}, "status": "completed"}))
    previous_run(victim)
    rd = RunDirectory.open(run, overwrite=True, resume=False)
    os.rename(run, moved)  # the locked folder moved away and a link planted at its name before the clean
    os.symlink(victim, run)
    rd.clean()
    names = {str(p.relative_to(victim)) for p in victim.rglob("*")}
    assert names == {
        "checkpoints",
        "client-state",
        "client-state/g1",
        "manifest.json",
        "metrics.csv",
        "layers.csv",
        "model.pt",
        "stop.json",
        "checkpoints/round-000001.pt",
        "checkpoints/notes.txt",
        "client-state/g1/t.bin",
        "user.txt",
    }  # nothing of the link's target went
    # the folder locked was cleaned: the run's files, its stop request and checkpoints went; what is not a run's stayed
    assert sorted(str(p.relative_to(moved)) for p in moved.rglob("*")) == [
        ".fedcli.lock",
        "checkpoints",
        "checkpoints/notes.txt",
        "user.txt",
    ]
    with pytest.raises(RunDirectoryOrder):
        rd.clean()  # once, before the run begins
    rd.release()


def test_clean_keeps_a_stop_request_of_a_folder_without_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "stop.json").write_text("{}")  # asked before the run started: this run's request
    rd = RunDirectory.open(run, overwrite=True, resume=False)
    rd.clean()
    assert sorted(os.listdir(run)) == [RUN_LOCK, "stop.json"]
    rd.release()
