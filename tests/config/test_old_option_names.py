"""A renamed option keeps its old name (issue 60, one word one meaning; ``fedcli.params.opt(was=...)``).

Fed-LAMB's bounded scaling function (its Assumption 4, phi(a) = min(a + ZETA, MAX)) is ``--scaling-bounds``, so that
"phi" on the command line is FedLAMA's interval factor only (``--phi``). ``--phi-bounds``, the recipe key
``phi_bounds`` and a stored config that says ``phi_bounds`` (a manifest, a sweep folder's runs) still mean it:
a hidden flag, a key read as the new one. Given under both names at once, it is refused (exit 2)."""

import pytest

from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.params import RENAMED, recorded
from fedcli.recipes import build_config, read_sweep
from fedcli.specs import PARTS
from runkit import error_lines, run_main


def test_the_old_name_is_the_field():
    assert RENAMED == {"phi_bounds": "scaling_bounds"}
    assert not hasattr(TrainConfig(), "phi_bounds")


def test_a_stored_config_with_the_old_key_reads_as_the_new_one():
    """A manifest's config (``from_dict``, --resume) and a sweep folder's run config (``TrainConfig(**config)``)."""
    old = TrainConfig.from_dict({"algo": "fedlamb", "phi_bounds": "0.5,2"})
    assert old.scaling_bounds == "0.5,2" and old.scaling_values() == (0.5, 2.0)
    assert TrainConfig(algo="fedlamb", phi_bounds="0.5,2") == old
    assert recorded(PARTS["local_step"]["lamb"], {"phi_bounds": "0.5,2"}).scaling_values() == (0.5, 2.0)
    with pytest.raises(ConfigError, match="scaling_bounds and phi_bounds .its old name. are both given"):
        TrainConfig(phi_bounds="0.5,2", scaling_bounds="0.5,3")


@pytest.mark.parametrize(
    "body",
    [
        'phi_bounds = "0.5,2"\n',
        '[fedlamb]\nphi_bounds = "0.5,2"\n',
        '[adaptive]\nphi-bounds = "0.5,2"\n',
        'scaling_bounds = "0.5,2"\n',
    ],
)
def test_a_recipe_key_by_either_name(tmp_path, body):
    recipe = tmp_path / "r.toml"
    recipe.write_text('algo = "fedlamb"\n' + body)
    assert build_config(str(recipe), {}).scaling_values() == (0.5, 2.0)


def test_a_sweep_recipe_key_by_the_old_name(tmp_path):
    recipe = tmp_path / "s.toml"
    recipe.write_text('seeds = 1\n[[runs]]\nname = "a"\nalgo = "fedlamb"\n[runs.adaptive]\nphi_bounds = "0.5,2"\n')
    assert read_sweep(recipe).runs[0].values["scaling_bounds"] == "0.5,2"


def test_a_recipe_with_both_names_is_refused(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('algo = "fedlamb"\nscaling_bounds = "0.5,2"\nphi_bounds = "0.5,3"\n')
    with pytest.raises(ConfigError, match="line 3: 'phi_bounds' is the old name of 'scaling_bounds'"):
        build_config(str(recipe), {})


@pytest.mark.parametrize("flag", ["--scaling-bounds", "--phi-bounds"])
def test_the_flag_by_either_name(tmp_path, capsys, flag):
    out = tmp_path / "run"
    code, _, err = run_main(["train", "--algo", "fedlamb", flag, "2,1", "--iterations", "2", "--out", str(out)], capsys)
    assert code == 2 and error_lines(err) == ["fedcli: error: --scaling-bounds needs 0 < ZETA < MAX, got '2,1'"]
    assert not out.exists()


def test_both_flags_are_refused(tmp_path, capsys):
    code, _, err = run_main(
        [
            "train",
            "--algo",
            "fedlamb",
            "--phi-bounds",
            "0.5,2",
            "--scaling-bounds",
            "0.5,2",
            "--out",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert code == 2 and error_lines(err) == [
        "fedcli: error: --scaling-bounds and --phi-bounds (its old name) are both given: give --scaling-bounds only"
    ]


def test_help_shows_the_new_flag_only(capsys):
    code, stdout = main(["train", "--help"]), capsys.readouterr().out
    rows = [line.strip("│ ") for line in stdout.splitlines()]
    flags = {row.split()[0] for row in rows if row.startswith("--")}  # the option column, not the help texts
    assert code == 0 and "--scaling-bounds" in flags and "--phi-bounds" not in flags
