"""Report labels come from the parts a run's manifest records, not from a table of method names in the report."""

import ast
import json
from pathlib import Path

import pytest

import fedcli
from fedcli.cli.main import main
from fedcli.fl.parts import CODECS, INITS
from fedcli.fl.schedules import SCHEDULES
from fedcli.reports.rundata import RunData
from fedcli.specs import METHODS

PLAIN = {"local_step": "sgd", "schedule": "periodic", "codec": "identity", "init": "overwrite", "server": "average"}
TINY = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "4",
    "--iterations",
    "4",
    "--tau",
    "2",
    "--threads",
    "1",
    "--workers",
    "1",
    "--quiet",
]


def run_dir(path: Path, config: dict, method: dict) -> RunData:
    """A hand-made run directory: its manifest alone (the labels read nothing else)."""
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(
        json.dumps({"status": "completed", "config": {"tau": 5, "phi": 2, **config}, "method": method})
    )
    return RunData(path)


def test_a_method_the_report_never_heard_of_is_labelled_from_its_parts(tmp_path):
    assert "newmethod" not in METHODS
    new = {"name": "newmethod", "label": "NewMethod", "personalized": False}
    # `--algo newmethod --schedule lama`: the layer-wise schedule put in place of the preset's own
    run = run_dir(tmp_path / "lama", {"algo": "newmethod", "schedule": "lama"}, {**new, **PLAIN, "schedule": "lama"})
    assert (run.method_label(), run.legend(), run.layerwise, run.learned_init) == (
        "NewMethod + FedLAMA",
        "NewMethod + FedLAMA (τ′=5, φ=2)",
        True,
        False,
    )
    # ... and ALA's init as well: the suffixes in the order of the parts
    run = run_dir(
        tmp_path / "both",
        {"algo": "newmethod", "schedule": "lama", "init": "ala"},
        {**new, **PLAIN, "schedule": "lama", "init": "ala"},
    )
    assert (run.method_label(), run.legend(), run.learned_init) == (
        "NewMethod + ALA + FedLAMA",
        "NewMethod + ALA + FedLAMA (τ′=5, φ=2)",
        True,
    )
    # a preset whose own schedule is layer-wise (no override in the config): its label alone, a layer-wise legend
    run = run_dir(tmp_path / "own", {"algo": "newmethod"}, {**new, **PLAIN, "schedule": "lama-accelerate"})
    assert (run.method_label(), run.legend(), run.schedule) == ("NewMethod", "NewMethod (τ′=5, φ=2)", "lama-accelerate")
    # no label recorded and none in the registry: the recorded name
    run = run_dir(
        tmp_path / "bare", {"algo": "newmethod", "init": "ala"}, {"name": "newmethod", **PLAIN, "init": "ala"}
    )
    assert (run.method_label(), run.legend()) == ("newmethod + ALA", "newmethod + ALA (τ=5)")


def test_feddyn_shows_its_label(tmp_path):
    # a manifest written before labels were recorded: the registry's label of the recorded name
    run = run_dir(
        tmp_path / "old", {"algo": "feddyn"}, {"name": "feddyn", **PLAIN, "local_step": "feddyn", "server": "feddyn"}
    )
    assert (run.method_label(), run.legend()) == ("FedDyn", "FedDyn (τ=5)")
    # a run of today: the engine records the label, the report shows it
    out = tmp_path / "run"
    assert main([*TINY, "--algo", "feddyn", "--schedule", "lama", "--phi", "2", "--out", str(out)]) == 0
    assert json.loads((out / "manifest.json").read_text())["method"]["label"] == "FedDyn"
    assert RunData(out).method_label() == "FedDyn + FedLAMA"


def test_an_alias_records_its_own_label(tmp_path):
    out = tmp_path / "run"
    assert main([*TINY, "--algo", "fedsgd", "--out", str(out)]) == 0
    method = json.loads((out / "manifest.json").read_text())["method"]
    assert (method["name"], method["label"]) == ("fedavg", "Fed-SGD")
    assert METHODS["fedsgd"].label_for("fedsgd") == "Fed-SGD" and METHODS["fedavg"].label_for("fedavg") == "FedAvg"
    assert METHODS["adp-fed"].label_for("adp-fed") == METHODS["fedadam"].label_for("fedadam") == "Adp-Fed"


def strings(source: str) -> set[str]:
    """The string constants of a module's code (docstrings left out)."""
    tree = ast.parse(source)
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    }


def test_every_method_has_a_label_and_the_report_names_none():
    assert all(m.label for m in METHODS.values())
    assert {"lama", "ala"} <= strings(
        'x = {"lama": 1}\ndef f():\n    """FedAvg"""\n    return "ala"'
    ) and "FedAvg" not in strings('"""FedAvg"""')
    root = Path(fedcli.__file__).parent
    # a part's label ("+ FedLAMA": the layer-wise schedule; also the paired layout's default column title) may appear
    parts = {c.label for table in (INITS, SCHEDULES, CODECS) for c in table.values() if c.label}
    assert parts == {"FedLAMA", "ALA"}
    names = set(METHODS) | {m.label for m in METHODS.values()} - parts
    for f in [*sorted((root / "reports").glob("*.py")), root / "cli" / "report.py"]:
        assert not strings(f.read_text()) & names, f"{f.name} names methods: {sorted(strings(f.read_text()) & names)}"


@pytest.mark.parametrize("algo,label", [("fedlama", "FedLAMA"), ("fedsgd", "Fed-SGD"), ("fedala", "FedALA")])
def test_recorded_labels_win_over_the_registry(tmp_path, algo, label):
    run = run_dir(tmp_path / algo, {"algo": algo}, {"name": METHODS[algo].name, "label": "Mine"})
    assert run.method_label() == "Mine" and METHODS[algo].label_for(algo) == label
