"""One device per process: ``--device cuda`` takes GPU local-rank mod visible GPUs (faked counts on the CPU),
``--device cuda:K``, the node-local rank under MPI; GPU runs that skip without a GPU."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedcli.cli.main import main
from fedcli.comm.mpi import launcher_local_rank
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl.engine import resolve_device

ROOT = Path(__file__).resolve().parents[2]
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cuda_spreads_processes_over_the_visible_gpus():
    assert [str(resolve_device("cuda", r, count=4)) for r in range(6)] == [
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:3",
        "cuda:0",
        "cuda:1",
    ]
    assert str(resolve_device("auto", 3, count=2)) == "cuda:1"
    assert str(resolve_device("auto", 3, count=0)) == "cpu" and str(resolve_device("cpu", 3, count=8)) == "cpu"
    assert str(resolve_device("cuda:2", 0, count=4)) == str(resolve_device("cuda:2", 3, count=4)) == "cuda:2"


def test_bad_devices_are_one_sentence_exit_2():
    with pytest.raises(ConfigError, match=r"--device cuda:2: only 2 CUDA device\(s\) are visible") as e:
        resolve_device("cuda:2", 0, count=2)
    assert e.value.exit_code == 2
    with pytest.raises(ConfigError, match="no CUDA device"):
        resolve_device("cuda", 0, count=0)
    for bad in ("gpu", "cuda:", "cuda:x", "cuda1"):
        with pytest.raises(ConfigError, match="expected cpu, cuda, cuda:K"):
            TrainConfig(device=bad).validate()
    TrainConfig(device="cuda:3").validate()


def test_launcher_local_rank_variables():
    assert launcher_local_rank({}) is None
    assert launcher_local_rank({"SLURM_LOCALID": "3"}) == 3
    assert launcher_local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_LOCALID": "3"}) == 1  # the MPI's own first
    assert launcher_local_rank({"MPI_LOCALRANKID": "2"}) == 2 and launcher_local_rank({"LOCAL_RANK": " "}) is None


def test_the_manifest_records_every_process_device(tmp_path):
    args = [
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "8",
        "--clients",
        "4",
        "--rounds",
        "1",
        "--device",
        "cpu",
        "--workers",
        "2",
        "--quiet",
        "--out",
        str(tmp_path / "w2"),
    ]
    assert main(args) == 0
    man = json.loads((tmp_path / "w2" / "manifest.json").read_text())
    assert man["devices"] == [{"device": "cpu", "local_rank": 0}, {"device": "cpu", "local_rank": 1}]


@pytest.mark.long(
    reason="the same two manifest fields of a 2-rank run (each rank's node-local rank, the data loaded once per node) "
    "are checked in make test on test_mpi_families' 2-process runs (test_one_and_two_processes_give_the_same_results)"
)
@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_mpi_ranks_get_their_node_local_rank(tmp_path):
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run(
        [
            mpiexec,
            "-n",
            "2",
            sys.executable,
            "-m",
            "mpi4py",
            "-m",
            "fedcli",
            "train",
            "--dataset",
            "digits",
            "--model",
            "mlp",
            "--mlp-hidden",
            "8",
            "--clients",
            "4",
            "--rounds",
            "1",
            "--device",
            "cpu",
            "--quiet",
            "--out",
            str(tmp_path / "m"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert p.returncode == 0, p.stderr
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert [d["local_rank"] for d in man["devices"]] == [0, 1]  # one node: MPI's shared-memory split
    # the node loaded the data once: digits' 1,797 float32 images of 64 pixels at least, in one shared window
    assert man["data_sharing"]["ranks"] == 2 and man["data_sharing"]["bytes"] >= 1797 * 64 * 4, man["data_sharing"]


SMALL = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "6",
    "--rounds",
    "2",
    "--algo",
    "ditto",
    "--client-test-fraction",
    "0.25",
    "--quiet",
]


@GPU
def test_gpu_run_records_its_device(tmp_path):
    assert main([*SMALL, "--device", "cuda:0", "--out", str(tmp_path / "g")]) == 0
    man = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert man["device"] == "cuda:0" and man["devices"][0]["device"] == "cuda:0"


@GPU
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_workers_take_one_gpu_each(tmp_path):
    assert main([*SMALL, "--device", "cuda", "--workers", "2", "--out", str(tmp_path / "w")]) == 0
    man = json.loads((tmp_path / "w" / "manifest.json").read_text())
    assert [d["device"] for d in man["devices"]] == ["cuda:0", "cuda:1"]


@GPU
def test_gpu_cohort_chunks_match_the_whole_cohort(tmp_path):
    """On CUDA the batched kernels may round differently per chunk size: equal within 1e-5 (stated in docs/scale.md)."""
    import csv

    for chunk in ("0", "1"):
        assert (
            main(
                [
                    *SMALL,
                    "--device",
                    "cuda",
                    "--trainer",
                    "vmap",
                    "--cohort-chunk",
                    chunk,
                    "--out",
                    str(tmp_path / chunk),
                ]
            )
            == 0
        )
    rows = [list(csv.DictReader(open(tmp_path / c / "metrics.csv"))) for c in ("0", "1")]
    for a, b in zip(*rows):
        for col in ("train_loss", "test_loss", "test_acc", "personal_acc"):
            assert abs(float(a[col]) - float(b[col])) <= 1e-5 * max(1.0, abs(float(a[col])))
