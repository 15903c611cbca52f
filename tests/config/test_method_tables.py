"""Each method's options in their own namespace: a part is built with exactly the options it declares
(its spec's ``Params`` / ``uses``: ``fedcli.specs.PartSpec``, ``fedcli.params.bind``), a recipe may set them in a table
named after the method
or its params section (``[fedlama] phi = 4``), the flat keys and flags stay as aliases, and the manifest records them
by section."""

import dataclasses
import pickle
import textwrap

import pytest

from fedcli.config import GeneralConfig, TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl import parts
from fedcli.fl.algorithms.fedprox import ProxStep
from fedcli.fl.parts import run_parts
from fedcli.fl.schedules import SCHEDULES
from fedcli.params import SECTIONS, bind, declared
from fedcli.recipes import build_config, read_sweep, run_config, table_keys, train_values
from fedcli.specs import METHODS, PARTS, part, run_sections
from fedcli.specs.fedprox import ProxParams
from fedcli.specs.parts import SGD


def test_a_part_receives_only_the_options_it_declares():
    cfg = TrainConfig(algo="fedprox", mu=0.25, lr=0.05, momentum=0.5, tau=7)
    step = ProxStep(cfg)
    # SGDStep's general options, then FedProx's own section: nothing else of the 100-odd config fields
    assert declared(ProxStep) == ("algo", "momentum", "weight_decay", "weight_decay_on", "momentum_persist", "mu")
    assert {f.name for f in dataclasses.fields(step.opts)} == set(declared(ProxStep))
    assert (step.opts.mu, step.opts.momentum, step.mu) == (0.25, 0.5, 0.25)
    with pytest.raises(AttributeError):
        step.opts.tau
    with pytest.raises(AttributeError):
        step.opts.lr
    # built from its own params (no config at all), or from anything holding them: the same
    again = ProxStep(step.opts)
    assert again.opts == step.opts
    assert bind(ProxStep, step.opts) is step.opts
    assert pickle.loads(pickle.dumps(step.opts)) == step.opts  # a process pool or a deep copy takes them whole


def test_a_part_that_reads_an_option_it_does_not_declare_fails_at_once():
    class Sloppy(parts.SGDStep):  # reads FedProx's mu without declaring it
        def __init__(self, opts):
            super().__init__(opts)
            self.mu = self.opts.mu

    with pytest.raises(AttributeError, match="mu"):
        Sloppy(TrainConfig(algo="fedprox"))

    here = f"{__name__}:test_a_part_that_reads_an_option_it_does_not_declare_fails_at_once.<locals>"
    part("local_step", "", f"{here}.Declared", base=SGD, Params=ProxParams)  # an anonymous spec extending SGD's

    class Declared(Sloppy):
        pass

    assert Declared(TrainConfig(algo="fedprox", mu=0.5)).mu == 0.5


def test_every_registered_part_builds_from_the_default_config_with_its_declared_options():
    cfg = TrainConfig()
    tables = {"local_step": parts.LOCAL_STEPS, "codec": parts.CODECS, "init": parts.INITS, "server": parts.SERVERS}
    for family, table in tables.items():
        for name, cls in table.items():
            p = bind(cls, cfg)
            assert {f.name for f in dataclasses.fields(p)} == set(declared(cls)), (family, name)
    for name, cls in SCHEDULES.items():
        assert cls.spec.iterations(cfg) >= 1, name


def test_sections_of_a_run_follow_its_parts():
    assert run_sections("fedlama") == ["fedlama"]
    assert run_sections("fedprox", schedule="lama") == ["fedprox", "fedlama"]  # FedProx + FedLAMA
    assert run_sections("fedavg") == []
    assert run_sections("fedavg", init="ala") == ["ala"]
    assert run_sections("fedlamb") == ["adaptive"] and run_sections("fedpaq") == ["qsgd"]
    assert set(run_parts("fedala")) == {"local_step", "schedule", "codec", "init", "server"}
    # a table is a params section or a method; a method's table holds what its parts read beyond the general options
    assert table_keys("fedlama") == {"phi", "lama_rule", "lama_eligible", "lama_first_adjust"}
    assert table_keys("fedlamb") == {f.name for f in dataclasses.fields(SECTIONS["adaptive"])}
    assert table_keys("fedavg") == set() and table_keys("nonsense") is None
    assert "phi" not in {f.name for f in dataclasses.fields(GeneralConfig)}  # FedLAMA's own, no longer a general option
    assert all(m.name in METHODS for m in METHODS.values())


def write(tmp_path, text: str, name: str = "r.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_a_single_run_recipe_sets_a_method_in_its_table(tmp_path):
    r = write(
        tmp_path,
        """
        algo = "fedlama"
        iterations = 40
        [fedlama]
        phi = 4
        lama_rule = "paper"
    """,
    )
    assert train_values(r) == {"algo": "fedlama", "iterations": 40, "phi": 4, "lama_rule": "paper"}
    cfg = build_config(str(r), {})
    assert (cfg.phi, cfg.lama_rule) == (4, "paper")
    # a flag wins over the table, as over any recipe key; a flag that picks another method leaves the table idle
    assert build_config(str(r), {"phi": 8}).phi == 8
    assert build_config(str(r), {"algo": "fedavg"}).phi == 2
    # FedProx + FedLAMA (a --schedule flag) reads [fedlama]
    assert build_config(str(r), {"algo": "fedprox", "schedule": "lama"}).phi == 4


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'algo = "fedlama"\n[fedlama]\nmu = 0.1\n',
            "line 3: [fedlama] has no key 'mu'; its keys: lama_eligible, lama_first_adjust, lama_rule, phi",
        ),
        ('algo = "fedlama"\n[fedlamma]\nphi = 4\n', "line 2: unknown table [fedlamma]"),
        (
            'algo = "fedavg"\n[fedprox]\nmu = 0.1\n',
            "line 2: [fedprox] holds options this run does not read (the tables its method reads: [fedavg])",
        ),
        ('algo = "fedlama"\nphi = 2\n[fedlama]\nphi = 4\n', "'phi' is set both as a plain key and in [fedlama]"),
        ('algo = "fedlama"\n[fedlama]\nphi = 0\n', "line 3: --phi must be >= 1, got 0"),
    ],
)
def test_a_wrong_table_is_refused_with_its_line(tmp_path, text, message):
    r = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        build_config(str(r), {})
    assert message in str(e.value)


def test_a_method_table_takes_the_options_of_that_method_only(tmp_path):
    """[fedlamb] beta2 reaches Fed-LAMB's run, not Adp-Fed's, although both read the adaptive section's beta2."""
    r = write(
        tmp_path,
        """
        [base]
        dataset = "digits"
        [fedlamb]
        beta2 = 0.99
        [[runs]]
        name = "Fed-LAMB"
        algo = "fedlamb"
        [[runs]]
        name = "Adp-Fed"
        algo = "fedadam"
    """,
    )
    runs = {run.name: run for run in read_sweep(r).runs}
    assert runs["Fed-LAMB"].values["beta2"] == 0.99 and "beta2" not in runs["Adp-Fed"].values
    assert run_config(runs["Adp-Fed"], 0, tmp_path / "o").beta2 == 0.999


def test_a_sweep_applies_each_table_to_the_runs_that_read_it(tmp_path):
    r = write(
        tmp_path,
        """
        [base]
        dataset = "digits"
        iterations = 40
        [base.fedlama]
        phi = 4
        [fedprox]
        mu = 0.001
        [[runs]]
        name = "FedAvg"
        algo = "fedavg"
        [[runs]]
        name = "FedLAMA"
        algo = "fedlama"
        [[runs]]
        name = "FedProx+FedLAMA"
        algo = "fedprox"
        schedule = "lama"
        fedlama = { phi = 8 }
    """,
    )
    runs = {run.name: run.values for run in read_sweep(r).runs}
    assert "phi" not in runs["FedAvg"] and "mu" not in runs["FedAvg"]
    assert runs["FedLAMA"]["phi"] == 4 and "mu" not in runs["FedLAMA"]
    assert (runs["FedProx+FedLAMA"]["phi"], runs["FedProx+FedLAMA"]["mu"]) == (8, 0.001)  # its own table wins
    # a table no run reads is a mistake
    unused = write(
        tmp_path,
        """
        [base]
        dataset = "digits"
        [ditto]
        ditto_lambda = 0.5
        [[runs]]
        name = "FedAvg"
        algo = "fedavg"
    """,
        "unused.toml",
    )
    with pytest.raises(
        ConfigError, match=r"unused.toml, line 4: \[ditto\] sets options that no run of this recipe reads"
    ):
        read_sweep(unused)


def test_the_docs_example_of_method_tables_reads_as_it_says(tmp_path):
    """docs/sweeps.md's recipe with method tables: each run gets the tables that concern it."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "sweeps.md").read_text()
    block = next(b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if "[fedlama]" in b)
    runs = {run.name: run.values for run in read_sweep(write(tmp_path, block)).runs}
    assert (runs["FedProx+FedLAMA"]["phi"], runs["FedProx+FedLAMA"]["mu"]) == (4, 0.001)
    assert runs["Fed-LAMB"]["beta2"] == 0.99 and "beta2" not in runs["Adp-Fed"] and "phi" not in runs["Fed-LAMB"]


def test_a_table_of_another_scale_is_checked_for_its_keys_only(tmp_path):
    """[scale.smoke.fedlama] applies at --scale smoke; read at paper it is not "a table no run reads" (it failed so),
    yet a key its section lacks is refused at any scale."""
    text = """
        [base]
        dataset = "digits"
        [scale.paper]
        [scale.smoke]
        iterations = 20
        [scale.smoke.fedlama]
        phi = 4
        [[runs]]
        name = "FedLAMA"
        algo = "fedlama"
    """
    r = write(tmp_path, text)
    assert read_sweep(r, "smoke").runs[0].values["phi"] == 4
    assert "phi" not in read_sweep(r, "paper").runs[0].values
    bad = write(tmp_path, text.replace("phi = 4", "mu = 4"), "bad.toml")
    with pytest.raises(ConfigError, match=r"\[fedlama\] has no key 'mu'"):
        read_sweep(bad, "paper")


def test_each_part_class_is_bound_to_the_spec_that_names_it_and_nothing_else_registers_it():
    """The spec's ``part(...)`` is the only registration: every spec's ``impl`` is a class bound to that spec (its
    name and declarations) when it was defined, the specs extend each other as the classes subclass each other, and
    a class whose base class is not its spec's ``base``'s class is refused when it is defined; a class declares
    nothing of its spec (no decorator, no name), and the decorators that used to repeat the spec are gone."""
    for family, table in PARTS.items():
        for name, spec in table.items():
            cls = spec.load()
            assert cls.spec is spec and cls.name == name, (family, name)
            ancestor = next((k.spec for k in cls.__mro__[1:] if vars(k).get("spec") is not None), None)
            assert spec.base is ancestor, (family, name)
            assert cls.requires == spec.declaration("requires") and cls.provides == spec.declaration("provides")
    for gone in ("implements", "register_local_step", "register_server", "register_init", "register_codec"):
        assert not hasattr(parts, gone), gone
    here = f"{__name__}:test_each_part_class_is_bound_to_the_spec_that_names_it_and_nothing_else_registers_it.<locals>"
    part("local_step", "", f"{here}.Orphan", Params=ProxParams)  # extends nothing
    with pytest.raises(TypeError, match="its spec extends nothing"):

        class Orphan(parts.SGDStep):  # but the class extends SGD
            pass

    part("local_step", "", f"{here}.Stray", base=SGD, Params=ProxParams)
    with pytest.raises(TypeError, match="its spec extends fedcli.fl.parts:SGDStep"):

        class Stray(parts.Part):  # its spec extends SGD, the class does not
            pass

    with pytest.raises(TypeError, match="already implements local_step 'prox'"):
        part("local_step", "prox2", "fedcli.fl.algorithms.fedprox:ProxStep")  # one class, one part


# Every layout of method tables docs/sweeps.md describes, each a sweep recipe of one run "r" on digits: the params the
# run must get. The [[runs]] row is empty where the layout is above the run, so that `fedcli train --recipe` ([base]
# and what applies before a run) and `fedcli sweep` read the same values; the run-level layouts are replayed by their
# seed<k>.toml, the recipe the sweep writes for `fedcli train --recipe`.
LAYOUT_BASE = """
[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "16"
clients = 4
iterations = 4
eval_every = 4
threads = 1
trainer = "loop"
{base}
[scale.smoke]
iterations = 2
eval_every = 2
{scale}
{top}
[[runs]]
name = "r"
{run}
"""
LAYOUTS = {
    "flat keys in [base]": (dict(base='algo = "fedlama"\nphi = 4'), {"fedlama": {"phi": 4}}),
    "[base.fedlama]": (dict(base='algo = "fedlama"\n[base.fedlama]\nphi = 4'), {"fedlama": {"phi": 4}}),
    "top-level [fedlama] beside [base]": (
        dict(base='algo = "fedlama"', top="[fedlama]\nphi = 4"),
        {"fedlama": {"phi": 4}},
    ),
    "top-level table named after a method": (
        dict(base='algo = "fedlamb"', top="[fedlamb]\nbeta2 = 0.99"),
        {"adaptive": {"beta2": 0.99}},
    ),
    "top-level tables of both parts' sections": (
        dict(base='algo = "fedprox"\nschedule = "lama"', top="[fedlama]\nphi = 4\n[fedprox]\nmu = 0.001"),
        {"fedlama": {"phi": 4}, "fedprox": {"mu": 0.001}},
    ),
    "flat key in [scale.smoke]": (dict(base='algo = "fedlama"', scale="phi = 4"), {"fedlama": {"phi": 4}}),
    "[scale.smoke.fedlama] over a flat key of [base]": (
        dict(base='algo = "fedlama"\nphi = 3', scale="[scale.smoke.fedlama]\nphi = 5"),
        {"fedlama": {"phi": 5}},
    ),
    "[scale.smoke.fedlama] over the top-level [fedlama]": (
        dict(
            base='algo = "fedlama"',
            scale="[scale.smoke.fedlama]\nphi = 5",
            top='[fedlama]\nphi = 4\nlama_rule = "paper"',
        ),
        {"fedlama": {"phi": 5, "lama_rule": "paper"}},
    ),
    "a run's own table": (dict(run='algo = "fedlama"\nfedlama = { phi = 4 }'), {"fedlama": {"phi": 4}}),
    "a run's table at one scale": (
        dict(base='algo = "fedlama"', top="[fedlama]\nphi = 3", run="scale.smoke = { fedlama = { phi = 6 } }"),
        {"fedlama": {"phi": 6}},
    ),
}


def _params(run_dir) -> dict:
    import json

    return json.loads((run_dir / "manifest.json").read_text())["params"]


def test_train_recipe_and_sweep_read_every_layout_of_method_tables_alike(tmp_path, capsys):
    """Issue 47, point 1: `fedcli train --recipe` ignored a top-level [fedlama] beside [base] (phi stayed 2, and phi = 0
    trained too) while `fedcli sweep` applied it. Both now read a recipe by one path (fedcli.recipes.recipe_levels):
    every layout gives the same manifest params under both commands, and the ones the layout asks for."""
    from simkit import cli

    for i, (layout, (parts, want)) in enumerate(LAYOUTS.items()):  # noqa: F402
        text = LAYOUT_BASE.format(**{"base": "", "scale": "", "top": "", "run": "", **parts})
        recipe = write(tmp_path, text, f"layout{i}.toml")
        code, _, err = cli(
            [
                "sweep",
                str(recipe),
                "--scale",
                "smoke",
                "--seeds",
                "1",
                "--out",
                str(tmp_path / f"s{i}"),
                "--in-process",
                "--quiet",
            ],
            capsys,
        )
        assert code == 0, (layout, err)
        swept = _params(tmp_path / f"s{i}" / "r" / "seed0")
        replay = tmp_path / f"s{i}" / "r" / "seed0.toml"
        # above the run, the recipe itself; a run's own tables, the run's recipe that the sweep wrote
        one = replay if parts.get("run") else recipe
        scale = ["--scale", "smoke", "--seed", "0"] if one is recipe else []  # seed<k>.toml holds the scale and seed
        code, _, err = cli(["train", "--recipe", str(one), *scale, "--quiet", "--out", str(tmp_path / f"t{i}")], capsys)
        assert code == 0, (layout, err)
        trained = _params(tmp_path / f"t{i}")
        assert trained == swept, layout
        for section, values in want.items():
            assert {k: trained[section][k] for k in values} == values, layout


def test_a_top_level_table_beside_base_is_validated_by_train_recipe(tmp_path, capsys):
    """The issue's recipe with phi = 0 trained (with phi = 2); it is refused now, with its file and line, as by
    sweep."""
    from runkit import error_lines, run_main

    r = write(tmp_path, '[base]\nalgo = "fedlama"\niterations = 40\neval_every = 20\n\n[fedlama]\nphi = 0\n')
    code, _, err = run_main(["train", "--recipe", str(r), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and error_lines(err) == [f"fedcli: error: {r}, line 7: --phi must be >= 1, got 0"]
    assert not (tmp_path / "o").exists()
    assert train_values(write(tmp_path, '[base]\nalgo = "fedlama"\n[fedlama]\nphi = 4\n', "ok.toml"))["phi"] == 4
