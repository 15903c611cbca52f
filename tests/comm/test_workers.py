"""--workers: client shards in worker processes give the same bits as one process; failures end the run cleanly."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedcli.cli.main import main
from fedcli.comm.communicator import Communicator, ordered_sum
from fedcli.specs import METHODS, run_specs
from runkit import error_lines, run_main

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "7",
    "--active-ratio",
    "0.9",
    "--batch-size",
    "16",
    "--lr",
    "0.1",
    "--quiet",
]


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def same_run(a: Path, b: Path) -> None:
    """Identical metrics (all but wall time) and a bitwise-identical final model."""
    ra, rb = rows(a / "metrics.csv"), rows(b / "metrics.csv")
    assert len(ra) == len(rb) > 0
    for x, y in zip(ra, rb):
        x.pop("wall_s"), y.pop("wall_s")
        assert x == y
    ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


def test_ordered_sum_adds_weighted_rows_in_cohort_order():
    """Against a float32 loop written here: acc = 0; acc = acc + fl(w_i * x_i) for the clients by cohort position."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 3, 5, generator=g) * torch.tensor([1e8, 1.0, 1e-8, 3.0]).view(
        4, 1, 1
    )  # reordering would change the bits
    b = torch.randn(4, 7, generator=g)
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    positions = [2, 0, 3, 1]
    skip = torch.tensor([False, False, True, False])
    got = ordered_sum([a, b], w, positions, skip).numpy()
    flat = np.concatenate([a.reshape(4, -1).numpy(), b.numpy()], axis=1)
    want = np.zeros(flat.shape[1], dtype=np.float32)
    for i in sorted(range(4), key=lambda i: positions[i]):
        if not skip[i]:
            want = (want + np.float32(w[i].item()) * flat[i]).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    # one process: client_sum is the ordered sum itself; client_gather puts rows at their positions
    c = Communicator()
    assert torch.equal(c.client_sum([a, b], w, positions, 4), ordered_sum([a, b], w, positions))
    assert torch.equal(
        c.client_gather(torch.tensor([[1.0], [2.0]]), [3, 1], 4), torch.tensor([[0.0], [2.0], [0.0], [1.0]])
    )


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "algo, extra, counts",
    [
        (
            "fedlama",
            ["--iterations", "24", "--tau", "2", "--phi", "2", "--eval-every", "8"],
            (3,),
        ),  # vmap, layer-wise syncs
        (
            "scaffold",
            ["--iterations", "12", "--tau", "3", "--eval-every", "6", "--trainer", "loop"],
            (3,),
        ),  # control variates
        (
            "fedams",
            ["--iterations", "12", "--tau", "3", "--eval-every", "6", "--lr", "0.01"],
            (2,),
        ),  # adaptive local steps
        (
            "fedala",
            [
                "--rounds",
                "2",
                "--local-epochs",
                "1",
                "--client-test-fraction",
                "0.25",
                "--weighting",
                "samples",
                "--eval-every",
                "1",
            ],
            (3,),
        ),  # ALA, personal_acc
        pytest.param(
            "fedlama",
            ["--iterations", "24", "--tau", "2", "--phi", "2", "--eval-every", "8"],
            (2,),
            marks=pytest.mark.long(
                reason="FedLAMA on 2 workers (a third run of it, a worker to start): make test holds it on 3 workers "
                "in [fedlama-extra0-counts0], and 2 workers in every other case of this file"
            ),
        ),
    ],
)
def test_results_are_bitwise_identical_for_any_number_of_workers(tmp_path, algo, extra, counts):
    args = ["train", *SMALL, "--algo", algo, *extra]
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "w1")]) == 0
    for n in counts:
        assert main([*args, "--workers", str(n), "--out", str(tmp_path / f"w{n}")]) == 0
        same_run(tmp_path / "w1", tmp_path / f"w{n}")
        man = json.loads((tmp_path / f"w{n}/manifest.json").read_text())
        assert man["workers"] == n == man["world_size"] and len(set(man["pids"])) == n and man["torch_threads"] == 1
        assert man["config"]["workers"] == n and man["status"] == "completed"


# clients of unequal sizes with --local-epochs: unequal step counts, so at a step some clients of a process have
# finished while others still train, and a process may finish its clients before the cohort's last step (issue 37)
UNEQUAL = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "7",
    "--partition",
    "dirichlet",
    "--alpha",
    "0.3",
    "--rounds",
    "2",
    "--local-epochs",
    "1",
    "--batch-size",
    "16",
    "--eval-every",
    "1",
    "--client-test-fraction",
    "0.25",
    "--weighting",
    "samples",
    "--lr",
    "0.05",
    "--seed",
    "4",
    "--quiet",
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "algo, extra",
    [
        ("fedlamb", ["--active-ratio", "0.6"]),  # before: the AMSGrad moments of a client moved in their last bits when
        ("mimelamb", ["--active-ratio", "0.6"]),  # another client of its process finished (fused vs unfused update)
        ("apple", ["--active-ratio", "1"]),  # before: its [K, N] matrix products changed bits with K
        pytest.param(
            "partialfed",
            ["--active-ratio", "0.6"],
            marks=pytest.mark.long(
                reason="the same unequal clients, 4 of 7 a round, on 1 and 2 workers with the same checks: make test "
                "holds it in test_every_personalized_preset_gives_the_same_results_for_any_number_of_workers"
                "[partialfed] (these flags with --personal-eval after-init)"
            ),
        ),
    ],
)
def test_unequal_local_steps_give_the_same_bits_for_any_number_of_workers(tmp_path, algo, extra):
    args = ["train", *UNEQUAL, "--algo", algo, *extra]
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "w1")]) == 0
    assert main([*args, "--workers", "2", "--out", str(tmp_path / "w2")]) == 0
    same_run(tmp_path / "w1", tmp_path / "w2")
    if algo != "fedlamb" and algo != "mimelamb":
        assert rows(tmp_path / "w1/clients.csv") == rows(tmp_path / "w2/clients.csv")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "extra",
    [
        ["--rounds", "1", "--model", "mlp", "--mlp-hidden", "16"],
        # issue 48: personal_acc 0.233041 with --workers 1, 0.232243 with 2 (client 15's after-init model of round 2 was
        # read
        # by the evaluating process half trained: see test_collectives_hand_over_values_not_the_senders_memory)
        pytest.param(
            ["--rounds", "2", "--active-ratio", "0.2", "--model", "cnn4"],
            marks=pytest.mark.long(
                reason="the issue's own run, cnn4 (15 to 40 s); make test holds its cause in "
                "test_collectives_hand_over_values_not_"
                "the_senders_memory (4 s) and the presets' parity below"
            ),
        ),
    ],
    ids=["1-round-mlp", "issue48-cnn4-active0.2"],
)
def test_partialfed_on_fedala_table2_mnist_entry_gives_the_same_results_for_any_number_of_workers(
    tmp_path, mnist_t10k, extra
):
    """FedALA Table 2's "PartialFed | MNIST-path" (recipes/fedala/aaai-table2.toml, PFLlib's pipeline: unequal client
    sizes, ``personal_eval = "after-init"``) on the MNIST t10k slice. 1-round-mlp, before: worker 1 failed with
    "IndexError: index 98 is out of bounds for dimension 0 with size 98 (at partialfed.py)": the Gumbel noise was as
    long as the longest client of its own process, while every process runs the whole cohort's steps.
    issue48-cnn4-active0.2: the recipe's own model and batch, 2 rounds, 4 of 20 clients per round."""
    args = [
        "train",
        "--recipe",
        str(ROOT / "recipes/fedala/aaai-table2.toml"),
        "--scale",
        "smoke",
        "--algo",
        "partialfed",
        "--lr",
        "0.1",
        "--data-dir",
        str(mnist_t10k),
        *extra,
        "--threads",
        "1",
        "--quiet",
    ]
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "w1")]) == 0
    assert main([*args, "--workers", "2", "--out", str(tmp_path / "w2")]) == 0
    same_run(tmp_path / "w1", tmp_path / "w2")
    assert rows(tmp_path / "w1/clients.csv") == rows(tmp_path / "w2/clients.csv")
    man = json.loads((tmp_path / "w2/manifest.json").read_text())
    assert man["clients"] == 20 and man["config"]["data_pool"] == "train+test" and man["config"]["partialfed_fs"] == 2
    assert man["config"]["personal_eval"] == "after-init" and man["config"]["client_test_split"] == "pfllib"


def _exchange(comm) -> list:
    """Every rank: allgather a tensor of its own, then change that tensor in place (as a cohort's models are trained
    right after their after-init snapshot is shared); after a barrier (every rank has changed its own), what each
    rank received, gathered at every rank."""
    mine = torch.full((4,), float(comm.rank + 1))
    got = comm.allgather(mine)
    mine.fill_(-1.0)
    comm.barrier()
    return comm.allgather([g.tolist() for g in got])


@pytest.mark.timeout(120)
def test_collectives_hand_over_values_not_the_senders_memory():
    """The root cause of issue 48's --workers dependence: the pipes pickled with multiprocessing's ForkingPickler, for
    which torch moves a CPU tensor's storage to shared memory and the receiver maps that same memory: a receiver read
    whatever the sender had written into it since (here -1, both ways, after the barrier). (A rank's own entry is its
    object itself, as with one process.)"""
    from fedcli.comm.workers import WorkerPool

    pool = WorkerPool(2, _exchange, ())
    try:
        seen = _exchange(pool.comm)
    finally:
        pool.close(True)
    assert seen[0][1] == [2.0] * 4 and seen[1][0] == [1.0] * 4  # what crossed a pipe: the values at the call


#: every personalized method's preset (its spec's defaults); partial participation where the method allows it
PERSONALIZED = sorted(n for n, m in METHODS.items() if m.personalized)
#: make test runs one preset per way an after-init model is kept (fedcli/fl/personal.py, ``initialized``) and the
#: cross-silo downloads; the others take the same paths
FAST = {"partialfed", "perfedavg", "ditto", "fedrep", "fedamp"}
LONG_PRESET = pytest.mark.long(
    reason="its after-init model is kept as one of make test's presets keeps it (the plain local "
    "model: partialfed; the stored one: ditto; cross-silo: fedamp), 5 to 10 s each"
)
PARITY = ["train", *UNEQUAL, "--personal-eval", "after-init"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("algo", [a if a in FAST else pytest.param(a, marks=LONG_PRESET) for a in PERSONALIZED])
def test_every_personalized_preset_gives_the_same_results_for_any_number_of_workers(tmp_path, algo):
    """Unequal clients (unequal step counts), 2 rounds, the model evaluated after its initialization (the point of
    issue 48), 4 of 7 clients per round (all 7 for the cross-silo methods): metrics.csv (all but wall_s), the final
    model and clients.csv are the same with --workers 1 and 2."""
    cross_silo = any(
        spec.declaration("full_participation")
        for kind, spec in run_specs(algo).items()
        if kind not in ("schedule", "method_init")
    )
    ratio = "1" if cross_silo else "0.6"
    args = [*PARITY, "--algo", algo, "--active-ratio", ratio]
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "w1")]) == 0
    assert main([*args, "--workers", "2", "--out", str(tmp_path / "w2")]) == 0
    same_run(tmp_path / "w1", tmp_path / "w2")
    assert rows(tmp_path / "w1/clients.csv") == rows(tmp_path / "w2/clients.csv")
    assert json.loads((tmp_path / "w2/manifest.json").read_text())["workers"] == 2


def test_auto_chooses_one_worker_for_small_runs_and_the_cores_for_long_ones():
    from fedcli.config import TrainConfig
    from fedcli.data.datasets import load_dataset
    from fedcli.runner import auto_workers

    ds = load_dataset("digits", None)
    part = SimpleNamespace(train=[np.arange(i * 50, i * 50 + 50) for i in range(16)])
    small = TrainConfig(dataset="digits", clients=16, iterations=600, device="cpu")  # the default run: about 4 s
    n, note = auto_workers(small, ds, part, cores=2)
    assert n == 1 and "auto: 1" in note
    big = TrainConfig(dataset="digits", clients=16, iterations=600, device="cpu", model="mlp", mlp_hidden="2000,2000")
    n, note = auto_workers(big, ds, part, cores=4)
    assert n == 4 and "4 physical cores" in note
    n, _ = auto_workers(big, ds, part, cores=1)
    assert n == 1
    n, _ = auto_workers(
        TrainConfig(
            dataset="digits", clients=16, active_ratio=0.125, iterations=600, device="cpu", mlp_hidden="2000,2000"
        ),
        ds,
        part,
        cores=4,
    )
    assert n == 2  # never more workers than clients per round


def test_default_run_records_the_auto_choice(tmp_path):
    assert main(["train", *SMALL, "--iterations", "4", "--tau", "2", "--out", str(tmp_path / "r")]) == 0
    man = json.loads((tmp_path / "r/manifest.json").read_text())
    assert man["workers"] == 1 and man["workers_choice"].startswith("auto: 1") and man["config"]["workers"] == 0
    assert man["torch_threads"] == 1


def test_workers_and_mpi_do_not_mix(monkeypatch, capsys):
    from fedcli.comm import mpi

    fake = Communicator()
    fake.size = 2
    monkeypatch.setitem(mpi.CURRENT, "comm", fake)
    with pytest.raises(Exception) as e:
        from fedcli.config import TrainConfig
        from fedcli.runner import launch

        with launch(TrainConfig(workers=2), fake):
            pass
    assert "mpiexec" in str(e.value) and getattr(e.value, "exit_code", None) == 2


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


RAISER = """
import sys
from fedcli.fl.engine import Simulation
orig = Simulation.run_round
def run_round(self, state):
    if self.comm.rank == 1 and state.round_idx == 1:
        raise RuntimeError("injected failure in worker 1")
    return orig(self, state)
Simulation.run_round = run_round
if __name__ == "__main__":  # the spawned workers import this file too (and get the patch)
    from fedcli.cli.main import main
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(120)
def test_a_failing_worker_ends_the_run_with_one_line(tmp_path, capsys):
    script = tmp_path / "raiser.py"
    script.write_text(RAISER)
    p = subprocess.run(
        [
            sys.executable,
            str(script),
            "train",
            *SMALL,
            "--iterations",
            "40",
            "--tau",
            "2",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "run"),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert p.returncode == 1, p.stderr
    lines = error_lines(p.stderr)
    assert lines == ["fedcli: error: worker 1: RuntimeError: injected failure in worker 1 (at raiser.py:7)"]
    man = json.loads((tmp_path / "run/manifest.json").read_text())
    assert man["status"] == "failed" and "worker 1" in man["error"]
    # a config error is every process's: one line, exit 2, no worker message
    code, _, err = run_main(["train", *SMALL, "--workers", "2", "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "already holds files" in err


def _start_long_run(tmp_path, name):
    out = tmp_path / name
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fedcli",
            "train",
            *SMALL,
            "--iterations",
            "1000000",
            "--tau",
            "2",
            "--eval-every",
            "4",
            "--workers",
            "2",
            "--out",
            str(out),
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 90
    while time.time() < deadline and not ((out / "metrics.csv").exists() and len(rows(out / "metrics.csv")) >= 1):
        time.sleep(0.2)
    assert (out / "metrics.csv").exists(), "the run never started"
    return proc, out, json.loads((out / "manifest.json").read_text())["pids"]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # dead, not reaped yet (its parent is gone)
    except OSError:
        return True


@pytest.mark.timeout(150)
def test_killed_worker_ends_the_run_and_killed_parent_takes_its_workers(tmp_path):
    proc, out, (root, worker) = _start_long_run(tmp_path, "a")
    try:
        os.kill(worker, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert err.strip().splitlines() == [f"fedcli: error: worker 1 (pid {worker}) was killed by SIGKILL"]
        assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
    finally:
        if proc.poll() is None:
            proc.kill()
    proc, out, (root, worker) = _start_long_run(tmp_path, "b")
    try:
        os.kill(root, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.time() + 10
        while time.time() < deadline and not _gone(worker):
            time.sleep(0.1)
        assert _gone(worker), "the worker outlived its parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        if not _gone(worker):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.timeout(150)
def test_ctrl_c_is_handled_by_the_parent_which_checkpoints_and_ends_its_workers(tmp_path):
    proc, out, (root, worker) = _start_long_run(tmp_path, "c")
    try:
        os.killpg(os.getpgid(root), signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        lines = err.strip().splitlines()  # the notice at once, then the closing line (no worker prints, no traceback)
        assert len(lines) == 2 and "stopping after round" in lines[0] and "Ctrl-C again" in lines[0], err
        assert "interrupted by SIGINT" in lines[1] and "fedcli train --resume" in lines[1] and "mpiexec" not in err
        man = json.loads((out / "manifest.json").read_text())
        assert man["status"] == "interrupted" and man["checkpoint"]
        deadline = time.time() + 10
        while time.time() < deadline and not _gone(worker):
            time.sleep(0.1)
        assert _gone(worker)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(200)
def test_a_killed_pool_run_resumes_with_its_workers_bitwise(tmp_path):
    """--workers 2, SIGKILL of the parent after a checkpoint, --resume (the workers come back as the checkpoint
    needs): the same metrics and model, bit for bit, as an uninterrupted one-process run."""
    args = ["train", *SMALL, "--iterations", "400", "--tau", "2", "--eval-every", "20", "--checkpoint-every", "2"]
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "one")]) == 0
    out = tmp_path / "pool"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedcli", *args, "--workers", "2", "--out", str(out)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (
            list((out / "checkpoints").glob("*.pt")) if (out / "checkpoints").exists() else []
        ):
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(json.loads((out / "manifest.json").read_text())["pids"][0], signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(1.5)  # the watchdog marks the run failed
    assert main(["train", "--resume", str(out), "--quiet"]) == 0  # in this process: its workers come back
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "completed" and man["workers"] == 2 and len(man["resumes"]) == 1
    same_run(tmp_path / "one", out)
