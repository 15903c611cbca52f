"""Options declared where they are used: a method's params dataclass (fedcli.params) becomes a flag, a recipe key, a
validated field, a line of --help and an entry of the manifest's config; every validation error names its key."""

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedcli.config import FIELDS, TrainConfig, coerce
from fedcli.errors import ConfigError
from fedcli.params import Open, opt, register_params, repeatable

ROOT = Path(__file__).resolve().parents[2]

# A new method in one file: its options, its local step and its preset; nothing else is edited.
FAKE_METHOD = '''
"""A test method: SGD along knob * gradient."""

from fedcli.fl.parts import SGDStep
from fedcli.params import Open, opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import SGD


@register_params(section="fake")
class FakeParams:
    """The knob of the test method."""

    fake_knob: float = opt(0.5, "Fake: factor on the local gradient.", lo=Open(0.0), hi=1.0, group="method")


# the part's one registration, before its class (fedcli's own: in fedcli/specs)
part("local_step", "fake", "fake_method:FakeStep", base=SGD, Params=FakeParams)


class FakeStep(SGDStep):
    def __init__(self, opts):
        super().__init__(opts)
        self.knob = self.opts.fake_knob

    def direction(self, cohort, grads):
        return {n: g * self.knob for n, g in grads.items()}


register_method(Method("fake", "SGD along a scaled gradient (test method); --fake-knob", local_step="fake"))
'''

# Runs fedcli's main() once per argv, after importing the method file, and prints their exit codes and output.
ENTRY = """
import contextlib, io, json, sys
import fake_method  # noqa: F401  (the method registers itself before fedcli.config assembles TrainConfig)
from fedcli.cli.main import main
from fedcli.config import TrainConfig
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
sub = issubclass(TrainConfig, fake_method.FakeParams)
sys.__stdout__.write("\\n@@RESULTS@@" + json.dumps({"results": results, "subclass": sub}))
"""


def metrics(run: Path) -> list[dict]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_method_in_one_file_gets_flag_recipe_key_validation_help_and_manifest(tmp_path):
    (tmp_path / "fake_method.py").write_text(FAKE_METHOD)
    (tmp_path / "entry.py").write_text(ENTRY)
    good = tmp_path / "good.toml"
    good.write_text(
        'algo = "fake"\nclients = 4\niterations = 10\ntau = 5\nmlp_hidden = "16"\n[fake]\nfake_knob = 0.5\n'
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('algo = "fake"\nfake_knob = 1.5\n')
    same = ["--clients", "4", "--iterations", "10", "--tau", "5", "--mlp-hidden", "16", "--quiet"]
    commands = [
        ["train", "--help"],
        ["train", "--list-algos"],
        ["train", "--algo", "fake", "--fake-knob", "0", "--quiet"],
        ["train", "--recipe", str(bad)],
        ["train", "--recipe", str(good), "--quiet", "--out", str(tmp_path / "fake")],
        ["train", "--algo", "fedavg", "--lr", "0.05", *same, "--out", str(tmp_path / "avg")],
        ["train", "--algo", "fake", "--fake-knob", "1", *same, "--out", str(tmp_path / "fake1")],
    ]
    env = {**os.environ, "COLUMNS": "2000", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    p = subprocess.run(
        [sys.executable, str(tmp_path / "entry.py"), json.dumps(commands)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.split("@@RESULTS@@")[-1])
    helps, algos, flag_bad, recipe_bad, fake, avg, fake1 = got["results"]
    assert got["subclass"]  # TrainConfig is assembled with the method's params class
    # --help: the flag, its help and default, in its panel
    line = next(l for l in helps["out"].splitlines() if "--fake-knob" in l)
    assert "Fake: factor on the local gradient." in line and "[default: 0.5]" in line
    panel = helps["out"].split("--fake-knob")[0].rsplit("╭─", 1)[-1]
    assert panel.lstrip("─ ").startswith("method options: fake "), panel[:40]  # its own panel, named by its section
    assert algos["code"] == 0 and "fake" in algos["out"] and "--fake-knob" in algos["out"]
    # validation by its bounds: the flag (exit 2, naming it) and the recipe key (file and line)
    assert flag_bad["code"] == 2 and "--fake-knob must be > 0.0, got 0.0" in flag_bad["err"]
    assert (
        recipe_bad["code"] == 2
        and f"{bad}, line 2" in recipe_bad["err"]
        and "--fake-knob must be <= 1.0" in recipe_bad["err"]
    )
    # the recipe's [fake] table runs, the manifest records it (in config and in its section), and the step reads it:
    # SGD along 0.5 g is SGD at lr / 2
    assert (fake["code"], avg["code"], fake1["code"]) == (0, 0, 0), (fake["err"], avg["err"], fake1["err"])
    manifest = json.loads((tmp_path / "fake" / "manifest.json").read_text())
    assert manifest["config"]["fake_knob"] == 0.5 and manifest["params"] == {"fake": {"fake_knob": 0.5}}
    assert json.loads((tmp_path / "fake1" / "manifest.json").read_text())["config"]["fake_knob"] == 1.0
    half, plain, whole = metrics(tmp_path / "fake"), metrics(tmp_path / "avg"), metrics(tmp_path / "fake1")
    assert len(half) == len(plain) == len(whole) >= 2
    for a, b in zip(half, plain):
        assert math.isclose(float(a["train_loss"]), float(b["train_loss"]), rel_tol=1e-5), (a, b)
        assert a["test_acc"] == b["test_acc"]
    assert half[-1]["train_loss"] != whole[-1]["train_loss"]


def test_register_params_refuses_a_taken_name_and_plain_fields():
    with pytest.raises(TypeError, match="FedDynParams"):

        @register_params
        class Clash:
            feddyn_alpha: float = opt(1.0, "again", lo=0.0)

    with pytest.raises(TypeError, match="opt"):

        @register_params
        class Plain:
            plain_knob: float = 1.0

    assert "plain_knob" not in FIELDS


def test_open_bounds_and_repeatable_flags():
    """``opt``'s bounds: a number is closed, ``Open(x)`` open, recorded as the bound and its ``*_open`` flag (what the
    check reads); ``repeatable`` is ``opt``'s field marked ``multiple``, the rest as ``opt`` makes it."""
    f = opt(1.0, "h", lo=Open(0.0), hi=2.0)
    assert [f.metadata[k] for k in ("lo", "lo_open", "hi", "hi_open")] == [0.0, True, 2.0, False]
    g = opt(1, "h", lo=0, hi=Open(5))
    assert [g.metadata[k] for k in ("lo", "lo_open", "hi", "hi_open")] == [0, False, 5, True]
    r = repeatable("", "h", group="run", was=("old",))
    assert r.metadata["multiple"] and not f.metadata["multiple"] and r.default == ""
    assert {**r.metadata, "multiple": False} == dict(opt("", "h", group="run", was=("old",)).metadata)
    with pytest.raises(ConfigError, match="must be > 0"):  # active_ratio: lo=Open(0.0), hi=1.0
        TrainConfig(active_ratio=0.0).validate()
    assert TrainConfig(active_ratio=1.0).validate().active_ratio == 1.0


def test_method_params_are_declared_in_their_files_not_in_config():
    config_py = (ROOT / "fedcli" / "config.py").read_text()
    owners = {
        "feddyn_alpha": "fedcli/specs/feddyn.py",
        "ditto_lambda": "fedcli/specs/ditto.py",
        "head_layers": "fedcli/specs/fedrep.py",
        "fomo_val_ratio": "fedcli/specs/fedfomo.py",
        "mu": "fedcli/specs/fedprox.py",
        "quant_levels": "fedcli/specs/qsgd.py",
        "ala_lr": "fedcli/specs/fedala.py",
        "lama_rule": "fedcli/specs/fedlama.py",
        "beta1": "fedcli/specs/adaptive.py",
    }
    for name, path in owners.items():
        assert f"    {name}: " not in config_py, name
        assert f"    {name}: " in (ROOT / path).read_text(), (name, path)
        assert name in FIELDS
    assert TrainConfig().feddyn_alpha == 0.1 and TrainConfig(mu=0.5).mu == 0.5


# ------------------------------------------------------------------------------ ConfigError.key
BAD = [
    ({"tau": 0}, "tau"),
    ({"lr": 0.0}, "lr"),
    ({"lr": float("nan")}, "lr"),
    ({"partition": "nope"}, "partition"),
    ({"alpha": 0.0}, "alpha"),
    ({"active_ratio": 1.5}, "active_ratio"),
    ({"algo": "nope"}, "algo"),
    ({"schedule": "nope"}, "schedule"),
    ({"init": "nope"}, "init"),
    ({"mlp_hidden": "a,b"}, "mlp_hidden"),
    ({"mlp_hidden": "8,0"}, "mlp_hidden"),
    ({"lr_decay_at": "x"}, "lr_decay_at"),
    ({"lr_decay_at": "-3"}, "lr_decay_at"),
    ({"scaling_bounds": "1"}, "scaling_bounds"),
    ({"scaling_bounds": "2,1"}, "scaling_bounds"),
    ({"feddyn_alpha": 0.0}, "feddyn_alpha"),
    ({"beta1": 1.0}, "beta1"),
    ({"apple_upload": "x"}, "apple_upload"),
    ({"pfedme_k": 0}, "pfedme_k"),
    ({"lama_rule": "x"}, "lama_rule"),
    ({"ala_sample_percent": 0.0}, "ala_sample_percent"),
    ({"local_epochs": 1.0, "algo": "fedlama"}, "local_epochs"),
    ({"active_ratio": 0.01, "clients": 10}, "active_ratio"),
    ({"algo": "fedamp", "active_ratio": 0.5}, "active_ratio"),
]


@pytest.mark.parametrize("values,key", BAD, ids=[k + "-" + str(i) for i, (_, k) in enumerate(BAD)])
def test_every_validation_error_carries_its_key(values, key):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**values).validate()
    assert e.value.key == key, str(e.value)


def test_dict_and_coercion_errors_carry_their_key():
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict({"tau": 5, "bogus_key": 1})
    assert e.value.key == "bogus_key"
    with pytest.raises(ConfigError) as e:
        coerce(FIELDS["tau"], 2.5)
    assert e.value.key == "tau"
    with pytest.raises(ConfigError) as e:  # the key, not the first flag the message happens to name
        TrainConfig(active_ratio=0.01, clients=10).validate()
    assert str(e.value).startswith("--active-ratio") and e.value.key == "active_ratio"
    assert ConfigError("--tau is bad").key is None  # no key is read out of a message


# ------------------------------------------------------------------------------ the partition file decides the clients
def test_setup_leaves_the_config_alone_and_the_built_config_records_the_files_clients(tmp_path):
    from fedcli.data.partition import save_partition
    from fedcli.data.setup import inline_partition, load_data, load_data_and_partition
    from fedcli.recipes import build_config

    base = TrainConfig(clients=6, partition="iid")
    save_partition(inline_partition(base, load_data(base)), tmp_path / "p.json")
    cfg = TrainConfig(partition_file=str(tmp_path / "p.json"))
    before = dataclasses.asdict(cfg)
    _, part = load_data_and_partition(cfg)
    assert len(part.train) == 6 and dataclasses.asdict(cfg) == before  # cfg.clients is still the default 16
    assert build_config(None, {"partition_file": str(tmp_path / "p.json")}).clients == 6
    assert build_config(None, {"partition_file": str(tmp_path / "p.json"), "clients": 6}).clients == 6
    with pytest.raises(ConfigError) as e:
        build_config(None, {"partition_file": str(tmp_path / "p.json"), "clients": 5})
    assert e.value.key == "clients" and "differs from the 6 clients" in str(e.value)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        textwrap.dedent(f"""\
        partition_file = "{tmp_path / "p.json"}"
        clients = 5
    """)
    )
    with pytest.raises(ConfigError) as e:
        build_config(str(recipe), {})
    assert str(e.value).startswith(f"{recipe}, line 2:") and e.value.key == "clients"
