"""A fine-tuning baseline (FedAvg-C, FedProx-C: the global model fine-tuned locally) is evaluated after its local
training in every recipe: under ``personal_eval = "after-init"`` its personal model would be the received global
model, i.e. FedAvg's, and the table's "-C" row would silently repeat FedAvg (the aaai-table recipes set after-init
in [base] for FedALA, the reference code's evaluation point)."""

import tomllib
from pathlib import Path

import pytest

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").rglob("*.toml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fine_tuning_baselines_are_evaluated_after_training(path):
    recipe = tomllib.loads(path.read_text())
    base = recipe.get("base", {})
    for run in recipe.get("runs", []):
        if str(run.get("algo", base.get("algo", ""))).endswith("-c"):
            point = run.get("personal_eval", base.get("personal_eval", "after-training"))
            assert point == "after-training", f"{path.name}: run {run.get('name')!r} evaluates {point}"
