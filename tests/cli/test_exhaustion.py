"""Exhaustion at the edges (issue 29, family 5): out of memory is one sentence with a hint and exit 3 (like a full
disk), and a run folder that stops being writable mid-run is the I/O exit code (3), the state recorded where it can be
and said in the line where it cannot; once writable again the run resumes to the uninterrupted result."""

import csv
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import error_lines
from signalkit import ENV, TINY, paused_child


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("gib", [2, 4])
def test_out_of_memory_is_one_sentence_with_a_hint_and_exit_3(tmp_path, gib):
    """``ulimit -v`` below what the model needs (a 20000 x 20000 layer: 1.6 GB; at 2 GiB even torch cannot load)."""
    limit = gib * 2**30
    out = tmp_path / "run"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedcli",
            "train",
            "--out",
            str(out),
            "--quiet",
            "--model",
            "mlp",
            "--mlp-hidden",
            "20000,20000",
            "--clients",
            "4",
            "--active-ratio",
            "0.5",
            "--iterations",
            "4",
            "--trainer",
            "loop",
        ],
        env=ENV,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    lines = error_lines(p.stderr)
    assert p.returncode == 3 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert (
        lines[0].startswith("fedcli: error: out of CPU memory")
        and "--trainer loop" in lines[0]
        and "--workers" in lines[0]
    )
    assert not out.exists()  # nothing but a lock would have been left: the folder is removed


def _unwritable(folder: Path) -> bool:
    """Make ``folder`` refuse new files (root ignores permissions: the immutable attribute then)."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        return True
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def _writable(folder: Path) -> None:
    if os.geteuid() != 0:
        folder.chmod(0o755)
    else:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)


@pytest.mark.timeout(300)
def test_a_folder_that_stops_being_writable_mid_run_is_exit_3_and_resumes(tmp_path):
    ref = tmp_path / "ref"
    assert main(TINY + ["--out", str(ref)]) == 0
    out = tmp_path / "run"
    p, go = paused_child(tmp_path, "round", out)  # paused at the start of round 3 (manifest and rows 1-2 written)
    if not _unwritable(out):
        p.kill()
        p.wait()
        pytest.skip("cannot make a folder unwritable here (no chattr)")
    try:
        go.touch()
        _, err = p.communicate(timeout=240)
    finally:
        _writable(out)
    lines = error_lines(err)
    assert p.returncode == 3 and len(lines) == 1 and "Traceback" not in err, err
    assert str(out) in lines[0] and "stopped being writable during the run" in lines[0], lines[0]
    assert "manifest.json could not be updated either" in lines[0] and "still says 'running'" in lines[0], lines[0]
    assert f"continue with: fedcli train --resume {out}" in lines[0]
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"  # what it could not change, it said
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert rows(out / "metrics.csv") == rows(ref / "metrics.csv") and len(rows(out / "metrics.csv")) == 10
    assert (out / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()
