"""A real full disk: ``fedcli train`` in a child process whose file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored)
makes the kernel's ``write()`` itself fail with EFBIG once a file would grow past it -- a short write mid-row, then
an error -- instead of a patched ``os.fsync``. The run must end with exit 3 and one sentence naming the file, leave
whole CSV rows only and no half-written temporary file, mark itself failed, and resume once the limit is gone."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
# fedavg on a 4-unit MLP, a metrics row (~95 bytes) every round: metrics.csv outgrows the manifest (~6 KB) after ~65
# rounds; a checkpoint (~15 KB here) is the largest file written while training
ARGS = ["train", "--algo", "fedavg", "--dataset", "digits", "--model", "mlp", "--mlp-hidden", "4", "--clients", "2",
        "--rounds", "90", "--tau", "1", "--batch-size", "8", "--eval-every", "1", "--threads", "1", "--workers", "1",
        "--seed", "1", "--keep-checkpoints", "1", "--quiet"]

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
    return subprocess.run([sys.executable, "-c", LIMITED, str(limit), *args], env=env, capture_output=True, text=True,
                          timeout=150)


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


@pytest.mark.timeout(300)
def test_metrics_write_fails_mid_row_then_resume(tmp_path):
    out, ref = tmp_path / "run", tmp_path / "ref"
    p = limited(7000, [*ARGS, "--checkpoint-every", "0", "--out", str(out)])  # checkpoints outgrow 7000 bytes
    assert p.returncode == 3, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "metrics.csv" in err[0] and "File too large" in err[0] and "Traceback" not in p.stderr, p.stderr
    text = (out / "metrics.csv").read_bytes()
    assert len(text) <= 7000 and text.endswith(b"\n")  # the half row that reached the disk was cut back
    got = rows(out / "metrics.csv")
    assert 50 < len(got) < 90 and [int(r["round"]) for r in got] == list(range(1, len(got) + 1))
    assert all(len(r) == len(got[0]) and None not in r.values() for r in got)  # whole rows only
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "metrics.csv" in man["error"]
    assert not [f for f in out.rglob("*") if f.is_file() and (".tmp" in f.name or f.name.startswith("."))
                and f.name != ".fedcli.lock"]

    # the disk has room again: --resume (no checkpoint: from the start, over the rows on disk) ends as an
    # uninterrupted run
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert main([*ARGS, "--checkpoint-every", "0", "--out", str(ref)]) == 0
    assert rows(out / "metrics.csv") == rows(ref / "metrics.csv")
    assert (out / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()


@pytest.mark.timeout(200)
def test_checkpoint_write_fails_and_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "run"
    p = limited(10000, [*ARGS, "--rounds", "12", "--checkpoint-every", "5", "--out", str(out)])  # manifest < limit < checkpoint
    assert p.returncode == 3, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "round-000005" in err[0] and "File too large" in err[0], p.stderr
    leftovers = [f.name for f in out.rglob("*") if f.is_file() and f.name not in
                 ("manifest.json", "metrics.csv", "layers.csv", "intervals.csv", "skipped.csv", "timing.csv", ".fedcli.lock")]
    assert leftovers == [], leftovers  # no half-written checkpoint, under its name or a temporary one
    assert (out / "metrics.csv").read_bytes().endswith(b"\n") and len(rows(out / "metrics.csv")) == 5
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
