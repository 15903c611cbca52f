"""The Fed-LAMB recipes follow Section 5's protocol: the lambda grid {0, 0.01, 0.1} for Fed-LAMB and Mime-LAMB, one
initial model across seeds, ResNet-18 with the CIFAR stem for Table 1, and a Tiny-ImageNet row."""

from pathlib import Path

import pytest

from fedcli.recipes import read_sweep
from fedcli.reports.products import parse_products

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "fedlamb"
GRID = ["fig2-iid", "fig3-noniid", "fig4-table1-cifar10", "fig4-table1-tinyimagenet"]


@pytest.mark.parametrize("stem", GRID)
@pytest.mark.parametrize("scale", ["paper", "smoke"])
def test_lambda_grid_and_one_initial_model(stem, scale):
    recipe = read_sweep(RECIPES / f"{stem}.toml", scale)
    runs = {r.name: r.values for r in recipe.runs}
    lamb = [n for n, v in runs.items() if v["algo"] in ("fedlamb", "mimelamb") and " lambda " not in n]
    assert lamb
    for name in lamb:
        grid = {runs[name]["weight_decay"]}
        for g in (0.01, 0.1):
            twin = runs[f"{name} lambda {g}"]
            assert {k: v for k, v in twin.items() if k != "weight_decay"} == {
                k: v for k, v in runs[name].items() if k != "weight_decay"
            }
            grid.add(twin["weight_decay"])
        assert grid == {0.0, 0.01, 0.1}  # the paper's grid, the rest of the run unchanged
    assert all(v["init_seed"] == 0 for v in runs.values())  # every seed starts from one model
    tables, figures = parse_products(recipe)  # the products still parse with the added rows
    assert tables and figures
    text = (RECIPES / f"{stem}.toml").read_text()
    for name in lamb:  # every lambda row is in the recipe's tables
        for g in (0.01, 0.1):
            assert text.count(f'"{name} lambda {g}"') >= 2  # the run and at least one table


def test_table1_rows_read_resnet18_with_the_cifar_stem():
    for stem, dataset in (("fig4-table1-cifar10", "cifar10"), ("fig4-table1-tinyimagenet", "tinyimagenet")):
        recipe = read_sweep(RECIPES / f"{stem}.toml", "paper")
        assert {(r.values["dataset"], r.values["model"]) for r in recipe.runs} == {(dataset, "resnet18-cifar")}
        assert "not a dataset fedcli reads" not in (RECIPES / f"{stem}.toml").read_text()
        assert {r.values["rounds"] for r in recipe.runs} == {100}
        assert {r.values["lr_decay_at"] for r in recipe.runs} == {"30,70"}
