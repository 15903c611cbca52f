"""``--personal-eval after-init`` against an independent re-implementation of FedALA's reference order.

The reference (PFLlib's ``serverALA.train``, as its other servers): every round, ``send_models()`` runs ALA
(``clientALA.local_initialization`` -> ``ALA.adaptive_local_aggregation``) for every client, then ``evaluate()``
pools correct predictions over all clients' local test splits, then every client trains and the server averages the
trained models weighted by training samples. The loop below is written from that code's logic with plain torch
(only the network module and the data are taken from the run), in a setting without randomness in the batches:
every client's whole training split is one batch (one local step per round), and ALA learns on 100% of it (the
slice offset is then 0 and one pass is one batch).
"""

import copy

import numpy as np
import pytest
import torch
from torch.func import functional_call

from fedcli.config import TrainConfig
from fedcli.fl.engine import Simulation

BASE = dict(
    algo="fedala",
    dataset="digits",
    model="mlp",
    mlp_hidden="16",
    clients=4,
    active_ratio=1.0,
    partition="pathological",
    classes_per_client=2,
    client_test_fraction=0.25,
    rounds=4,
    local_epochs=1.0,
    batch_size=100000,
    lr=0.5,
    eval_every=1,
    device="cpu",
    weighting="samples",
    threads=1,
    ala_sample_percent=100.0,
    ala_layers=2,
)


def fedcli_run(point: str):
    sim = Simulation(TrainConfig(**{**BASE, "personal_eval": point}).validate()).setup()
    init = {n: p.clone() for n, p in sim.global_params.items()}
    summary = sim.run()
    return sim, init, [r["personal_acc"] for r in summary.history]


def reference(
    sim,
    init: dict,
    rounds: int,
    lr: float,
    p: int = 2,
    eta: float = 1.0,
    threshold: float = 0.1,
    num_pre_loss: int = 10,
):
    """PFLlib's FedALA: (ALA for all, evaluate, train, aggregate) per round; returns the evaluations after ALA
    and, for the other option, those of the trained models."""
    model, buffers = sim.model, dict(sim.model.named_buffers())
    x_all, y_all = sim.train_x, sim.train_y
    train = [torch.as_tensor(t) for t in sim.partition.train]
    test = [torch.as_tensor(t) for t in sim.partition.test]
    names = list(init)
    n_train = np.array([len(t) for t in train], dtype=np.float64)

    def loss_of(params, ix):
        return torch.nn.functional.cross_entropy(functional_call(model, (params, buffers), (x_all[ix],)), y_all[ix])

    def evaluate(models):
        correct = sum(
            int((functional_call(model, (m, buffers), (x_all[t],)).argmax(1) == y_all[t]).sum())
            for m, t in zip(models, test)
        )
        return correct / sum(len(t) for t in test)

    global_model = {n: t.clone() for n, t in init.items()}
    local = [copy.deepcopy(global_model) for _ in train]
    weights = [None] * len(train)
    start = [True] * len(train)
    after_init, after_training = [], []
    for _ in range(rounds):
        for c, ix in enumerate(train):  # send_models: ALA on every client
            theta, theta_g = local[c], global_model
            if float(torch.sum(theta_g[names[0]] - theta[names[0]])) == 0:
                continue
            top = names[-p:]
            for n in names[:-p]:
                theta[n] = theta_g[n].clone()
            if weights[c] is None:
                weights[c] = {n: torch.ones_like(theta[n]) for n in top}
            temp = {n: (theta[n] + (theta_g[n] - theta[n]) * weights[c][n]) if n in top else theta[n] for n in names}
            losses = []
            while True:
                t = {n: v.detach().requires_grad_(n in top) for n, v in temp.items()}
                loss = loss_of(t, ix)  # the slice is the whole split, one batch
                grads = torch.autograd.grad(loss, [t[n] for n in top])
                for n, g in zip(top, grads):
                    weights[c][n] = torch.clamp(weights[c][n] - eta * (g * (theta_g[n] - theta[n])), 0, 1)
                temp = {
                    n: (theta[n] + (theta_g[n] - theta[n]) * weights[c][n]) if n in top else theta[n] for n in names
                }
                losses.append(loss.item())
                if not start[c]:
                    break
                if len(losses) > num_pre_loss and np.std(losses[-num_pre_loss:]) < threshold:
                    break
            start[c] = False
            local[c] = {n: v.detach().clone() for n, v in temp.items()}
        after_init.append(evaluate(local))
        for c, ix in enumerate(train):  # one local epoch = one full batch
            t = {n: v.detach().requires_grad_(True) for n, v in local[c].items()}
            grads = torch.autograd.grad(loss_of(t, ix), [t[n] for n in names])
            local[c] = {n: (t[n] - lr * g).detach() for n, g in zip(names, grads)}
        after_training.append(evaluate(local))
        global_model = {n: sum(w * local[c][n] for c, w in enumerate(n_train / n_train.sum())) for n in names}
    return after_init, after_training


def test_after_init_is_the_reference_evaluation_order():
    sim_i, init_i, at_init = fedcli_run("after-init")
    sim_t, init_t, at_end = fedcli_run("after-training")
    for n in init_i:
        assert torch.equal(init_i[n], init_t[n])
    ref_init, ref_end = reference(sim_i, init_i, BASE["rounds"], BASE["lr"])
    one = 1.0 / sum(len(t) for t in sim_i.partition.test)  # one local test sample
    assert len(at_init) == len(ref_init) == BASE["rounds"]
    assert ref_init[0] == pytest.approx(at_init[0], abs=1e-12)  # round 0: the initial global model on every client
    assert np.allclose(at_init, ref_init, atol=one / 2), (at_init, ref_init)
    assert np.allclose(at_end, ref_end, atol=one / 2), (at_end, ref_end)
    # the two points are different numbers (the option changes what is measured)
    assert max(abs(a - b) for a, b in zip(at_init, at_end)) > 5 * one
    # the default stays the model after training (the golden records)
    assert TrainConfig().personal_eval == "after-training"


@pytest.mark.parametrize("algo", ["ditto", "pfedme"])
def test_after_init_of_a_stored_personal_model_is_the_last_rounds(algo):
    """Ditto's v and pFedMe's theta are not set by the initialization: before round r's training they are what
    round r - 1's training left (every client trains every round), so the after-init row r is the after-training
    row r - 1, and row 1 is the initial global model (no client has a personalized model yet)."""
    kw = {**BASE, "algo": algo, "batch_size": 16, "rounds": 3, "lr": 0.05}
    runs = {
        p: Simulation(TrainConfig(**{**kw, "personal_eval": p}).validate()).setup()
        for p in ("after-init", "after-training")
    }
    init_acc = runs["after-init"].personal.evaluate(
        runs["after-init"]
    )  # nothing trained yet: the global model everywhere
    acc = {p: [r["personal_acc"] for r in sim.run().history] for p, sim in runs.items()}
    assert acc["after-init"][0] == init_acc
    assert acc["after-init"][1:] == acc["after-training"][:-1]
    assert acc["after-init"] != acc["after-training"]


def test_every_personalized_preset_runs_after_init():
    from fedcli.specs import METHODS

    for algo in sorted(n for n, m in METHODS.items() if m.personalized):
        kw = {**BASE, "algo": algo, "batch_size": 16, "rounds": 2, "lr": 0.05, "personal_eval": "after-init"}
        summary = Simulation(TrainConfig(**kw).validate()).setup().run()
        assert all(0.0 <= r["personal_acc"] <= 1.0 for r in summary.history), algo
