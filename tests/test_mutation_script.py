"""``make mutation`` (scripts/mutation.py): the copy it mutates holds the whole package, and tests that fail before any
mutation stop it (they would count every mutant as killed). The mutation run itself is not part of ``make test``."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import mutation  # noqa: E402


def test_the_copy_keeps_the_results_package_and_leaves_out_the_top_results_folder(tmp_path):
    """``fedcli/results/`` is a package; left out of the copy, the shared venv's editable install imported another
    checkout's ``fedcli.results`` in its place (ImportError in the old tree's resume test: every survivor "killed")."""
    src = tmp_path / "repo"
    for f in (
        "fedcli/results/checkpoint.py",
        "fedcli/fl/adaptive.py",
        "tests/test_x.py",
        "results/mutation/a.json",
        ".venv/bin/python",
        ".git/HEAD",
        "mutation-out/a.json",
        "fedcli/__pycache__/a.pyc",
        "tests/.pytest_cache/v",
    ):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("x")
    mutation.copy_repo(tmp_path / "copy", None, root=src)
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert copied == ["fedcli/fl/adaptive.py", "fedcli/results/checkpoint.py", "tests/test_x.py"]


def test_tests_failing_before_any_mutation_stop_the_run(tmp_path):
    failing = f"{sys.executable} -c 'raise SystemExit(1)'"
    with pytest.raises(SystemExit, match="x: the tests fail on the unmutated copy"):
        mutation.check_unmutated("x", failing, tmp_path, {}, 60)
    mutation.check_unmutated("x", f"{sys.executable} -c 'pass'", tmp_path, {}, 60)  # passing tests: the run goes on


@pytest.mark.parametrize("name", sorted(mutation.TARGETS))
def test_every_target_names_a_module_and_functions_that_exist(name):
    """A target whose module moved (issue 60: ``lr_at`` from ``fl/engine.py`` to ``fl/state.py``) stopped ``make
    mutation`` at that target with an AssertionError after the other targets had run; each module is a file and each
    named function is defined in it, and its tests exist."""
    module, functions, tests = mutation.TARGETS[name]
    assert (ROOT / module).is_file(), module
    if functions:
        assert len(mutation.function_lines(ROOT / module, functions)) >= len(functions)
    assert all((ROOT / t).is_file() for t in tests), tests
