"""Ditto (FedALA's baseline): its global model is FedAvg's, its personalized models learn and are pulled toward the
global model by lambda (digits, 2 classes per client, local test splits)."""

import pytest

from fedcli.fl.engine import Simulation
from fedcli.fl.personal import client_model
from simkit import COLS, PERSONAL_BASE, accuracy_by_hand, assert_learned, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal


learned = assert_learned


# ------------------------------------------------------------------ Ditto
def test_ditto_global_model_is_fedavg_and_personal_models_learn(data):
    sim, s = run(data, algo="ditto", ditto_epochs=1.0, rounds=3)
    same((sim, s), run(data, algo="fedavg", rounds=3), cols=COLS)  # the global track and the ledger are FedAvg's
    learned(s)
    v = sim.store.tables[f"ditto.p:{sim.layers[0].name}"]
    assert set(v) == {0, 1, 2, 3}
    pooled, _ = accuracy_by_hand(sim, lambda c: client_model(sim, c, "ditto"))
    assert s.history[-1]["personal_acc"] == pytest.approx(pooled, abs=1e-12)  # v is what is evaluated


def test_ditto_lambda_pulls_toward_the_global_model(data):
    """A large lambda keeps v near w^t: after one round, v is closer to the round's starting global model."""
    dist = {}
    for lam in (0.0, 10.0):
        sim = Simulation(config(algo="ditto", ditto_lambda=lam, ditto_epochs=1.0, rounds=1, lr=0.05)).setup(*data)
        w0 = {n: p.clone() for n, p in sim.global_params.items()}
        sim.run()
        dist[lam] = sum(float((client_model(sim, 0, "ditto")[0][n] - w0[n]).norm() ** 2) for n in w0)
    assert dist[10.0] < 0.5 * dist[0.0]
