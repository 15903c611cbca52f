"""FedLAMA's accelerate variant: with phi = 1 it is FedAvg; its intervals worked out by hand, edge cases, the
schedule and a run (digits + a small MLP, seconds)."""

from baselines_kit import data, fedavg, run
from fedcli.config import TrainConfig
from fedcli.fl.algorithms.fedlama import LamaAccelerate, lama_accelerate_intervals
from fedcli.models.layers import LayerInfo
from simkit import assert_same_run


def test_lama_accelerate_phi1_equals_fedavg(data, fedavg):
    assert_same_run(run(data, algo="fedavg", schedule="lama-accelerate", phi=1), fedavg)


# ------------------------------------------------------------------ FedLAMA's accelerate variant
T, PHI = 10, 4


def test_accelerate_intervals_hand_computed():
    d, n = [0.04, 0.001, 0.5, 0.002], [100, 1000, 10, 500]
    # d*n = [4, 1, 5, 1], total 11; sizes 1610; decreasing order [2, 0, 3, 1]:
    # layer 2: delta 5/11 = .455, lambda 10/1610 = .006 < 1 - .455 -> short (10 // 4 = 2)
    # layer 0: delta 9/11 = .818, lambda 110/1610 = .068 < .182 -> short
    # layer 3: delta 10/11 = .909, lambda 610/1610 = .379 < .091 fails -> tau'
    assert lama_accelerate_intervals(d, n, T, PHI, rule="paper") == [2, T, 2, T]
    assert lama_accelerate_intervals(d, n, T, PHI, rule="reference") == [2, T, 2, 2]
    assert lama_accelerate_intervals(d, n, T, PHI) == [2, T, 2, 2]  # the author code's loop is the default
    assert lama_accelerate_intervals(d, n, T, 1, rule="paper") == [T] * 4
    assert lama_accelerate_intervals(d, n, T, 3, rule="paper") == [3, T, 3, T]  # tau' // phi
    assert lama_accelerate_intervals(d, n, 2, 4, rule="paper") == [1, 2, 1, 2]  # never below 1


def test_accelerate_intervals_edge_cases():
    # ties keep layer order: [0, 1, 2]; layer 0: lambda 1/3 < 1 - 1/3 -> short; layer 1: 2/3 < 1/3 fails
    assert lama_accelerate_intervals([0.1, 0.1, 0.1], [10, 10, 10], T, PHI, rule="paper") == [2, T, T]
    # an exact tie goes on in the author code's loop: [1, 1] with dims [1, 1]: layer 0 lambda 1/2, 1 - delta 1/2
    assert lama_accelerate_intervals([1.0, 1.0], [1, 1], T, PHI, rule="reference") == [2, 2]
    assert lama_accelerate_intervals([1.0, 1.0], [1, 1], T, PHI, rule="paper") == [T, T]
    # nothing measured: no layer is critical
    assert lama_accelerate_intervals([0.0, 0.0], [5, 5], T, PHI) == [T, T]
    # kernels only: fc.b (d 1e-2) is the most critical tensor but not eligible; order conv.w, fc.w.
    # d*n = [.4, .01, .1, .1], delta over all .61: conv.w delta .656, lambda 400/1400 = .286 < .344 -> short
    d, n = [1e-3, 1e-3, 1e-4, 1e-2], [400, 10, 1000, 10]
    assert lama_accelerate_intervals(d, n, T, PHI, eligible=[True, False, True, False], rule="paper") == [2, T, T, T]


def test_accelerate_schedule_and_run(data):
    layers = [LayerInfo(i, f"l{i}", (k,), k, "kernel") for i, k in enumerate([100, 1000, 10, 500])]
    cfg = TrainConfig(tau=T, phi=PHI, lama_rule="paper", lama_eligible="all", lama_first_adjust=0)
    s = LamaAccelerate(cfg, layers)
    assert s.round_length == T and s.intervals == [T] * 4 and s.needs_discrepancy
    for layer, dv in enumerate([0.04, 0.001, 0.5, 0.002]):
        s.observe(layer, dv * T * layers[layer].numel, T)
    adj = s.adjust(0, T)
    assert adj.intervals == s.intervals == [2, T, 2, T]
    assert [s.due(j, T) for j in (1, 2, 3, 10)] == [[], [0, 2], [], [0, 1, 2, 3]]
    # a run: intervals in {tau' // phi, tau'}, more communication than FedAvg(tau') for faster sync
    sim, run_sum = run(data, algo="fedavg", schedule="lama-accelerate", tau=4, phi=2, lama_first_adjust=0)
    assert set(sim.schedule.intervals) <= {2, 4}
    assert run_sum.comm_params > run_sum.fedavg_comm_params
