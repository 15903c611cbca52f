"""Confirming a study's best configurations over seeds and the tuned rows of a paper table (fedcli/tune/confirm.py,
issue 58 section 3): ``run_confirm`` re-runs the top k of each study as an ordinary sweep recording which trial each
row confirms; ``fedcli sweep RECIPE --tuned DIR`` runs each row at its study's confirmed best (by the mean validation
objective over the seeds, worked out here from the runs' metrics.csv); a row without a study is refused in one line,
exit 2, nothing written; ``fedcli report --paper`` says how the values were selected. The study folder is built from
real ``fedcli train`` runs in the contract's layout (tests/tunekit.py)."""

import json

import pytest

from fedcli.tune.confirm import confirmed, run_confirm
from runkit import error_lines
from simkit import cli
from tunekit import build_study, report_text, table_recipe
from tunekit import last2 as _last2

TABLE = table_recipe([{"name": "FedAvg", "algo": "fedavg", "tau": 2}])


@pytest.fixture(scope="module")
def confirmed_study(tmp_path_factory):
    root = tmp_path_factory.mktemp("confirm") / "study"
    build_study(
        root,
        {
            "fedavg": [
                {"params": {"lr": 0.1}},
                {"params": {"lr": 0.5}},
                {"params": {"lr": 0.3}},
                {"params": {"lr": 0.02}, "prune_at": 4},
            ]
        },
        grid_size=None,
    )
    result = run_confirm(root, top=2, seeds=2, in_process=True)
    return root, result


def test_run_confirm_reruns_the_top_k_over_seeds(confirmed_study):
    root, result = confirmed_study
    trials = {n: _last2(root / f"fedavg/trial-{n:04d}") for n in (0, 1, 2)}
    top2 = sorted(trials, key=lambda n: (-trials[n], n))[:2]
    mapping = json.loads((root / "confirm" / "confirm.json").read_text())
    assert [(r["study"], r["number"]) for r in mapping["rows"]] == [("fedavg", n) for n in top2]
    sweep = json.loads((root / "confirm" / "sweep.json").read_text())
    assert sorted((e["name"], e["seed"], e["status"]) for e in sweep["runs"]) == sorted(
        (f"fedavg trial {n}", s, "completed") for n in top2 for s in (0, 1)
    )
    for e in sweep["runs"]:  # each row at its trial's params, the study's base otherwise
        n = int(e["name"].split()[-1])
        assert e["config"]["lr"] == {0: 0.1, 1: 0.5, 2: 0.3}[n] and e["config"]["val_fraction"] == 0.2
    # seed 0 of a confirmation is its trial again: the same value
    for n in top2:
        seed0 = root / "confirm" / f"fedavg-trial-{n}" / "seed0"
        assert _last2(seed0) == pytest.approx(trials[n])
    means = {
        n: (
            _last2(root / "confirm" / f"fedavg-trial-{n}" / "seed0")
            + _last2(root / "confirm" / f"fedavg-trial-{n}" / "seed1")
        )
        / 2
        for n in top2
    }
    got = confirmed(root)["fedavg"]
    assert got["best"]["number"] == max(means, key=lambda n: (means[n], -n))
    assert got["best"]["mean"] == pytest.approx(max(means.values())) and got["best"]["seeds"] == 2
    assert len(result.runs) == 4


def test_study_report_shows_the_confirmation(confirmed_study):
    """The study report's text (what ``fedcli report DIR`` prints: the same functions as its ``_study``, without
    drawing the figures; tests/report/test_tune_report.py::test_report_of_a_study runs the command) has the
    confirmation's table, the chosen trial marked."""
    root, _ = confirmed_study
    best = confirmed(root)["fedavg"]["best"]
    out = report_text(root)
    assert "Confirmed over seeds" in out
    assert f"| {best['number']} (chosen) | {best['params']['lr']:g} | {best['mean']:.4g} | 2 |" in out


def test_run_confirm_refuses_bad_counts(confirmed_study):
    from fedcli.errors import ConfigError

    root, _ = confirmed_study
    for top, seeds in ((0, 2), (2, 0)):
        with pytest.raises(ConfigError):
            run_confirm(root, top=top, seeds=seeds)


def test_sweep_tuned_runs_each_row_at_its_confirmed_best_and_the_paper_says_how(confirmed_study, tmp_path, capsys):
    root, _ = confirmed_study
    best = confirmed(root)["fedavg"]["best"]
    (tmp_path / "table.toml").write_text(TABLE)
    out = tmp_path / "tuned"
    code, _, err = cli(
        ["sweep", str(tmp_path / "table.toml"), "--tuned", str(root), "--in-process", "-q", "--out", str(out)], capsys
    )
    assert code == 0, err
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["runs"][0]["config"]["lr"] == best["params"]["lr"]
    assert sweep["tuned"]["rows"]["FedAvg"]["trial"] == best["number"]
    code, _, err = cli(["report", str(out), "--paper", "fedlamb", "--output", str(tmp_path / "paper")], capsys)
    assert code == 0, err
    md = (tmp_path / "paper" / "section.md").read_text()
    para = next(l for l in md.splitlines() if l.startswith("Hyper-parameter selection."))
    assert "sampler tpe, pruner sha" in para and "4 trials each" in para and "seeds 0, 1" in para
    assert "20% of it" in para and f"chosen lr = {best['params']['lr']:g} (trial {best['number']}" in para
    assert "lr in log [0.01, 1]" in para
    assert "Hyper-parameter selection." in (tmp_path / "paper" / "section.tex").read_text()


def test_sweep_tuned_refuses_a_row_without_a_study(confirmed_study, tmp_path, capsys):
    root, _ = confirmed_study
    (tmp_path / "table.toml").write_text(TABLE + '\n[[runs]]\nname = "FedProx"\nalgo = "fedprox"\ntau = 2\n')
    out = tmp_path / "tuned"
    code, _, err = cli(["sweep", str(tmp_path / "table.toml"), "--tuned", str(root), "--out", str(out)], capsys)
    assert code == 2 and error_lines(err) == [
        f"fedcli: error: --tuned {root}: run 'FedProx' of the recipe has no study there (it would be 'fedprox'; the "
        f"studies: fedavg); tune it with `fedcli tune`"
    ]
    assert not out.exists()


def test_sweep_tuned_refuses_a_study_not_confirmed(tmp_path, capsys):
    root = build_study(tmp_path / "study", {"fedavg": [{"params": {"lr": 0.1}}]})
    (tmp_path / "table.toml").write_text(TABLE)
    capsys.readouterr()  # the training's own lines
    code, _, err = cli(
        ["sweep", str(tmp_path / "table.toml"), "--tuned", str(root), "--out", str(tmp_path / "o")], capsys
    )
    assert code == 2 and len(error_lines(err)) == 1 and "has no confirmed configuration" in err
    assert not (tmp_path / "o").exists()


def test_confirm_takes_a_base_that_is_a_whole_config(confirmed_study, tmp_path):
    """A study whose base is a run's whole config (every field, as a manifest records it, with its params sections)
    confirms: the recipe written is valid TOML without the run's own folder and seed, and its run trains at the
    trial's params (it failed on the `params` key: not a table a recipe row takes)."""
    import shutil
    import tomllib

    root, _ = confirmed_study
    copy = tmp_path / "study"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("confirm"))
    rec = json.loads((copy / "tune.json").read_text())
    config = json.loads((copy / "fedavg/trial-0000/manifest.json").read_text())["config"]
    rec["studies"][0]["base"] = {**config, "params": {"fedprox": {}}}
    (copy / "tune.json").write_text(json.dumps(rec))
    result = run_confirm(copy, top=1, seeds=1, in_process=True)
    best = confirmed(copy)["fedavg"]["best"]
    assert [p.status for p in result.runs] == ["completed"] and result.runs[0].config["lr"] == best["params"]["lr"]
    row = tomllib.loads((copy / "confirm" / "recipe.toml").read_text())["runs"][0]
    assert "out" not in row and "seed" not in row and row["lr"] == best["params"]["lr"]  # the sweep sets out and seed


def test_tune_confirm_from_the_command_line(tmp_path, capsys):
    """``fedcli tune DIR --confirm 1 --seeds 2`` is run_confirm through the CLI: the best trial re-run over 2 seeds
    into DIR/confirm, and its closing line names the chosen trial; a folder that is not a study is refused in one
    line (exit 2); --confirm with --promote too."""
    root = tmp_path / "study"
    build_study(root, {"fedavg": [{"params": {"lr": 0.1}}, {"params": {"lr": 0.5}}]}, grid_size=None)
    best = max((0, 1), key=lambda n: (_last2(root / f"fedavg/trial-{n:04d}"), -n))
    code, out, err = cli(["tune", str(root), "--confirm", "1", "--seeds", "2"], capsys)
    assert code == 0, err
    sweep = json.loads((root / "confirm" / "sweep.json").read_text())
    assert sorted((e["name"], e["seed"], e["status"]) for e in sweep["runs"]) == [
        (f"fedavg trial {best}", 0, "completed"),
        (f"fedavg trial {best}", 1, "completed"),
    ]
    assert f"confirmed fedavg: trial {best} " in err
    code, out, err = cli(["tune", str(tmp_path), "--confirm", "1"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "not a study folder" in err
    code, out, err = cli(["tune", str(root), "--confirm", "1", "--promote", "0"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "one at a time" in err
