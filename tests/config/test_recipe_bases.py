"""Every recipe's [base] runs alone: ``fedcli train --recipe R --scale smoke`` (docs/sweeps.md: "--recipe FILE --scale
smoke
runs its [base] alone").

Every recipe in recipes/ (found at test time, so a new one is covered) must have a smoke scale whose [base] builds a
valid config, loads its data and partition and sets up the simulation (the model takes the data); data this
machine lacks (the paper-scale datasets: Cifar, Tiny-ImageNet, AG News, the full MNIST) may instead give the
documented data-missing error (exit 3), and only for those datasets when their folder is absent. A few recipes
then really train through the CLI for one round (exit 0); all of them do under the ``slow`` marker.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.data.setup import data_dir, inline_partition, load_data, load_key, pooled_test_set
from fedcli.errors import DataError
from fedcli.fl.engine import Simulation
from fedcli.recipes import build_config

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").glob("*/*.toml"))
# datasets whose files live outside the repository: a machine may lack them (exit 3 then, never for the others)
ON_DISK = {
    "mnist",
    "fmnist",
    "emnist",
    "femnist",
    "cifar10",
    "cifar100",
    "tinyimagenet",
    "agnews",
    "imagefolder",
    "tensors",
}
# really trained through the CLI in the fast suite: the example and one recipe of each other paper
CLI_RUNS = [
    "recipes/fedala/aaai-table2.toml",
    "recipes/fedlamb/fig5-skip-sync.toml",
    "recipes/fedlama/reproduce-femnist.toml",
]
# the fast suite's budget cut beyond --rounds 1: FedALA's round is a whole local epoch of the 7,500 MNIST images at
# batch
# 10 (about 750 steps of the 4-layer CNN, 13 s alone, 30 s beside another test process); a quarter of it runs the same
# code (test_every_base_trains_through_the_cli, slow, runs every base with its whole epoch)
FAST_BUDGET = {"recipes/fedala/aaai-table2.toml": ["--local-epochs", "0.25"]}


def lacks(cfg) -> bool:
    """This machine lacks the config's dataset: an on-disk dataset whose folder is not there."""
    folder = data_dir(cfg)
    return cfg.dataset in ON_DISK and (folder is None or not (ROOT / folder).exists())


def test_every_recipe_is_found_and_has_a_smoke_scale():
    assert len(RECIPES) >= 30
    for r in RECIPES:
        assert "smoke" in tomllib.loads((ROOT / r).read_text()).get("scale", {}), r


@pytest.fixture(scope="module")
def loaded() -> dict:
    """The datasets this module's set-ups loaded, by what loading depends on (``fedcli.data.setup.load_key``, as a
    sweep's pool worker keeps them): the recipes share a few datasets (the FEMNIST sample, the MNIST test
    split), each parsed once here; every recipe's partition and set-up are its own."""
    return {}


def load_once(cfg, loaded: dict):
    key = load_key(cfg)
    if key not in loaded:  # a DataError is raised again each time: nothing is kept
        loaded[key] = load_data(cfg)
    return loaded[key]


@pytest.mark.parametrize("recipe", RECIPES)
def test_base_alone_sets_up_at_smoke_scale(recipe, monkeypatch, loaded):
    monkeypatch.chdir(ROOT)
    cfg = build_config(recipe, {}, "smoke")  # a ConfigError (exit 2) fails the test
    try:
        dataset = load_once(cfg, loaded)
    except DataError:
        assert lacks(cfg), f"{recipe}: data error although {cfg.dataset} at {data_dir(cfg)} is on this machine"
        return
    part = inline_partition(cfg, dataset)
    if cfg.data_pool == "train+test":
        dataset = pooled_test_set(dataset, part)
    sim = Simulation(cfg).setup(dataset, part)
    assert sim.layers and len(sim.client_indices) == len(part.train)


def run_cli(recipe: str, tmp_path: Path, monkeypatch, capsys, extra=()) -> tuple[int, str]:
    """(exit code, stderr) of ``fedcli train --recipe R --scale smoke --rounds 1 EXTRA``, in this process from the
    checkout (the command's own code path; a process of its own would only add the start-up)."""
    monkeypatch.chdir(ROOT)
    try:
        code = main(
            [
                "train",
                "--recipe",
                recipe,
                "--scale",
                "smoke",
                "--rounds",
                "1",
                *extra,
                "--quiet",
                "--out",
                str(tmp_path / Path(recipe).stem),
            ]
        )
    except SystemExit as e:  # fedcli's one-line error and exit code
        code = e.code
    return code or 0, capsys.readouterr().err


def check_cli(recipe: str, result: tuple[int, str]) -> None:
    code, err = result
    if code == 3:
        cfg = build_config(str(ROOT / recipe), {}, "smoke")
        assert lacks(cfg), f"{recipe}: exit 3 although its data is here: {err[-400:]}"
        return
    assert code == 0, f"{recipe}: exit {code}: {err[-600:]}"


@pytest.mark.parametrize("recipe", CLI_RUNS)
def test_base_trains_through_the_cli(recipe, tmp_path, monkeypatch, capsys):
    check_cli(recipe, run_cli(recipe, tmp_path, monkeypatch, capsys, FAST_BUDGET.get(recipe, ())))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [r for r in RECIPES if r not in CLI_RUNS or r in FAST_BUDGET])
def test_every_base_trains_through_the_cli(recipe, tmp_path, monkeypatch, capsys):
    check_cli(recipe, run_cli(recipe, tmp_path, monkeypatch, capsys))


def test_a_base_without_algo_says_so(tmp_path):
    from fedcli.errors import ConfigError

    r = tmp_path / "r.toml"
    r.write_text('[base]\nlocal_epochs = 1.0\n\n[[runs]]\nname = "a"\nalgo = "fedavg"\n')
    with pytest.raises(ConfigError, match=r"\[base\] sets no algo.*fedcli sweep"):
        build_config(str(r), {}, None)
