"""The ``[tune]`` recipe table (fedcli/tune/space.py), the objectives read from a run directory
(fedcli/tune/objectives.py) and the pruning arithmetic (fedcli/tune/pruning.py): numbers worked out by hand."""

import pytest

from fedcli.errors import ConfigError

RECIPE = """\
title = "t"

[base]
dataset = "digits"
model = "mlp"
iterations = 160
val_fraction = 0.2

[[runs]]
name = "FedLAMA"
algo = "fedlama"
tau = 2

[tune]
trials = 6
sampler = "random"
objectives = [{ metric = "val_acc", reduce = "last3" }, { metric = "comm_bytes", reduce = "final" }]
{tune_extra}
[tune.space]
{space}
[tune.space.fedlama]
defaults = true
"""


def tune_of(tmp_path, space="lr = { log = [0.01, 1.0] }", tune_extra=""):
    from fedcli.recipes import read_recipe
    from fedcli.tune.space import parse_tune

    path = tmp_path / "r.toml"
    path.write_text(RECIPE.replace("{space}", space).replace("{tune_extra}", tune_extra))
    data, text = read_recipe(path)
    return parse_tune(path, text, data)


def test_table_read_with_method_defaults(tmp_path):
    t = tune_of(tmp_path)
    assert (t.trials, t.sampler, t.seed, t.pruner) == (6, "random", 0, "sha")
    assert [(o.metric, o.reduce, o.direction, o.k) for o in t.objectives] == [
        ("val_acc", "last3", "maximize", 3),
        ("comm_bytes", "final", "minimize", 1),
    ]
    space = t.space_for("fedlama")
    # [tune.space] lr, then FedLAMA's declared defaults (fedcli/specs/fedlama.py) replace it: lr, tau', phi
    assert {k: p.to_json() for k, p in space.items()} == {
        "lr": {"log": [0.001, 1.0]},
        "tau": {"choices": [2, 5, 10, 20]},
        "phi": {"choices": [1, 2, 4, 8]},
    }
    assert t.space_for("fedavg") == {"lr": t.common["lr"]}  # the method table is FedLAMA's only


def test_declared_default_spaces_of_the_papers_methods():
    from fedcli.tune.space import default_space

    js = {m: {k: p.to_json() for k, p in default_space(m).items()} for m in ("fedala", "fedprox", "fedlamb", "fedavg")}
    assert js["fedala"] == {
        "lr": {"log": [0.001, 1.0]},
        "ala_lr": {"log": [0.1, 10.0]},
        "ala_sample_percent": {"choices": [5.0, 10.0, 20.0, 40.0, 80.0, 100.0]},
        "ala_layers": {"choices": [2, 4, 6]},
    }
    assert js["fedprox"]["mu"] == {"choices": [0.0001, 0.001, 0.01, 0.1]}
    assert js["fedlamb"] == {"lr": {"log": [0.0001, 0.1]}, "weight_decay": {"choices": [0.0, 0.01, 0.1]}}
    assert js["fedavg"] == {"lr": {"log": [0.001, 1.0]}}


@pytest.mark.parametrize(
    "space, extra, said",
    [
        ("lr = { log = [0.0, 1.0] }", "", "line 20: 'lr' log range [0.0, 1.0] runs through 0"),
        ("lr = { float = [-1.0, 1.0] }", "", "line 20: 'lr' range [-1.0, 1.0] is outside the option's declared bounds"),
        ("iterations = { choices = [10, 20] }", "", "line 20: 'iterations' fixes a trial's budget"),
        ("eval_every = { int = [1, 4] }", "", "line 20: 'eval_every' fixes a trial's budget"),
        ("tau = { float = [1.0, 4.0] }", "", "line 20: 'tau' is a int option; a float range does not fit it"),
        ("lrr = { log = [0.01, 1.0] }", "", "line 20: unknown option 'lrr'"),
        ("lr = { log = [0.01, 1.0] }", "sampler_x = 1", "line 18: unknown key 'sampler_x' in [tune]"),
        ("phi = { choices = [0, 2] }", "", "line 20: 'phi' range [0, 2] is outside the option's declared bounds"),
        ("lr = { log = [1.0, 0.1] }", "", "line 20: 'lr' range [1.0, 0.1] is empty or runs backwards"),
    ],
)
def test_bad_space_refused_with_file_and_line(tmp_path, space, extra, said):
    with pytest.raises(ConfigError) as e:
        tune_of(tmp_path, space, extra)
    assert said in str(e.value) and str(tmp_path / "r.toml") in str(e.value)


def test_objective_on_the_test_set_refused(tmp_path):
    text = RECIPE.replace('metric = "comm_bytes", reduce = "final"', 'metric = "test_acc"')
    (tmp_path / "r.toml").write_text(text.replace("{space}", "").replace("{tune_extra}", ""))
    from fedcli.recipes import read_recipe
    from fedcli.tune.space import parse_tune

    data, t = read_recipe(tmp_path / "r.toml")
    with pytest.raises(ConfigError, match="line 17: objective metric 'test_acc' is not one of"):
        parse_tune(tmp_path / "r.toml", t, data)


def write_metrics(d, rows):
    d.mkdir(parents=True, exist_ok=True)
    cols = ["round", "iteration", "test_acc", "comm_bytes", "val_acc"]
    (d / "metrics.csv").write_text(",".join(cols) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


def test_objective_values_by_hand_and_test_acc_never_read(tmp_path):
    from fedcli.tune.objectives import value
    from fedcli.tune.space import parse_objective

    rows = [(1, 10, 0.5, 100, 0.2), (2, 20, 0.6, 200, 0.6), (3, 30, 0.7, 300, 0.4), (4, 40, 0.8, 400, 0.5)]
    write_metrics(tmp_path / "a", rows)
    o = lambda **k: parse_objective(k, "here")  # noqa: E731
    assert value(tmp_path / "a", o(metric="val_acc")) == 0.5
    assert value(tmp_path / "a", o(metric="val_acc", reduce="last3")) == pytest.approx((0.6 + 0.4 + 0.5) / 3)
    assert value(tmp_path / "a", o(metric="val_acc", reduce="best")) == 0.6
    assert (
        value(tmp_path / "a", {"metric": "val_acc", "reduce": "best", "direction": "maximize"}) == 0.6
    )  # tune.json's form
    assert value(tmp_path / "a", o(metric="val_acc", reduce="to_target(0.55)")) == 20.0  # the iteration reaching it
    assert value(tmp_path / "a", o(metric="comm_bytes", reduce="to_target(0.45)")) == 200.0  # bytes spent by then
    assert value(tmp_path / "a", o(metric="comm_bytes", reduce="to_target(0.9)")) is None  # never reached
    # the test set poisoned: the validation objective does not move; --select-on test reads it
    write_metrics(tmp_path / "a", [(r, i, 1.0 - t, c, v) for r, i, t, c, v in rows])
    assert value(tmp_path / "a", o(metric="val_acc", reduce="last3")) == pytest.approx(0.5)
    assert value(tmp_path / "a", o(metric="val_acc"), select_on="test") == pytest.approx(0.2)


def test_rungs_floor_and_hopeless_by_hand():
    from fedcli.tune.pruning import floor_of, hopeless, rung_values, rungs_of
    from fedcli.tune.space import Param

    assert rungs_of(160, 0) == [10, 20, 40, 80]
    assert rungs_of(160, 25) == [40, 80]
    # FedLAMA: lama_first_adjust 6 x the largest tau' of the space (10) = 60; warm-up 30; decay at round 20 x tau 10 =
    # 200
    space = {"tau": Param("tau", "choices", choices=(2, 10))}
    floor, why = floor_of({"algo": "fedlama", "warmup_iterations": 30, "lama_first_adjust": 6}, space)
    assert floor == 60 and len(why) == 2
    assert floor_of({"algo": "fedavg", "tau": 10, "lr_decay_at": "20,40", "lr_decay_unit": "round"}, {})[0] == 200
    # best so far at each rung passed: (10: 0.3), (20: max(0.3, 0.2) = 0.3); rung 40 not passed yet
    pts = [(10, 0.3), (20, 0.2), (30, 0.5)]
    assert rung_values(pts, [10, 20, 40], maximize=True) == {10: 0.3, 20: 0.3}
    # 10 classes: chance 0.1 + 0.05; a quarter of 160 is 40: decided at the first evaluation at or past 40
    why, at = hopeless([(20, 0.1), (40, 0.15), (60, 0.9)], 10, 160, 0)
    assert at == 40 and why.startswith("hopeless: best validation accuracy 0.1500 by iteration 40")
    assert hopeless([(20, 0.1), (40, 0.16)], 10, 160, 0) is None
    assert hopeless([(20, 0.1), (30, 0.1)], 10, 160, 0) is None  # not a quarter yet


def test_pruned_share_by_hand():
    from fedcli.cli.tune import pruned_share

    # rungs 10, 20, 40, 80 of 160: 10 + 10/2 + 20/4 + 40/8 + 80/16 = 30 of 160
    assert pruned_share(160, [10, 20, 40, 80]) == pytest.approx(30 / 160)


def test_storage_choices_and_the_password_masked(tmp_path, monkeypatch):
    from fedcli.results.masking import masked
    from fedcli.tune.study import resolve_storage, storage_label

    assert resolve_storage("journal", tmp_path) == ("journal", str(tmp_path / "optuna.journal"))
    assert resolve_storage("sqlite", tmp_path) == ("sqlite", f"sqlite:///{tmp_path / 'optuna.sqlite3'}")
    url = "postgresql+psycopg://ann:s3cr3t@db.example:5432/tune"
    assert masked(url) == "postgresql+psycopg://ann:***@db.example:5432/tune"
    monkeypatch.setenv("MY_DB", url)
    kind, what = resolve_storage("env:MY_DB", tmp_path)
    assert (kind, what) == ("url", url) and storage_label(
        kind, what
    ) == "postgresql+psycopg://ann:***@db.example:5432/tune"
    with pytest.raises(ConfigError, match="environment variable FEDCLI_TUNE_STORAGE is not set"):
        monkeypatch.delenv("FEDCLI_TUNE_STORAGE", raising=False)
        resolve_storage("env:", tmp_path)
    with pytest.raises(ConfigError) as e:
        resolve_storage("ann:s3cr3t@nowhere", tmp_path)
    assert "s3cr3t" not in str(e.value) and "ann:***@nowhere" in str(e.value)


def test_record_differs_names_both_and_trials_csv_by_hand(tmp_path):
    from fedcli.tune.study import record_differs, write_trials_csv

    old = {
        "recipe": "a.toml",
        "recipe_sha256": "1" * 64,
        "scale": "smoke",
        "objectives": [{"metric": "val_acc"}],
        "select_on": "validation",
        "storage": "journal",
        "studies": [{"name": "fedavg", "space": {"lr": {"log": [0.01, 1.0]}}, "base": {"lr": 0.1}}],
    }
    assert record_differs(old, dict(old)) is None
    assert record_differs(old, {**old, "scale": "paper"}) == "it was tuned at scale smoke, not paper"
    new = {**old, "studies": [{"name": "fedavg", "space": {"lr": {"log": [0.01, 0.5]}}, "base": {"lr": 0.1}}]}
    assert record_differs(old, new) == (
        'study fedavg\'s space {"lr": {"log": [0.01, 1.0]}} is not {"lr": {"log": [0.01, 0.5]}}'
    )
    rows = [
        {
            "study": "b",
            "number": 0,
            "state": "COMPLETE",
            "params": {"lr": 0.1},
            "values": [0.5, 7.0],
            "run": "b/trial-0000",
            "baseline": True,
        },
        {
            "study": "a",
            "number": 1,
            "state": "PRUNED",
            "params": {"lr": 0.2, "tau": 4},
            "values": None,
            "run": "a/trial-0001",
            "pruned_iteration": 40,
        },
    ]
    write_trials_csv(tmp_path, rows, ["lr", "tau"], 2)
    assert (tmp_path / "trials.csv").read_text() == (
        "study,number,state,params_lr,params_tau,values_0,values_1,run,pruned_iteration,baseline\n"
        "a,1,PRUNED,0.2,4,,,a/trial-0001,40,0\n"
        "b,0,COMPLETE,0.1,,0.5,7.0,b/trial-0000,,1\n"
    )


def test_a_journal_cut_by_a_kill_is_repaired(tmp_path):
    """A coordinator killed while appending leaves a last record without its newline and a stale lock: both go before
    the next coordinator writes (else its first record would share the cut line and Optuna would refuse the file)."""
    from fedcli.tune.study import repair_journal

    whole = b'{"op_code":0,"worker_id":"a"}\n{"op_code":4,"worker_id":"a"}\n'
    (tmp_path / "optuna.journal").write_bytes(whole + b'{"op_code":5,"wor')
    (tmp_path / "optuna.journal.lock").symlink_to(tmp_path / "gone")
    assert repair_journal(tmp_path) == 17
    assert (tmp_path / "optuna.journal").read_bytes() == whole
    assert not (tmp_path / "optuna.journal.lock").is_symlink()
    assert repair_journal(tmp_path) == 0 and (tmp_path / "optuna.journal").read_bytes() == whole


def test_a_row_cut_while_the_trial_writes_it_is_not_read(tmp_path):
    """The coordinator reads a running trial's metrics.csv as it grows: a last row without its newline (cut mid-write)
    is left out, so the best-so-far value is 0.5, not the cut cell's 0.9 (nor a half-written number)."""
    from fedcli.tune.objectives import value

    (tmp_path / "metrics.csv").write_text("round,iteration,val_acc\n1,10,0.25\n2,20,0.5\n3,30,0.9")
    assert value(tmp_path, {"metric": "val_acc", "reduce": "best"}) == 0.5
    assert value(tmp_path, {"metric": "val_acc", "reduce": "final"}) == 0.5
