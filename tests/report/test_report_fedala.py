"""FedALA's tables (``layout = "matrix"``, fedcli/reports/matrix.py) and the recipes/fedala recipes.

The run directories are written by hand (manifest.json, metrics.csv, layers.csv), so every number of the
expected tables is worked out in the comments. The recipes are only parsed and validated (no training).
"""

import csv
import math
from pathlib import Path

import pytest

from fedala_kit import loc, make_sweep, md_rows  # the hand-made sweep, its numbers worked out there
from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.recipes import read_sweep
from fedcli.reports.core import find_sweeps, make_table
from fedcli.reports.products import parse_products, parse_table
from fedcli.reports.rundata import RunData
from fedcli.specs import METHODS

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(
    (ROOT / "recipes" / "fedala").glob("aaai-*.toml")
)  # the paper's tables (reproduce-*: test_reproduce_recipe)
ACC = {
    "name": "acc",
    "layout": "matrix",
    "methods": ["FedAvg", "FedALA"],
    "settings": ["A", "B"],
    "setting_labels": ["Set A", "Set B"],
    "header": [["Group", 2]],
    "skip": ["FedAvg | B"],
    "paper": "FedALA AAAI 2023, Table 2",
}
COST = {
    "name": "cost",
    "layout": "matrix",
    "methods": ["FedAvg", "FedALA", "FedFomo", "FedRep"],
    "settings": ["A"],
    "values": ["acc", "time_total", "time_round", "time_init", "params_round", "ala_params"],
}
APPLY = {
    "name": "apply",
    "layout": "matrix",
    "methods": ["FedAvg"],
    "settings": ["A"],
    "cell": "{method} + ALA | {setting}",
    "compare": "{method} | {setting}",
    "values": ["acc", "imp", "ala_params"],
}


def test_best_personal_or_global_accuracy_mean_std_by_hand(tmp_path):
    root = make_sweep(tmp_path / "s", [ACC])
    md = make_table(find_sweeps(root), "acc", "md")
    rows = md_rows(md)
    assert rows[0] == ["Method", "Set A", "Set B"]
    assert rows[1] == ["FedAvg", "59.00 ± 1.41%", "—"]  # test_acc (no personal_acc): the global model
    assert rows[2] == ["FedALA", "89.00 ± 1.41%", "82.00 ± 2.83%"]  # best personal_acc, not test_acc (.30)
    assert "**Group** (columns 2–3)" in md and "personal_acc" in md and "—: not run" in md
    recs = {r["method"]: r for r in csv.DictReader(make_table(find_sweeps(root), "acc", "csv").splitlines())}
    assert float(recs["FedALA"]["A_mean"]) == pytest.approx(89.0) and float(recs["FedALA"]["A_std"]) == pytest.approx(
        100 * math.sqrt(2e-4)
    )
    assert recs["FedAvg"]["B_mean"] == ""
    tex = make_table(find_sweeps(root), "acc", "latex")
    assert "\\multicolumn{2}{c}{Group}" in tex and "$89.00 \\pm 1.41$\\%" in tex
    # the run data underneath
    ala = RunData(root / "fedala-a/seed0")
    assert (
        ala.personalized
        and ala.acc_metric("auto") == "personal_acc"
        and ala.accuracy("best", "auto") == pytest.approx(0.90)
    )
    assert ala.accuracy("final", "auto") == pytest.approx(0.80) and ala.accuracy() == pytest.approx(
        0.30
    )  # default: test_acc
    avg = RunData(root / "fedavg-a/seed0")
    assert (
        not avg.personalized and avg.accuracy("best", "auto") == pytest.approx(0.60) and avg.method_label() == "FedAvg"
    )
    # metric = "test_acc" forces the global model for every row; "final" the last evaluation
    root2 = make_sweep(tmp_path / "t", [{**ACC, "metric": "test_acc"}, {**ACC, "name": "final", "accuracy": "final"}])
    assert md_rows(make_table(find_sweeps(root2), "acc", "md"))[2][1:] == ["30.00 ± 0.00%", "30.00 ± 0.00%"]
    assert md_rows(make_table(find_sweeps(root2), "final", "md"))[2][1:] == ["84.00 ± 5.66%", "70.00 ± 0.00%"]


def test_cost_columns_by_hand(tmp_path):
    root = make_sweep(tmp_path / "s", [COST])
    rows = md_rows(make_table(find_sweeps(root), "cost", "md"))
    assert rows[0] == [
        "Method",
        "A: Acc.",
        "A: Total time (s)",
        "A: Time/iter. (s)",
        "A: ALA initial stage (s)",
        "A: Param./iter.",
        "A: ALA weights",
    ]
    fedavg, fedala, fomo, rep = rows[1:5]
    assert fedala == ["FedALA", "89.00 ± 1.41%", "38.00 ± 2.83", "11.00 ± 1.41", "13.00 ± 9.90", "2.00 Σ", "10"]
    assert fedavg[2:] == [
        "2.00 ± 0.00",
        "1.00 ± 0.00",
        "—",
        "2.00 Σ",
        "—",
    ]  # wall 1, 2, 3; best test_acc at round 2 (both seeds)
    assert fomo[5] == "5.00 Σ" and rep[5] == "1.80 Σ"
    run = RunData(root / "fedala-a/seed0")
    assert run.round_times() == [10.0, 30.0, 5.0] and run.ala_params == 10.0
    assert run.comm_bytes / 4 / (run.active_clients * run.rounds) / run.model_params == pytest.approx(2.0)


def test_improvement_of_ala(tmp_path):
    root = make_sweep(tmp_path / "s", [APPLY])
    md = make_table(find_sweeps(root), "apply", "md")
    rows = md_rows(md)
    assert rows[0] == ["Method", "A: Acc.", "A: Imps.", "A: ALA weights"]
    assert rows[1] == ["FedAvg", "94.00 ± 1.41%", "+35.00", "40"]  # 94.00 - 59.00; ala_layers 3: 30 + 9 + 1
    assert "Imps.: the accuracy minus" in md
    assert RunData(root / "fedavgpala-a/seed0").method_label() == "FedAvg + ALA"


def test_time_units_switch_to_minutes(tmp_path):
    slow = {
        ("FedALA | A", s): dict(algo="fedala", test=[0.3] * 3, personal=[0.5, 0.6, 0.7], wall=(60.0, 120.0, 180.0))
        for s in (0, 1)
    }
    root = make_sweep(
        tmp_path / "s", [{**COST, "methods": ["FedALA"], "values": ["time_total", "time_round"]}], runs=slow
    )
    rows = md_rows(make_table(find_sweeps(root), "cost", "md"))
    assert rows[0] == ["Method", "A: Total time (min)", "A: Time/iter. (min)"]
    assert rows[1] == ["FedALA", "3.00 ± 0.00", "1.00 ± 0.00"]


def test_report_cli_prints_the_matrix(tmp_path, capsys):
    root = make_sweep(tmp_path / "s", [ACC, COST])
    assert main(["report", str(root), "--table", "acc"]) == 0
    out = capsys.readouterr().out
    assert "FedALA AAAI 2023, Table 2" in out and "89.00 ± 1.41%" in out


def test_matrix_spec_errors():
    base = {"name": "x", "layout": "matrix", "methods": ["a"], "settings": ["s", "t"]}
    t = parse_table(base, loc)
    assert t.metric == "auto" and t.groups[0].values == ["acc"] and t.run_names() == ["a | s", "a | t"]
    for bad, match in [
        ({"values": ["speed"]}, "unknown value"),
        ({"values": ["acc", "imp"]}, "go together"),
        ({"compare": "{method}"}, "go together"),
        ({"header": [["x", 1]]}, "covering"),
        ({"cell": "{method}"}, "must contain"),
        ({"skip": ["nope"]}, "not one of its cells"),
        ({"runs": ["a"]}, "no `runs`"),
        ({"setting_labels": ["one"]}, "one label per setting"),
        ({"columns": ["acc"]}, "fixed columns"),
        ({"metric": "loss"}, "metric must be one of"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse_table({**base, **bad}, loc)
    with pytest.raises(ConfigError, match='is for layout = "matrix"'):
        parse_table({"name": "x", "runs": ["a"], "values": ["acc"]}, loc)
    # table-level keys are the defaults of every group; a group overrides them
    t = parse_table(
        {**base, "groups": [{"label": "g1"}, {"label": "g2", "settings": ["u"], "methods": ["b", "c"]}]}, loc
    )
    assert [g.run_names() for g in t.groups] == [["a | s", "a | t"], ["b | u", "c | u"]]
    # rows layout accepts a metric too
    assert parse_table({"name": "x", "runs": ["a"], "metric": "auto"}, loc).metric == "auto"


# ------------------------------------------------------------------------------------------------ recipes


def test_run_scales_key(tmp_path):
    text = """
[base]
dataset = "digits"
[scale.paper]
[scale.smoke]
rounds = 1
[[runs]]
name = "both"
algo = "fedavg"
[[runs]]
name = "paper only"
algo = "fedavg"
scales = ["paper"]
"""
    p = tmp_path / "r.toml"
    p.write_text(text)
    assert read_sweep(p, "paper").run_names == ["both", "paper only"]
    assert read_sweep(p, "smoke").run_names == ["both"]
    p.write_text(text.replace('scales = ["paper"]', 'scales = ["tiny"]'))
    with pytest.raises(ConfigError, match="line 13.*`scales` must be"):
        read_sweep(p, "paper")


PRODUCTS = {
    "aaai-table1": "Table 1",
    "aaai-table2": "Table 2",
    "aaai-table3": "Table 3",
    "aaai-table4": "Table 4",
    "aaai-table6": "Table 6",
    "aaai-table7": "Table 7",
}
LABELS = [
    "FedAvg",
    "FedProx",
    "FedAvg-C",
    "FedProx-C",
    "Per-FedAvg",
    "FedRep",
    "pFedMe",
    "Ditto",
    "FedAMP",
    "FedPHP",
    "FedFomo",
    "APPLE",
    "PartialFed",
    "FedALA",
]


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_fedala_recipe_valid_at_both_scales(path):
    text = path.read_text()
    assert "Fidelity" in text and "Smoke scale" in text
    for scale in ("paper", "smoke"):
        r = read_sweep(path, scale)
        assert r.paper.startswith("FedALA AAAI 2023") and r.fidelity and r.seeds == 5
        tables, _ = parse_products(r)
        assert [t.name for t in tables] == [path.stem] and PRODUCTS[path.stem] in tables[0].paper
        assert all(t.layout == "matrix" and t.metric == "auto" for t in tables)
        for run in r.runs:
            cfg = TrainConfig(**run.values)
            assert cfg.algo in METHODS, f"{path.name} {run.name}: unknown method {cfg.algo!r}"
            cfg.validate()
            assert (cfg.batch_size, cfg.local_epochs, cfg.drop_last, cfg.client_test_fraction, cfg.weighting) == (
                10,
                1.0,
                True,
                0.25,
                "samples",
            )
            if cfg.algo == "fedala" or cfg.init == "ala":
                assert cfg.ala_sample_percent in (5, 10, 20, 40, 60, 80, 100) and cfg.ala_lr == 1.0
            if scale == "paper":
                assert cfg.rounds == 2000 and cfg.eval_every == 1 and cfg.data_dir == ""  # data/<dataset>
                assert cfg.dataset in ("mnist", "cifar10", "cifar100", "tinyimagenet", "agnews")
                assert (cfg.model == "fasttext") == (cfg.dataset == "agnews")
                if cfg.dataset == "agnews":
                    assert (cfg.agnews_vocab_size, cfg.agnews_max_len) == (0, 200)
                assert cfg.lr == {"mnist": 0.1}.get(
                    cfg.dataset, 0.1 if cfg.model in ("resnet18", "fasttext") else 0.005
                )
            else:  # offline, minutes on 2 CPU cores
                assert cfg.rounds <= 4 and cfg.model == "cnn4"
                assert (cfg.dataset, cfg.data_dir) in (
                    ("mnist", str(ROOT.parent / "shared/datasets/mnist-t10k")),
                    ("femnist", str(ROOT.parent / "shared/datasets/femnist-leaf-sample")),
                )


def test_table2_grid():
    paper = read_sweep(ROOT / "recipes/fedala/aaai-table2.toml", "paper")
    assert len(paper.runs) == 14 * 8
    t = parse_products(paper)[0][0]
    assert t.groups[0].methods == LABELS and len(t.groups[0].settings) == 8
    by = {r.name: r.values for r in paper.runs}
    assert by["FedALA | MNIST-path"]["ala_layers"] == 2 and by["pFedMe | Cifar10-dir"]["pfedme_lambda"] == 15.0
    assert by["FedFomo | Cifar100-path"]["classes_per_client"] == 10 and by["APPLE | Cifar10-dir"]["alpha"] == 0.1
    assert (by["FedRep | Tiny-dir"]["dataset"], by["FedRep | Tiny-dir"]["model"]) == ("tinyimagenet", "cnn4")
    assert (by["Ditto | ResNet18-Tiny-dir"]["model"], by["Ditto | ResNet18-Tiny-dir"]["lr"]) == ("resnet18", 0.1)
    assert (by["FedALA | AGNews-dir"]["model"], by["FedALA | AGNews-dir"]["alpha"]) == ("fasttext", 0.1)
    smoke = read_sweep(ROOT / "recipes/fedala/aaai-table2.toml", "smoke")
    assert len(smoke.runs) == 14 * 2
    t = parse_products(smoke)[0][0]
    assert t.groups[0].settings == ["MNIST-path", "FEMNIST"] and set(t.run_names()) == set(smoke.run_names)
    v = {r.name: r.values for r in smoke.runs}
    assert (
        v["FedAvg | MNIST-path"]["clients"],
        v["FedAvg | MNIST-path"]["partition"],
        v["FedAvg | FEMNIST"]["partition"],
    ) == (20, "pathological", "natural")


def test_paper_datasets_of_the_other_tables():
    """Tables 1, 3, 4 and 6 at paper scale on the paper's datasets; their smoke runs unchanged (offline)."""

    def runs(stem, scale):
        return {r.name: r.values for r in read_sweep(ROOT / f"recipes/fedala/{stem}.toml", scale).runs}

    counts = {
        "aaai-table1": (12, 12),
        "aaai-table3": (14, 14),
        "aaai-table4": (14 * 5 + 9 * 4, 74),
        "aaai-table6": (7, 4),
        "aaai-table7": (26, 26),
    }
    for stem, (n_paper, n_smoke) in counts.items():
        assert (len(runs(stem, "paper")), len(runs(stem, "smoke"))) == (n_paper, n_smoke), stem
    for stem in ("aaai-table1", "aaai-table3"):  # TINY*
        assert {(v["dataset"], v["model"], v["lr"], v["alpha"]) for v in runs(stem, "paper").values()} == {
            ("tinyimagenet", "resnet18", 0.1, 0.1)
        }
    t1 = runs("aaai-table1", "paper")
    assert [t1[f"FedALA p={p}"]["ala_layers"] for p in (6, 5, 4, 3, 2)] == [62, 59, 47, 32, 17]
    t4 = runs("aaai-table4", "paper")
    assert (t4["FedAMP | Tiny-dir0.01"]["dataset"], t4["FedAMP | Tiny-dir0.01"]["alpha"]) == ("tinyimagenet", 0.01)
    assert (t4["FedPHP | Tiny-dir0.5"]["alpha"], t4["FedRep | AGNews-dir1"]["alpha"]) == (0.5, 1.0)
    assert t4["FedRep | AGNews-dir1"]["model"] == "fasttext"
    assert t4["Ditto + ALA | Tiny-dir"]["init"] == "ala" and t4["Ditto + ALA | Tiny-dir"]["dataset"] == "tinyimagenet"
    assert t4["Ditto + ALA | Cifar100"]["dataset"] == "cifar100"
    t6 = runs("aaai-table6", "paper")
    assert [(t6[f"FedALA p={p}"]["model"], t6[f"FedALA p={p}"]["ala_layers"]) for p in (4, 3, 2, 1)] == [
        ("cnn4", 2 * p) for p in (4, 3, 2, 1)
    ]
    assert [(t6[f"fastText p={p}"]["dataset"], t6[f"fastText p={p}"]["ala_layers"]) for p in (3, 2, 1)] == [
        ("agnews", 5),
        ("agnews", 4),
        ("agnews", 2),
    ]
    # smoke: the same offline runs as before Tiny-ImageNet/AG News had loaders
    assert {v["dataset"] for stem in counts for v in runs(stem, "smoke").values()} <= {"mnist", "femnist"}
    t4s = parse_products(read_sweep(ROOT / "recipes/fedala/aaai-table4.toml", "smoke"))[0][0]
    assert [g.settings for g in t4s.groups] == [
        ["Tiny-dir0.01", "Tiny-dir0.5"],
        ["Cifar100-50c", "Cifar100-100c"],
        ["Cifar100"],
    ]
    t6s = parse_products(read_sweep(ROOT / "recipes/fedala/aaai-table6.toml", "smoke"))[0][0]
    assert [g.methods for g in t6s.groups] == [[f"FedALA p={p}" for p in (4, 3, 2, 1)]]


def test_reproduce_recipe():
    """recipes/fedala/reproduce-mnist-path.toml (make reproduce-fedala): FedAvg, FedAvg-C and FedALA in FedALA's MNIST
    pathological setting, the CPU scale on the MNIST test split beside the repo."""
    path = ROOT / "recipes/fedala/reproduce-mnist-path.toml"
    for scale, rounds, data_dir in (
        ("cpu", 40, str(ROOT.parent / "shared/datasets/mnist-t10k")),
        ("paper", 2000, ""),
    ):  # resolved against the checkout
        r = read_sweep(path, scale)
        assert r.run_names == ["FedAvg", "FedAvg-C", "FedALA"] and r.paper.startswith("FedALA AAAI 2023, Table 2")
        tables, figures = parse_products(r)
        assert [t.name for t in tables] == ["reproduce-mnist-path", "reproduce-mnist-path-final"]
        assert all(t.metric == "auto" for t in tables) and [f.y for f in figures] == ["auto", "test_acc"]
        for run in r.runs:
            cfg = TrainConfig(**run.values).validate()
            assert (cfg.dataset, cfg.partition, cfg.classes_per_client, cfg.clients, cfg.active_ratio, cfg.model) == (
                "mnist",
                "pathological",
                2,
                20,
                1.0,
                "cnn4",
            )
            assert (
                cfg.batch_size,
                cfg.local_epochs,
                cfg.drop_last,
                cfg.lr,
                cfg.weighting,
                cfg.client_test_fraction,
            ) == (10, 1.0, True, 0.1, "samples", 0.25)
            assert (cfg.rounds, cfg.eval_every, cfg.data_dir) == (rounds, 1, data_dir)
        ala = TrainConfig(**r.runs[2].values)
        assert (ala.algo, ala.ala_layers, ala.ala_sample_percent, ala.ala_lr, ala.ala_threshold) == (
            "fedala",
            2,
            80.0,
            1.0,
            0.1,
        )


def test_reproduce_recipe_pfllib_pipeline():
    """recipes/fedala/reproduce-mnist-pfllib.toml (make reproduce-fedala since issue 26): FedAvg-C and FedALA, 5 seeds,
    PFLlib's data pipeline, FedALA evaluated after ALA and FedAvg-C after its fine-tuning, evaluation every 2 rounds
    at cpu scale (the best and last read at the same points for both)."""
    path = ROOT / "recipes/fedala/reproduce-mnist-pfllib.toml"
    for scale, rounds, every, data_dir in (
        ("cpu", 10, 2, str(ROOT.parent / "shared/datasets/mnist-t10k")),
        ("paper", 2000, 1, ""),
    ):
        r = read_sweep(path, scale)
        assert (
            r.run_names == ["FedAvg-C", "FedALA"] and r.seeds == 5 and r.paper.startswith("FedALA AAAI 2023, Table 2")
        )
        tables, figures = parse_products(r)
        assert [t.name for t in tables] == ["reproduce-mnist-pfllib", "reproduce-mnist-pfllib-final"]
        assert [f.y for f in figures] == ["auto", "test_acc"]
        cfgs = [TrainConfig(**run.values).validate() for run in r.runs]
        for cfg in cfgs:
            assert (cfg.dataset, cfg.partition, cfg.classes_per_client, cfg.clients, cfg.active_ratio, cfg.model) == (
                "mnist",
                "pathological",
                2,
                20,
                1.0,
                "cnn4",
            )
            assert (cfg.data_pool, cfg.pathological_rule, cfg.client_test_split, cfg.client_test_fraction) == (
                "train+test",
                "classes",
                "pfllib",
                0.25,
            )
            assert (cfg.batch_size, cfg.local_epochs, cfg.drop_last, cfg.lr, cfg.weighting) == (
                10,
                1.0,
                True,
                0.1,
                "samples",
            )
            assert (cfg.rounds, cfg.eval_every, cfg.data_dir) == (rounds, every, data_dir)
        assert [(c.algo, c.personal_eval) for c in cfgs] == [("fedavg-c", "after-training"), ("fedala", "after-init")]
        ala = cfgs[1]
        assert (ala.ala_layers, ala.ala_sample_percent, ala.ala_lr, ala.ala_threshold) == (2, 80.0, 1.0, 0.1)
