"""The training process's C heap (``fedcli.runtime.heap``): glibc's thresholds fixed so that a step's tensors reuse the
heap, measured in page faults of a real pFedMe run against the same run with glibc's defaults; left alone where the
user chose the allocator."""

import csv
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.runtime import heap

ROOT = Path(__file__).resolve().parents[2]
PFEDME = ["train", "--algo", "pfedme", "--iterations", "10", "--workers", "1", "--quiet"]
# glibc's defaults: a fresh process whose training does not touch the thresholds
UNTUNED = """
import resource, sys
import fedcli.runtime.heap as heap
heap.keep_heap_for_reuse = lambda: False
from fedcli.cli.main import main
import fedcli.fl.engine
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
code = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
sys.exit(code)
"""


def test_the_users_allocator_choice_is_left_alone():
    assert not heap.user_chose_allocator({})
    assert not heap.user_chose_allocator({"MALLOC_MMAP_THRESHOLD_": "", "GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    for env in (
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"MALLOC_MMAP_THRESHOLD_": "1"},
        {"MALLOC_TOP_PAD_": "0"},
        {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"},
    ):
        assert heap.user_chose_allocator(env), env


@pytest.mark.skipif(heap._libc() is None, reason="glibc only")
def test_a_pfedme_run_faults_in_far_fewer_pages_than_under_glibcs_defaults(tmp_path, monkeypatch):
    for k in heap.USER_SETTINGS:
        monkeypatch.delenv(k, raising=False)
    p = subprocess.run(
        [sys.executable, "-c", UNTUNED, *PFEDME, "--out", str(tmp_path / "untuned")],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert p.returncode == 0, p.stderr
    untuned = int(p.stdout.split()[-1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert main([*PFEDME, "--out", str(tmp_path / "tuned")]) == 0
    tuned = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # measured: 354,000 page faults under glibc's defaults, 14,000 with the thresholds fixed (the kernel time of the
    # defaults was 40% of the run's), at 20 iterations; at these 10, 254,000 and 13,000
    assert tuned * 5 < untuned, (tuned, untuned)
    rows = [
        [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(open(tmp_path / d / "metrics.csv"))]
        for d in ("tuned", "untuned")
    ]
    assert rows[0] == rows[1]  # the same arithmetic, bit for bit
    assert (tmp_path / "tuned" / "model.pt").read_bytes() == (tmp_path / "untuned" / "model.pt").read_bytes()
