"""A real full disk: ``fedcli train`` in a child process whose file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored)
makes the kernel's ``write()`` itself fail with EFBIG once a file would grow past it -- a short write mid-row, then
an error -- instead of a patched ``os.fsync``. The run must end with exit 3 and one sentence naming the file, leave
whole CSV rows only and no half-written temporary file, mark itself failed, and resume once the limit is gone. The
end of a run (model.pt, client-state/index.pt, then the manifest) is tested with a disk that fills at one named file
(its fsync fails with ENOSPC inside the real atomic write), in this process."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import run_forked

ROOT = Path(__file__).resolve().parents[2]
# fedavg on a 4-unit MLP, a metrics row (~95 bytes) every round: metrics.csv outgrows the manifest (~6 KB) after ~65
# rounds; a checkpoint (~15 KB here) is the largest file written while training
ARGS = [
    "train",
    "--algo",
    "fedavg",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "4",
    "--clients",
    "2",
    "--rounds",
    "90",
    "--tau",
    "1",
    "--batch-size",
    "8",
    "--eval-every",
    "1",
    "--threads",
    "1",
    "--workers",
    "1",
    "--seed",
    "1",
    "--keep-checkpoints",
    "1",
    "--quiet",
]

LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() past the limit then fails with EFBIG instead of killing us
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from fedcli.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def limited(limit: int, args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return run_forked(LIMITED, [str(limit), *args], env=env, timeout=150)


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


@pytest.mark.timeout(300)
def test_metrics_write_fails_mid_row_then_resume(tmp_path):
    out, ref = tmp_path / "run", tmp_path / "ref"
    p = limited(7000, [*ARGS, "--checkpoint-every", "0", "--out", str(out)])  # checkpoints outgrow 7000 bytes
    assert p.returncode == 3, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "metrics.csv" in err[0] and "File too large" in err[0] and "Traceback" not in p.stderr, (
        p.stderr
    )
    text = (out / "metrics.csv").read_bytes()
    assert len(text) <= 7000 and text.endswith(b"\n")  # the half row that reached the disk was cut back
    got = rows(out / "metrics.csv")
    assert 50 < len(got) < 90 and [int(r["round"]) for r in got] == list(range(1, len(got) + 1))
    assert all(len(r) == len(got[0]) and None not in r.values() for r in got)  # whole rows only
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "metrics.csv" in man["error"]
    assert not [
        f
        for f in out.rglob("*")
        if f.is_file() and (".tmp" in f.name or f.name.startswith(".")) and f.name != ".fedcli.lock"
    ]

    # the disk has room again: --resume (no checkpoint: from the start, over the rows on disk) ends as an
    # uninterrupted run
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert main([*ARGS, "--checkpoint-every", "0", "--out", str(ref)]) == 0
    assert rows(out / "metrics.csv") == rows(ref / "metrics.csv")
    assert (out / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()


@pytest.mark.timeout(200)
def test_checkpoint_write_fails_and_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "run"
    p = limited(
        10000, [*ARGS, "--rounds", "12", "--checkpoint-every", "5", "--out", str(out)]
    )  # manifest < limit < checkpoint
    assert p.returncode == 3, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "round-000005" in err[0] and "File too large" in err[0], p.stderr
    leftovers = [
        f.name
        for f in out.rglob("*")
        if f.is_file()
        and f.name
        not in (
            "manifest.json",
            "metrics.csv",
            "layers.csv",
            "intervals.csv",
            "skipped.csv",
            "timing.csv",
            ".fedcli.lock",
        )
    ]
    assert leftovers == [], leftovers  # no half-written checkpoint, under its name or a temporary one
    assert (out / "metrics.csv").read_bytes().endswith(b"\n") and len(rows(out / "metrics.csv")) == 5
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"


# a Ditto run keeping its client state on disk (client-state/), with the personal models kept at the end
DITTO = [
    "train",
    "--algo",
    "ditto",
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
    "--rounds",
    "8",
    "--tau",
    "2",
    "--batch-size",
    "8",
    "--lr",
    "0.05",
    "--eval-every",
    "1",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--client-state",
    "disk",
    "--checkpoint-every",
    "2",
    "--quiet",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "workers,keep,full_at",
    [
        ("1", "personal", "client-state/index.pt"),  # the case
        # two processes, nothing kept at the end: the other process removed its client-state files as soon as its rounds
        # were done, whether or not the root's end was saved, so the last checkpoint lost its rows
        ("2", "none", "model.pt"),
    ],
)
def test_the_manifest_says_completed_last_and_a_run_stopped_before_resumes(
    workers, keep, full_at, tmp_path, monkeypatch, capsys
):
    """Issue 56, item 17: the end of a run wrote manifest.json 'completed' before client-state/index.pt, so a disk that
    filled between the two left exit 3 beside a manifest saying completed, and --resume had nothing to resume. The disk
    fills here as a final file is written (its fsync fails with ENOSPC, through the real atomic write): exit 3, the
    manifest not completed, every file the last checkpoint refers to kept; the resume then ends as an uninterrupted
    run."""
    import errno

    from runkit import error_lines
    from runkit import rows as run_rows

    ref, out = tmp_path / "ref", tmp_path / "run"
    args = [*DITTO, "--workers", workers, "--client-state-keep", keep]
    # the uninterrupted run in one process: a run's files do not depend on its number of workers
    # (tests/comm/test_workers.py), and the resume must end as that run
    assert main([*DITTO, "--workers", "1", "--client-state-keep", keep, "--out", str(ref)]) == 0
    assert (ref / "client-state" / "index.pt").is_file() == (keep == "personal")
    real = os.fsync
    folder, name = (out / full_at).parent, (out / full_at).name

    def full(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder / f".{name}.tmp")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", full)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", str(out)])
    lines = error_lines(capsys.readouterr().err)
    assert e.value.code == 3 and len(lines) == 1, lines
    assert f"cannot write {out / full_at} (No space left on device)" in lines[0], lines[0]
    assert f"continue with: fedcli train --resume {out}" in lines[0], lines[0]
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and name in man["error"], man["status"]
    assert not (out / full_at).exists() and not [f for f in out.rglob("*") if ".tmp" in f.name]
    monkeypatch.setattr(os, "fsync", real)  # the disk has room again
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["status"] == "completed"
    assert run_rows(out / "metrics.csv") == run_rows(ref / "metrics.csv")
    assert (out / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()
    assert sorted(p.relative_to(out) for p in out.glob("client-state/**/*")) == sorted(
        p.relative_to(ref) for p in ref.glob("client-state/**/*")
    )
