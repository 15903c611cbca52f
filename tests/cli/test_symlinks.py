"""Never write through a symbolic link (issue 29, family 1): a link planted at any path of the run-directory and
sweep-folder contract is refused with one sentence naming it, and the file or folder it points to stays as it was,
for ``fedcli train`` (fresh and ``--overwrite``), ``--resume``, ``fedcli sweep`` and ``fedcli report``."""

import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import error_lines

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
    "--algo",
    "fedlama",
    "--tau",
    "1",
    "--phi",
    "2",
    "--iterations",
    "8",
    "--batch-size",
    "16",
    "--lr",
    "0.05",
    "--eval-every",
    "2",
    "--checkpoint-every",
    "1",
    "--keep-checkpoints",
    "3",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]

RUN_PATHS = [
    "manifest.json",
    "metrics.csv",
    "layers.csv",
    "intervals.csv",
    "skipped.csv",
    "timing.csv",
    "model.pt",
    "checkpoints",
    "checkpoints/round-000002.pt",
    ".fedcli.lock",
]


def run_main(args, capsys):
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def snapshot(path: Path) -> dict:
    """Every file under ``path`` (or the file itself) with the sha256 of its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def victim(tmp: Path, kind: str) -> Path:
    """What a planted link points to: a file or a folder outside every run folder, with content."""
    v = tmp / f"victim-{kind}"
    if kind == "dir":
        v.mkdir()
        (v / "precious.txt").write_text("do not touch\n")
        (v / "round-000002.pt").write_bytes(b"not yours")
    else:
        v.write_text("precious bytes that must survive\n")
    return v


def plant(run: Path, rel: str, target: Path) -> Path:
    p = run / rel
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(target, target_is_directory=target.is_dir())
    return p


def interrupted(args: list[str], out: Path) -> Path:
    """``out``: a run of ``args`` stopped by SIGTERM in round 3 (status ``interrupted``, checkpoints of rounds 1 and
    2)."""
    from fedcli.fl import engine

    sync = engine.Simulation.synchronize

    def signal_me(self, cohort, layers, step, *a, **k):
        if cohort.round_idx == 2 and step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return sync(self, cohort, layers, step, *a, **k)

    engine.Simulation.synchronize = signal_me
    try:
        with pytest.raises(SystemExit) as e:
            main(args + ["--out", str(out)])
    finally:
        engine.Simulation.synchronize = sync
    assert e.value.code == 143
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A completed run and one interrupted by SIGTERM in round 3 (checkpoints after rounds 1 and 2)."""
    base = tmp_path_factory.mktemp("runs")
    done = base / "done"
    assert main(TINY + ["--on-diverge", "skip-client", "--out", str(done)]) == 0
    (done / "skipped.csv").write_text("round,iteration,step,client,reason\n")
    stopped = interrupted(TINY, base / "stopped")
    (stopped / "intervals.csv").touch()
    (stopped / "skipped.csv").touch()
    return done, stopped


def _refused(code, err, link: Path):
    lines = error_lines(err)
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err and "symbolic link" in lines[0], err
    assert str(link) in lines[0] or link.name in lines[0], (link, lines[0])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rel", RUN_PATHS)
@pytest.mark.parametrize("command", ["fresh", "overwrite", "resume"])
def test_train_and_resume_never_write_through_a_link(runs, tmp_path, capsys, rel, command):
    done, stopped = runs
    run = tmp_path / "run"
    if command == "fresh":  # a new --out folder that holds nothing but the planted link
        run.mkdir()
    else:
        shutil.copytree(done if command == "overwrite" else stopped, run)
    target = victim(tmp_path, "dir" if rel == "checkpoints" else "file")
    before = snapshot(target)
    link = plant(run, rel, target)
    args = {
        "fresh": TINY + ["--out", str(run)],
        "overwrite": TINY + ["--out", str(run), "--overwrite"],
        "resume": ["train", "--resume", str(run), "--quiet"],
    }[command]
    code, err = run_main(args, capsys)
    assert snapshot(target) == before  # the target is unchanged, whatever happened
    _refused(code, err, link)
    assert link.is_symlink()


@pytest.mark.timeout(300)
def test_a_fresh_out_with_a_planted_lock_link_is_refused(tmp_path, capsys):
    target = victim(tmp_path, "file")
    before = snapshot(target)
    run = tmp_path / "fresh"
    run.mkdir()
    link = plant(run, ".fedcli.lock", target)
    code, err = run_main(TINY + ["--out", str(run)], capsys)
    assert snapshot(target) == before
    _refused(code, err, link)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rel", ["figures", "figures/curves.png", "figures/curves.pdf"])
def test_report_never_writes_through_a_link(runs, tmp_path, capsys, rel):
    done, _ = runs
    run = tmp_path / "run"
    shutil.copytree(done, run)
    target = victim(tmp_path, "dir" if rel == "figures" else "file")
    before = snapshot(target)
    link = plant(run, rel, target)
    code, err = run_main(["report", str(run)], capsys)
    assert snapshot(target) == before
    _refused(code, err, link)


SWEEP = """\
title = "links"
seeds = 1

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "16"
clients = 4
active_ratio = 0.5
iterations = 4
eval_every = 2
lr = 0.1
threads = 1
trainer = "loop"

[[runs]]
name = "FedAvg"
algo = "fedavg"
tau = 2
"""

SWEEP_PATHS = [
    "sweep.json",
    ".sweep.lock",
    ".sweep.workers.lock",
    "fedavg/seed0.toml",
    "fedavg/seed0.log",
    "fedavg/seed0",
    "fedavg",
    "fedavg/seed0/manifest.json",
    "fedavg/seed0/metrics.csv",
    "fedavg/seed0/.fedcli.lock",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rel", SWEEP_PATHS)
def test_sweep_never_writes_through_a_link(tmp_path, capsys, rel):
    recipe = tmp_path / "links.toml"
    recipe.write_text(SWEEP)
    root = tmp_path / "sweep"
    root.mkdir()
    target = victim(tmp_path, "dir" if rel in ("fedavg/seed0", "fedavg") else "file")
    before = snapshot(target)
    link = plant(root, rel, target)
    code, err = run_main(["sweep", str(recipe), "--out", str(root), "--in-process", "--quiet"], capsys)
    assert snapshot(target) == before
    assert code != 0, err
    assert "Traceback" not in err
    log = root / "fedavg" / "seed0.log"
    said = err + (log.read_text() if log.is_file() and not log.is_symlink() else "")
    assert "symbolic link" in said and link.name in said, said


# ------------------------------------------------------------------ client state on disk (issue 41)
DITTO = [
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
    "--algo",
    "ditto",
    "--tau",
    "1",
    "--iterations",
    "8",
    "--batch-size",
    "16",
    "--lr",
    "0.05",
    "--momentum",
    "0.5",
    "--momentum-persist",
    "client",
    "--client-test-fraction",
    "0.25",
    "--client-state",
    "disk",
    "--eval-every",
    "2",
    "--checkpoint-every",
    "1",
    "--keep-checkpoints",
    "3",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]
# a row file (the momentum rows, which a completed run removes, and Ditto's personal models, which it keeps)
ROW = "client-state/g0/r0/*.bin"
STATE_PATHS = ["client-state", "client-state/g0", "client-state/g0/r0", ROW, "client-state/g7", "client-state/index.pt"]


@pytest.fixture(scope="module")
def state_runs(tmp_path_factory):
    """Ditto with its state on disk: a completed run and one interrupted by SIGTERM in round 3."""
    base = tmp_path_factory.mktemp("state-runs")
    done = base / "done"
    assert main(DITTO + ["--out", str(done)]) == 0
    stopped = interrupted(DITTO, base / "stopped")
    assert any((stopped / "client-state" / "g0" / "r0").glob("*momentum*.bin"))
    assert any((done / "client-state" / "g0" / "r0").glob("*.bin")) and (done / "client-state" / "index.pt").is_file()
    return done, stopped


def plant_state(run: Path, rel: str, tmp: Path) -> tuple[Path, Path]:
    """A link at ``rel`` in ``run`` to a real outside file or folder holding what was there (a folder: a copy of
    it; a row file: a longer file), so that following the link would find what it expects."""
    if rel == ROW:
        rows = sorted((run / "client-state" / "g0" / "r0").glob("*.bin"), key=lambda p: "momentum" not in p.name)
        rel = str(rows[0].relative_to(run))  # a momentum file where there is one (a resume cuts it back)
    here = run / rel
    target = tmp / "outside" / here.name
    target.parent.mkdir()
    if here.is_dir():
        shutil.copytree(here, target)
        for f in [f for f in target.rglob("*") if f.is_file()]:  # not the bytes a rerun would write again
            f.write_bytes(f.read_bytes() + os.urandom(64))
        (target / "precious.txt").write_text("do not touch\n")
    elif rel.endswith("g7"):  # a stale generation (a later one than the checkpoint's): a folder outside
        (target / "r0").mkdir(parents=True)
        (target / "r0" / "precious.bin").write_bytes(os.urandom(4096))
    else:
        target.write_bytes((here.read_bytes() if here.is_file() else b"") + os.urandom(1 << 16))  # longer
    return plant(run, rel, target), target


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rel", STATE_PATHS)
@pytest.mark.parametrize("command", ["resume", "overwrite", "fresh"])
def test_client_state_is_never_written_or_deleted_through_a_link(state_runs, tmp_path, capsys, rel, command):
    """Every path of client-state/ (the folder, a generation, a rank folder, a row file, a stale generation, the
    index): refused with exit 2 naming the link before anything changes; what it points to stays byte for byte."""
    done, stopped = state_runs
    run = tmp_path / "run"
    if command == "fresh":
        run.mkdir()
        shutil.copytree(done / "client-state", run / "client-state")
    else:
        shutil.copytree(stopped if command == "resume" else done, run)
    if rel == "client-state/index.pt" and command == "resume":
        shutil.copy(done / "client-state" / "index.pt", run / "client-state" / "index.pt")
    link, target = plant_state(run, rel, tmp_path)
    before = snapshot(target)
    args = {
        "fresh": DITTO + ["--out", str(run)],
        "overwrite": DITTO + ["--out", str(run), "--overwrite"],
        "resume": ["train", "--resume", str(run), "--quiet"],
    }[command]
    code, err = run_main(args, capsys)
    assert snapshot(target) == before  # not truncated, not deleted, nothing written into it
    _refused(code, err, link)
    assert "stopped being writable" not in err
    assert link.is_symlink()


@pytest.mark.timeout(300)
def test_a_completed_runs_report_reads_nothing_through_a_client_state_link(state_runs, tmp_path, capsys):
    done, _ = state_runs
    run = tmp_path / "run"
    shutil.copytree(done, run)
    link, target = plant_state(run, "client-state", tmp_path)
    before = snapshot(target)
    code, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert snapshot(target) == before and link.is_symlink()


def _row_file(path) -> bool:
    return os.fspath(path).endswith(".bin")


# when the link is planted: the first row file created (a fresh run), cut back (a resume) or deleted (the end of a run)
DURING = {
    "create": ("open", lambda path, flags, *a, **k: _row_file(path) and flags & os.O_CREAT),
    "truncate": ("open", lambda path, flags, *a, **k: _row_file(path) and flags & os.O_ACCMODE == os.O_WRONLY),
    "delete": ("unlink", lambda path, *a, **k: _row_file(path)),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("when", list(DURING))
def test_a_link_planted_at_client_state_during_the_run_gets_nothing(state_runs, tmp_path, capsys, monkeypatch, when):
    """Issue 56.5, the client store: ``client-state/`` swapped for a link to a copy of it (outside the run) after every
    check, just before a row file is created, cut back or deleted, must not see that file created, cut or deleted
    through the link. The store reaches its files through descriptors (the rank folder opened from the store's folder,
    opened from the run folder), so the file it holds is the one it checked; the next folder it opens finds the link
    and is refused (exit 2); a run that opens none completes."""
    done, stopped = state_runs
    run = tmp_path / "run"
    if when == "truncate":  # rows written after the last checkpoint (a SIGKILL mid-round), which the resume cuts back
        shutil.copytree(stopped, run)
        for f in (run / "client-state").rglob("*.bin"):
            f.write_bytes(f.read_bytes() + os.urandom(64))
    target, before = tmp_path / "outside", {}
    name, due = DURING[when]
    real = getattr(os, name)

    def plant_then(path, *a, **k):
        if not before and due(path, *a, **k) and (run / "client-state").is_dir():
            shutil.copytree(run / "client-state", target)
            for f in [f for f in target.rglob("*") if f.is_file()]:  # longer: a cut would show
                f.write_bytes(f.read_bytes() + os.urandom(64))
            (target / "precious.txt").write_text("do not touch\n")
            (run / "client-state").rename(run / "client-state-moved")
            (run / "client-state").symlink_to(target, target_is_directory=True)
            before.update(snapshot(target))
        return real(path, *a, **k)

    monkeypatch.setattr(os, name, plant_then)
    args = ["train", "--resume", str(run), "--quiet"] if when == "truncate" else DITTO + ["--out", str(run)]
    code, err = run_main(args, capsys)
    monkeypatch.undo()
    assert before and snapshot(target) == before  # before: the file created, cut back or deleted through the link
    assert (run / "client-state").is_symlink()
    if code != 0:
        _refused(code, err, run / "client-state")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rel", ["ditto/seed0/client-state", "ditto/seed0/client-state/g0"])
def test_sweep_never_writes_client_state_through_a_link(tmp_path, capsys, rel):
    recipe = tmp_path / "links.toml"
    recipe.write_text(
        SWEEP.replace(
            'name = "FedAvg"\nalgo = "fedavg"',
            'name = "Ditto"\nalgo = "ditto"\nclient_state = "disk"\nclient_test_fraction = 0.25',
        )
    )
    root = tmp_path / "sweep"
    root.mkdir()
    target = victim(tmp_path, "dir")
    before = snapshot(target)
    link = plant(root, rel, target)
    code, err = run_main(["sweep", str(recipe), "--out", str(root), "--in-process", "--quiet"], capsys)
    assert snapshot(target) == before
    assert code != 0 and "Traceback" not in err, err
    log = root / "ditto" / "seed0.log"
    said = err + (log.read_text() if log.is_file() else "")
    assert "symbolic link" in said and str(link) in said, said


@pytest.mark.timeout(300)
def test_a_link_planted_at_checkpoints_during_the_run_gets_nothing(tmp_path, capsys, monkeypatch):
    """Issue 56.5: a check, then a write, leaves a window: ``checkpoints/`` swapped for a link after it was checked
    (here
    inside the first checkpoint's ``torch.save``, between the folder's check and the file's write) must neither receive
    a checkpoint nor lose a file. The checkpoint is written through the folder's descriptor (into the folder checked);
    the next one finds the link and is refused (exit 2)."""
    import torch

    target = victim(tmp_path, "dir")
    before = snapshot(target)
    run = tmp_path / "run"
    real_save, planted = torch.save, []

    def save_then_plant(obj, f, *a, **k):
        if not planted and (run / "checkpoints").is_dir():
            planted.append(True)
            (run / "checkpoints").rename(run / "checkpoints-moved")
            (run / "checkpoints").symlink_to(target, target_is_directory=True)
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save_then_plant)
    code, err = run_main(TINY + ["--out", str(run)], capsys)
    assert planted and snapshot(target) == before  # before: round-000001.pt written through the link
    _refused(code, err, run / "checkpoints")
