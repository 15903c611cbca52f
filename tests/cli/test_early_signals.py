"""The fedcli command's first signal handlers are in place before the ``fedcli`` package imports anything
(fedcli/runtime/early.py): ``python -m fedcli`` imports the package (its API, dataclasses, inspect, ...) before
``fedcli/__main__.py`` runs, and a Ctrl-C in that window printed a KeyboardInterrupt traceback (seen under load in
test_signals.py's 0.1 s case). A program that imports fedcli keeps Python's own handler."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# imported by the interpreter at start-up (site): when fedcli.api is about to be imported, write down what SIGINT does
HOOK = """\
import os, signal, sys

class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "fedcli.api":
            h = signal.getsignal(signal.SIGINT)
            with open(os.environ["PROBE_OUT"], "w") as f:
                f.write(getattr(h, "__module__", "") + "." + getattr(h, "__name__", repr(h)))
        return None

sys.meta_path.insert(0, Probe())
"""


def sigint_when_the_api_loads(tmp_path: Path, *argv: str) -> str:
    (tmp_path / "sitecustomize.py").write_text(HOOK)
    out = tmp_path / "probe.txt"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "PROBE_OUT": str(out)}
    p = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return out.read_text()


def test_python_m_fedcli_holds_its_handlers_before_the_package_imports_its_api(tmp_path):
    assert sigint_when_the_api_loads(tmp_path, "-m", "fedcli", "--version") == "fedcli.runtime.early._handler"


def test_a_program_importing_fedcli_keeps_pythons_handler(tmp_path):
    assert sigint_when_the_api_loads(tmp_path, "-c", "import fedcli").endswith("signal.default_int_handler")
