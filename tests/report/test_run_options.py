"""The report reads a run's method options through the declarations its parts were built with (typed), not by
string key: ``RunData.params(kind)`` (``fedcli.params.recorded``); docs/method-contract.md, "The path of a method
option"."""

import ast
import re
from pathlib import Path

import srckit
from fedcli.params import SECTIONS
from fedcli.reports.rundata import RunData
from fedcli.reports.tables import phi_of

REPORT = Path(__file__).resolve().parents[2] / "fedcli" / "reports"


def run(tmp_path, **config):
    cfg = {"algo": "fedlama", "tau": 3, **config}
    return RunData(tmp_path, {"config": cfg, "method": {"name": cfg["algo"], "schedule": "lama", "layerwise": True}})


def test_a_runs_schedule_options_are_read_typed_with_defaults_for_older_runs(tmp_path):
    p = run(tmp_path, phi=4, lama_rule="paper").params("schedule")
    assert (p.phi, p.tau, p.lama_rule, p.lama_eligible) == (4, 3, "paper", "kernels")  # a default for the unrecorded
    assert type(p).__mro__[1].__name__ == "LamaParams"  # the spec's own dataclass, with its types
    older = run(tmp_path)  # a run recorded before phi was (its manifest lacks it): the declared default
    assert older.params("schedule").phi == 2 and phi_of(older) == 2
    assert run(tmp_path, phi=4).legend() == "FedLAMA (τ′=3, φ=4)"
    periodic = RunData(tmp_path, {"config": {"algo": "fedavg", "tau": 5, "phi": 9}, "method": {"name": "fedavg"}})
    assert phi_of(periodic) == 1 and not hasattr(periodic.params("schedule"), "phi")  # phi is not FedAvg's


def test_the_report_reads_no_method_option_by_string_key():
    """No ``config.get("phi")`` or ``config["mu"]`` for a field of a method's params section in fedcli/reports."""
    general = {"system", "personal"}  # sections every run reads (not a method's)
    options = {f for name, cls in SECTIONS.items() if name not in general for f in cls.__dataclass_fields__}
    found = []
    for path in sorted(REPORT.rglob("*.py")):
        for node in ast.walk(srckit.tree(path)):
            key = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                key = node.args[0].value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            if isinstance(key, str) and key in options and re.search(r"config", ast.unparse(node)):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
