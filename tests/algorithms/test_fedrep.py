"""FedRep (FedALA's baseline): the head stays local and is not counted, the heads differ while the global head never
moves, and without a head it is fedavg-c (digits, 2 classes per client, local test splits)."""

import csv

import pytest
import torch

from fedcli.config import TrainConfig
from fedcli.fl.engine import Simulation
from fedcli.fl.personal import client_model
from fedcli.runner import run_train
from simkit import PERSONAL_BASE, assert_learned, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal


learned = assert_learned


# ------------------------------------------------------------------ FedRep
def test_fedrep_keeps_the_head_local_and_counts_only_the_body(data, tmp_path):
    cfg = TrainConfig(
        **{**BASE, "algo": "fedrep", "head_epochs": 1.0, "rounds": 3, "out": str(tmp_path / "rep")}
    ).validate()
    s = run_train(cfg, quiet=True)
    with open(tmp_path / "rep/layers.csv") as f:
        layers = list(csv.DictReader(f))
    head, body = layers[-2:], layers[:-2]
    assert all(int(r["syncs"]) == 0 and int(r["comm_params"]) == 0 and float(r["comm_bytes"]) == 0 for r in head)
    assert all(int(r["interval"]) == 0 for r in head) and all(int(r["interval"]) > 0 for r in body)
    assert all(int(r["syncs"]) == 3 for r in body)
    body_numel = sum(int(r["numel"]) for r in body)
    assert s.comm_params == 3 * body_numel < s.fedavg_comm_params
    assert s.comm_bytes == pytest.approx(3 * 4 * body_numel * 8)  # 4 clients up + down, 32 bits each way
    learned(s)


def test_fedrep_heads_differ_and_global_head_never_moves(data):
    sim, s = run(data, algo="fedrep", head_epochs=1.0, rounds=2)
    init = Simulation(config(algo="fedrep")).setup(*data).global_params
    head = [li.name for li in sim.layers[-2:]]
    for n in head:
        assert torch.equal(sim.global_params[n], init[n])
        heads = sim.store.tables[f"fedrep.head:{n}"]
        assert set(heads) == {0, 1, 2, 3} and not torch.equal(heads[0], heads[1])
        # the evaluated model holds the client's own head
        assert torch.equal(client_model(sim, 2)[0][n], heads[2])


def test_fedrep_without_head_is_fedavg_c(data):
    same(run(data, algo="fedrep", head_layers=0), run(data, algo="fedavg-c"))
