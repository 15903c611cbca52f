"""The narrow services parts use instead of the simulation: the cohort's weighted sum of named tensors, the batch
source, the run directory's CSV writers."""

import torch

from fedcli.config import TrainConfig

# the purposes of batches are registered by the modules that use them (imported here, as a run imports its parts')
from fedcli.fl.adaptive import FULL_BATCH
from fedcli.fl.algorithms.fedala import ALA_BATCHES
from fedcli.fl.algorithms.fedfomo import VAL_BATCHES
from fedcli.fl.algorithms.perfedavg import EVAL_BATCH
from fedcli.fl.cohort import BatchSource, Cohort, client_batches, sample_slice
from fedcli.fl.engine import RoundRecord, Simulation
from fedcli.fl.rng import torch_gen
from fedcli.results.rundir import RunDir
from fedcli.results.runlog import RunLog


def _cohort(weights) -> Cohort:
    c = Cohort([2, 5, 9], torch.tensor(weights, dtype=torch.float64), {}, {})
    c.cohort_ids = [2, 5, 9]
    return c


def test_cohort_sums_weighs_names_and_skips_rows():
    """Worked by hand: a = [[1, 2], [3, 4], [5, 6]], b = [10, 20, 30] (one scalar per client)."""
    sim = Simulation(TrainConfig())
    stacked = {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), "b": torch.tensor([10.0, 20.0, 30.0])}
    cohort = _cohort([0.5, 0.25, 0.25])
    out = sim.view.cohort_sums(cohort, stacked, cohort.weights)
    assert list(out) == ["a", "b"] and out["a"].shape == (2,) and out["b"].shape == ()
    assert out["a"].tolist() == [2.5, 3.5] and out["b"].item() == 17.5  # 0.5*1 + 0.25*3 + 0.25*5, ...
    skip = torch.tensor([False, True, False])  # client 5 dropped: its row adds nothing
    out = sim.view.cohort_sums(cohort, stacked, cohort.weights, skip)
    assert out["a"].tolist() == [1.75, 2.5] and out["b"].item() == 12.5
    out = sim.view.cohort_sums(cohort, stacked, None)  # no weights: the plain sum
    assert out["a"].tolist() == [9.0, 12.0] and out["b"].item() == 60.0


def test_cohort_sums_leave_the_dropped_clients_out_by_default():
    """A client dropped by --on-diverge skip-client (``cohort.skipped``) adds nothing to a cohort sum unless the caller
    says otherwise (issue 60: SCAFFOLD no longer reads ``cohort.skipped``). Worked by hand: a = [1, 3, 5], client 5
    dropped, NaN in its row: 1 + 5 = 6 (weights 1), and 0.5 * 1 + 0.25 * 5 = 1.75."""
    sim = Simulation(TrainConfig())
    cohort = _cohort([0.5, 0.25, 0.25])
    cohort.skipped.add(5)
    stacked = {"a": torch.tensor([1.0, float("nan"), 5.0])}
    assert sim.view.cohort_sums(cohort, stacked, None)["a"].item() == 6.0
    assert sim.view.cohort_sums(cohort, stacked, cohort.weights)["a"].item() == 1.75
    assert sim.view.cohort_sum(
        cohort, [torch.tensor([[1.0], [2.0], [5.0]])], None, torch.tensor([False, False, True])
    ).tolist() == [3.0]


def test_cohort_sums_of_a_process_without_clients_is_zero():
    """A process holding no client of the cohort adds zeros of the right shapes (the others' rows come by
    all-reduce)."""
    sim = Simulation(TrainConfig())
    cohort = Cohort([], torch.zeros(0, dtype=torch.float64), {}, {})
    cohort.cohort_ids = [2, 5]
    out = sim.view.cohort_sums(cohort, {"w": torch.zeros(0, 2, 3)}, cohort.weights)
    assert out["w"].shape == (2, 3) and not out["w"].any()


# ---------------------------------------------------------------------------- the batch source
def _source(**kw) -> BatchSource:
    indices = [torch.arange(0, 10), torch.arange(100, 103), torch.arange(200, 208)]  # 10, 3 and 8 samples
    return BatchSource(seed=7, indices=indices, batch=4, **kw)


def test_batch_source_same_keys_same_batches_and_purposes_are_independent():
    src = _source()
    a = src.plan("train", [0, 2], round_idx=3, steps=5)
    b = src.plan("train", [0, 2], round_idx=3, steps=5)
    assert a.idx.shape == (5, 2, 4) and torch.equal(a.idx, b.idx) and torch.equal(a.mask, b.mask)
    # a client's batches depend on (seed, round, client, purpose) only, not on who else is in the plan
    assert torch.equal(src.plan("train", [2], round_idx=3, steps=5).idx[:, 0], a.idx[:, 1])
    assert not torch.equal(src.plan("train", [0, 2], round_idx=4, steps=5).idx, a.idx)  # another round
    ditto = src.plan("ditto", [0, 2], round_idx=3, steps=5)  # another purpose
    assert not torch.equal(ditto.idx, a.idx)
    # the keys: train = (seed, "batches", round, client), any other purpose its own name
    assert torch.equal(a.idx[:, 0], client_batches(src.indices[0], 5, 4, torch_gen(7, "batches", 3, 0))[0])
    assert torch.equal(ditto.idx[:, 1], client_batches(src.indices[2], 5, 4, torch_gen(7, "ditto", 3, 2))[0])
    # every shuffled batch holds the client's own samples; 5 batches of 4 from 10 samples: two whole epochs
    assert a.mask.eq(1).all() and sorted(a.idx[:, 0].flatten().tolist()) == sorted(list(range(10)) * 2)


def test_batch_source_pads_a_client_smaller_than_a_batch():
    plan = _source().plan("train", [1], round_idx=0, steps=2)  # 3 samples, batches of 4
    assert plan.mask[:, 0].tolist() == [[1.0, 1.0, 1.0, 0.0]] * 2
    for j in range(2):  # all 3 samples once, then one of them again as weight-0 padding
        assert sorted(plan.idx[j, 0, :3].tolist()) == [100, 101, 102] and plan.idx[j, 0, 3].item() in (100, 101, 102)


def test_batch_source_in_order_plans():
    src = _source()
    plan = src.plan(VAL_BATCHES, [0, 1])  # 10 samples: 4 + 4 + 2; 3 samples: 3, then used up
    assert plan.idx[:, 0].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 8, 8]]
    assert plan.mask[:, 0].tolist() == [[1.0] * 4, [1.0] * 4, [1.0, 1.0, 0.0, 0.0]]
    assert plan.idx[:, 1].tolist() == [[100, 101, 102, 100], [100] * 4, [100] * 4]
    assert plan.mask[:, 1].tolist() == [[1.0, 1.0, 1.0, 0.0], [0.0] * 4, [0.0] * 4]
    assert plan.real.tolist() == [[4, 3], [4, 0], [2, 0]]
    full = src.plan(FULL_BATCH, [0, 1])  # the same batches; a used-up client's dummy batch weighs 1
    assert (
        torch.equal(full.idx, plan.idx)
        and full.mask[1:, 1].eq(1).all()
        and torch.equal(full.mask[:, 0], plan.mask[:, 0])
    )
    given = src.plan(VAL_BATCHES, indices=[torch.tensor([5, 6])])  # indices other than the training split
    assert given.idx.tolist() == [[[5, 6, 5, 5]]] and given.real.tolist() == [[2]]


def test_batch_source_ala_windows():
    """ALA's purpose: int(s/100 * n) consecutive samples at an offset drawn from (seed, "ala", round, client), in
    batches of 4, the last one partial. 75% of 10 = 7 samples (4 + 3), of 3 = 2 (one batch of 2), of 8 = 6 (4 + 2)."""
    src = _source()
    plan = src.plan(ALA_BATCHES, [0, 1, 2], round_idx=5, percent=75)
    assert torch.equal(
        plan.idx, src.plan(ALA_BATCHES, [0, 1, 2], round_idx=5, percent=75).idx
    )  # same keys, same batches
    assert plan.real.tolist() == [[4, 2, 4], [3, 0, 2]]
    for k, (c, m) in enumerate([(0, 7), (1, 2), (2, 6)]):
        n = src.indices[c].numel()
        off = int(torch.randint(0, n - m + 1, (1,), generator=torch_gen(7, "ala", 5, c)))  # the reference's randint
        got = torch.cat([plan.idx[j, k, : plan.real[j, k]] for j in range(2)])
        assert torch.equal(got, src.indices[c][off : off + m])  # contiguous, in order
        assert torch.equal(got, sample_slice(src.indices[c], 75, torch_gen(7, "ala", 5, c)))
        alone = src.plan(ALA_BATCHES, [c], round_idx=5, percent=75).idx[:, 0]  # not who else is asked
        assert torch.equal(alone, plan.idx[: len(alone), k])
    # over rounds the offset of client 0 takes every value of [0, 10 - 7], both ends
    assert {int(src.plan(ALA_BATCHES, [0], round_idx=r, percent=75).idx[0, 0, 0]) for r in range(100)} == {0, 1, 2, 3}
    none = src.plan(ALA_BATCHES, [0, 1], round_idx=5, percent=5)  # int(0.05 * 10) = 0: nothing to learn on
    assert none.idx.shape == (0, 2, 4) and none.real.shape == (0, 2)


def test_batch_source_perfedavg_eval_batch():
    """Per-FedAvg's evaluation batch: B samples of a shuffled epoch keyed (seed, "perfedavg.eval", round, client); a
    client with fewer than B samples gets all of them (padding weighs 0); never augmented."""
    src = _source(augment="cifar")
    plan = src.plan(EVAL_BATCH, [0, 1], round_idx=2, steps=1)
    assert plan.shifts is None and plan.flips is None and src.plan("train", [0], 2, 1).shifts is not None
    pick = torch.randperm(10, generator=torch_gen(7, "perfedavg.eval", 2, 0))[:4]
    assert torch.equal(plan.idx[0, 0], src.indices[0][pick]) and plan.mask[0, 0].eq(1).all()
    perm = torch.randperm(3, generator=torch_gen(7, "perfedavg.eval", 2, 1))
    assert torch.equal(plan.idx[0, 1][plan.mask[0, 1] > 0], src.indices[1][perm]) and plan.mask[0, 1].tolist() == [
        1,
        1,
        1,
        0,
    ]
    assert torch.equal(src.plan(EVAL_BATCH, [0, 1], round_idx=2, steps=1).idx, plan.idx)


# ---------------------------------------------------------------------------- the CSV writers (a round hook)
def test_attached_run_dir_registers_its_csv_writers_first(tmp_path):
    sim = Simulation(TrainConfig())
    other = lambda s, state: None  # noqa: E731
    sim.add_round_hook(other)
    first, second = RunDir(tmp_path), RunDir(tmp_path)
    sim.attach(first, RunLog(first))
    assert isinstance(sim.round_hooks[0], RunLog) and [h.fn for h in sim.round_hooks[1:]] == [other]
    sim.attach(second, RunLog(second))  # replaced, not doubled
    assert [h.run_dir for h in sim.round_hooks if isinstance(h, RunLog)] == [second]
    sim.attach(None)
    assert [h.fn for h in sim.round_hooks] == [other]
    first.close(), second.close()


def test_run_log_writes_the_rounds_skipped_clients_and_metrics(tmp_path):
    rd = RunDir(tmp_path)
    sim = Simulation(TrainConfig(dataset="digits", model="mlp", clients=6, rounds=1, threads=1).validate()).setup()
    sim.record = RoundRecord(
        round=3,
        start_iteration=30,
        metrics=None,  # FedAvg's parts record no rows of their own
        skips=[{"round": 3, "step": 2, "client": 5, "reason": "loss"}],
    )
    RunLog(rd)(sim, None)  # no evaluation this round: metrics.csv keeps its header only
    # the skip of round index 3 is written as round 4 (rounds counted from 1, as in metrics.csv)
    assert (tmp_path / "skipped.csv").read_text().splitlines() == [
        "round,iteration,step,client,reason",
        "4,32,2,5,loss",
    ]
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 1 and not (tmp_path / "layers.csv").exists()
    rd.close()
