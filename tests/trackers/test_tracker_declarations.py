"""The trackers' names are declared apart from their code (issue 60, item 4): ``fedcli.specs.trackers`` holds each
``--tracker`` name, its library and its class as a string, so checking ``--tracker`` in the config imports no tracker
code (``fedcli.config`` no longer imports ``fedcli.trackers``, and the import-linter ignore list is empty)."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedcli.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import sys
from fedcli.config import TrainConfig
cfg = TrainConfig(tracker="TensorBoard, tensorboard").validate()
print(cfg.tracker, sorted(m for m in sys.modules if m.startswith("fedcli.trackers")))
"""


def test_config_checks_tracker_names_without_the_trackers_package():
    p = subprocess.run(
        [sys.executable, "-c", CHECK],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["tensorboard", "[]"]


def test_the_import_linter_ignore_list_is_empty():
    (top, *_) = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert top.get("ignore_imports", []) == []


def test_each_built_in_class_is_the_one_its_declaration_names():
    import importlib

    from fedcli.specs.trackers import DECLARED_TRACKERS
    from fedcli.trackers import TRACKERS

    for name, declared in DECLARED_TRACKERS.items():
        module, _, cls = declared.impl.partition(":")
        assert TRACKERS[name] is getattr(importlib.import_module(module), cls)
        assert (TRACKERS[name].name, TRACKERS[name].package) == (name, declared.package)


def test_a_tracker_of_your_own_is_declared_by_registering_it():
    from fedcli.config import TrainConfig
    from fedcli.specs.trackers import DECLARED_TRACKERS
    from fedcli.trackers import TRACKERS, Tracker, register_tracker

    class Mine(Tracker):
        name, package = "mine-test", "json"  # a library every Python has

    try:
        with pytest.raises(ConfigError, match="unknown tracker 'mine-test'; choose one of: mlflow, tensorboard, wandb"):
            TrainConfig(tracker="mine-test").validate()
        register_tracker(Mine)
        assert TrainConfig(tracker="mine-test").validate().tracker == "mine-test"
        with pytest.raises(TypeError, match="a name of its own"):
            register_tracker(Mine)
    finally:
        TRACKERS.pop("mine-test", None)
        DECLARED_TRACKERS.pop("mine-test", None)
