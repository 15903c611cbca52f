"""Per-method defaults: a method's paper settings fill what neither a flag nor a recipe key gives."""

import json

import pytest

from fedcli.cli.main import build_app
from fedcli.config import TrainConfig, with_method_defaults
from fedcli.recipes import build_config
from fedcli.specs import METHODS
from runkit import error_lines


def test_personalized_method_holds_out_local_test_splits_by_default():
    cfg = build_config(None, {"algo": "fedala"})
    assert cfg.client_test_fraction == 0.25
    assert build_config(None, {"algo": "fedavg"}).client_test_fraction == TrainConfig().client_test_fraction == 0.0


def test_cross_silo_methods_default_to_full_participation():
    for algo in ("apple", "fedamp"):
        assert build_config(None, {"algo": algo}).active_ratio == 1.0
    assert build_config(None, {"algo": "fedavg"}).active_ratio == TrainConfig().active_ratio == 0.5


# FedALA's setup (Experimental Setup; Algorithm 1 line 19; the reference loader), written out here by hand
FEDALA_SETUP = {
    "client_test_fraction": 0.25,
    "active_ratio": 1.0,
    "batch_size": 10,
    "local_epochs": 1.0,
    "drop_last": True,
    "weighting": "samples",
    "lr": 0.1,
}
PERSONALIZED = (
    "fedala",
    "fedavg-c",
    "fedprox-c",
    "perfedavg",
    "fedrep",
    "pfedme",
    "ditto",
    "fedamp",
    "fedphp",
    "fedfomo",
    "apple",
    "partialfed",
)


def test_personalized_presets_run_in_fedalas_setup():
    assert sorted(n for n, m in METHODS.items() if m.personalized) == sorted(PERSONALIZED)
    for algo in PERSONALIZED:
        cfg = build_config(None, {"algo": algo})
        assert {k: getattr(cfg, k) for k in FEDALA_SETUP} == FEDALA_SETUP, algo
    for algo in ("fedprox", "fedprox-c"):  # FedALA's appendix (and FedLAMA AAAI Table 4 for FedProx)
        assert build_config(None, {"algo": algo}).mu == 0.001
    assert build_config(None, {"algo": "apple"}).iterations == 1200  # its slow take-off (fedcli/fl/algorithms/apple.py)
    plain = build_config(None, {"algo": "fedavg"})
    assert (plain.batch_size, plain.local_epochs, plain.drop_last, plain.lr) == (32, 0.0, False, 0.1)
    # an explicit flag still wins, also one that switches a default off
    assert build_config(None, {"algo": "fedala", "drop_last": False, "local_epochs": 0.0}).drop_last is False


def test_explicit_flag_and_recipe_key_win(tmp_path):
    assert build_config(None, {"algo": "fedala", "client_test_fraction": 0.1}).client_test_fraction == 0.1
    recipe = tmp_path / "r.toml"
    recipe.write_text('algo = "fedala"\nclient_test_fraction = 0.4\n')
    assert build_config(str(recipe), {}).client_test_fraction == 0.4
    assert build_config(str(recipe), {"client_test_fraction": 0.2}).client_test_fraction == 0.2


def test_explicit_tau_wins_over_a_default_of_local_epochs(tmp_path):
    """--tau says how long a round is; a preset's default of one local epoch per round would silently replace it."""
    cfg = build_config(None, {"algo": "fedavg-c", "tau": 2})
    assert (cfg.tau, cfg.local_epochs, cfg.batch_size) == (2, 0.0, 10)  # the rest of the preset's setup stays
    assert build_config(None, {"algo": "fedavg-c", "tau": 2, "local_epochs": 2.0}).local_epochs == 2.0
    recipe = tmp_path / "r.toml"
    recipe.write_text('algo = "fedala"\ntau = 3\n')
    assert build_config(str(recipe), {}).local_epochs == 0.0


def test_unknown_method_left_for_validation():
    assert with_method_defaults({"algo": "nope", "lr": 0.3}) == {"algo": "nope", "lr": 0.3}


def test_every_default_is_a_valid_config_value():
    for name, m in METHODS.items():
        for key in m.effective_defaults():
            assert key in TrainConfig.__dataclass_fields__, (name, key)
        cfg = build_config(None, {"algo": name})
        for key, value in m.effective_defaults().items():
            assert getattr(cfg, key) == value, (name, key)


def test_manifest_records_method_defaults(tmp_path):
    from typer.testing import CliRunner

    out = tmp_path / "run"
    r = CliRunner().invoke(
        build_app(),
        [
            "train",
            "--algo",
            "fedavg-c",
            "--iterations",
            "10",
            "--clients",
            "4",
            "--out",
            str(out),
            "--quiet",
            "--threads",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["method"]["defaults"] == FEDALA_SETUP
    assert man["method"]["personalized"] is True
    assert man["config"]["client_test_fraction"] == 0.25


def test_list_algos_is_one_row_per_method_with_aliases_folded(capsys):
    from typer.testing import CliRunner

    r = CliRunner().invoke(build_app(), ["train", "--list-algos"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    for name, m in METHODS.items():
        if name == m.name:
            assert sum(1 for ln in lines if ln.startswith(f"│ {name} ")) == 1, name
    assert any("= fedsgd" in ln for ln in lines) and not any(ln.startswith("│ fedsgd ") for ln in lines)
    assert sum(
        "personalized" in ln.split("│")[1] for ln in lines if ln.startswith("│") and len(ln.split("│")) > 2
    ) == sum(1 for n, m in METHODS.items() if n == m.name and m.personalized)
    # each default is shown as the flag that sets it (a boolean as --name / --no-name)
    assert any("--drop-last " in ln and "--drop-last True" not in ln for ln in lines)
    assert any("--client-test-fraction 0.25" in ln for ln in lines)


def test_a_default_that_cannot_combine_exits_2_naming_the_way_out(capsys):
    from fedcli.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--algo", "fedala", "--schedule", "lama", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(error_lines(err)) == 1 and "--local-epochs 0" in err
