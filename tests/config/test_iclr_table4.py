"""recipes/fedlama/iclr-table4.toml: the ICLR submission's Table 4 (non-IID CIFAR-10), beside the arXiv one."""

from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.recipes import read_sweep

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "fedlama" / "iclr-table4.toml"

# the ICLR table's groups: (active ratio, Dirichlet coefficient) -> learning rate
GROUPS = {(0.25, 0.1): 0.4, (0.25, 0.5): 0.8, (1.0, 0.1): 0.8, (1.0, 0.5): 0.8}


def test_the_iclr_groups_and_learning_rates():
    recipe = read_sweep(RECIPE, "paper")
    seen = {}
    for r in recipe.runs:
        v = r.values
        assert (v["dataset"], v["model"], v["clients"], v["batch_size"], v["iterations"]) == (
            "cifar10",
            "resnet20",
            128,
            32,
            6000,
        )
        assert v["partition"] == "dirichlet" and v["weighting"] == "uniform"  # the authors' code, as the arXiv recipe
        assert v["lr"] == GROUPS[(v["active_ratio"], v["alpha"])]
        seen.setdefault((v["active_ratio"], v["alpha"]), set()).add((v["algo"], v["tau"], v.get("phi")))
    assert set(seen) == set(GROUPS)
    for rows in seen.values():  # FedAvg (6), FedAvg (24), FedLAMA (6, 4) in every group
        assert {(a, t) for a, t, _ in rows} == {("fedavg", 6), ("fedavg", 24), ("fedlama", 6)}
        assert {p for a, _, p in rows if a == "fedlama"} == {4}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scale", ["paper", "smoke"])
def test_dry_run(scale, tmp_path):
    assert (
        main(["sweep", str(RECIPE), "--scale", scale, "--seeds", "3", "--dry-run", "--out", str(tmp_path / "s")]) == 0
    )
