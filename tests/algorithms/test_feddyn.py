"""FedDyn (fedcli/fl/algorithms/feddyn.py; Acar et al., ICLR 2021, Algorithm 1): the client's corrected local step,
its gradient-state update and the server's h update on a 1-D quadratic worked by hand; resume; lama/ala; learning."""

import csv
import json
import os
import signal

import pytest
import torch

from fedcli.cli.main import main
from fedcli.comm.communicator import Communicator
from fedcli.config import TrainConfig
from fedcli.fl.algorithms.feddyn import FedDynServer, FedDynStep
from fedcli.fl.clientstate import close_round, open_round
from fedcli.fl.cohort import Cohort
from fedcli.fl.store import ClientStore
from fedcli.fl.view import PartView


def test_client_step_and_state_on_a_1d_quadratic_by_hand():
    """L(theta) = (theta - 3)^2 / 2, so g = theta - 3; theta^{t-1} = 1, grad_i = 0.5, alpha = 0.25, lr = 0.5.

    step 1: theta = 1:      d = (1 - 3) - 0.5 + 0.25 * 0          = -2.5     theta = 1 + 0.5 * 2.5      = 2.25
    step 2: theta = 2.25:   d = (2.25 - 3) - 0.5 + 0.25 * 1.25    = -0.9375  theta = 2.25 + 0.5 * 0.9375 = 2.71875
    state:  grad_i = 0.5 - 0.25 * (2.71875 - 1) = 0.0703125
    """
    cfg = TrainConfig(feddyn_alpha=0.25)
    step = FedDynStep(cfg)
    step.setup(PartView.fake(layers=()))
    store = ClientStore()
    store.scatter("feddyn.grad_i:w", [7], torch.tensor([[0.5]], dtype=torch.float64))
    glob = {"w": torch.tensor([1.0], dtype=torch.float64)}
    view = PartView.fake(global_params=glob, store=store, comm=Communicator(), full_participation=False)
    one = torch.ones(1, dtype=torch.float64)
    cohort = Cohort([7], one, {"w": glob["w"].clone().unsqueeze(0)}, {})
    open_round(step, view, cohort)  # as the engine does: grad_i loaded, then begin_round
    assert float(step.grad_i["w"]) == 0.5
    seen = []
    for _ in range(2):
        g = {"w": cohort.params["w"] - 3.0}
        seen.append(float(step.direction(cohort, g)["w"]))
        step.step(cohort, g, 0.5)
    assert seen == [-2.5, -0.9375]
    assert float(cohort.params["w"]) == 2.71875
    cohort.params["w"].copy_(glob["w"])  # the round-end synchronization replaces the client's model first
    close_round(step, view, cohort)  # end_round, then grad_i kept
    assert float(store.tables["feddyn.grad_i:w"][7]) == 0.0703125
    assert "grad_i" not in vars(step)  # the rows are dropped between rounds
    # a client that has not trained yet starts from grad_i = 0 (plain SGD plus the proximal term)
    cohort2 = Cohort([8], one, {"w": glob["w"].clone().unsqueeze(0)}, {})
    open_round(step, view, cohort2)
    assert float(step.direction(cohort2, {"w": torch.tensor([[-2.0]], dtype=torch.float64)})["w"]) == -2.0


def test_server_h_update_by_hand():
    """m = 4 clients, |P_t| = 2, alpha = 0.25; theta^{t-1} = 1, cohort mean 1.75, h^{t-1} = 0.25:

    h^t = 0.25 - (0.25 / 4) * 2 * (1.75 - 1) = 0.15625;  theta^t = 1.75 - 0.15625 / 0.25 = 1.125.
    The first round (h = 0): h^1 = -0.09375, theta^1 = 1.75 + 0.375 = 2.125.
    """
    server = FedDynServer(TrainConfig(feddyn_alpha=0.25))
    server.begin_round(PartView.fake(n_active=2, client_indices=[torch.arange(1)] * 4), None)
    prev, avg = torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.75], dtype=torch.float64)
    assert float(server.update("w", prev, avg)) == 2.125
    assert float(server.h["w"]) == -0.09375
    server.load_state_dict({"h": {"w": torch.tensor([0.25], dtype=torch.float64)}})
    assert float(server.update("w", prev, avg)) == 1.125
    assert float(server.h["w"]) == 0.15625
    assert float(server.state_dict()["h"]["w"]) == 0.15625


SMALL = [
    "train",
    "--algo",
    "feddyn",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "6",
    "--rounds",
    "6",
    "--tau",
    "2",
    "--batch-size",
    "16",
    "--eval-every",
    "1",
    "--checkpoint-every",
    "2",
    "--threads",
    "1",
    "--workers",
    "1",
    "--quiet",
]


def rows(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_interrupted_and_resumed_run_is_bitwise_identical(tmp_path, monkeypatch, capsys):
    ref = tmp_path / "ref"
    assert main(SMALL + ["--out", str(ref)]) == 0
    from fedcli.fl import engine

    sync = engine.Simulation.synchronize

    def signal_me(self, cohort, layers, step, *a, **k):
        if cohort.round_idx == 3 and step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return sync(self, cohort, layers, step, *a, **k)

    out = tmp_path / "run"
    monkeypatch.setattr(engine.Simulation, "synchronize", signal_me)
    with pytest.raises(SystemExit) as e:
        main(SMALL + ["--out", str(out)])
    monkeypatch.setattr(engine.Simulation, "synchronize", sync)
    assert e.value.code != 0
    assert len(rows(out / "metrics.csv")) < 6
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert rows(out / "metrics.csv") == rows(ref / "metrics.csv")
    assert (out / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()


@pytest.mark.parametrize("extra", [["--schedule", "lama", "--phi", "2"], ["--init", "ala"]])
def test_composes_with_lama_and_ala(tmp_path, extra):
    out = tmp_path / "run"
    longer = ["--rounds", "20", "--tau", "4", "--eval-every", "5", "--checkpoint-every", "0"]
    assert main(SMALL + longer + ["--out", str(out), *extra]) == 0
    man = json.loads((out / "manifest.json").read_text())
    assert man["method"]["local_step"] == "feddyn" and man["method"]["server"] == "feddyn"
    assert man["method"]["schedule" if extra[0] == "--schedule" else "init"] == extra[1]
    accs = [float(r["test_acc"]) for r in rows(out / "metrics.csv")]
    assert accs[-1] > accs[0] and accs[-1] > 0.5  # it learns (chance: 0.1)


def test_alpha_flag_reaches_both_parts(tmp_path):
    from fedcli.fl.engine import Simulation

    sim = Simulation(
        TrainConfig(algo="feddyn", feddyn_alpha=0.003, rounds=1, tau=1, clients=4, mlp_hidden="8", threads=1).validate()
    ).setup()
    assert sim.local_step.alpha == sim.server.alpha == 0.003
    assert TrainConfig(algo="feddyn").feddyn_alpha == 0.1
