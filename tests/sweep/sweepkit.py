"""The tiny two-run sweep recipe the sweep tests share (digits, MLP 32, 8 iterations at the smoke scale). Test modules
import it from here."""

RECIPE = """\
title = "tiny"
paper = "a test"
seeds = 2

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "32"
clients = 4
active_ratio = 0.5
iterations = 40
lr = 0.1
threads = 1
trainer = "loop"

[scale.smoke]
iterations = 8
eval_every = 2

[[runs]]
name = "FedAvg x1"
algo = "fedavg"
tau = 2

[[runs]]
name = "FedLAMA phi=2"
algo = "fedlama"
tau = 1
phi = 2
scale.smoke = { lr = 0.2 }

[[tables]]
name = "t"
layout = "paired"
rows = [["FedAvg x1", "FedAvg x1"], ["FedAvg x1", "FedLAMA phi=2"]]
"""


#: the [base] of the tiny system-model sweeps (digits, MLP 8, 4 clients, 2 a round, evaluations every 4 iterations, on
#: the CPU; issue 57's re-timed runs and --paper system): a recipe adds its title, paper, iterations and runs
SYSTEM_BASE = """\
[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "8"
clients = 4
active_ratio = 0.5
eval_every = 4
batch_size = 16
threads = 1
device = "cpu"
"""
#: the tiny tune recipe of the ``fedcli tune`` tests (digits, MLP 32, one FedAvg row; a validation split unless
#: ``split`` is empty): ``tune_recipe(...)`` fills it
TUNE_RECIPE = """\
title = "tiny tune"

[base]
trainer = "loop"
dataset = "digits"
threads = 1
model = "mlp"
tau = 2
mlp_hidden = "32"
clients = 4
lr = 0.3
active_ratio = 0.5
iterations = {iterations}
eval_every = {eval_every}
{split}

[[runs]]
name = "FedAvg"
algo = "fedavg"

[tune]
trials = {trials}
sampler = "{sampler}"
seed = 3
pruner = "none"
objectives = [{{ metric = "val_acc", reduce = "last3" }}]

[tune.space]
{space}
"""


def tune_recipe(
    path,
    trials=3,
    iterations=40,
    eval_every=2,
    sampler="random",
    split="val_fraction = 0.2",
    space="lr = { log = [0.2, 0.8] }",
):
    """Write :data:`TUNE_RECIPE` to ``path`` and return it. The default budget and space keep every trial above the
    hopeless rule (lr 0.2 reaches validation accuracy 0.33 by iteration 10, a quarter of 40; chance + 0.05 = 0.15)."""
    path.write_text(
        TUNE_RECIPE.format(
            trials=trials, iterations=iterations, eval_every=eval_every, sampler=sampler, split=split, space=space
        )
    )
    return path


def require_slurm() -> None:
    """Skip the test without a reachable Slurm (``sudo scripts/slurm-local.sh up`` starts one), or fail it where
    FEDCLI_REQUIRE_SLURM is set (CI, ``.ci/run``)."""
    import os

    import pytest

    from fedcli.sweep.slurm import have_slurm

    if not os.environ.get("FEDCLI_TESTS_SLURM_LOCK"):
        pytest.fail("a test that submits Slurm jobs must be marked @pytest.mark.slurm (one such test at a time)")
    why = have_slurm()
    if why:
        if os.environ.get("FEDCLI_REQUIRE_SLURM"):
            pytest.fail(f"FEDCLI_REQUIRE_SLURM is set but no Slurm is reachable: {why}")
        pytest.skip(f"no Slurm reachable ({why}); start one with `sudo scripts/slurm-local.sh up`")


def wait_for(cond, timeout: float, what: str, every: float = 0.5):
    """Poll ``cond()`` every ``every`` seconds until it returns something true, which is returned; fail the test
    after ``timeout`` seconds saying ``what`` was waited for."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def worker_job_ids(root) -> list[str]:
    """The Slurm job ids of the study workers that ``fedcli tune --study-workers`` launched for ``root``
    (``workers.json``); none before it is written."""
    import json

    f = root / "workers.json"
    return [w["job_id"] for w in json.loads(f.read_text())["workers"]] if f.is_file() else []


def slurm_node() -> str:
    """The local cluster's one node (scripts/slurm-local.sh names it after the host), for ``--sbatch=--nodelist=``."""
    import subprocess

    return subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True, check=True).stdout.split()[0]


def queue_pending() -> bool:
    """Whether a job of this user waits in the Slurm queue (PENDING: the one-node cluster's 2 CPUs are taken)."""
    import subprocess

    r = subprocess.run(
        ["squeue", "-h", "--me", "-t", "PENDING", "-o", "%i"], capture_output=True, text=True, timeout=60, check=False
    )
    return r.returncode == 0 and bool(r.stdout.strip())


class QueueClock:
    """A time limit that waits on the Slurm queue, not on the wall clock: its ``seconds`` pass only while no job of
    this user is PENDING, so jobs that wait for the cluster's CPUs (another test's, a job left over) cost the test
    none of them. :meth:`tick` fails the test with ``what`` once they are spent."""

    def __init__(self, seconds: float):
        import time

        self.left = seconds
        self.last = time.monotonic()

    def tick(self, what: str) -> None:
        import time

        now = time.monotonic()
        if not queue_pending():
            self.left -= now - self.last
        self.last = now
        assert self.left > 0, what

    def wait_for(self, cond, what: str):
        """Poll ``cond()`` every 2 s until it returns something true, which is returned."""
        import time

        while not (got := cond()):
            self.tick(what)
            time.sleep(2)
        return got

    def wait(self, proc, what: str) -> int:
        """Wait for the process ``proc`` (its output going to files, not pipes) and return its exit code."""
        import subprocess

        while True:
            try:
                return proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.tick(what)


def trials_csv(root):
    """A study folder's trials.csv, one dict per row (the ``fedcli tune`` tests)."""
    import csv

    with open(root / "trials.csv") as f:
        return list(csv.DictReader(f))


def manifest(run) -> dict:
    """A run directory's manifest.json."""
    import json

    return json.loads((run / "manifest.json").read_text())
