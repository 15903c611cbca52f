"""FedAMP (FedALA's personalized-aggregation baseline): update formulas by hand, learning on digits (2 classes
per client, local test splits), ALA on top, resume."""

import math
import signal

import pytest
import torch

from fedcli.cli.main import main
from fedcli.errors import ConfigError
from fedcli.fl.algorithms.fedamp import AMPInit, AMPStep, cloud_models
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.view import PartView
from runkit import error_lines, interrupted, rows, run_main
from simkit import assert_learned, personal_config, personal_run, same_personal

config, run, same = personal_config, personal_run, same_personal


learned = assert_learned


# ------------------------------------------------------------------ FedAMP
def test_fedamp_cloud_models_by_hand():
    """3 models of two tensors; alpha = 0.05, sigma = 0.1, so xi_ij = 0.05 * exp(-10 d) / 0.1 = 0.5 exp(-10 d)."""
    models = {"a": torch.tensor([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1]]), "b": torch.tensor([[0.0], [0.0], [0.1]])}
    # squared distances over both tensors: d12 = 0.01, d13 = 0.01 + 0.01 = 0.02, d23 = 0.01 + 0.01 + 0.01 = 0.03
    x12, x13, x23 = 0.5 * math.exp(-0.1), 0.5 * math.exp(-0.2), 0.5 * math.exp(-0.3)  # 0.452419, 0.409365, 0.370409
    u, xi = cloud_models(models, [0, 1], alpha=0.05, sigma=0.1)
    torch.testing.assert_close(
        xi, torch.tensor([[1 - x12 - x13, x12, x13], [x12, 1 - x12 - x23, x23]], dtype=torch.float64)
    )
    # u_1 = x12 w2 + x13 w3 + (1 - x12 - x13) w1 with w1 = 0: a = (0.1 x12, 0.1 x13), b = 0.1 x13
    # u_2 = x21 w1 + x23 w3 + (1 - x12 - x23) w2:        a = (0.1 (1 - x12 - x23), 0.1 x23), b = 0.1 x23
    torch.testing.assert_close(u["a"], torch.tensor([[0.0452418709, 0.0409365377], [0.0177172181, 0.0370409110]]))
    torch.testing.assert_close(u["b"], torch.tensor([[0.0409365377], [0.0370409110]]))
    # all models equal (round 0): u_i = w_i exactly, although xi_ii = 1 - 2 * 0.5 / 0.1 * ... is far below 0
    same_models = {"a": torch.tensor([[0.3, -0.7]]).repeat(3, 1)}
    u0, xi0 = cloud_models(same_models, [0, 1, 2], alpha=1000.0, sigma=0.1)
    assert torch.equal(u0["a"], same_models["a"]) and float(xi0[0, 0]) == 1 - 2 * 1000 / 0.1


def test_fedamp_cloud_is_an_average_only_when_alpha_is_small():
    """w = 0, 0.1, 0.2 (squared distances d12 = d23 = 0.01, d13 = 0.04), sigma = 0.1 (docs/fidelity-fedala.md, "FedAMP
    + ALA needs clouds that are averages"). alpha = 1000: xi_12 = 10^4 e^-0.1 = 9048.37, xi_13 = 10^4 e^-0.4 = 6703.20,
    u_1 = 0.1 xi_12 + 0.2 xi_13 = 2245.48, far outside [0, 0.2] (what ALA writes into the lower layers).
    alpha = sigma / (N - 1) = 0.05: xi_12 = 0.5 e^-0.1 = 0.452419, xi_13 = 0.5 e^-0.4 = 0.335160, xi_11 = 0.212421 >= 0,
    u_1 = 0.0452419 + 0.0670320 = 0.112274, an average."""
    models = {"w": torch.tensor([[0.0], [0.1], [0.2]], dtype=torch.float64)}
    u, xi = cloud_models(models, [0], alpha=1000.0, sigma=0.1)
    assert float(xi[0, 0]) == pytest.approx(1 - 9048.374 - 6703.200, abs=1e-2)
    assert float(u["w"][0, 0]) == pytest.approx(2245.477, abs=1e-3)
    u, xi = cloud_models(models, [0], alpha=0.1 / 2, sigma=0.1)
    torch.testing.assert_close(
        xi, torch.tensor([[0.2124213, 0.4524187, 0.3351600]], dtype=torch.float64), rtol=0, atol=1e-7
    )
    assert float(u["w"][0, 0]) == pytest.approx(0.1122739, abs=1e-7) and bool((xi >= 0).all())


def test_fedamp_proximal_step_by_hand(data):
    """w <- w - lr (grad + lambda / alpha (w - u)): lambda = 0.1, alpha = 0.05 (coefficient 2), lr = 0.1."""
    cfg = config(algo="fedamp", amp_lambda=0.1, amp_alpha=0.05)
    step = AMPStep(cfg)
    cohort = Cohort(
        [0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64), {"w": torch.tensor([[1.0, 2.0], [0.0, -1.0]])}, {}
    )
    init = AMPInit(cfg)  # what FedAMP's init sent this round (download), offered to the step through the view
    init.clouds = {"w": torch.tensor([[0.5, 2.0], [1.0, -1.0]])}
    step.begin_round(PartView.fake(parts={"init": init}), cohort)
    assert step.clouds is init.clouds
    step.step(cohort, {"w": torch.full((2, 2), 0.5)}, lr=0.1)
    # client 0: 1 - 0.1 (0.5 + 2 * 0.5) = 0.85,  2 - 0.1 * 0.5 = 1.95
    # client 1: 0 - 0.1 (0.5 + 2 * -1) = 0.15,  -1 - 0.05 = -1.05
    torch.testing.assert_close(cohort.params["w"], torch.tensor([[0.85, 1.95], [0.15, -1.05]]))


def test_fedamp_learns_and_needs_every_client(data, capsys, tmp_path):
    sim, s = run(data, algo="fedamp", rounds=3)
    learned(s)
    assert s.comm_bytes == run(data, algo="fedavg-c", rounds=3)[1].comm_bytes  # upload w_i, download u_i
    with pytest.raises(ConfigError, match="--active-ratio 1"):
        Simulation(config(algo="fedamp", active_ratio=0.5)).setup(*data)
    code, _, err = run_main(
        [
            "train",
            "--algo",
            "fedamp",
            "--dataset",
            "digits",
            "--model",
            "mlp",
            "--clients",
            "4",
            "--active-ratio",
            "0.5",
            "--client-test-fraction",
            "0.25",
            "--rounds",
            "1",
            "--device",
            "cpu",
            "--quiet",
            "--out",
            str(tmp_path / "amp"),
        ],
        capsys,
    )
    assert code == 2 and "--active-ratio 1" in err and "Traceback" not in err and len(error_lines(err)) == 1


@pytest.mark.parametrize("algo", ["fedamp"])
def test_ala_layers_0_is_the_method(data, algo):
    same(run(data, algo=algo, init="ala", ala_layers=0, rounds=3), run(data, algo=algo, rounds=3))


def test_fedamp_resume_is_bitwise(tmp_path, monkeypatch, capsys):
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
        "fedamp",
        "--amp-alpha",
        "1",
        "--amp-sigma",
        "10",
        "--iterations",
        "12",
        "--tau",
        "2",
        "--batch-size",
        "8",
        "--lr",
        "0.05",
        "--momentum",
        "0.5",
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
    ref, out = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0
    assert interrupted(monkeypatch, capsys, out, 3, signal.SIGINT, args)[0] == 130
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert rows(ref / "metrics.csv") == rows(out / "metrics.csv")
    assert (ref / "model.pt").read_bytes() == (out / "model.pt").read_bytes()
