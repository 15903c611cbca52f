"""The report of accuracy across clients (clients.csv): the worst-10% mean by hand, its table column and figure."""

import csv
import math

import pytest

from fedcli.cli.train import run_train
from fedcli.config import TrainConfig
from fedcli.reports.clients import worst_mean
from fedcli.reports.single import comparison_table, load_run, write_figures
from simkit import PERSONAL_BASE


def test_worst_mean_by_hand():
    assert worst_mean([0.5, 0.1, 0.9, 0.3]) == 0.1  # ceil(0.4) = 1 client
    assert worst_mean([0.2] * 5 + [0.9] * 4 + [0.05, 0.15]) == pytest.approx(0.1)  # ceil(1.1) = 2: (0.05 + 0.15) / 2
    assert worst_mean([0.7] * 10) == 0.7 and worst_mean([1.0, 0.0] * 5) == 0.0  # 10 clients: exactly 1
    assert math.isnan(worst_mean([]))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("clients")
    out = {}
    for algo in ("fedavg-c", "fedavg"):
        cfg = TrainConfig(**{**PERSONAL_BASE, "algo": algo, "clients": 12, "out": str(root / algo)}).validate()
        run_train(cfg, quiet=True)
        out[algo] = load_run(root / algo)
    return out


def test_table_and_figure_of_the_worst_clients(runs, tmp_path):
    pers = runs["fedavg-c"]
    with open(pers.path / "clients.csv") as f:
        last = [r for r in csv.DictReader(f) if r["round"] == "2"]
    accs = sorted(float(r["personal_acc"]) for r in last)
    assert len(accs) == 12
    by_hand = (accs[0] + accs[1]) / 2  # 12 clients: ceil(1.2) = 2 worst
    table = comparison_table([pers, runs["fedavg"]])
    cols = [c.key for c in table.sections[0].columns]
    worst = [row[cols.index("worst_personal_acc")] for row in table.sections[0].rows]
    assert worst[0].values["value"] == pytest.approx(100 * by_hand, abs=1e-9)
    assert worst[1].text == "—"  # FedAvg writes no clients.csv
    files = {p.name for p in write_figures([pers, runs["fedavg"]], tmp_path)}
    assert {"clients.png", "clients.pdf", "clients.txt"} <= files
    caption = (tmp_path / "clients.txt").read_text()
    assert f"12 clients, worst 10% {100 * by_hand:.2f}%" in caption and "FedAvg (" not in caption.split("Runs:")[1]


def test_no_clients_figure_without_personalized_runs(runs, tmp_path):
    files = {p.name for p in write_figures([runs["fedavg"]], tmp_path)}
    assert "clients.png" not in files
    assert "worst_personal_acc" not in [c.key for c in comparison_table([runs["fedavg"]]).sections[0].columns]


def test_sweep_figure_kind_clients(tmp_path):
    """A recipe's ``kind = "clients"`` figure: a box per run over its seeds' clients, the worst-10% mean per seed
    averaged over the seeds (worked out here from each seed's clients.csv)."""
    from fedcli.reports.figures import draw
    from fedcli.reports.products import FigureDef, Panel

    seeds = {}
    for seed in (0, 1):
        cfg = TrainConfig(
            **{**PERSONAL_BASE, "algo": "fedavg-c", "clients": 10, "seed": seed, "out": str(tmp_path / f"s{seed}")}
        ).validate()
        run_train(cfg, quiet=True)
        seeds[seed] = load_run(tmp_path / f"s{seed}")
    worst = []
    for seed in (0, 1):
        with open(tmp_path / f"s{seed}" / "clients.csv") as f:
            last = sorted(float(r["personal_acc"]) for r in csv.DictReader(f) if r["round"] == "2")
        worst.append(100 * last[0])  # 10 clients: the worst one
    figure_def = FigureDef("clients-fig", "clients", title="across clients", panels=[Panel(runs=["FedAvg-C"])])
    files = draw(figure_def, {"FedAvg-C": seeds}, tmp_path / "figs")
    assert sorted(p.name for p in files) == ["clients-fig.pdf", "clients-fig.png", "clients-fig.txt"]
    caption = (tmp_path / "figs" / "clients-fig.txt").read_text()
    mean = sum(worst) / 2
    assert f"worst 10% {mean:.2f}%" in caption and "over 2 seed(s), 20 client results" in caption
