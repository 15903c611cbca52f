"""--cohort-chunk K on a round whose parts treat each client on its own: the round is taken K clients at a time end to
end (fedcli.fl.chunked), with the whole-cohort round's bits, its divergence error, and memory bounded by K."""

import csv
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from fedcli.cli.main import main
from fedcli.comm.communicator import assign_clients, ordered_sum
from fedcli.fl import trainers
from fedcli.fl.cohort import sample_cohort
from runkit import MPIEXEC, mpirun_each, run_forked

ROOT = Path(__file__).resolve().parents[2]
# 20 clients, 7 a round: under two processes 4 + 3 (or 3 + 4) clients, so chunks of 3 give one process an empty chunk
RUN = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "20",
    "--active-ratio",
    "0.35",
    "--rounds",
    "3",
    "--tau",
    "3",
    "--batch-size",
    "8",
    "--client-test-fraction",
    "0.25",
    "--eval-every",
    "1",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--workers",
    "1",
    "--seed",
    "3",
    "--quiet",
]


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_a_running_ordered_sum_continues_bitwise():
    """Three clients added 2 + 1 into one running sum give the bits of the three at once (one rounding each)."""
    x = torch.tensor([[0.1, 1e8], [0.2, 1.0], [0.3, -1e8]], dtype=torch.float32)
    w = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    whole = ordered_sum([x], w, [0, 1, 2])
    part = ordered_sum([x[:2]], w[:2], [0, 1])
    part = ordered_sum([x[2:]], w[2:], [2], out=part)
    assert torch.equal(whole, part)
    # by hand: 0.05 + 0.05 + 0.075 in float32, and 0.5e8 + 0.25 + (-0.25e8) (the 0.25 is lost: ulp(5e7) = 4)
    assert float(whole[1]) == 25000000.0


@pytest.mark.parametrize("algo", ["ditto", "fedavg"])
def test_a_chunked_round_is_the_whole_round_bitwise(algo, tmp_path):
    """Ditto (its personalized models in the store, on disk) and FedAvg with momentum: chunks of 3 (7 clients a round:
    3 + 3 + 1) and of 1 give the whole-cohort run's metrics and model bytes."""
    for chunk in ("0", "3", "1"):
        assert (
            main(
                [
                    "train",
                    "--algo",
                    algo,
                    *RUN,
                    "--client-state",
                    "disk",
                    "--cohort-chunk",
                    chunk,
                    "--out",
                    str(tmp_path / chunk),
                ]
            )
            == 0
        )
    for chunk in ("3", "1"):
        assert rows(tmp_path / "0" / "metrics.csv") == rows(tmp_path / chunk / "metrics.csv")
        assert (tmp_path / "0" / "model.pt").read_bytes() == (tmp_path / chunk / "model.pt").read_bytes()
    man = json.loads((tmp_path / "3" / "manifest.json").read_text())
    assert man["cohort_chunk_rounds"] == "whole rounds chunk by chunk"


def test_a_part_that_needs_the_whole_cohort_keeps_the_trainer_chunks(tmp_path):
    assert main(["train", "--algo", "scaffold", *RUN, "--cohort-chunk", "2", "--out", str(tmp_path / "s")]) == 0
    man = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert man["cohort_chunk_rounds"].startswith("the trainer's call only: its local step (ScaffoldStep)")


def test_divergence_in_a_chunked_round_names_the_client_the_whole_round_names(tmp_path, monkeypatch, capsys):
    round_idx = 1
    victim = sample_cohort(3, round_idx, 20, 7)[4]  # in the second chunk of 3
    orig = trainers.VmapTrainer.grads

    def grads(self, cohort, x, y, w, *a, **k):
        g, losses = orig(self, cohort, x, y, w, *a, **k)
        if cohort.round_idx == round_idx and victim in cohort.clients:
            g = {n: t.clone() for n, t in g.items()}
            next(iter(g.values()))[cohort.clients.index(victim)] = float("nan")
        return g, losses

    monkeypatch.setattr(trainers.VmapTrainer, "grads", grads)
    errors = []
    for chunk in ("0", "3"):
        with pytest.raises(SystemExit) as e:
            main(["train", "--algo", "fedavg", *RUN, "--cohort-chunk", chunk, "--out", str(tmp_path / chunk)])
        assert e.value.code == 4
        errors.append(capsys.readouterr().err.strip())
    assert errors[0] == errors[1] and f"client {victim}" in errors[0] and "round 2, local step 3" in errors[0]


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_under_mpi_every_process_takes_as_many_chunks(tmp_path):
    """``mpiexec -n 2``, 7 clients a round split 4 + 3 or 3 + 4: in chunks of 3 one process has an empty second chunk
    (its collective store writes still meet the other's); the runs equal the whole-cohort one, on disk and in memory."""
    from fedcli.config import TrainConfig
    from fedcli.data.setup import load_data_and_partition

    if MPIEXEC is None:
        pytest.skip("mpiexec not installed (make install brings mpich)")
    _, part = load_data_and_partition(TrainConfig(dataset="digits", clients=20, seed=3, client_test_fraction=0.25))
    sizes = [len(t) for t in part.train]
    counts = [
        [math.ceil(len(assign_clients(sample_cohort(3, r, 20, 7), sizes, k, 2)) / 3) for k in range(2)]
        for r in range(3)
    ]
    assert any(a != b for a, b in counts)  # the case this test is about
    # one mpiexec runs the three: the whole cohort a round, then chunks of 3 with client state on disk and in memory
    runs = {
        "whole": ["--client-state", "memory"],
        "disk": ["--client-state", "disk", "--cohort-chunk", "3"],
        "memory": ["--client-state", "memory", "--cohort-chunk", "3"],
    }
    p = mpirun_each(
        2,
        [["train", "--algo", "ditto", *RUN, *extra, "--out", str(tmp_path / name)] for name, extra in runs.items()],
        timeout=240,
    )
    assert p.returncode == 0, p.stderr
    whole = tmp_path / "whole"
    for state in ("disk", "memory"):
        assert rows(tmp_path / state / "metrics.csv") == rows(whole / "metrics.csv")
        assert (tmp_path / state / "model.pt").read_bytes() == (whole / "model.pt").read_bytes()


# a child run that SIGKILLs itself in round KILL_ROUND once the first chunk of clients is trained and stored
KILLER = """
import os, signal, sys
from fedcli.fl import chunked
KILL_ROUND = int(sys.argv[1])
orig = chunked.RoundSum.add
def add(self, cohort, *a, **k):
    if cohort.round_idx == KILL_ROUND and self.acc is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(self, cohort, *a, **k)
chunked.RoundSum.add = add
from fedcli.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.timeout(300)
def test_sigkill_in_a_chunked_round_then_resume_is_the_whole_round_run(tmp_path):
    """Ditto, state on disk, chunks of 2 (7 clients a round): killed in round 3 after its first chunk stored its
    personalized models; --resume from the checkpoint after round 2 ends with the uninterrupted whole-cohort run's
    metrics and model bytes."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    args = ["train", "--algo", "ditto", *RUN, "--rounds", "5", "--client-state", "disk", "--checkpoint-every", "2"]
    assert main([*args, "--out", str(tmp_path / "ref")]) == 0
    p = run_forked(KILLER, ["2", *args, "--cohort-chunk", "2", "--out", str(tmp_path / "run")], env=env, timeout=240)
    assert p.returncode == -9, p.stderr
    p = run_forked(KILLER, ["-1", "train", "--resume", str(tmp_path / "run"), "--quiet"], env=env, timeout=240)
    assert p.returncode == 0, p.stderr
    assert rows(tmp_path / "ref" / "metrics.csv") == rows(tmp_path / "run" / "metrics.csv")
    assert (tmp_path / "ref" / "model.pt").read_bytes() == (tmp_path / "run" / "model.pt").read_bytes()
