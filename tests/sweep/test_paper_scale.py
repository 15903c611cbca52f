"""Recipe entries at ``--scale paper`` on data in each loader's real on-disk format, budget cut to one round
(tests/paperkit.py): one entry per dataset and model family here, with the quick cut (two clients, one local step;
the two slowest, WRN-28-10 and ResNet18 at batch 128, marked slow); all of them with ``make paper-check``."""

import pytest

import paperkit
from fedcli.recipes import read_sweep

#: (recipe, run name): one per (dataset, model family) of the recipes, a method that is not one of the slow ones
#: where the pair has one (test_every_dataset_and_model_family_is_covered keeps it complete)
SAMPLE = [
    ("recipes/fedala/aaai-table1.toml", "FedALA s=5"),  # tinyimagenet, resnet18
    ("recipes/fedala/aaai-table2.toml", "FedAvg | MNIST-path"),  # mnist, cnn4
    ("recipes/fedala/aaai-table2.toml", "FedAvg | Cifar10-path"),  # cifar10, cnn4
    ("recipes/fedala/aaai-table2.toml", "FedAvg | Cifar100-path"),  # cifar100, cnn4
    ("recipes/fedala/aaai-table2.toml", "FedAvg | Tiny-dir"),  # tinyimagenet, cnn4
    ("recipes/fedala/aaai-table2.toml", "FedAvg | AGNews-dir"),  # agnews, fasttext
    ("recipes/fedlama/aaai-fig3-cifar10.toml", "FedLAMA"),  # cifar10, resnet20
    ("recipes/fedlama/aaai-fig3-femnist.toml", "FedLAMA"),  # femnist, femnist_cnn
    ("recipes/fedlama/aaai-table2.toml", "FedAvg x1"),  # cifar100, wrn
    ("recipes/fedlamb/claim-grid-edges.toml", "MLP Fed-AMS lr 0.0001"),  # mnist, mlp
    ("recipes/fedlamb/claim-grid-edges.toml", "CNN Fed-AMS lr 0.0001"),  # mnist, lamb_cnn
    ("recipes/fedlamb/fig2-iid.toml", "FMNIST-CNN E1 Fed-SGD"),  # fmnist, lamb_cnn
    ("recipes/fedlamb/fig4-table1-cifar10.toml", "Fed-SGD"),  # cifar10, resnet18
    (
        "recipes/system/fedprox-stragglers.toml",
        "FedProx mu1 partial 90%",
    ),  # synthetic, mlp; the system model's deadline
]
#: marked slow (make test-slow; make paper-check runs them too): WRN-28-10, 1.5 to 3 minutes on 2 cores, and ResNet18
#: at batch 128, 40 s to 2.5 minutes (the ResNet18 family stays in make test with Tiny-ImageNet's FedALA entry)
SLOW = {("recipes/fedlama/aaai-table2.toml", "FedAvg x1"), ("recipes/fedlamb/fig4-table1-cifar10.toml", "Fed-SGD")}


def sample():
    return [
        pytest.param(r, n, id=f"{r.split('/')[-1][:-5]}:{n}", marks=[pytest.mark.slow] if (r, n) in SLOW else [])
        for r, n in SAMPLE
    ]


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    return paperkit.write_data(tmp_path_factory.mktemp("paperdata"))


def entry(recipe: str, name: str) -> paperkit.Entry:
    run = next(r for r in read_sweep(paperkit.ROOT / recipe, "paper").runs if r.name == name)
    return paperkit.Entry(recipe, run)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe,name", sample())
def test_paper_scale_entry_trains_on_real_formats(data_dirs, tmp_path, recipe, name):
    e = paperkit.run_entry(entry(recipe, name), data_dirs, tmp_path, quick=True)
    assert e.outcome == "ok", (e.outcome, [p.read_text()[-2000:] for p in tmp_path.glob("*.log")])
    assert e.detail["cohort"] <= 2 or e.detail["algo"] in ("apple", "fedamp")


def test_every_dataset_and_model_family_is_covered():
    every = paperkit.entries()
    pairs = {(e.values.get("dataset"), paperkit.family(str(e.values.get("model")))) for e in every}
    sampled = {
        (e.values.get("dataset"), paperkit.family(str(e.values.get("model")))) for e in (entry(*s) for s in SAMPLE)
    }
    assert pairs == sampled, sorted(pairs ^ sampled, key=str)
    assert len(every) >= 600  # every recipe read at --scale paper (637 when this test was written)


def test_the_cut_keeps_the_recipe_and_cuts_the_budget(data_dirs, tmp_path):
    e = entry("recipes/fedlama/aaai-fig3-cifar10.toml", "FedLAMA")
    cfg = paperkit.cut(e, data_dirs, tmp_path / "run")
    assert (cfg.rounds, cfg.eval_every, cfg.dataset, cfg.model, cfg.clients) == (1, 1, "cifar10", "resnet20", 128)
    assert round(cfg.active_ratio * cfg.clients) == paperkit.COHORT and cfg.data_dir == str(data_dirs["cifar10"])
    assert (cfg.tau, cfg.phi, cfg.lr, cfg.momentum_persist) == (e.values["tau"], 2, e.values["lr"], "slot")


def test_the_dataset_memo_keys_on_the_data_pool(monkeypatch):
    """A sweep worker (and the paper check) keeps the last loaded dataset: a run with --data-pool train after one with
    train+test on the same data must not get the merged pool, whose test set is empty (it divided by zero)."""
    import fedcli.data.setup as setup
    from fedcli.config import TrainConfig
    from fedcli.sweep.executors import memoize_datasets

    monkeypatch.setattr(setup, "load_data", setup.load_data)  # restored after the test
    memoize_datasets()
    pooled = setup.load_data(
        TrainConfig(dataset="digits", data_pool="train+test", client_test_fraction=0.25).validate()
    )
    plain = setup.load_data(TrainConfig(dataset="digits").validate())
    assert len(pooled.test_y) == 0 and len(plain.test_y) > 0
    assert len(plain.train_y) + len(plain.test_y) == len(pooled.train_y)


@pytest.mark.timeout(300)
def test_a_divergence_passes_only_when_listed_with_evidence_and_its_run_folder_is_whole(
    data_dirs, tmp_path, monkeypatch
):
    """Fed-AMS at lr 0.003 on MNIST's MLP stops in round 1 (as on the real MNIST split: paperkit.DIVERGES): listed, it
    passes as diverged with its run folder checked; unlisted, the same exit 4 fails the check."""
    recipe, name = "recipes/fedlamb/claim-rounds-to-target.toml", "MLP Fed-AMS lr 0.003"
    assert f"{recipe} | {name}" in paperkit.DIVERGES
    e = paperkit.run_entry(entry(recipe, name), data_dirs, tmp_path / "listed")
    assert e.outcome.startswith("diverged (as on real data") and paperkit.passed(e.outcome), e.outcome
    assert e.detail["exit"] == 4
    assert (
        paperkit.check_run(
            tmp_path / "listed" / next(p.name for p in (tmp_path / "listed").iterdir() if p.is_dir()), diverged=True
        )
        == ""
    )
    monkeypatch.setattr(paperkit, "DIVERGES", {})
    e = paperkit.run_entry(entry(recipe, name), data_dirs, tmp_path / "unlisted")
    assert e.outcome.startswith("FAIL exit 4: training diverged") and not paperkit.passed(e.outcome), e.outcome
