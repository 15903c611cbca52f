"""The FedLAMA author code's local optimizer as options of the SGD step and the engine, checked by hand:

- ``--weight-decay-on kernels+final-bias`` (Keras ``l2(c)`` on conv/dense kernels and the final dense bias:
  a gradient 2c * w, so ``--weight-decay 2c``),
- ``--momentum-persist slot|client`` (each worker's Keras optimizer outlives the round),
- ``--bn-buffers never`` (its FedLAMA averages trainable variables only),
- ``--lama-first-adjust`` is in test_schedules.py.
"""

import pytest
import torch

from fedcli.comm.communicator import Communicator
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.parts import AverageServer, SGDStep, decayed_tensors
from fedcli.fl.slots import slot_of
from fedcli.fl.store import ClientStore
from fedcli.fl.view import PartView
from fedcli.models import build_model, layer_info
from fedcli.models.layers import LayerInfo
from simkit import configurer

BASE = dict(
    dataset="digits",
    model="mlp",
    mlp_hidden="16",
    clients=6,
    active_ratio=0.5,
    partition="dirichlet",
    alpha=0.5,
    iterations=24,
    batch_size=16,
    lr=0.05,
    eval_every=12,
    device="cpu",
    tau=2,
    phi=2,
    threads=1,
)
config = configurer(BASE)


# ------------------------------------------------------------------ which tensors are decayed
def test_decayed_tensors_femnist_cnn_and_resnet20():
    femnist = layer_info(build_model("femnist_cnn", (1, 28, 28), 62))
    assert decayed_tensors(femnist, "all") is None
    # conv/dense kernels + the output layer's bias; conv1.bias, conv2.bias, fc1.bias are not decayed
    assert decayed_tensors(femnist, "kernels+final-bias") == {
        "conv1.weight",
        "conv2.weight",
        "fc1.weight",
        "fc2.weight",
        "fc2.bias",
    }
    resnet = layer_info(build_model("resnet20", (3, 32, 32), 10))
    got = decayed_tensors(resnet, "kernels+final-bias")
    assert "fc.weight" in got and "fc.bias" in got and "conv1.weight" in got and "layer3.0.shortcut.0.weight" in got
    assert not any(
        ".bn" in n or "shortcut.1" in n or n.startswith("bn1") for n in got
    )  # BatchNorm gamma/beta undecayed
    assert len(got) == 19 + 2 + 1 + 1  # 19 3x3 convs, 2 projection convs, fc.weight, and fc.bias
    assert len(got) == sum(li.kind == "kernel" for li in resnet) + 1


def _cohort(values: dict[str, list], clients=(0,)):
    params = {
        n: torch.tensor(v, dtype=torch.float32).unsqueeze(0).repeat(len(clients), *([1] * len(torch.tensor(v).shape)))
        for n, v in values.items()
    }
    return Cohort(list(clients), torch.full((len(clients),), 1.0 / len(clients), dtype=torch.float64), params, {})


def _layers(kinds: dict[str, str]):
    return tuple(LayerInfo(i, n, (1,), 1, k) for i, (n, k) in enumerate(kinds.items()))


def _cfg(**kw):
    base = dict(momentum=0.0, weight_decay=0.0, weight_decay_on="all", momentum_persist="none", seed=0, algo="fedavg")
    base.update(kw)
    return TrainConfig(**base)


def test_weight_decay_on_kernels_and_final_bias_hand_worked():
    # hidden (kernel w, bias b), out (kernel w, bias b); zero loss gradient, lr 0.1, weight decay 0.5:
    # a decayed x becomes x - 0.1 * 0.5 * x = 0.95 x, an undecayed one stays
    kinds = {"h.weight": "kernel", "h.bias": "bias", "o.weight": "kernel", "o.bias": "bias"}
    values = {"h.weight": [1.0, 2.0], "h.bias": [3.0], "o.weight": [4.0], "o.bias": [5.0]}
    for on, expect in (
        ("kernels+final-bias", {"h.weight": [0.95, 1.9], "h.bias": [3.0], "o.weight": [3.8], "o.bias": [4.75]}),
        ("all", {"h.weight": [0.95, 1.9], "h.bias": [2.85], "o.weight": [3.8], "o.bias": [4.75]}),
    ):
        step = SGDStep(_cfg(weight_decay=0.5, weight_decay_on=on))
        step.setup(_view(layers=_layers(kinds)))
        cohort = _cohort(values)
        step.begin_round(None, cohort)
        step.step(cohort, {n: torch.zeros_like(p) for n, p in cohort.params.items()}, lr=0.1)
        for n, v in expect.items():
            assert cohort.params[n][0].tolist() == pytest.approx(v), (on, n)


def test_keras_l2_is_twice_the_coefficient():
    # Keras l2(c) adds c * sum(w^2) to the loss; its gradient is 2 c w: --weight-decay 2e-4 is l2(1e-4)
    w = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    (1e-4 * w.pow(2).sum()).backward()
    assert torch.allclose(w.grad, 2e-4 * w.detach())


# ------------------------------------------------------------------ persistent momentum
def _view(layers=None, global_params=None, **kw):
    """The part interface of a run of one client store, on one process, with FedAvg's server."""
    cfg = _cfg(**kw)
    return PartView.fake(
        seed=cfg.seed,
        store=ClientStore(),
        comm=Communicator(),
        layers=layers or _layers({"w": "kernel"}),
        global_params=global_params or {"w": torch.zeros(1)},
        full_participation=False,
        parts={"server": AverageServer(cfg)},
    )


def _round(view, step, round_idx, cohort_ids, grads_of, steps=1, lr=1.0):
    """One round of ``steps`` SGD steps; client c's gradient is grads_of[c] (constant); returns its momentum."""
    cohort = _cohort({"w": [0.0]}, clients=cohort_ids)
    cohort.round_idx, cohort.cohort_ids = round_idx, list(cohort_ids)
    step.begin_round(view, cohort)
    for _ in range(steps):
        step.step(cohort, {"w": torch.tensor([[grads_of[c]] for c in cohort_ids])}, lr)
    step.end_round(view, cohort)
    return {c: float(cohort.opt_state["momentum"][0][k]) for k, c in enumerate(cohort_ids)}


G = {0: 1.0, 1: 11.0, 2: 21.0, 3: 31.0}  # each client's constant gradient


def test_momentum_reset_each_round_by_default():
    view = _view(momentum=0.5)
    step = SGDStep(_cfg(momentum=0.5))
    # round 0, two steps: b = g, then 0.5 g + g = 1.5 g
    assert _round(view, step, 0, [0, 1], G, steps=2) == {0: 1.5, 1: 16.5}
    # round 1: a fresh buffer again: b = g
    assert _round(view, step, 1, [1, 2], G) == {1: 11.0, 2: 21.0}


def test_momentum_persists_by_client():
    view = _view(momentum=0.5, momentum_persist="client")
    step = SGDStep(_cfg(momentum=0.5, momentum_persist="client"))
    assert _round(view, step, 0, [0, 1], G, steps=2) == {0: 1.5, 1: 16.5}
    # client 1 continues from its 16.5: 0.5 * 16.5 + 11 = 19.25; client 2 has none: 0.5 * 0 + 21
    assert _round(view, step, 1, [1, 2], G) == {1: 19.25, 2: 21.0}
    # client 0 comes back after a round away: 0.5 * 1.5 + 1 = 1.75
    assert _round(view, step, 2, [0, 3], G) == {0: 1.75, 3: 31.0}


def test_momentum_persists_by_slot():
    view = _view(momentum=0.5, momentum_persist="slot", seed=3)
    step = SGDStep(_cfg(momentum=0.5, momentum_persist="slot", seed=3))
    first = _round(view, step, 0, [0, 1], G, steps=2)  # {0: 1.5, 1: 16.5}, held by slots s0 = slot_of(...)
    by_slot = {slot_of(3, 0, [0, 1])[c]: b for c, b in first.items()}
    second = _round(view, step, 1, [2, 3], G)  # new clients inherit the slots' buffers: 0.5 * b_slot + g
    where = slot_of(3, 1, [2, 3])
    assert second == {c: 0.5 * by_slot[where[c]] + G[c] for c in (2, 3)}
    assert sorted(second.values()) in ([21.75, 39.25], [29.25, 31.75])  # by hand: {0.75, 8.25} + {21, 31}


def test_slots_are_a_fresh_random_permutation_each_round():
    ids = list(range(20))
    maps = [slot_of(0, r, ids) for r in range(6)]
    for m in maps:
        assert sorted(m.values()) == ids
    assert len({tuple(m[c] for c in ids) for m in maps}) == 6  # differs from round to round
    assert maps[0] == slot_of(0, 0, ids) and maps[0] != slot_of(1, 0, ids)  # keyed by (seed, round)


def test_author_step_equals_a_keras_sgd_reimplementation():
    # two rounds of 3 steps for one client slot, constant lr: fedcli (momentum 0.9 persisted, weight decay 2c on
    # kernels and the final bias) against Keras's SGD written out: v <- mu v - lr (g + 2 c w); w <- w + v
    c, mu, lr = 1e-2, 0.9, 0.1
    kinds = {"h.weight": "kernel", "h.bias": "bias", "o.weight": "kernel", "o.bias": "bias"}
    start = {"h.weight": [0.5, -1.0], "h.bias": [0.2], "o.weight": [1.5], "o.bias": [-0.7]}
    grad = lambda n, x: torch.sin(3 * x) + (0.5 if n.endswith("bias") else 0.0)  # noqa: E731 (any smooth gradient)
    decayed = {"h.weight", "o.weight", "o.bias"}

    w = {n: torch.tensor(v) for n, v in start.items()}
    v = {n: torch.zeros_like(t) for n, t in w.items()}
    for _ in range(2):
        for _ in range(3):
            for n in w:
                g = grad(n, w[n]) + (2 * c * w[n] if n in decayed else 0.0)
                v[n] = mu * v[n] - lr * g
                w[n] = w[n] + v[n]

    view = _view(
        momentum=mu,
        weight_decay=2 * c,
        weight_decay_on="kernels+final-bias",
        momentum_persist="slot",
        layers=_layers(kinds),
        global_params={n: torch.zeros(len(x)) for n, x in start.items()},
    )
    step = SGDStep(_cfg(momentum=mu, weight_decay=2 * c, weight_decay_on="kernels+final-bias", momentum_persist="slot"))
    step.setup(view)
    x = {n: torch.tensor(vv) for n, vv in start.items()}
    for r in range(2):
        cohort = _cohort({n: t.tolist() for n, t in x.items()})
        cohort.round_idx, cohort.cohort_ids = r, [0]
        step.begin_round(view, cohort)
        for _ in range(3):
            step.step(cohort, {n: grad(n, p) for n, p in cohort.params.items()}, lr)
        step.end_round(view, cohort)
        x = {n: p[0].clone() for n, p in cohort.params.items()}
    for n in w:
        assert torch.allclose(x[n], w[n], atol=1e-6), n


# ------------------------------------------------------------------ in a run
def test_persistent_momentum_changes_the_run_and_is_refused_where_a_fresh_buffer_is_assumed(tmp_path):
    none = Simulation(config(algo="fedavg", momentum=0.9)).setup()
    none.run()
    slot = Simulation(config(algo="fedavg", momentum=0.9, momentum_persist="slot")).setup()
    slot.run()
    assert any(not torch.equal(none.global_params[n], slot.global_params[n]) for n in none.global_params)
    assert slot.store.tables and all(k.startswith("sgd.momentum.slot:") for k in slot.store.tables)
    assert set(slot.store.tables["sgd.momentum.slot:out.weight"]) == {0, 1, 2}  # 3 active of 6: slots 0..2
    for algo in ("scaffold", "fednova"):
        with pytest.raises(ConfigError, match="--momentum-persist slot cannot be used with --algo " + algo):
            Simulation(config(algo=algo, momentum=0.9, momentum_persist="slot")).setup()
    # without momentum there is nothing to keep: accepted everywhere
    Simulation(config(algo="scaffold", momentum_persist="slot")).setup()


BN = dict(model="resnet20", dataset="digits", iterations=8, tau=2, phi=2, batch_size=8, clients=4, active_ratio=0.5)


def test_bn_buffers_never_keeps_statistics_per_slot():
    sim = Simulation(config(algo="fedlama", bn_buffers="never", **BN)).setup()
    start = {n: b.clone() for n, b in sim.global_buffers.items()}
    sim.run()
    # the global model carries slot 0's statistics, not an average
    tables = sim.store.tables
    for n, b in sim.global_buffers.items():
        assert torch.equal(b, tables[f"bn.slot:{n}"][0]), n
    rm = "bn1.running_mean"
    assert not torch.equal(sim.global_buffers[rm], start[rm])
    assert not torch.equal(tables[f"bn.slot:{rm}"][0], tables[f"bn.slot:{rm}"][1])  # the slots differ
    # each slot's counter counts its own batches: 8 iterations x 1 batch per step
    assert int(tables["bn.slot:bn1.num_batches_tracked"][0]) == 8
    # with the default, statistics are averaged with their layer: no slot tables at all
    avg = Simulation(config(algo="fedlama", **BN)).setup()
    avg.run()
    assert not any(k.startswith("bn.") for k in avg.store.tables)
    assert int(avg.global_buffers["bn1.num_batches_tracked"]) == 0  # integer counters are never averaged


def test_new_options_validate_and_reach_help():
    for key, bad in (("momentum_persist", "worker"), ("weight_decay_on", "kernels"), ("bn_buffers", "sometimes")):
        with pytest.raises(ConfigError, match="--" + key.replace("_", "-")):
            TrainConfig(**{**BASE, key: bad}).validate()
    with pytest.raises(ConfigError, match="--lama-first-adjust"):
        TrainConfig(**{**BASE, "lama_first_adjust": -1}).validate()


# ------------------------------------------------------------------ independent of the process count
@pytest.mark.mpi
@pytest.mark.long(
    reason="the author options under mpiexec -n 2 alone (5 s of CPU): make test runs FedLAMA with them on 1 and 2 "
    "processes in test_mpi_families.py (its 'fedlama-author' case, every CSV cell and the model compared)"
)
@pytest.mark.timeout(300)
def test_author_options_identical_under_mpi(tmp_path):
    from fedcli.cli.main import main
    from runkit import AUTHOR_OPTIONS, MPIEXEC, mpirun, rows

    if MPIEXEC is None:
        pytest.skip("mpiexec not installed")
    # an MLP: a BatchNorm model amplifies the all-reduce's float rounding (summation order differs with the
    # process count) into visible differences within a few steps, with or without these options
    args = [
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--clients",
        "6",
        "--active-ratio",
        "0.5",
        "--algo",
        "fedlama",
        "--tau",
        "2",
        "--phi",
        "2",
        "--iterations",
        "16",
        "--eval-every",
        "4",
        "--batch-size",
        "8",
        "--lr",
        "0.05",
        *AUTHOR_OPTIONS,
        "--lama-first-adjust",
        "0",
        "--quiet",
    ]
    assert main([*args, "--out", str(tmp_path / "n1")]) == 0
    p = mpirun(2, [*args, "--out", str(tmp_path / "n2")])
    assert p.returncode == 0, p.stderr
    a, b = rows(tmp_path / "n1/metrics.csv"), rows(tmp_path / "n2/metrics.csv")
    assert len(a) == len(b) == 4
    for x, y in zip(a, b):
        assert x["comm_params"] == y["comm_params"]
        for col in ("train_loss", "test_loss", "test_acc"):
            assert abs(float(x[col]) - float(y[col])) <= 1e-5, (col, x[col], y[col])


def test_resume_carries_slot_momentum_and_statistics(tmp_path, monkeypatch, capsys):
    """Interrupted and resumed, a run with the author options equals the uninterrupted one (the slots' momentum
    and BatchNorm statistics are in the checkpoint)."""
    import signal

    from fedcli.cli.main import main
    from fedcli.results import checkpoint
    from runkit import AUTHOR_OPTIONS, interrupted, rows

    args = [
        "train",
        "--dataset",
        "digits",
        "--model",
        "resnet20",
        "--clients",
        "6",
        "--active-ratio",
        "0.5",
        "--algo",
        "fedlama",
        "--iterations",
        "24",
        "--tau",
        "2",
        "--phi",
        "2",
        "--batch-size",
        "8",
        "--lr",
        "0.05",
        *AUTHOR_OPTIONS,
        "--bn-buffers",
        "never",
        "--lama-first-adjust",
        "0",
        "--eval-every",
        "4",
        "--checkpoint-every",
        "2",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--quiet",
    ]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0
    assert interrupted(monkeypatch, capsys, run, 3, signal.SIGINT, args)[0] == 130
    ck = checkpoint.load(checkpoint.list_checkpoints(run)[-1][1])
    store = ck["ranks"][0]["store"]
    assert any(k.startswith("sgd.momentum.slot:") for k in store) and any(k.startswith("bn.slot:") for k in store)
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert rows(ref / "metrics.csv") == rows(run / "metrics.csv")
    assert (ref / "model.pt").read_bytes() == (run / "model.pt").read_bytes()
