"""APPLE (FedALA's baseline): learning on digits (2 classes per client, local test splits), the update
formulas on tiny tensors worked out by hand, invariants, ``--init ala --ala-layers 0``, resume."""

import signal

import pytest
import torch

from fedcli.cli.main import main
from fedcli.data.setup import load_data_and_partition
from fedcli.errors import ConfigError
from fedcli.fl.algorithms.apple import AppleStep, cos_lambda, dr_gradient, personalized
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.results import checkpoint
from runkit import interrupted, rows
from simkit import personal_config as config
from simkit import personal_run as run
from simkit import same_personal as same


def learned(summary, gain):
    accs = [r["personal_acc"] for r in summary.history]
    assert max(accs) > accs[0] + gain, accs
    assert summary.history[-1]["personal_acc"] > max(
        r["test_acc"] for r in summary.history
    )  # non-IID: personal models win


# ------------------------------------------------------------------ APPLE
def test_apple_learns_and_downloads_every_core(data):
    sim, s = run(data, algo="apple", rounds=3)
    learned(s, 0.1)
    sigma = sum(li.numel for li in sim.layers)
    n = 4  # every client uploads 1 model and downloads M = N = 4: (1 + M) Sigma float32 per client per round
    assert s.comm_bytes == pytest.approx(3 * n * (1 + n) * sigma * 4)
    assert [r["comm_params"] for r in s.history] == [
        r["comm_params"] for r in run(data, algo="fedavg-c", rounds=3)[1].history
    ]
    p = torch.stack([sim.store.tables["apple.p"][c] for c in range(n)])
    assert p.shape == (4, 4) and not torch.allclose(p, torch.full((4, 4), 0.25))  # the DR vectors were learned


def test_apple_m_all_but_own_counts_n_models(data):
    sim, s = run(data, algo="apple", apple_m=3, rounds=1)
    sigma = sum(li.numel for li in sim.layers)
    assert s.comm_bytes == pytest.approx(4 * (1 + 3) * sigma * 4)


def test_apple_update_by_hand():
    """N = 3 clients, cohort rows = clients 0 and 2, two tensors; lr 0.1 (core lr 0.1 * N = 0.3),
    eta_2 = 0.01, mu = 0.1, lambda = 1."""
    cores = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), "b": torch.tensor([[1.0], [0.0], [2.0]])}
    p = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]])
    idx = torch.tensor([0, 2])
    own = {n: c[idx].clone() for n, c in cores.items()}
    # personalized models: 0.5 c0 + 0.25 c1 + 0.25 c2 and 0.2 c0 + 0.3 c1 + 0.5 c2
    torch.testing.assert_close(personalized(p, cores["w"], own["w"], idx), torch.tensor([[2.5, 3.5], [3.6, 4.6]]))
    torch.testing.assert_close(personalized(p, cores["b"], own["b"], idx), torch.tensor([[1.0], [1.2]]))

    step = AppleStep(config(algo="apple", apple_dr_lr=0.01, apple_mu=0.1))
    step.n, step.cores, step.own, step.idx, step.p, step.lam = 3, cores, own, idx, p.clone(), 1.0
    step.p0 = torch.tensor([0.5, 0.3, 0.2])
    grads = {"w": torch.tensor([[1.0, -1.0], [2.0, 0.0]]), "b": torch.tensor([[4.0], [1.0]])}
    step.step(Cohort([0, 2], torch.tensor([0.5, 0.5], dtype=torch.float64), {}, {}), grads, lr=0.1)
    # own cores: c_i - 0.3 * p_ii * g  (p_00 = 0.5, p_22 = 0.5)
    torch.testing.assert_close(step.own["w"], torch.tensor([[0.85, 2.15], [4.7, 6.0]]))
    torch.testing.assert_close(step.own["b"], torch.tensor([[0.4], [1.85]]))
    # p-gradient: mean over the 2 tensors of mean(g * c_j) (own column: the updated core) + 0.1 * (p - p0)
    #   row 0: w-terms [-0.65, -0.5, -0.5], b-terms [1.6, 0, 8]   -> [0.475, -0.25, 3.75] + [0, -0.005, 0.005]
    #   row 1: w-terms [1, 3, 4.7],         b-terms [1, 0, 1.85]  -> [1, 1.5, 3.275]     + [-0.03, 0, 0.03]
    torch.testing.assert_close(
        dr_gradient(grads, cores, step.own, idx), torch.tensor([[0.475, -0.25, 3.75], [1.0, 1.5, 3.275]])
    )
    torch.testing.assert_close(step.p, torch.tensor([[0.49525, 0.25255, 0.21245], [0.1903, 0.285, 0.46695]]))


def test_apple_cos_scheduler():
    # L = int(0.2 * 10) = 2; the reference applies round t - 1's value in round t
    assert [cos_lambda(t, 10, 0.2) for t in range(5)] == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.0])
    assert [cos_lambda(t, 10, 0.0) for t in range(3)] == [1.0, 0.0, 0.0]


def test_apple_one_client_without_dr_learning_is_fedavg_c(data):
    """One client, p = [1] fixed, uploading its core: the core is trained by plain SGD at lr * 1 * 1."""
    kw = dict(clients=1, partition="iid", rounds=2)
    one = load_data_and_partition(config(**kw))
    a_sim, a = run(one, algo="apple", apple_upload="core", apple_dr_lr=0.0, **kw)
    b_sim, b = run(one, algo="fedavg-c", **kw)
    for x, y in zip(a.history, b.history):
        assert x["personal_acc"] == pytest.approx(y["personal_acc"], abs=0.01)
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-4)
    for n in a_sim.global_params:
        torch.testing.assert_close(a_sim.global_params[n], b_sim.global_params[n], atol=1e-5, rtol=1e-5)


def test_apple_core_upload_learns(data):
    learned(run(data, algo="apple", apple_upload="core", rounds=3)[1], 0.1)


def test_apple_refuses_partial_participation_ala_and_few_downloads(data):
    for kw, key in (
        (dict(active_ratio=0.5), "active-ratio"),
        (dict(init="ala"), "init ala"),
        (dict(apple_m=2), "apple-m"),
        (dict(apple_m=5), "apple-m"),
    ):
        with pytest.raises(ConfigError, match=key):
            Simulation(config(algo="apple", **kw)).setup(*data)


def test_apple_ala_layers_0_is_apple(data):
    same(run(data, algo="apple", init="ala", ala_layers=0), run(data, algo="apple"))


def test_apple_resume_carries_cores_and_dr_vectors(tmp_path, monkeypatch, capsys):
    args = [
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "16",
        "--clients",
        "4",
        "--active-ratio",
        "1",
        "--algo",
        "apple",
        "--iterations",
        "12",
        "--tau",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "0.1",
        "--client-test-fraction",
        "0.25",
        "--eval-every",
        "2",
        "--checkpoint-every",
        "2",
        "--device",
        "cpu",
        "--local-epochs",
        "0",
        "--threads",
        "1",
        "--quiet",
    ]  # rounds of tau steps (the preset defaults to epochs)
    for mode in ("personal", "core"):
        a = args + ["--apple-upload", mode]
        ref, out = tmp_path / f"ref-{mode}", tmp_path / f"run-{mode}"
        assert main(a + ["--out", str(ref)]) == 0
        assert interrupted(monkeypatch, capsys, out, 3, signal.SIGINT, a)[0] == 130
        ck = checkpoint.load(checkpoint.list_checkpoints(out)[-1][1])
        assert "apple.p" in ck["ranks"][0]["store"]
        assert main(["train", "--resume", str(out), "--quiet"]) == 0
        assert rows(ref / "metrics.csv") == rows(out / "metrics.csv")
        assert (ref / "model.pt").read_bytes() == (out / "model.pt").read_bytes()
        monkeypatch.undo()
