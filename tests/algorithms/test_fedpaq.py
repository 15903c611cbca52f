"""FedPAQ: without quantization it is FedAvg; with FedLAMA's schedule the ledger counts the quantized bits
(digits + a small MLP, seconds)."""

import pytest

from baselines_kit import assert_differs, data, fedavg, run
from fedcli.results.runlog import layer_rows
from simkit import assert_same_run


def test_fedpaq_without_quantization_equals_fedavg(data, fedavg):
    assert_same_run(run(data, algo="fedpaq", quant_levels=0), fedavg)
    assert_differs(run(data, algo="fedpaq", quant_levels=16), fedavg)


def test_fedpaq_lama_ledger_counts_quantized_bits(data):
    sim, s = run(data, algo="fedpaq", schedule="lama", tau=2, phi=2, quant_levels=16)
    m = sim.n_active
    want = sum(sim.ledger.syncs[li.index] * m * li.numel * ((5 + 1 + 32 / li.numel) + 32) / 8 for li in sim.layers)
    assert s.comm_bytes == pytest.approx(want, rel=1e-12)
    assert s.comm_params == sum(sim.ledger.syncs[li.index] * li.numel for li in sim.layers)
    assert sum(r["comm_bytes"] for r in layer_rows(sim)) == pytest.approx(s.comm_bytes, rel=1e-12)
