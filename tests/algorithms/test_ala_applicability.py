"""ALA on other methods (FedALA Table 4, "Applicability of ALA"): ``--init ala`` replaces the method's local
initialization and the method's own machinery uses the ALA-initialized model. For each method:
``--ala-layers 0`` is the method itself, and with ALA the evaluated models change through the method's own path
(Ditto's anchor, Per-FedAvg's adaptation start, FedRep's body). Digits + a small MLP, seconds."""

import pytest
import torch

from fedcli.fl.personal import client_model
from fedcli.specs import METHODS
from simkit import PERSONAL_BASE, personal_config, personal_run, same_personal

config, run, same = personal_config, personal_run, same_personal

# FedALA's applicability table (FedFomo and APPLE are left out there: they download several client models)
APPLICABLE = ["fedavg", "fedprox", "perfedavg", "fedrep", "pfedme", "ditto", "fedamp", "fedphp", "partialfed"]
OWN = {"ditto": dict(ditto_epochs=1.0), "pfedme": dict(lr=0.05, pfedme_lr=0.1)}  # lambda * lr < 2 (pFedMe)
ROUNDS = 3


def registered(algo):
    assert algo in METHODS, f"{algo} is not registered"
    return algo


@pytest.mark.parametrize("algo", APPLICABLE)
def test_ala_layers_0_is_the_method(data, algo):
    kw = dict(algo=registered(algo), rounds=2, **OWN.get(algo, {}))
    base = run(data, **kw)
    same(
        run(data, init="ala", ala_layers=0, **kw),
        base,
        cols=("round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes")
        + (("personal_acc",) if base[1].history[-1]["personal_acc"] != "" else ()),
    )


@pytest.mark.parametrize("algo", ["perfedavg", "fedrep", "ditto"])
def test_ala_changes_what_the_method_evaluates(data, algo):
    kw = dict(algo=algo, rounds=ROUNDS, **OWN.get(algo, {}))
    sim, s = run(data, init="ala", **kw)
    _, b = run(data, **kw)
    assert s.history[-1]["personal_acc"] != b.history[-1]["personal_acc"]
    assert len(sim.init.initial_passes) == 4  # ALA ran for every client (from round 2 on)


def test_ala_on_fedrep_mixes_the_top_received_tensors_not_the_head(data):
    sim, _ = run(data, algo="fedrep", init="ala", rounds=ROUNDS)
    names = [li.name for li in sim.layers]
    head = set(names[-2:])
    top = sim.init.top_names(sim)
    assert top == names[-4:-2] and not (set(top) & head)  # p = 2 tensors below the local head
    assert all(f"ala.w:{n}" in sim.store.tables for n in top)


def test_ala_on_ditto_anchors_the_personal_model_at_the_ala_start(data):
    """Ditto's v is pulled toward the model the client starts from: with ALA that is the ALA-initialized model,
    so v differs from plain Ditto's although v's own data stream is the same."""
    kw = dict(algo="ditto", ditto_epochs=1.0, rounds=ROUNDS)
    sim_a, _ = run(data, init="ala", **kw)
    sim_b, _ = run(data, **kw)
    v = lambda sim, c: client_model(sim, c, "ditto")[0]  # noqa: E731
    assert any(not torch.equal(v(sim_a, c)[n], v(sim_b, c)[n]) for c in range(4) for n in sim_a.global_params)


def test_ala_on_perfedavg_adapts_from_the_clients_start_model(data):
    sim, s = run(data, algo="perfedavg", init="ala", rounds=ROUNDS)
    assert set(sim.store.tables[f"perfedavg.start.p:{sim.layers[0].name}"]) == set(range(4))
    plain, _ = run(data, algo="perfedavg", rounds=ROUNDS)
    assert (
        "perfedavg.start.p:" + sim.layers[0].name not in plain.store.tables
    )  # plain Per-FedAvg adapts the global model
    start = client_model(sim, 0, "perfedavg.start")[0]
    assert any(not torch.equal(start[n], sim.global_params[n]) for n in start)  # not the global model
    assert 0.1 < s.best_personal_acc <= 1.0
