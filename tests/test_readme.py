"""Every command of README.md's ```bash blocks runs, as written, in a fresh sandbox (so the README cannot drift).

The sandbox is a folder holding the repository's recipes/ and examples/ (symlinks) with the shared data beside it
(``../shared``), like a fresh clone. Budgets are made small, nothing else is changed:

- ``fedcli train``: ``--iterations 20`` (``--rounds 1`` for a round budget) and ``--threads 1``;
- ``fedcli sweep``: ``--dry-run`` (validates the recipe and plans every run); the slow test runs the README's smoke
  sweep for real with one seed, then its report;
- ``fedcli bench``: workload c, one timed step, no warm-up (still about a minute: marked slow);
- ``.venv/bin/...`` is this interpreter's environment; MPI runs under a timeout.

Skipped, each with its reason: commands that download (``--download``, ``make install``), the test suite itself
(``make test``), a GPU command, ``--resume`` (needs an interrupted run), a report of a sweep that ran as --dry-run
(run by the slow test), and commands needing the shared data when it is not beside the repository.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from simkit import SHARED

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SMALL_ITERATIONS = "20"


def readme_commands() -> list[tuple[str, str]]:
    """(id, command) of every command line in README.md's ```bash blocks (continuations joined, comments dropped)."""
    text = (ROOT / "README.md").read_text()
    out = []
    for b, block in enumerate(re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M), 1):
        joined = re.sub(r"\\\n\s*", " ", block)
        k = 0
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                k += 1
                out.append((f"block{b}-{k}-{words[0].rsplit('/', 1)[-1]}-{words[1] if len(words) > 1 else ''}", " ".join(shlex.quote(w) for w in words)))
    return out


COMMANDS = readme_commands()


def set_option(argv: list[str], flag: str, value: str) -> list[str]:
    if flag in argv:
        i = argv.index(flag)
        return argv[: i + 1] + [value] + argv[i + 2:]
    return argv + [flag, value]


def small_train(argv: list[str]) -> list[str]:
    argv = set_option(argv, "--rounds", "1") if "--rounds" in argv else set_option(argv, "--iterations", SMALL_ITERATIONS)
    return set_option(argv, "--threads", "1")


def sweep_out(argv: list[str]) -> str:
    """The folder a ``fedcli sweep`` writes (its --out, else results/<recipe stem>-<scale>)."""
    if "--out" in argv:
        return argv[argv.index("--out") + 1]
    return f"results/{Path(argv[2]).stem}-{argv[argv.index('--scale') + 1]}"


class Sandbox:
    def __init__(self, root: Path):
        self.repo = root / "repo"
        self.repo.mkdir(parents=True)
        for name in ("recipes", "examples", "Makefile"):
            (self.repo / name).symlink_to(ROOT / name)
        if SHARED.is_dir():
            (root / "shared").symlink_to(SHARED)
        self.dry_sweeps: set[str] = set()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def plan(self, argv: list[str]) -> tuple[list[str] | None, str | None]:
        """(the command to run, or None and why it is skipped)."""
        if "../shared/" in " ".join(argv) and not (self.repo.parent / "shared" / "datasets").is_dir():
            return None, f"the data beside the repository ({SHARED}) is not there"
        if argv[0] == "make":
            return None, {"install": "downloads packages (network)", "test": "it is this test suite"}.get(argv[1], "not a fedcli step")
        if argv[0] in ("python", "python3"):
            return [sys.executable, *argv[1:]], None
        if argv[0].startswith(".venv/bin/"):
            exe = BIN / argv[0].rsplit("/", 1)[-1]
            if not exe.exists():
                return None, f"{exe.name} is not installed in this environment"
            rest = [str(BIN / a.rsplit("/", 1)[-1]) if a.startswith(".venv/bin/") else a for a in argv[1:]]
            if "fedcli" in rest and "train" in rest:
                rest = small_train(rest)
            return [str(exe), *rest], None
        assert argv[0] == "fedcli", argv
        cmd = argv[1] if len(argv) > 1 else ""
        if "--download" in argv:
            return None, "--download needs the network"
        if cmd == "train":
            if "--resume" in argv:
                return None, "--resume needs an interrupted run (the run before it completed)"
            return small_train(argv), None
        if cmd == "sweep":
            self.dry_sweeps.add(sweep_out(argv))
            return argv + ([] if "--dry-run" in argv else ["--dry-run"]), None
        if cmd == "report" and len(argv) > 2 and argv[2] in self.dry_sweeps:
            return None, f"{argv[2]} is from a sweep that ran with --dry-run here (test_readme_smoke_sweep_and_report runs it, slow)"
        if cmd == "bench":
            if "cuda" in argv:
                return None, "needs a CUDA GPU"
            return set_option(set_option(set_option(argv, "--workloads", "c"), "--steps", "1"), "--warmup", "0"), None
        return argv, None

    def run(self, argv: list[str], timeout: int = 600) -> tuple[int, str]:
        """(exit code, output): fedcli commands in this process (no torch import per command), others as processes."""
        if argv[0] != "fedcli":
            p = subprocess.run(argv, cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=timeout)
            return p.returncode, p.stdout[-2000:] + p.stderr[-3000:]
        from fedcli.cli.main import main

        old = os.getcwd()
        os.chdir(self.repo)
        try:
            code = main(argv[1:]) or 0
        except SystemExit as e:
            code = e.code
        finally:
            os.chdir(old)
        return code, ""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    return Sandbox(tmp_path_factory.mktemp("readme"))


def test_readme_has_commands():
    assert len(COMMANDS) >= 15
    assert all(cmd.split()[0].rsplit("/", 1)[-1] in ("fedcli", "make", "python", "mpiexec") for _, cmd in COMMANDS), COMMANDS


def _param(i: str, cmd: str):
    slow = cmd.startswith("fedcli bench")  # three processes per workload: about a minute even at one step
    return pytest.param(cmd, id=i, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("cmd", [_param(i, c) for i, c in COMMANDS])
def test_readme_command(sandbox, cmd):
    argv, why = sandbox.plan(shlex.split(cmd))
    if argv is None:
        pytest.skip(why)
    code, out = sandbox.run(argv, timeout=300 if "mpiexec" in argv[0] else 600)
    assert code == 0, f"{' '.join(argv)}\nexit {code}\n{out}"


@pytest.mark.slow
def test_readme_smoke_sweep_and_report(tmp_path, capsys):
    """The README's smoke sweep for real (one seed instead of three), then its report command as written."""
    box = Sandbox(tmp_path)
    lines = [shlex.split(c) for _, c in COMMANDS]
    sweep = next(a for a in lines if a[:2] == ["fedcli", "sweep"] and "smoke" in a)
    report = next(a for a in lines if a[:2] == ["fedcli", "report"] and len(a) > 2 and a[2] == sweep_out(sweep))
    if not (tmp_path / "shared" / "datasets").is_dir():
        pytest.skip(f"the data beside the repository ({SHARED}) is not there")
    assert box.run(set_option(sweep, "--seeds", "1"))[0] == 0
    assert box.run(report)[0] == 0
    assert "smoke scale of:" in capsys.readouterr().out
