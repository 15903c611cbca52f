"""A sweep figure tells apart every pair of runs it draws (issue 57, item 4): the FedProx stragglers figure drew
FedProx mu = 0 and mu = 1 as one "FedProx (τ=20)" (same colour, marker and dash), and its legend did not say that
FedAvg drops the stragglers while the others keep their partial work. And a legend below a panel never covers another
panel's legend or data (two panels of four long legends ran into each other)."""

from __future__ import annotations

import json

from fedcli.reports import style
from fedcli.reports.figures import build
from fedcli.reports.products import FigureDef, Panel
from fedcli.reports.rundata import RunData
from simkit import write_csv

METRICS = ["round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes", "sim_time_s"]
STYLES = {
    "fedavg": ("FedAvg", ["#4D4D4D", "o"]),
    "fedprox": ("FedProx", ["#9467BD", "<"]),
    "fednova": ("FedNova", ["#BCBD22", "h"]),
}


def run(path, algo, params, on_deadline, acc=0.5):
    """A --system run of ``algo`` whose parts read ``params`` ({part: {option: value}}), stragglers handled by
    ``on_deadline``: the manifest as fedcli writes it (method label and style, params, system) and three evaluations."""
    path.mkdir(parents=True)
    label, look = STYLES[algo]
    system = {
        "speed": "tiers:3.6e6@0.1,9e5@0.9",
        "uplink": "constant:1e7",
        "deadline": 0.25,
        "on_deadline": on_deadline,
    }
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "seed": 0,
                "method": {"name": algo, "label": label, "style": look, "layerwise": False},
                "params": params,
                "system": system,
                "config": {
                    "algo": algo,
                    "seed": 0,
                    "tau": 20,
                    "mu": 1.0,
                    "lr": 0.1,
                    "dataset": "synthetic",
                    "model": "mlp",
                    "rounds": 3,
                    "out": str(path),
                    "system": True,
                    "on_deadline": on_deadline,
                    **params.get(algo, {}),
                },
            }
        )
    )
    write_csv(
        path / "metrics.csv",
        METRICS,
        [
            {
                "round": i,
                "iteration": 20 * i,
                "train_loss": 1,
                "test_loss": 1,
                "test_acc": acc + 0.01 * i,
                "comm_params": 10 * i,
                "comm_bytes": 100 * i,
                "sim_time_s": 0.3 * i,
            }
            for i in (1, 2, 3)
        ],
    )
    return RunData(path)


def stragglers(tmp_path) -> dict:
    return {
        "FedAvg drop 90%": {0: run(tmp_path / "a", "fedavg", {}, "drop", 0.1)},
        "FedProx mu0 partial 90%": {0: run(tmp_path / "p0", "fedprox", {"fedprox": {"mu": 0.0}}, "keep-partial")},
        "FedProx mu1 partial 90%": {0: run(tmp_path / "p1", "fedprox", {"fedprox": {"mu": 1.0}}, "keep-partial")},
        "FedNova partial 90%": {0: run(tmp_path / "n", "fednova", {}, "keep-partial")},
    }


def legend_of(fig, k=0) -> list[tuple]:
    """(text, colour, dash, marker fill) of each line of panel ``k``'s legend."""
    ax = fig.axes[k]
    lines = {line.get_label(): line for line in ax.get_lines()}
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    return [(t, lines[t].get_color(), str(lines[t].get_linestyle()), lines[t].get_fillstyle()) for t in texts]


def test_stragglers_figure_tells_its_four_runs_apart(tmp_path):
    runs = stragglers(tmp_path)
    fig, _ = build(FigureDef("stragglers-90", "curves", x="time", panels=[Panel(runs=list(runs))]), runs)
    got = legend_of(fig)
    assert [t for t, *_ in got] == [
        "FedAvg (τ=20), stragglers dropped",
        "FedProx (τ=20), μ=0, stragglers' partial work kept",
        "FedProx (τ=20), μ=1, stragglers' partial work kept",
        "FedNova (τ=20), stragglers' partial work kept",
    ]
    prox = [look for t, *look in got if t.startswith("FedProx")]
    assert prox[0] != prox[1] and all(a != b for a, b in zip(*prox))  # colour, dash and fill: each differs
    assert "μ=1.0" not in got[0][0]  # FedAvg ignores mu: its config's mu is never shown (only what its parts read)


def test_runs_equal_in_every_option_are_told_apart_by_their_names(tmp_path):
    """Two recipe runs whose recorded options are the same (here: the same config but for the learning rate, which no
    part records) get the config value that differs; runs alike in everything get the recipe's run names."""
    a = run(tmp_path / "a", "fedavg", {}, "drop")
    b = run(tmp_path / "b", "fedavg", {}, "drop")
    cfg = json.loads((tmp_path / "b" / "manifest.json").read_text())
    cfg["config"]["lr"] = 0.5
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(cfg))
    b = RunData(tmp_path / "b")
    assert style.apart([a, b], ["FedAvg (τ=20)"] * 2, ["x", "y"]) == ["FedAvg (τ=20), lr=0.1", "FedAvg (τ=20), lr=0.5"]
    assert style.apart([a, a], ["FedAvg (τ=20)"] * 2, ["x", "y"]) == ["FedAvg (τ=20) [x]", "FedAvg (τ=20) [y]"]
    assert (
        style.apart([a, b], ["mine", "mine"], ["x", "y"], own=True)[1] == "mine, lr=0.5"
    )  # a recipe's labels kept, told apart


def test_two_panels_legends_never_cover_each_other_or_the_data(tmp_path, monkeypatch):
    """Four long legends in each of two panels side by side (curves against time): no legend box overlaps another
    legend or any panel's axes (read back from the saved figure's layout)."""
    runs = stragglers(tmp_path)
    names = list(runs)
    labels = [f"{n} with a long recipe label that names the whole setting" for n in names]
    fig, _ = build(
        FigureDef(
            "two",
            "curves",
            x="time",
            panels=[Panel(title="left", runs=names, labels=labels), Panel(title="right", runs=names, labels=labels)],
        ),
        runs,
    )
    monkeypatch.setattr(style.plt(), "close", lambda fig: None)  # read the layout back after save() laid it out
    style.save(fig, tmp_path / "out", "two")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legs = [ax.get_legend().get_window_extent(r) for ax in fig.axes]
    data = [ax.get_window_extent(r) for ax in fig.axes]
    assert not legs[0].overlaps(legs[1]), (legs[0], legs[1])
    assert not any(leg.overlaps(box) for leg in legs for box in data)
    assert all(leg.width <= 1.1 * box.width for leg, box in zip(legs, data))
