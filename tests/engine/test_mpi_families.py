"""Every MPI-capable family gives the same results on 1 and 2 processes, in every column but ``wall_s`` of every CSV:
counts, intervals, names and every integer cell identical, floats equal to rounding (docs/parallel.md: under MPI each
rank
adds its clients and one ``Allreduce`` adds the ranks, so losses and weights move in the last bits: 2e-8 relative in
train_loss here; ``--workers`` sums in cohort order and gives the same bits); and an MPI run interrupted and resumed
under MPI equals the uninterrupted MPI run of the same size bitwise. Small runs (an 8-unit MLP, 3 rounds) with partial
participation, so per-client state moves between processes. Each test has a timeout; under CI a missing ``mpiexec``
fails these tests instead of skipping them (tests/conftest.py)."""

import csv
import json
import signal
from pathlib import Path

import pytest

from fedcli.cli.main import main
from runkit import AUTHOR_OPTIONS, MPIEXEC, mpirun, mpirun_each
from simkit import assert_rows_close

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)"),
]

BASE = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "6",
    "--active-ratio",
    "0.5",
    "--rounds",
    "3",
    "--tau",
    "2",
    "--local-epochs",
    "0",
    "--batch-size",
    "8",
    "--eval-every",
    "1",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--workers",
    "1",
    "--seed",
    "6",
    "--quiet",
]
FAMILIES = {
    "fedlama": [
        "--algo",
        "fedlama",
        "--phi",
        "2",
        "--lama-first-adjust",
        "0",
        "--lr",
        "0.1",
        "--weighting",
        "samples",
        "--partition",
        "dirichlet",
        "--alpha",
        "0.5",
    ],
    "fedlamb": ["--algo", "fedlamb", "--lr", "0.05", "--eps", "1e-4"],
    # FedLAMA with its authors' optimizer options (slot momentum that persists across rounds, weight decay on the
    # kernels and the final bias; test_author_optimizer.py's MPI case, in make test-long, runs them alone)
    "fedlama-author": "--algo fedlama --phi 2 --lama-first-adjust 0 --lr 0.05".split() + AUTHOR_OPTIONS,
    "mime": ["--algo", "mime", "--lr", "0.01"],
    "scaffold": ["--algo", "scaffold", "--lr", "0.1"],
    "feddyn": ["--algo", "feddyn", "--lr", "0.1"],
    "ditto": ["--algo", "ditto", "--lr", "0.1", "--client-test-fraction", "0.25"],
    "fedala": ["--algo", "fedala", "--lr", "0.1", "--client-test-fraction", "0.25", "--ala-num-pre-loss", "3"],
}
CSVS = ("metrics.csv", "layers.csv", "intervals.csv", "skipped.csv")


def cells(path: Path) -> list[dict]:
    """A CSV's rows as text, without wall_s (missing file: no rows)."""
    if not path.exists():
        return []
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def assert_same_files(a: Path, b: Path, rel: float = 0.0) -> None:
    """Every CSV cell but wall_s: as text (``rel`` 0, bitwise floats), or integer/text cells as text and floats within
    ``rel`` relative; the final models' tensors bit for bit, or within ``rel`` (and 1e-7 absolute)."""
    import torch

    for f in CSVS:
        if rel:
            assert_rows_close(cells(a / f), cells(b / f), rel, f)
        else:
            assert cells(a / f) == cells(b / f), f
    assert len(cells(a / "metrics.csv")) == 3
    ma, mb = (torch.load(x / "model.pt", weights_only=True) for x in (a, b))
    assert list(ma) == list(mb)
    for k in ma:
        assert torch.equal(ma[k], mb[k]) if not rel else torch.allclose(ma[k], mb[k], rtol=rel, atol=1e-7), k


def test_every_mpi_family_is_here():
    assert {"fedlama", "fedlamb", "mime", "scaffold", "feddyn", "ditto", "fedala"} <= set(FAMILIES)


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    """Every family on 2 processes, one mpiexec for all of them."""
    base = tmp_path_factory.mktemp("mpi2")
    runs = [["train", *BASE, *FAMILIES[f], "--out", str(base / f)] for f in sorted(FAMILIES)]
    p = mpirun_each(2, runs)
    assert p.returncode == 0, p.stderr
    return base


@pytest.mark.timeout(450)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_and_two_processes_give_the_same_results(family, two_process_runs, tmp_path):
    assert main(["train", *BASE, *FAMILIES[family], "--out", str(tmp_path / "n1")]) == 0
    n2 = two_process_runs / family
    man = json.loads((n2 / "manifest.json").read_text())
    assert man["world_size"] == 2
    # each rank its node-local rank (one node: MPI's shared-memory split), and the node loaded the data once: digits'
    # 1,797 float32 images of 64 pixels at least, in one shared window (also test_devices.py's MPI case, make test-long)
    assert [d["local_rank"] for d in man["devices"]] == [0, 1]
    assert man["data_sharing"]["ranks"] == 2 and man["data_sharing"]["bytes"] >= 1797 * 64 * 4, man["data_sharing"]
    if family == "fedlama":
        assert len(cells(tmp_path / "n1/intervals.csv")) == 3 * 4  # an adjustment at every round end, 4 tensors
    assert_same_files(tmp_path / "n1", n2, rel=1e-6)


# rank 0 sends itself SIGTERM in round 1 (0-based); the processes agree on it at the round's end and checkpoint
TERM_ON_RANK0 = """
import os, signal, sys
from fedcli.fl import engine
orig = engine.Simulation.run_round
def run_round(self, state):
    if self.comm.rank == 0 and state.round_idx == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    return orig(self, state)
engine.Simulation.run_round = run_round
from fedcli.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(300)
def test_mpi_resume_equals_the_uninterrupted_mpi_run(two_process_runs, tmp_path):
    """The uninterrupted run is the module's 2-process SCAFFOLD run (without --checkpoint-every, which only writes)."""
    args = ["train", *BASE, *FAMILIES["scaffold"], "--checkpoint-every", "1"]
    ref, out = two_process_runs / "scaffold", tmp_path / "run"
    p = mpirun(2, [*args, "--out", str(out)], timeout=150, script=TERM_ON_RANK0)
    assert p.returncode == 128 + signal.SIGTERM, p.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["checkpoint"].endswith("round-000002.pt")
    assert len(cells(out / "metrics.csv")) == 2
    p = mpirun(2, ["train", "--resume", str(out), "--quiet"], timeout=150)
    assert p.returncode == 0, p.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "completed" and man["resumes"][-1]["round"] == 2 and man["world_size"] == 2
    assert_same_files(ref, out)
