"""Data loaded once per node under MPI and shared by its ranks (``fedcli.comm.node_share``): the layout by hand, the
pickle's round trip, and under real MPI (``mpiexec -n 2``) that every rank's arrays are views of one shared window
equal to a plain load, read-only, and that a loading error on the node's leader is raised on every rank."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedcli.comm import node_share
from runkit import MPIEXEC

ROOT = Path(__file__).resolve().parents[2]


def test_layout_aligns_every_buffer_to_64_bytes():
    # 1 byte -> 64, 64 -> 64, 65 -> 128: offsets 0, 64, 128; total 256; an empty buffer takes no room
    assert node_share.layout([1, 64, 65]) == ([0, 64, 128], 256)
    assert node_share.layout([0, 3]) == ([0, 0], 64)


def test_pack_sends_tensors_and_arrays_out_of_band_and_round_trips():
    data = {
        "x": torch.arange(12, dtype=torch.float32).view(3, 4),
        "y": torch.tensor([1, 0, 1]),
        "parts": [np.arange(5), np.arange(5, 9)],
        "name": "toy",
        "half": torch.ones(2, dtype=torch.bfloat16),
    }
    meta, buffers = node_share.pack(data)
    assert len(buffers) == 4  # x, y and the two index arrays; bfloat16 (no numpy dtype) travels in the pickle
    back = pickle.loads(meta, buffers=[memoryview(bytes(b.raw())).toreadonly() for b in buffers])
    assert torch.equal(back["x"], data["x"]) and back["x"].dtype == torch.float32 and back["x"].shape == (3, 4)
    assert torch.equal(back["y"], data["y"]) and back["y"].dtype == torch.int64
    assert [a.tolist() for a in back["parts"]] == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]
    assert not back["parts"][0].flags.writeable  # a write into shared data raises
    assert torch.equal(back["half"], data["half"]) and back["name"] == "toy"


def test_data_too_big_for_dev_shm_is_not_shared(monkeypatch):
    monkeypatch.setattr(node_share, "shm_free", lambda path="/dev/shm": node_share.SHM_MARGIN + 100)
    meta, why, buffers = node_share._packed({"x": np.zeros(1000)})
    assert meta is None and buffers == [] and "free in /dev/shm" in why


def test_data_that_does_not_pickle_is_not_shared():
    meta, why, _ = node_share._packed({"f": lambda: 0})
    assert meta is None and why.startswith("the data does not pickle")


SCRIPT = r"""
import sys
import numpy as np, torch
from fedcli.comm import node_share
from fedcli.comm.mpi import MPICommunicator
from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.errors import ConfigError

comm = MPICommunicator()
cfg = TrainConfig(dataset="digits", clients=5, partition="dirichlet", alpha=0.5)
ds, part = comm.load_shared(lambda: load_data_and_partition(cfg))
plain_ds, plain_part = load_data_and_partition(cfg)
assert torch.equal(ds.train_x, plain_ds.train_x) and torch.equal(ds.test_y, plain_ds.test_y)
assert all(np.array_equal(a, b) for a, b in zip(part.train, plain_part.train)) and part.hash == plain_part.hash
for t in (ds.train_x, ds.train_y, ds.test_x):
    assert node_share.in_window(t.data_ptr()), "a tensor outside the shared window"
assert node_share.in_window(part.train[0].ctypes.data) and not part.train[0].flags.writeable
assert not node_share.in_window(plain_ds.train_x.data_ptr())
assert comm.node_size == 2 and comm.data_sharing["ranks"] == 2 and comm.data_sharing["bytes"] >= ds.train_x.numel() * 4

def broken():
    raise ConfigError("the leader could not load")
try:
    comm.load_shared(broken)
except ConfigError as e:
    assert "the leader could not load" in str(e)
else:
    raise AssertionError("no error on rank %d" % comm.rank)
# a file per rank, not stdout: mpiexec forwards the ranks' output in chunks that may interleave within a line
open(sys.argv[1] + "/rank%d.ok" % comm.rank, "w").close()
"""


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_every_rank_reads_the_leaders_load_in_one_shared_window(tmp_path):
    if MPIEXEC is None:
        pytest.skip("mpiexec not installed (make install brings mpich)")
    script = tmp_path / "share.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", str(script), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in tmp_path.glob("rank*.ok")) == ["rank0.ok", "rank1.ok"], p.stdout + p.stderr
