"""The FedLAMA recipes: every table and figure of the three paper versions, valid at both scales.

These tests only parse and validate (no training): every run's config at ``smoke`` and ``paper``
scale, every report product against the run names, and the promises of the smoke scale.
"""

from pathlib import Path

import pytest

from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl.schedules import SCHEDULES
from fedcli.recipes import read_sweep, train_values
from fedcli.reports.products import parse_products
from fedcli.specs import METHODS

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes" / "fedlama").glob("*.toml"))
SHARED_FEMNIST = str(ROOT.parent / "shared/datasets/femnist-leaf-sample")  # the recipes' root is the checkout

# every table and figure of the papers, and the recipe product that reproduces it
PRODUCTS = {
    "aaai-table1": "FedLAMA AAAI 2023, Table 1",
    "aaai-table2": "FedLAMA AAAI 2023, Table 2",
    "aaai-table3": "FedLAMA AAAI 2023, Table 3",
    "aaai-table4": "FedLAMA AAAI 2023, Table 4",
    "aaai-fig2a": "Figure 2 a)",
    "aaai-fig2b": "Figure 2 b)",
    "aaai-fig3-left": "Figure 3 (left)",
    "aaai-fig3-right": "Figure 3 (right)",
    "aaai-fig4-cifar10": "Figure 4",
    "aaai-fig4-cifar100": "Figure 4",
    "aaai-fig4-femnist": "Figure 4",
    "aaai-fig5-cifar10": "Figure 5",
    "aaai-fig5-cifar100": "Figure 5",
    "aaai-fig5-femnist": "Figure 5",
    **{f"arxiv-table{i}": f"Table {i}" for i in range(1, 13)},
    "arxiv-fig1a": "Figure 1 a)",
    "arxiv-fig1b": "Figure 1 b)",
    "arxiv-fig2": "Figure 2",
    "arxiv-fig3": "Figure 3",
    "arxiv-fig4a": "Figure 4 a)",
    "arxiv-fig4b": "Figure 4 b)",
    "arxiv-fig5a": "Figure 5 a)",
    "arxiv-fig5b": "Figure 5 b)",
    "arxiv-fig6": "Figure 6",
}


def all_products():
    out = {}
    for path in RECIPES:
        tables, figures = parse_products(read_sweep(path, "smoke"))
        for p in tables + figures:
            out[p.name] = (path.name, p)
    return out


def test_every_paper_table_and_figure_has_a_recipe():
    products = all_products()
    missing = sorted(set(PRODUCTS) - set(products))
    assert not missing, f"no recipe produces {missing}"
    for name, needle in PRODUCTS.items():
        assert needle in products[name][1].paper, (name, products[name][1].paper)
    assert len(RECIPES) >= 19


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_valid_at_both_scales(path):
    text = path.read_text()
    assert "Fidelity" in text and "Smoke scale" in text, (
        "say which fidelity setting reproduces the table, and what smoke is"
    )
    for scale in ("paper", "smoke"):
        r = read_sweep(path, scale)
        assert r.paper.startswith("FedLAMA") and r.fidelity and r.seeds == 3
        tables, figures = parse_products(r)
        assert tables or figures
        for run in r.runs:
            cfg = TrainConfig(**run.values)
            assert cfg.algo in METHODS, f"{path.name} {run.name}: unknown method {cfg.algo!r}"
            assert not cfg.schedule or cfg.schedule in SCHEDULES, (
                f"{path.name} {run.name}: unknown schedule {cfg.schedule!r}"
            )
            cfg.validate()
            assert cfg.batch_size == 32
            if r.fidelity.startswith("author code"):
                assert_author_code(cfg, r.fidelity)
            if scale == "paper":
                assert cfg.dataset in ("cifar10", "cifar100", "femnist") and cfg.clients == 128
                assert cfg.model in ("resnet20", "wrn", "femnist_cnn")
            else:
                # minutes on 2 CPU cores: small models, few steps, offline data
                assert cfg.iterations <= 200 and cfg.model == "mlp" and cfg.clients <= 32
                assert cfg.dataset == "digits" or (cfg.dataset == "femnist" and cfg.data_dir == SHARED_FEMNIST)
    # fedcli train --recipe uses [base] (+ --scale)
    assert train_values(path, "smoke")["iterations"] <= 200


def assert_author_code(cfg, fidelity):
    """A run of a recipe that says it follows the FedLAMA author code uses exactly the code's optimizer and schedule."""
    from fedcli.specs import METHODS

    assert (cfg.weighting, cfg.momentum, cfg.momentum_persist) == ("uniform", 0.9, "slot")
    assert (cfg.weight_decay, cfg.weight_decay_on) == (2e-4, "kernels+final-bias")  # Keras l2(1e-4)
    assert (cfg.lama_rule, cfg.lama_eligible, cfg.lama_first_adjust) == ("reference", "kernels", 6)
    lama = (cfg.schedule or METHODS[cfg.algo].schedule) == "lama"
    assert cfg.bn_buffers == ("never" if lama else "with-layer"), (cfg.algo, cfg.schedule, cfg.bn_buffers)
    assert (cfg.warmup_iterations > 0) == ("warm-up" in fidelity and "no warm-up" not in fidelity)


def test_paper_settings_of_aaai_table3():
    r = read_sweep(ROOT / "recipes/fedlama/aaai-table3.toml", "paper")
    by = {x.name: x.values for x in r.runs}
    assert [
        (by[n]["algo"], by[n]["tau"], by[n]["lr"]) for n in ("FedAvg x1", "FedAvg x2", "FedAvg x4", "FedAvg x8")
    ] == [("fedavg", 20, 0.02), ("fedavg", 40, 0.02), ("fedavg", 80, 0.02), ("fedavg", 160, 0.02)]
    assert [(by[n]["tau"], by[n]["phi"], by[n]["lr"]) for n in ("FedLAMA phi=2", "FedLAMA phi=4", "FedLAMA phi=8")] == [
        (20, 2, 0.06),
        (20, 4, 0.04),
        (20, 8, 0.04),
    ]
    v = by["FedLAMA phi=2"]
    assert (v["iterations"], v["clients"], v["active_ratio"], v["writers_per_client"], v["momentum"]) == (
        4000,
        128,
        0.25,
        2,
        0.9,
    )
    s = {x.name: x.values for x in read_sweep(ROOT / "recipes/fedlama/aaai-table3.toml", "smoke").runs}
    # the smoke grid keeps the ratios: FedAvg tau = tau' x 1, 2, 4, 8
    assert [s[n]["tau"] for n in ("FedAvg x1", "FedAvg x2", "FedAvg x4", "FedAvg x8")] == [2, 4, 8, 16]
    assert {s[n]["tau"] for n in ("FedLAMA phi=2", "FedLAMA phi=4", "FedLAMA phi=8")} == {2}


def test_recipe_key_error_points_at_the_run(tmp_path):
    src = (ROOT / "recipes/fedlama/aaai-table3.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace("phi = 4\nlr = 0.04", 'phi = 4\nlr = "fast"'))
    with pytest.raises(ConfigError) as e:
        read_sweep(bad, "smoke")
    line = src.splitlines().index('name = "FedLAMA phi=4"') + 5  # name, algo, bn_buffers, phi, lr
    assert f"{bad}, line {line}" in str(e.value) and "lr" in str(e.value)


def test_reproduce_femnist_cpu_scale():
    """`make reproduce-fedlama`: the real CNN on the LEAF sample, natural split, three runs at one lr, paired
    cohorts."""
    r = read_sweep(ROOT / "recipes/fedlama/reproduce-femnist.toml", "cpu")
    by = {x.name: TrainConfig(**x.values) for x in r.runs}
    assert [(c.algo, c.tau, c.phi if c.algo == "fedlama" else 1) for c in by.values()] == [
        ("fedavg", 5, 1),
        ("fedavg", 10, 1),
        ("fedlama", 5, 2),
    ]
    for c in by.values():
        c.validate()
        assert (c.dataset, c.data_dir, c.model, c.partition, c.writers_per_client) == (
            "femnist",
            SHARED_FEMNIST,
            "femnist_cnn",
            "natural",
            2,
        )
        assert (c.clients, c.active_ratio, c.iterations, c.lr, c.checkpoint_every) == (50, 0.25, 400, 0.02, 0)
        assert_author_code(c, r.fidelity)
    assert "make reproduce-fedlama" in (ROOT / "recipes/fedlama/reproduce-femnist.toml").read_text()
    assert "reproduce-fedlama:" in (ROOT / "Makefile").read_text()


def test_relative_paths_resolve_against_the_recipe_not_the_current_folder(tmp_path, monkeypatch):
    """A recipe's data_dir, partition_file and model file are found from any folder (issue 30): relative to the
    recipe's folder, or to its `root` key (this repository's recipes: the checkout)."""
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "recipes" / "one.toml").write_text(
        'dataset = "tensors"\ndata_dir = "d.npz"\nmodel = "nets/m.py:Net"\npartition_file = "/abs/part.json"\n'
    )
    (proj / "recipes" / "grid.toml").write_text(
        'root = ".."\n[base]\ndata_dir = "data/x"\n[[runs]]\nname = "a"\n[[runs]]\nname = "b"\ndata_dir = "other"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    v = train_values("../proj/recipes/one.toml")
    assert v["data_dir"] == str(proj / "recipes" / "d.npz")
    assert v["model"] == f"{proj / 'recipes' / 'nets' / 'm.py'}:Net" and v["partition_file"] == "/abs/part.json"
    r = read_sweep(proj / "recipes" / "grid.toml")
    assert r.root == proj and [run.values["data_dir"] for run in r.runs] == [str(proj / "data/x"), str(proj / "other")]
    # this repository's recipes: ../shared/datasets beside the checkout, whatever the current folder
    r = read_sweep(ROOT / "recipes" / "fedlama" / "aaai-table3.toml", "smoke")
    assert r.root == ROOT and {run.values["data_dir"] for run in r.runs} == {SHARED_FEMNIST}
    (proj / "recipes" / "bad.toml").write_text('root = 3\n[base]\n[[runs]]\nname = "a"\n')
    with pytest.raises(ConfigError, match="bad.toml, line 1: key 'root' must be a folder"):
        read_sweep(proj / "recipes" / "bad.toml")
