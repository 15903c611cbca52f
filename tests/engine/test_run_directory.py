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


# a process that looks at a run's lock the way `fedcli sweep --status/--wait` and a study's workers do, over and over
# until the file STOP exists (argv: RUN_DIR STOP)
LOOKER = """
import sys
from pathlib import Path
from fedcli.results.lock import held_by_other
run, stop, n = Path(sys.argv[1]), Path(sys.argv[2]), 0
while not stop.exists():
    held_by_other(run)
    n += 1
print(n)
"""

# a process that holds the run's lock until the file STOP exists (argv: RUN_DIR STOP READY)
HOLDER = """
import sys, time
from pathlib import Path
from fedcli.results.lock import RunLock
run, stop, ready = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
lock = RunLock(run).take()
ready.write_text("held")
while not stop.exists():
    time.sleep(0.01)
lock.release()
"""


def test_a_look_at_a_run_lock_never_refuses_a_run_that_starts(tmp_path):
    """Another process looking over and over whether the run is in use (``held_by_other``; ``fedcli sweep --wait``
    looked every few seconds while its Slurm jobs started, and one job was refused "in use by a running fedcli
    (another process)"): 200 takes of the run's lock meanwhile all succeed (the look took the lock for itself and
    wrote its record; it now holds a shared lock for microseconds, which ``RunLock.take`` rides out)."""
    import runkit
    from fedcli.results.lock import RunLock

    run, stop = tmp_path / "run", tmp_path / "stop"
    run.mkdir()
    looker = runkit.start_forked(LOOKER, [str(run), str(stop)])
    try:
        refused = 0
        for _ in range(200):
            try:
                RunLock(run).take().release()
            except RunLocked:
                refused += 1
    finally:
        stop.write_text("")
        looker.wait(60)
    out, err = looker.communicate()
    assert looker.returncode == 0, err
    assert refused == 0 and int(out) > 200, (refused, out)


def test_a_look_at_a_run_lock_names_a_live_holder_and_writes_nothing(tmp_path):
    """``held_by_other``: None where no lock file is (and it makes none); a live holder's record while another process
    holds the lock, the file unchanged by the look; None once it has let go (the file gone with it); and a run whose
    record names a live process is refused at once, naming it."""
    import time

    import runkit
    from fedcli.results.lock import RunLock, held_by_other

    run, stop, ready = tmp_path / "run", tmp_path / "stop", tmp_path / "ready"
    run.mkdir()
    assert held_by_other(run) is None and not (run / RUN_LOCK).exists()
    holder = runkit.start_forked(HOLDER, [str(run), str(stop), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None, holder.communicate()
            time.sleep(0.01)
        before = (run / RUN_LOCK).read_bytes()
        seen = held_by_other(run)
        assert seen is not None and seen["pid"] == holder.pid
        assert (run / RUN_LOCK).read_bytes() == before
        t0 = time.monotonic()
        with pytest.raises(RunLocked, match=f"in use by a running fedcli \\(pid {holder.pid} on "):
            RunLock(run).take()
        assert time.monotonic() - t0 < RunLock.GRACE_S  # a live recorded holder: refused without the grace
    finally:
        stop.write_text("")
        holder.wait(60)
    assert holder.returncode == 0, holder.communicate()
    assert held_by_other(run) is None and not (run / RUN_LOCK).exists()
