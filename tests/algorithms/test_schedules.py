"""FedLAMA Eqs. 2-4 and Algorithm 1, with numbers worked out by hand (see the comments)."""

import pytest

from fedcli.comm.ledger import Ledger, fedavg_params
from fedcli.config import TrainConfig
from fedcli.fl.algorithms.fedlama import Lama, lama_intervals
from fedcli.fl.layerwise import delta_lambda
from fedcli.fl.schedules import Periodic, unit_discrepancy
from fedcli.models.layers import LayerInfo
from lama_ref import author_adjusts_after, author_rule, paper_algorithm1

T, PHI = 10, 4
LONG = T * PHI


def test_eq2_unit_discrepancy():
    # x1 = [1, 2], x2 = [3, 4], u = [2, 3]: (||(-1,-1)||^2 + ||(1,1)||^2) / 2 = 2; tau_l = 4, dim = 2 -> 2 / 8
    assert unit_discrepancy(2.0, 4, 2) == 0.25


def test_eq3_eq4_along_sorted_order():
    d, n = [0.04, 0.001, 0.5, 0.002], [100, 1000, 10, 500]
    # d*n = [4, 1, 5, 1], total 11; sizes total 1610; argsort(d) = [1, 3, 0, 2]
    deltas, lambdas = delta_lambda(d, n, [1, 3, 0, 2])
    assert deltas == pytest.approx([1 / 11, 2 / 11, 6 / 11, 1.0])
    assert lambdas == pytest.approx([1000 / 1610, 1500 / 1610, 1600 / 1610, 1.0])


def test_algorithm1_both_rules():
    d, n = [0.04, 0.001, 0.5, 0.002], [100, 1000, 10, 500]
    # layer 1: delta 0.0909 < 1 - 0.6211 -> long; layer 3: 0.1818 < 0.0683 fails -> tau' and, in the
    # author code, the first layer to break the condition still gets the long interval.
    assert lama_intervals(d, n, T, PHI, rule="paper") == [T, LONG, T, T]
    assert lama_intervals(d, n, T, PHI, rule="reference") == [T, LONG, T, LONG]
    assert lama_intervals(d, n, T, PHI) == [T, LONG, T, LONG]  # the author code's rule is the default


def test_algorithm1_ties_keep_layer_order():
    d, n = [0.1, 0.1, 0.1], [10, 10, 10]
    # stable order 0, 1, 2: delta 1/3 < 2/3 -> long; delta 2/3 < 1/3 fails
    assert lama_intervals(d, n, T, PHI, rule="paper") == [LONG, T, T]
    assert lama_intervals(d, n, T, PHI, rule="reference") == [LONG, LONG, T]


def test_algorithm1_exact_tie_follows_the_author_code():
    # the issue's example: d = [1, 1], dim = [1, 1], tau' = 5, phi = 2. Layer 0: delta 1/2, lambda 1/2,
    # 1 - lambda = 1/2: not 1 - lambda < delta, so the author code goes on; layer 1: delta 1, 1 - lambda 0 -> stop.
    assert lama_intervals([1.0, 1.0], [1, 1], 5, 2, rule="reference") == [10, 10]
    # the text's strict delta_l < 1 - lambda_l gives layer 0 tau' at the tie
    assert lama_intervals([1.0, 1.0], [1, 1], 5, 2, rule="paper") == [5, 5]


def test_algorithm1_zero_discrepancy_layer_and_strict_boundary():
    d, n = [0.0, 0.3, 0.1], [50, 25, 25]
    # d*n = [0, 7.5, 2.5]; order 0, 2, 1. Layer 0: delta 0 < 0.5 -> long.
    # Layer 2: delta 0.25 < 1 - 0.75 = 0.25 is false (strict) -> tau' in the text's rule; in the author
    # code's, 1 - lambda < delta is false too, so it goes on to layer 1 (1 - 1 = 0 < 1: stop, long).
    assert lama_intervals(d, n, T, PHI, rule="paper") == [LONG, T, T]
    assert lama_intervals(d, n, T, PHI, rule="reference") == [LONG, LONG, LONG]


def test_algorithm1_all_zero_discrepancy():
    # delta is taken as 0: every layer but the last one in the order satisfies 0 < 1 - lambda; the author
    # code divides 0 by 0 (nan), which never breaks its loop: every kernel gets the long interval
    assert lama_intervals([0.0, 0.0], [5, 5], T, PHI, rule="paper") == [LONG, T]
    assert lama_intervals([0.0, 0.0], [5, 5], T, PHI, rule="reference") == [LONG, LONG]


def test_algorithm1_kernels_only():
    # conv.w (kernel 400, d 1e-3), conv.b (bias 10, 1e-3), fc.w (kernel 1000, 1e-4), fc.b (bias 10, 1e-2)
    d, n = [1e-3, 1e-3, 1e-4, 1e-2], [400, 10, 1000, 10]
    eligible = [True, False, True, False]
    # d*n = [0.4, 0.01, 0.1, 0.1] -> total over ALL tensors 0.61; lambda over kernels: 1400.
    # fc.w: delta 0.1/0.61 = 0.164 < 1 - 1000/1400 = 0.286 -> long; conv.w: 0.5/0.61 < 0 fails.
    assert lama_intervals(d, n, T, PHI, eligible=eligible, rule="paper") == [T, T, LONG, T]
    assert lama_intervals(d, n, T, PHI, eligible=eligible, rule="reference") == [LONG, T, LONG, T]
    # all layers eligible: order 2, 0, 1, 3; fc.w: 0.164 < 1 - 1000/1420 = 0.296 -> long; conv.w: 0.82 < 0.014 fails
    assert lama_intervals(d, n, T, PHI, rule="paper") == [T, T, LONG, T]


def test_femnist_cnn_shape_only_the_author_rule_relaxes_fc1():
    # The LEAF CNN's tensors (conv1 w/b, conv2 w/b, fc1 w/b, fc2 w/b) with fc1.weight (97% of the parameters)
    # the least discrepant. Kernels: 800 + 51200 + 6422528 + 126976 = 6601504.
    n = [800, 32, 51200, 64, 6422528, 2048, 126976, 62]
    d = [1e-6, 1e-6, 1e-7, 1e-6, 1e-9, 1e-6, 1e-8, 1e-6]
    kernels = [True, False, True, False, True, False, True, False]
    # d*n: 8e-4, 3.2e-5, 5.12e-3, 6.4e-5, 6.422528e-3, 2.048e-3, 1.26976e-3, 6.2e-5; total 0.015818288.
    # Walk (kernels by d): fc1.w: delta = 6.422528e-3 / 0.015818288 = 0.406, lambda = 6422528/6601504 = 0.973,
    # 1 - lambda = 0.027 -> the text's rule gives it tau'; fc2.w: delta 0.486, 1 - lambda = 52000/6601504
    # = 0.0079 -> tau'; conv2.w, conv1.w fail likewise. So "paper" is FedAvg(tau') exactly, while the author
    # code's rule gives fc1.w the long interval and stops.
    assert lama_intervals(d, n, 20, 2, rule="paper", eligible=kernels) == [20] * 8
    assert lama_intervals(d, n, 20, 2, rule="reference", eligible=kernels) == [20, 20, 20, 20, 40, 20, 20, 20]


@pytest.mark.parametrize("seed", range(40))
def test_algorithm1_matches_independent_reimplementations(seed):
    # random layers with values exact in binary (d in quarters, sizes small integers), so exact ties occur
    # and both sides compute every ratio the same way
    import random

    rng = random.Random(seed)
    L = rng.randint(1, 9)
    d = [rng.randint(0, 4) / 4 for _ in range(L)]
    n = [rng.choice([1, 2, 3, 4, 8]) for _ in range(L)]
    kinds = [rng.choice(["kernel", "kernel", "bias", "norm"]) for _ in range(L)]
    phi = rng.choice([2, 3, 4])
    got = lama_intervals(d, n, 1, phi, rule="reference", eligible=[k == "kernel" for k in kinds])
    assert got == author_rule(d, n, kinds, phi)
    assert lama_intervals(d, n, 1, phi, rule="paper") == paper_algorithm1(d, n, phi)


def _layers(numels, kinds=None):
    kinds = kinds or ["kernel"] * len(numels)
    return [LayerInfo(i, f"l{i}", (n,), n, k) for i, (n, k) in enumerate(zip(numels, kinds))]


def _cfg(**kw):
    base = dict(tau=2, phi=3, lama_rule="paper", lama_eligible="all", lama_first_adjust=0)
    base.update(kw)
    return TrainConfig(**base)


def test_periodic_schedule_due():
    s = Periodic(_cfg(tau=3), _layers([4, 4]))
    assert s.round_length == 3
    assert [s.due(j, 3) for j in (1, 2, 3)] == [[], [], [0, 1]]
    assert s.due(2, 2) == [0, 1]  # a round cut by the budget ends with a full synchronization


def test_lama_schedule_observes_and_adjusts():
    s = Lama(_cfg(), _layers([100, 1000]))
    assert s.round_length == 6 and s.intervals == [2, 2]
    s.intervals = [2, 6]
    assert [s.due(j, 6) for j in range(1, 7)] == [[], [0], [], [0], [], [0, 1]]
    s.observe(0, 8.0, 2)  # d = 8 / (2 * 100)
    s.observe(1, 6.0, 6)  # d = 6 / (6 * 1000)
    assert s.d == [0.04, 0.001]
    adj = s.adjust(0, 6)
    # order [1, 0]: delta = 1/5 < 1 - 1000/1100 = 0.0909 fails -> both tau'
    assert adj.intervals == [2, 2] and adj.d == [0.04, 0.001]
    assert adj.intervals == lama_intervals(adj.d, [100, 1000], 2, 3, rule="paper")


@pytest.mark.parametrize("phi", [1, 2, 3, 4, 7, 8])
def test_first_adjustment_waits_as_the_author_code(phi):
    # with --lama-first-adjust 6 (the default) a round end adjusts iff more than 6 tau' iterations have run;
    # the author code's epochs of tau' iterations adjust after epoch e with (e + 1) % phi == 0 and e > 5
    tau, rounds = 5, 12
    s = Lama(_cfg(tau=tau, phi=phi, lama_rule="reference", lama_first_adjust=6), _layers([3, 4]))
    ends = [(r + 1) * phi * tau for r in range(rounds)]
    ours = [it for r, it in enumerate(ends) if s.adjust(r, it) is not None]
    assert ours == author_adjusts_after(tau, phi, rounds * phi)
    assert ours[0] == tau * {1: 7, 2: 8, 3: 9, 4: 8, 7: 7, 8: 8}[phi]  # by hand: the first multiple of phi above 6
    # K = 0: every round end (the algorithm box)
    s0 = Lama(_cfg(tau=tau, phi=phi, lama_first_adjust=0), _layers([3, 4]))
    assert all(s0.adjust(r, it) is not None for r, it in enumerate(ends))


def test_what_each_schedule_declares():
    # FedAvg: one interval for all layers, no discrepancy to measure, a round that may be taken chunk by chunk;
    # FedLAMA: per-layer intervals that it re-adjusts from Eq. 2 (measured at every synchronization)
    avg, lama = Periodic(_cfg(), _layers([4, 4])), Lama(_cfg(), _layers([4, 4]))
    assert (Periodic.separable, Periodic.layerwise, Periodic.needs_discrepancy) == (True, False, False)
    assert (Lama.layerwise, Lama.needs_discrepancy) == (True, True)
    assert avg.eligible == [True, True] and lama.eligible == [True, True]  # --lama-eligible all
    assert Lama(_cfg(lama_eligible="kernels"), _layers([4, 2], ["kernel", "bias"])).eligible == [True, False]


def test_a_round_is_separable_only_when_every_layer_waits_for_its_end_and_nothing_is_measured():
    s = Periodic(_cfg(tau=3), _layers([4, 4]))
    assert s.separable_now()  # intervals [3, 3], a round of 3: only the round's end synchronizes
    s.intervals = [3, 4]
    assert s.separable_now()  # an interval past the round's end: still only its end
    s.intervals = [3, 2]
    assert not s.separable_now()  # layer 1 is synchronized at step 2, inside the round
    one = Periodic(_cfg(tau=1), [])
    assert not one.separable_now()  # no layers: the minimum interval is taken as 0, below any round (here 1)
    lama = Lama(_cfg(tau=2, phi=3), _layers([4, 4]))
    lama.intervals = [6, 6]
    assert not lama.separable_now()  # every layer waits for the round's end, but Eq. 2 is measured across the cohort


def test_schedule_state_round_trips_and_an_old_checkpoint_keeps_the_built_intervals():
    s = Periodic(_cfg(tau=3), _layers([4, 4]))
    s.load_state_dict({})  # a checkpoint written before the schedule was a part: nothing to load
    assert s.intervals == [3, 3]
    s.load_state_dict({"intervals": [3, 6]})
    assert s.intervals == [3, 6] and s.state_dict() == {"intervals": [3, 6]}
    lama = Lama(_cfg(), _layers([100, 1000]))
    lama.load_state_dict({})
    assert lama.intervals == [2, 2] and lama.d == [0.0, 0.0]
    lama.load_state_dict({"intervals": [6, 2], "d": [0.5, 0.25]})
    assert lama.intervals == [6, 2] and lama.d == [0.5, 0.25]
    assert lama.state_dict() == {"intervals": [6, 2], "d": [0.5, 0.25]}


def test_ledger_eq8_and_bytes():
    led = Ledger([10, 100])
    led.record_sync(0, clients=4, up_bits=32)
    led.record_sync(0, clients=4, up_bits=32)
    led.record_sync(1, clients=4, up_bits=8)
    assert led.params == 2 * 10 + 100  # Eq. 8: sum_l dim(u_l) * c_l
    assert led.bytes == 2 * 4 * 10 * 64 / 8 + 4 * 100 * 40 / 8
    assert fedavg_params(110, 100, 8) == 110 * 12


def test_a_layerwise_schedule_is_one_pure_intervals_function():
    """Issue 60: the layer-wise base keeps d_l (Eq. 2), adjusts at a round's end and checkpoints both; a method writes
    only ``intervals_of``. Here a rule of its own: tau' for the layer of larger d, phi * tau' for the others. By hand:
    d_0 = 8 / (2 * 100) = 0.04, d_1 = 6 / (6 * 1000) = 0.001, so layer 0 keeps tau' = 2 and layer 1 gets 3 * 2 = 6."""
    from fedcli.fl.schedules import LayerwiseSchedule

    def larger_d_short(d, numel, tau, phi, *, rule, eligible):
        top = max(range(len(d)), key=lambda i: d[i])
        return [tau if i == top else phi * tau for i in range(len(d))]

    class Mine(LayerwiseSchedule):
        intervals_of = staticmethod(larger_d_short)

    s = Mine(_cfg(), _layers([100, 1000]))
    assert (
        s.needs_discrepancy and s.layerwise and s.round_length == 2
    )  # the base's round: tau' (its spec's round_length)
    s.observe(0, 8.0, 2)
    s.observe(1, 6.0, 6)
    adj = s.adjust(0, 6)
    assert s.intervals == adj.intervals == [2, 6] and adj.d == [0.04, 0.001]
    assert s.state_dict() == {"intervals": [2, 6], "d": [0.04, 0.001]}
