"""The progress bar and the closing summary: communication so far against FedAvg's so far, and the accuracy a run is
judged by (personal_acc for personalized methods). Numbers worked out by hand."""

from types import SimpleNamespace

from rich.console import Console

from fedcli.cli.console import TrainProgress, summary_table
from fedcli.fl.engine import Summary


def row(**kw):
    return {"round": 40, "iteration": 200, "test_acc": 0.5083, "comm_params": 40_000, "personal_acc": "", **kw}


def test_comm_is_against_fedavg_so_far():
    # 1,000 parameters, tau 5, 400 iterations in all; after 200 iterations FedAvg has synchronized 200 // 5 = 40 times
    p = TrainProgress(400, 1_000, 5, enabled=False)
    assert "comm 100.0% of FedAvg" in p.info(row())               # FedAvg's own schedule: 40,000 / 40,000 (the whole run's
    assert "comm 75.0% of FedAvg" in p.info(row(comm_params=30_000))  # 80,000 would say 50% and 37.5%)
    assert "comm 100.0% of FedAvg" in p.info(row(iteration=5, round=1, comm_params=1_000))  # the first round too
    # FedLAMA rounds of phi * tau' = 10 iterations: after 3 rounds (30 iterations) FedAvg(tau' = 5) synchronized 6 times
    assert "comm 50.0% of FedAvg" in p.info(row(iteration=30, round=3, comm_params=3_000))


def test_comm_with_local_epochs_is_per_round():
    # --local-epochs: a round is one local phase of 7 steps; FedAvg synchronizes once per round: 3 rounds = 3,000
    p = TrainProgress(600, 1_000, 5, per_round=True, enabled=False)
    assert "comm 100.0% of FedAvg" in p.info(row(iteration=21, round=3, comm_params=3_000))
    assert "comm 50.0% of FedAvg" in p.info(row(iteration=21, round=3, comm_params=1_500))


def test_bar_counts_rounds_under_a_round_budget():
    p = TrainProgress(50, 1_000, 5, rounds=True, per_round=True, enabled=False)
    p(row(iteration=210, round=30, comm_params=30_000))
    assert p.progress.tasks[0].completed == 30 and p.progress.tasks[0].total == 50
    q = TrainProgress(600, 1_000, 5, enabled=False)
    q(row())
    assert q.progress.tasks[0].completed == 200


def test_personalized_runs_show_personal_acc():
    p = TrainProgress(400, 1_000, 5, enabled=False)
    info = p.info(row(personal_acc=0.4812))
    assert "personal acc 48.12%" in info and "50.83" not in info
    assert "acc 50.83%" in p.info(row()) and "personal" not in p.info(row())


def render(table) -> str:
    c = Console(record=True, width=200)
    c.print(table)
    return c.export_text()


def test_summary_leads_with_personal_acc():
    cfg = SimpleNamespace(algo="fedala", dataset="digits", model="mlp", tau=5, local_epochs=1.0)
    s = Summary(rounds=86, iteration=600, final_acc=0.5083, best_acc=0.52, best_iteration=570, comm_params=3_000,
                fedavg_comm_params=3_000, best_personal_acc=0.4905, best_personal_round=80, final_personal_acc=0.4812)
    text = render(summary_table(cfg, s, "results/x"))
    lines = [ln for ln in text.splitlines() if "accuracy" in ln]
    assert "final personal accuracy" in lines[0] and "48.12%" in lines[0]
    assert "best personal accuracy" in lines[1] and "49.05% (round 80)" in lines[1]
    assert "global model accuracy" in lines[2] and "50.83% final" in lines[2]
    assert "100.00% of FedAvg with one synchronization per round" in text
    plain = SimpleNamespace(algo="fedavg", dataset="digits", model="mlp", tau=5, local_epochs=0.0)
    text = render(summary_table(plain, Summary(final_acc=0.9, best_acc=0.91, comm_params=10, fedavg_comm_params=20), "r"))
    assert "final accuracy" in text and "90.00%" in text and "personal" not in text and "50.00% of FedAvg with tau=5" in text
