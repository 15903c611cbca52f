"""The rounds and local steps of a run (``fedcli.fl.budget.plan_run``) over every schedule and budget kind, on numbers
worked out by hand, and the places that use it (engine, sweep estimate, worker planner, FedPHP, APPLE) agreeing."""

import math

import pytest

from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.fl.budget import plan_run, schedule_round_length
from fedcli.fl.engine import Simulation
from fedcli.runner import estimate_work
from fedcli.sweep import estimate as est
from simkit import PERSONAL_BASE


def cfg(**kw):
    """The budget fields plan_run reads (a TrainConfig has them too)."""
    base = dict(iterations=600, rounds=0, local_epochs=0.0, batch_size=10, drop_last=False, active_ratio=1.0)
    return TrainConfig(**{**base, **kw})


def train_config(**kw):
    return TrainConfig(**{**dict(dataset="digits", model="mlp", clients=4, active_ratio=0.5), **kw}).validate()


# ------------------------------------------------------------------ the schedules' round lengths
def test_round_length_of_every_schedule():
    assert schedule_round_length(train_config(algo="fedavg", tau=4)) == 4  # periodic: tau
    assert schedule_round_length(train_config(algo="fedlama", tau=2, phi=3)) == 6  # FedLAMA: phi * tau'
    assert schedule_round_length(train_config(algo="fedavg", schedule="lama", tau=2, phi=3)) == 6  # --schedule wins
    assert schedule_round_length(train_config(algo="fedlama", schedule="lama-accelerate", tau=4, phi=2)) == 4  # tau'


# ------------------------------------------------------------------ fixed round lengths
def test_iteration_budget_cuts_the_last_round():
    """--iterations 30, rounds of 4: 8 rounds (7 x 4 + 2), 30 iterations, 3 clients a round: 90 client steps."""
    p = plan_run(cfg(iterations=30), round_length=4, n_active=3)
    assert (p.rounds, p.iterations, p.client_steps, p.expected_client_steps) == (8, 30, 90, 90.0)
    assert [p.round_steps(it, [0]) for it in (0, 24, 28)] == [4, 4, 2]
    assert not p.done(7, 28) and p.done(8, 30)
    assert p.progress(8, 30) == 30


def test_round_budget_of_fedlama_rounds():
    """FedLAMA tau' 2, phi 3: a round is 6 iterations; --rounds 5 with 2 of 4 clients: 30 iterations, 60 steps."""
    p = plan_run(cfg(rounds=5, active_ratio=0.5), round_length=6, sizes=[10, 10, 10, 10])
    assert (p.n_active, p.rounds, p.iterations, p.client_steps) == (2, 5, 30, 60)
    assert p.round_steps(24, [1, 3]) == 6 and not p.done(4, 24) and p.done(5, 30) and p.progress(5, 30) == 5
    p = plan_run(cfg(iterations=20), round_length=6, n_active=2)  # the same under --iterations 20: 6 + 6 + 6 + 2
    assert (p.rounds, p.iterations, p.client_steps, p.round_steps(18, [0])) == (4, 20, 40, 2)


# ------------------------------------------------------------------ --local-epochs
SIZES = [25, 30, 7, 40]  # batch 10, one epoch: 3, 3, 1 (a padded batch), 4 steps; with drop_last 2, 3, 1, 4


def test_local_epochs_full_participation():
    p = plan_run(cfg(rounds=2, local_epochs=1.0), round_length=5, sizes=SIZES)
    assert p.steps == (3, 3, 1, 4) and p.per_client
    assert (p.rounds, p.iterations, p.client_steps) == (2, 8, 22)  # rounds of max 4 iterations, 11 steps a round
    assert p.round_steps(0, [0, 1, 2, 3]) == 4 and p.client_round_steps([2, 0], 4) == [1, 3]
    # --iterations 10: rounds of 4 iterations until 10 are reached, the last not cut: 3 rounds, 12 iterations
    p = plan_run(cfg(iterations=10, local_epochs=1.0), round_length=5, sizes=SIZES)
    assert (p.rounds, p.iterations, p.client_steps) == (3, 12, 33)
    assert p.round_steps(8, [0, 1, 2, 3]) == 4 and not p.done(2, 8) and p.done(3, 12)
    p = plan_run(cfg(rounds=1, local_epochs=1.0, drop_last=True), round_length=5, sizes=SIZES)
    assert p.steps == (2, 3, 1, 4) and p.client_steps == 10
    p = plan_run(
        cfg(rounds=1, local_epochs=0.5), round_length=5, sizes=SIZES
    )  # ceil(1.25), ceil(1.5), ceil(0.35), ceil(2)
    assert p.steps == (2, 2, 1, 2) and p.client_steps == 7


def test_local_epochs_partial_participation():
    """2 of 4 clients a round: a round lasts its cohort's longest client, so the iterations (and, under --iterations,
    the rounds) depend on the sampled cohorts; the expected client steps use the mean of 11 / 4 steps."""
    p = plan_run(cfg(rounds=2, local_epochs=1.0, active_ratio=0.5), round_length=5, sizes=SIZES)
    assert (p.rounds, p.iterations, p.client_steps) == (2, None, None)
    assert p.expected_client_steps == pytest.approx(2 * 2 * 11 / 4)
    assert p.round_steps(0, [0, 2]) == 3 and p.round_steps(0, [2, 3]) == 4
    p = plan_run(cfg(iterations=10, local_epochs=1.0, active_ratio=0.5), round_length=5, sizes=SIZES)
    assert (p.rounds, p.iterations, p.client_steps) == (None, None, None)
    assert p.expected_client_steps == pytest.approx(3 * 2 * 11 / 4)  # the fewest rounds: ceil(10 / 4)
    p = plan_run(cfg(rounds=2, local_epochs=1.0), round_length=5, n_active=2)  # no sizes: unknown
    assert (p.rounds, p.client_steps, p.expected_client_steps) == (None, None, None)


# ------------------------------------------------------------------ the users agree
FACTS = est.DataFacts((1, 8, 8), 10, 1437, 360)


def test_sweep_estimate_counts_local_epochs_under_an_iteration_budget():
    """n_i = 1437 / 4 = 359.25 samples, batch 32: 12 steps an epoch; --iterations 30 is ceil(30 / 12) = 3 rounds of
    2 clients x 12 steps = 72 client steps (before the plan: 30 x 2, as if a round were one step per iteration)."""
    c = train_config(algo="fedavg", iterations=30, local_epochs=1.0, batch_size=32).to_dict()
    assert est.client_steps(c, FACTS) == 72
    c = train_config(algo="fedlama", schedule="lama-accelerate", rounds=3, tau=4, phi=2).to_dict()
    assert est.client_steps(c, FACTS) == 3 * 2 * 4  # the accelerate variant's round is tau'


def test_worker_planner_counts_fedlama_rounds():
    """--rounds 3 of FedLAMA (tau' 2, phi 3) with 2 of 4 clients: 3 x 6 x 2 = 36 client steps (the planner used to
    count tau steps a round: 12)."""
    c = train_config(algo="fedlama", rounds=3, tau=2, phi=3)
    assert estimate_work(c, *load_data_and_partition(c)).client_steps == 36


@pytest.fixture(scope="module")
def data():
    return load_data_and_partition(TrainConfig(**PERSONAL_BASE).validate())


def personal(**kw):
    return TrainConfig(**{**PERSONAL_BASE, **kw}).validate()


def test_engine_runs_the_plan_with_local_epochs_under_an_iteration_budget(data):
    """Every client every round, one local epoch: rounds of the largest client's steps until --iterations is reached."""
    sim = Simulation(personal(rounds=0, iterations=25, eval_every=0)).setup(*data)
    longest = max(math.ceil(int(n) / sim.batch_size) for n in sim.sizes)  # one epoch, batch B
    s = sim.run()
    assert (s.rounds, s.iteration) == (math.ceil(25 / longest), math.ceil(25 / longest) * longest)
    assert (sim.plan.rounds, sim.plan.iterations) == (s.rounds, s.iteration)


def test_fedphp_and_apple_take_the_plans_rounds(data):
    """FedPHP's T and APPLE's R are the rounds of the plan; APPLE's used to ignore --local-epochs (ceil(I / tau))."""
    for algo in ("fedphp", "apple"):
        sim = Simulation(personal(algo=algo, rounds=0, iterations=25, tau=2)).setup(*data)
        longest = max(math.ceil(int(n) / sim.batch_size) for n in sim.sizes)
        part = sim.init if algo == "fedphp" else sim.local_step
        assert part.rounds == sim.plan.rounds == math.ceil(25 / longest) != math.ceil(25 / 2)


def test_the_round_length_is_the_schedule_specs_and_the_planner_imports_no_torch():
    """Issue 60: a schedule declares its round length in its spec (``round_length=``), so the budget planner learns it
    without importing a torch class. By hand: FedLAMA phi * tau' = 3 * 4 = 12; its accelerate variant and FedAvg tau' =
    4."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; from fedcli.config import TrainConfig; from fedcli.fl.budget import schedule_round_length as r; "
        "print(r(TrainConfig(algo='fedlama', tau=4, phi=3)), r(TrainConfig(algo='fedlama', schedule='lama-accelerate', "
        "tau=4, phi=3)), r(TrainConfig(algo='fedavg', tau=4)), 'torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12", "4", "4", "False"]
