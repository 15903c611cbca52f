"""FedALA's adaptive local aggregation: one update worked out by hand, the initial-stage rule, the sampled
slice, the identities that tie ``--init ala`` to the base methods, and a learning test (digits, seconds)."""

import math

import pytest
import torch

from fedcli.errors import ConfigError
from fedcli.fl.algorithms.fedala import (
    WEIGHTS,
    ALAClients,
    ALASettings,
    ala_mix,
    ala_weight_step,
    initial_stage_done,
    learn_weights,
)
from fedcli.fl.cohort import in_order_plan, sample_slice
from fedcli.fl.rng import torch_gen
from simkit import COLS, PERSONAL_BASE, personal_config, personal_run, same_personal

BASE, config, run, same = PERSONAL_BASE, personal_config, personal_run, same_personal


# ------------------------------------------------------------------ one ALA update, by hand
def tiny():
    """A 2-in 2-out linear layer: local model weight 0, bias (0.5, -0.5); global model weight I, bias 0."""
    model = torch.nn.Linear(2, 2)
    glob = {"weight": torch.eye(2), "bias": torch.zeros(2)}
    local = {"weight": torch.zeros(1, 2, 2), "bias": torch.tensor([[0.5, -0.5]])}
    weights = {"weight": torch.ones(1, 2, 2), "bias": torch.ones(1, 2)}
    return model, glob, local, weights


def test_pieces_by_hand():
    theta, theta_g = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, -1.0])
    w = torch.tensor([0.5, 1.0, 0.25])
    assert torch.equal(ala_mix(theta, theta_g, w), torch.tensor([2.0, 2.0, 2.0]))  # 1 + 2*.5, 2 + 0, 3 - 4*.25
    g = torch.tensor([0.1, 5.0, 1.0])
    # W - eta * g * (theta_g - theta) = (.5 - .2, 1 - 0, .25 + 4 * 1.0), clipped to [0, 1]
    assert torch.allclose(ala_weight_step(w, g, theta, theta_g, eta=1.0), torch.tensor([0.3, 1.0, 1.0]))
    assert torch.allclose(ala_weight_step(w, g, theta, theta_g, eta=3.0), torch.tensor([0.0, 1.0, 1.0]))


def test_one_batch_update_by_hand():
    """x = (1, 0), y = 1, W = 1: theta_t = global, logits (1, 0), dL/dz = (s, -s) with s = e / (1 + e);
    dL/dweight = [[s, 0], [-s, 0]]; the update (I) only moves W[0, 0] to 1 - eta * s; the bias update
    (0.5 * s each) would push W_b above 1: clipped to 1."""
    model, glob, local, weights = tiny()
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([1])
    clients = ALAClients(glob, local, weights, {}, start_phase=[False])
    w, passes, losses = learn_weights(model, clients, x, y, in_order_plan([torch.tensor([0])], 1), ALASettings(eta=0.5))
    s = math.e / (1 + math.e)
    assert passes == [1]
    assert torch.allclose(w["weight"][0], torch.tensor([[1 - 0.5 * s, 1.0], [1.0, 1.0]]))
    assert torch.equal(w["bias"][0], torch.ones(2))
    assert losses[0][0] == pytest.approx(math.log(1 + math.e), rel=1e-6)  # CE at logits (1, 0), label 1


def test_two_batches_update_by_hand():
    """The second batch sees theta_t rebuilt from the updated W: logits (1 - s, 0), so W[0, 0] gets
    -sigma(1 - s) more and is clipped at 0; the pass loss is the last batch's, log(1 + e^(1 - s))."""
    model, glob, local, weights = tiny()
    x, y = torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([1, 1])
    clients = ALAClients(glob, local, weights, {}, start_phase=[False])
    w, passes, losses = learn_weights(
        model, clients, x, y, in_order_plan([torch.tensor([0, 1])], 1), ALASettings(eta=1.0)
    )
    s = math.e / (1 + math.e)
    assert 1 - s - 1 / (1 + math.exp(-(1 - s))) < 0  # so the clip acts
    assert torch.allclose(w["weight"][0], torch.tensor([[0.0, 1.0], [1.0, 1.0]]))
    assert torch.equal(w["bias"][0], torch.ones(2))
    assert len(losses[0]) == 1 and losses[0][0] == pytest.approx(math.log(1 + math.exp(1 - s)), rel=1e-6)
    # the initialized top layers: theta + (theta_g - theta) * W
    assert torch.allclose(
        ala_mix(local["weight"], glob["weight"], w["weight"])[0], torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    )
    assert torch.allclose(ala_mix(local["bias"], glob["bias"], w["bias"])[0], torch.zeros(2))


def test_clients_learn_independently():
    """Two clients at once: each gets exactly what it gets alone (its own slice, its own number of batches)."""
    model, glob, local, weights = tiny()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = torch.tensor([1, 0, 1])
    two_local = {n: torch.cat([t, t * -2.0]) for n, t in local.items()}
    two_w = {n: torch.ones(2, *t.shape[1:]) for n, t in local.items()}
    slices = [torch.tensor([0, 1, 2]), torch.tensor([1])]
    two = ALAClients(glob, two_local, two_w, {}, start_phase=[False, False])
    w2, passes, _ = learn_weights(model, two, x, y, in_order_plan(slices, 1), ALASettings(eta=1.0))
    assert passes == [1, 1]
    for k in range(2):
        one_w = {n: torch.ones(1, *t.shape[1:]) for n, t in local.items()}
        one = ALAClients(glob, {n: t[k : k + 1] for n, t in two_local.items()}, one_w, {}, start_phase=[False])
        w1, _, _ = learn_weights(model, one, x, y, in_order_plan([slices[k]], 1), ALASettings(eta=1.0))
        for n in w1:
            torch.testing.assert_close(w1[n][0], w2[n][k])


def reference_pass(model, glob, local, w, x, y, batch, eta, drop_last=False):  # noqa: PLR0913
    """One ALA pass as the reference loop does it, written out in plain autograd (the test's own re-implementation):
    DataLoader(slice, batch, drop_last) batches in order; per batch, the temporary model's top layers are
    local + (global - local) * W, W <- clamp(W - eta * dL/dtheta_t * (global - local), 0, 1). Returns W and the
    last batch's loss."""
    w = {n: t.clone() for n, t in w.items()}
    n = x.shape[0]
    stop = n - n % batch if drop_last else n
    loss = None
    for s in range(0, stop, batch):
        theta_t = {k: (local[k] + (glob[k] - local[k]) * w[k]).requires_grad_(True) for k in w}
        out = torch.nn.functional.linear(x[s : s + batch], theta_t["weight"], theta_t["bias"])
        loss = torch.nn.functional.cross_entropy(out, y[s : s + batch])
        grads = torch.autograd.grad(loss, [theta_t["weight"], theta_t["bias"]])
        for k, g in zip(("weight", "bias"), grads):
            w[k] = torch.clamp(w[k] - eta * g * (glob[k] - local[k]), 0.0, 1.0)
    return w, float(loss.detach())


def test_partial_last_batch_is_used():
    """The reference's ALA loader keeps the partial last batch (drop_last=False): a slice of 5 with batch 2 is
    batches of 2, 2 and 1. Two clients at once (slices of 5 and 3: last batches of 1 sample each, at different
    steps) each get what the plain reference loop gives, and that differs from dropping the partial batch."""
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(3, 3)
    x, y = torch.randn(8, 3, generator=gen), torch.tensor([0, 1, 2, 1, 0, 2, 2, 1])
    glob = {"weight": torch.randn(3, 3, generator=gen), "bias": torch.randn(3, generator=gen)}
    locals_ = [{"weight": torch.randn(3, 3, generator=gen), "bias": torch.randn(3, generator=gen)} for _ in range(2)]
    w0 = [{"weight": torch.rand(3, 3, generator=gen), "bias": torch.rand(3, generator=gen)} for _ in range(2)]
    slices = [torch.arange(0, 5), torch.arange(5, 8)]
    stacked = {n: torch.stack([loc[n] for loc in locals_]) for n in ("weight", "bias")}
    weights = {n: torch.stack([w[n] for w in w0]) for n in ("weight", "bias")}
    clients = ALAClients(glob, stacked, weights, {}, start_phase=[False, False])
    w, passes, losses = learn_weights(model, clients, x, y, in_order_plan(slices, 2), ALASettings(eta=0.7))
    assert passes == [1, 1]
    for k, sl in enumerate(slices):
        expect, last_loss = reference_pass(model, glob, locals_[k], w0[k], x[sl], y[sl], batch=2, eta=0.7)
        dropped, _ = reference_pass(model, glob, locals_[k], w0[k], x[sl], y[sl], batch=2, eta=0.7, drop_last=True)
        for n in expect:
            torch.testing.assert_close(w[n][k], expect[n])
        assert any(not torch.allclose(expect[n], dropped[n]) for n in expect)  # the partial batch moved W
        assert losses[k] == [pytest.approx(last_loss, rel=1e-5)]  # the pass loss is the partial batch's


def test_initial_stage_rule():
    assert not initial_stage_done([1.0] * 10, 10, 0.1)  # needs more than 10 losses
    assert initial_stage_done([1.0] * 11, 10, 0.1)
    assert not initial_stage_done([0.0, 1.0] * 6, 10, 0.1)  # std 0.5 of the last 10
    assert initial_stage_done([9.0] + [1.0, 1.1] * 5, 10, 0.1)  # only the last 10 count (std 0.05)
    model, glob, local, weights = tiny()
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([1])
    plan = in_order_plan([torch.tensor([0])], 1)
    clients = ALAClients(glob, local, weights, {}, start_phase=[True])
    _, passes, losses = learn_weights(model, clients, x, y, plan, ALASettings(eta=1.0, num_pre_loss=3, threshold=10.0))
    assert passes == [4] and len(losses[0]) == 4  # stops as soon as > 3 losses have std < 10
    clients = ALAClients(glob, local, {n: torch.ones_like(t) for n, t in weights.items()}, {}, start_phase=[True])
    settings = ALASettings(eta=1.0, num_pre_loss=3, threshold=0.0, max_passes=7)
    _, passes, _ = learn_weights(model, clients, x, y, plan, settings)
    assert passes == [7]  # threshold 0 never converges: the cap


def test_settings_are_the_options():
    """ALASettings (Alg. 1's hyper-parameters) defaults to the declared options' defaults, and the part's settings are
    read off its options, each from its own one."""
    from fedcli.specs.fedala import ALAParams

    assert ALASettings() == ALASettings.from_options(ALAParams())
    assert ALASettings() == ALASettings(layers=2, percent=80.0, eta=1.0, threshold=0.1, num_pre_loss=10, max_passes=50)
    opts = ALAParams(
        ala_layers=4, ala_sample_percent=20.0, ala_lr=0.5, ala_threshold=0.01, ala_num_pre_loss=3, ala_max_passes=7
    )
    assert ALASettings.from_options(opts) == ALASettings(
        layers=4, percent=20.0, eta=0.5, threshold=0.01, num_pre_loss=3, max_passes=7
    )
    # the initial stage goes on while the std of the last 3 of more than 3 losses is not below 0.01, at most 7 passes
    settings = ALASettings.from_options(opts)
    assert settings.stage_goes_on([1.0] * 3, 3) and not settings.stage_goes_on([1.0] * 4, 4)
    assert settings.stage_goes_on([0.0, 1.0] * 3, 6) and not settings.stage_goes_on([0.0, 1.0] * 3, 7)


def test_sampled_slice():
    ix = torch.arange(100, 130)  # 30 samples
    a = sample_slice(ix, 80, torch_gen(0, "ala", 3, 7))
    assert a.numel() == 24 and torch.equal(a, torch.arange(int(a[0]), int(a[0]) + 24)) and 100 <= int(a[0]) <= 106
    assert torch.equal(a, sample_slice(ix, 80, torch_gen(0, "ala", 3, 7)))  # keyed: reproducible
    offsets = {int(sample_slice(ix, 80, torch_gen(0, "ala", r, 7))[0]) for r in range(200)}
    assert offsets == set(range(100, 107))  # every offset in [0, n - m], both ends
    assert sample_slice(ix, 100, torch_gen(1)).numel() == 30
    assert sample_slice(torch.arange(1), 50, torch_gen(1)).numel() == 0


# ------------------------------------------------------------------ identities on the engine
def test_ala_layers_0_equals_base_method(data):
    avg_c = run(data, algo="fedavg-c")
    same(run(data, algo="fedavg", init="ala", ala_layers=0), avg_c)
    same(run(data, algo="fedala", ala_layers=0), avg_c)
    same(avg_c, run(data, algo="fedavg"), cols=COLS)  # the global model and the ledger are FedAvg's
    prox_c = run(data, algo="fedprox-c", mu=0.1)
    same(run(data, algo="fedprox", mu=0.1, init="ala", ala_layers=0), prox_c)
    same(prox_c, run(data, algo="fedprox", mu=0.1), cols=COLS)


def test_ala_skipped_in_first_round_then_learned(data):
    # round 0: every local model equals the global one, so ALA is skipped (and the initial stage still ahead)
    same(run(data, algo="fedala", rounds=1), run(data, algo="fedavg-c", rounds=1))
    sim, s = run(data, algo="fedala", rounds=3)
    assert set(sim.init.initial_passes) == set(range(4)) and min(sim.init.initial_passes.values()) >= 11
    for n in sim.init.top_names(sim):
        w = sim.store.tables[f"ala.w:{n}"]
        assert set(w) == set(range(4))
        assert all(float(t.min()) >= 0.0 and float(t.max()) <= 1.0 for t in w.values())
        assert any(float(t.min()) < 1.0 for t in w.values())  # the weights moved
    assert all(float(v) == 1.0 for v in sim.store.tables["ala.started"].values())
    assert s.history[-1]["comm_params"] == run(data, algo="fedavg", rounds=3)[1].history[-1]["comm_params"]


def test_a_clients_first_weight_learning_starts_from_w_ones(data):
    """W starts at ones (FedALA Alg. 1; the reference's ``torch.ones_like``): a client's first learning starts from
    theta + (theta_g - theta) * 1 = theta_g in its top layers. After round 0 (ALA skipped, nothing stored) the W that
    client 0's and client 3's first learning reads is that start, a tensor of ones per top layer."""
    sim, _ = run(data, algo="fedala", rounds=1)
    top = sim.init.top_names(sim)
    assert top and not any(k.startswith("ala.w") for k in sim.store.names())
    w = WEIGHTS.load(sim, [0, 3], names=top)
    assert set(w) == set(top)
    assert all(t.shape == (2, *sim.global_params[n].shape) and torch.equal(t, torch.ones_like(t)) for n, t in w.items())


def test_ala_on_fedprox_differs_and_runs(data):
    a = run(data, algo="fedprox", mu=0.1, init="ala")
    b = run(data, algo="fedprox-c", mu=0.1)
    assert (
        a[1].history[-1]["personal_acc"] != "" and a[1].history[-1]["personal_acc"] != b[1].history[-1]["personal_acc"]
    )


def test_init_option_is_validated():
    with pytest.raises(ConfigError, match="--init"):
        config(init="nope")
    with pytest.raises(ConfigError, match="ala-sample-percent"):
        config(algo="fedala", ala_sample_percent=0.0)


def test_fedala_learns_personal_models(data):
    sim, s = run(data, algo="fedala", rounds=3)
    accs = [r["personal_acc"] for r in s.history]
    assert accs[-1] > accs[0] + 0.15 and s.best_personal_acc > 0.85, accs
    assert (
        s.best_personal_acc == max(accs) and s.history[s.best_personal_round - 1]["personal_acc"] == s.best_personal_acc
    )
    # personalized models beat the global model on non-IID data (2 classes per client)
    assert s.best_personal_acc > max(r["test_acc"] for r in s.history)


def test_fedala_resume_is_identical(tmp_path, monkeypatch, capsys):
    """A run interrupted by SIGINT (checkpoint at the round's end) and resumed gives the uninterrupted run's
    rows: the local models, ALA weights and initial-stage flags travel in the checkpointed client store."""
    import csv
    import os
    import signal

    from fedcli.cli.main import main
    from fedcli.fl import engine

    args = [
        "train",
        "--algo",
        "fedala",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "32",
        "--clients",
        "4",
        "--active-ratio",
        "0.5",
        "--partition",
        "pathological",
        "--client-test-fraction",
        "0.25",
        "--rounds",
        "4",
        "--local-epochs",
        "1",
        "--batch-size",
        "16",
        "--lr",
        "0.3",
        "--eval-every",
        "1",
        "--ala-num-pre-loss",
        "3",
        "--checkpoint-every",
        "1",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--quiet",
    ]
    assert main(args + ["--out", str(tmp_path / "ref")]) == 0
    sync = engine.Simulation.synchronize

    def signal_me(self, cohort, *a, **k):
        if cohort.round_idx == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return sync(self, cohort, *a, **k)

    monkeypatch.setattr(engine.Simulation, "synchronize", signal_me)
    with pytest.raises(SystemExit) as e:
        main(args + ["--out", str(tmp_path / "run")])
    assert e.value.code == 130
    monkeypatch.setattr(engine.Simulation, "synchronize", sync)
    assert main(["train", "--resume", str(tmp_path / "run"), "--quiet"]) == 0

    def rows(d):
        with open(tmp_path / d / "metrics.csv") as f:
            return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]

    ref, got = rows("ref"), rows("run")
    assert len(ref) == 4 and ref == got and all(r["personal_acc"] for r in ref)
