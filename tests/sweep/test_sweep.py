"""``fedcli sweep``: expansion, run folders, the sweep manifest, resuming, recipe errors with lines.

Trainings are tiny (digits, MLP 32, 8 iterations, one thread) and run in this process
(``in_process=True``) except in the one test of the default worker pool.
"""

import json

import pytest

from fedcli.cli.main import main
from fedcli.errors import ConfigError
from fedcli.recipes import read_sweep
from fedcli.reports.core import find_sweeps, make_table
from fedcli.sweep.executors import toml_flat
from fedcli.sweep.run import SweepFailed, SweepLock, config_matches, run_sweep, slugify
from runkit import error_lines
from sweepkit import RECIPE


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(RECIPE)
    return path


def statuses(root):
    m = json.loads((root / "sweep.json").read_text())
    return {(r["name"], r["seed"]): r["status"] for r in m["runs"]}


def test_expand_grid_scales_and_seeds(recipe):
    r = read_sweep(recipe, "smoke")
    assert [x.name for x in r.runs] == ["FedAvg x1", "FedLAMA phi=2"]
    avg, lama = (x.values for x in r.runs)
    assert avg["iterations"] == 8 and avg["tau"] == 2 and avg["lr"] == 0.1  # base < scale < run
    assert lama["lr"] == 0.2 and lama["phi"] == 2  # < run.scale
    assert read_sweep(recipe).scale is None and read_sweep(recipe).runs[1].values["lr"] == 0.1
    assert slugify("FedLAMA phi=2") == "fedlama-phi-2"


def test_sweep_runs_then_skips_then_retries(recipe, tmp_path):
    root = tmp_path / "sw"
    res = run_sweep(recipe, "smoke", out=root, in_process=True)
    assert len(res.ran) == 4 and not res.failed
    assert set(statuses(root).values()) == {"completed"}
    assert (root / "fedlama-phi-2/seed1/metrics.csv").exists()
    # the run's own recipe replays it with fedcli train
    text = (root / "fedavg-x1/seed0.toml").read_text()
    assert 'algo = "fedavg"' in text and "seed = 0" in text and f'out = "{root}/fedavg-x1/seed0"' in text
    # a second call runs nothing
    assert run_sweep(recipe, "smoke", out=root, in_process=True).ran == []
    # a failed, an interrupted and a deleted run are run again, and only they
    for rel, status in (("fedavg-x1/seed1", "failed"), ("fedlama-phi-2/seed1", "interrupted")):
        m = root / rel / "manifest.json"
        data = json.loads(m.read_text())
        data["status"] = status
        m.write_text(json.dumps(data))
    for f in (root / "fedlama-phi-2/seed0").iterdir():
        if f.is_file():
            f.unlink()
    assert list(statuses(root).values()).count("completed") == 4  # sweep.json: as of the last call
    res = run_sweep(recipe, "smoke", out=root, in_process=True)
    assert sorted(p.label for p in res.ran) == ["FedAvg x1 seed 1", "FedLAMA phi=2 seed 0", "FedLAMA phi=2 seed 1"]
    assert set(statuses(root).values()) == {"completed"}
    # a changed recipe reruns what changed (and the report sees the new runs)
    recipe.write_text(RECIPE.replace("scale.smoke = { lr = 0.2 }", "scale.smoke = { lr = 0.3 }"))
    res = run_sweep(recipe, "smoke", out=root, in_process=True)
    assert sorted(p.label for p in res.ran) == ["FedLAMA phi=2 seed 0", "FedLAMA phi=2 seed 1"]
    # more seeds: only the new ones
    res = run_sweep(recipe, "smoke", seeds=3, out=root, in_process=True)
    assert sorted(p.label for p in res.ran) == ["FedAvg x1 seed 2", "FedLAMA phi=2 seed 2"]
    md = make_table(find_sweeps(root), "t", "md")
    assert "over 3 seeds (0, 1, 2)" in md


def test_failed_run_is_recorded_and_exit_code_passed_on(recipe, tmp_path, capsys):
    bad = tmp_path / "bad.toml"  # a partition file that is not there: the data check passes (digits), each run exits 3
    bad.write_text(RECIPE.replace('dataset = "digits"', f'dataset = "digits"\npartition_file = "{tmp_path}/none.json"'))
    with pytest.raises(SweepFailed) as e:
        run_sweep(bad, "smoke", out=tmp_path / "bad", in_process=True)
    assert e.value.exit_code == 3 and "4 of 4 runs" in str(e.value) and "none.json" in str(e.value)
    assert set(statuses(tmp_path / "bad").values()) == {"failed"}
    with pytest.raises(SystemExit) as ex:
        main(["sweep", str(bad), "--scale", "smoke", "--out", str(tmp_path / "bad"), "--in-process", "--quiet"])
    err = capsys.readouterr().err
    assert ex.value.code == 3 and "fedcli: error: 4 of 4 runs" in err and "retry" in err


def test_missing_dataset_refused_before_any_run(recipe, tmp_path, capsys, monkeypatch):
    """The data check (fedcli/data/preflight.py) ends the sweep with exit 3 before any run starts, one sentence per
    dataset naming its path and how to get it; --dry-run shows it as a table."""
    bad = tmp_path / "bad.toml"
    bad.write_text(
        RECIPE.replace('dataset = "digits"', f'dataset = "mnist"\ndata_dir = "{tmp_path}/nomnist"').replace(
            'name = "FedLAMA phi=2"', f'name = "FedLAMA phi=2"\ndataset = "femnist"\ndata_dir = "{tmp_path}/nofemnist"'
        )
    )
    root = tmp_path / "bad-sweep"
    for extra in ([], ["--jobs", "2"], ["--in-process"]):
        with pytest.raises(SystemExit) as ex:
            main(["sweep", str(bad), "--scale", "smoke", "--out", str(root), "--quiet", *extra])
        assert ex.value.code == 3
        err = capsys.readouterr().err
        assert "2 dataset(s) this sweep needs are missing (no run was started)" in err
        assert f"mnist for 2 run(s) at {tmp_path}/nomnist: no MNIST files there" in err and "pass --download" in err
        assert f"femnist for 2 run(s) at {tmp_path}/nofemnist" in err and "LEAF" in err
        assert not root.exists()  # nothing written, nothing started
    monkeypatch.setenv(
        "COLUMNS", "400"
    )  # the plan's tables wrap a long tmp_path (a clone's deeper pytest folder) mid-name
    assert main(["sweep", str(bad), "--scale", "smoke", "--out", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "MISSING" in out and "nomnist" in out and "nofemnist" in out and not root.exists()


def test_worker_pool_matches_in_process(recipe, tmp_path):
    """The default executor (a spawned worker process) gives the same metrics as an in-process run."""
    one = recipe.parent / "one.toml"
    text = RECIPE.replace("seeds = 2", "seeds = 1")
    one.write_text(
        text[: text.index("[[runs]]")]
        + text[text.index("[[runs]]", text.index("[[runs]]") + 1) : text.index("[[tables]]")]
    )
    run_sweep(one, "smoke", out=tmp_path / "a", in_process=True)
    res = run_sweep(one, "smoke", out=tmp_path / "b", jobs=2)
    assert [p.label for p in res.ran] == ["FedLAMA phi=2 seed 0"] and not res.failed
    for name in ("metrics.csv", "intervals.csv", "layers.csv"):
        a = (tmp_path / "a/fedlama-phi-2/seed0" / name).read_text().splitlines()
        b = (tmp_path / "b/fedlama-phi-2/seed0" / name).read_text().splitlines()
        assert [r.split(",")[:7] for r in a] == [r.split(",")[:7] for r in b]  # wall_s (column 8 of metrics) differs
    assert json.loads((tmp_path / "b/fedlama-phi-2/seed0/manifest.json").read_text())["status"] == "completed"


def test_cli_sweep_dry_run_and_second_call(recipe, tmp_path, capsys):
    root = tmp_path / "cli"
    assert main(["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "missing (run)" in out and not root.exists()
    assert main(["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root), "--in-process"]) == 0
    assert "2 ran now" in capsys.readouterr().err
    assert main(["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root), "--in-process"]) == 0
    assert "nothing to run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "edit, needle, line",
    [
        (("tau = 2\n", "tau = 0\n"), "--tau", 23),  # bad value in a run: that run's line
        (("tau = 1\n", "tua = 1\n"), "unknown key 'tua'", 28),
        (("scale.smoke = { lr = 0.2 }", "scale.smoke = { lr = -1.0 }"), "--lr", 30),  # inside an inline scale override
        (("scale.smoke = { lr = 0.2 }", "scale.smok = { lr = 0.2 }"), "scale 'smok'", 30),
        (("iterations = 8\n", 'iterations = "8"\n'), "int", 17),  # in [scale.smoke]
        (("lr = 0.1\n", 'lr = 0.1\nout = "x"\n'), "not allowed", 13),
        (('name = "FedLAMA phi=2"', 'name = "FedAvg x1"'), "used twice", 26),
        (
            ('["FedAvg x1", "FedLAMA phi=2"]]', '["FedAvg x1", "FedLAMA phi=3"]]'),
            "'FedLAMA phi=3', which is not in [[runs]]",
            35,
        ),
        (('layout = "paired"', 'layout = "wide"'), "layout", 34),
        (("seeds = 2", "seeds = 0"), "seeds", 3),
        (('title = "tiny"', 'titel = "tiny"'), "unknown top-level key", 1),
        (('algo = "fedavg"', 'algo = "nosuch"'), "unknown method 'nosuch'", 22),  # checked when the config is built
    ],
)
def test_recipe_errors_name_file_and_line(recipe, capsys, edit, needle, line):
    recipe.write_text(RECIPE.replace(*edit))
    with pytest.raises(SystemExit) as ex:
        main(["sweep", str(recipe), "--scale", "smoke", "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert ex.value.code == 2 and len(error_lines(err)) == 1, err
    assert needle in err and f"{recipe}, line {line}" in err, err


def test_usage_errors(recipe, tmp_path, capsys):
    for args, needle in (
        ([str(recipe), "--scale", "huge"], "no [scale.huge]"),
        ([str(tmp_path / "none.toml")], "cannot be read"),
        ([str(recipe), "--jobs", "0"], "--jobs"),
        ([str(recipe), "--mpi", "2", "--in-process"], "--mpi"),
    ):
        with pytest.raises(SystemExit) as ex:
            main(["sweep", *args, "--out", str(tmp_path / "u")])
        assert ex.value.code == 2 and needle in capsys.readouterr().err
    flat = tmp_path / "flat.toml"
    flat.write_text("tau = 2\n")
    with pytest.raises(ConfigError, match="not a sweep recipe"):
        read_sweep(flat)


def test_lock_and_helpers(tmp_path):
    with SweepLock(tmp_path):
        with pytest.raises(ConfigError, match="another fedcli sweep"):
            with SweepLock(tmp_path):
                pass
    with SweepLock(tmp_path):  # released
        pass
    assert config_matches({"lr": 0.1, "out": "a", "threads": 2}, {"lr": 0.1, "out": "b", "threads": 1})
    assert not config_matches({"lr": 0.1}, {"lr": 0.2})
    assert config_matches({"lr": 0.1, "new_field": 3}, {"lr": 0.1})  # a field added after the run
    assert toml_flat({"a": 'x"y', "b": True, "c": 1e-05, "d": 3}) == 'a = "x\\"y"\nb = true\nc = 1e-05\nd = 3\n'
    import tomllib

    assert tomllib.loads(toml_flat({"a": 'x"y', "b": True, "c": 1e-05, "d": 3, "e": ""})) == {
        "a": 'x"y',
        "b": True,
        "c": 1e-05,
        "d": 3,
        "e": "",
    }
