"""Every command of the ```bash blocks of README.md and of the docs pages (docs/*.md, in mkdocs.yml's order) runs, as
written, in a fresh sandbox of its own (so the documentation cannot drift; emptied for each test, at one path:
``box_dir``), and what it produced is checked: a train's run directory completed with metrics rows and a model, a
partition file of the named clients, a report's output and figure files, a sweep's plan, the example's data files. A
command that reads what earlier commands wrote (``fedcli report results/lama`` after ``fedcli train ... --out
results/lama``) runs those first, in its sandbox; the bare ``fedcli report`` (everything under results/) runs the
first command that writes there. Earlier means: README.md first, then the pages in mkdocs.yml's nav order, each top
to bottom. No test depends on another's files. Blocks fenced
```sh hold commands with placeholders, or that need a GPU, a cluster or hours: they are shown, not run. README.md is
the front page: at most 400 lines.

The sandbox is a folder holding the repository's recipes/ and examples/ (symlinks) with the shared data beside it
(``../shared``), like a fresh clone. Budgets are made small, nothing else is changed:

- ``fedcli train``: ``--iterations 5`` (``--rounds 1`` for a round budget) and ``--threads 1``;
- ``fedcli sweep``: ``--dry-run`` (validates the recipe and plans every run); the slow test runs the README's smoke
  sweep for real with one seed, then its report;
- ``fedcli tune`` (a study, not ``--promote``/``--confirm``): ``--dry-run`` (validates the recipe and plans the studies;
  tests/sweep/test_tune_*.py run studies for real);
- ``fedcli bench``: workload c, one timed step, no warm-up (still about a minute: marked slow);
- ``.venv/bin/...`` is this interpreter's environment; MPI runs under a timeout.

Skipped, each with its reason: commands that download (``--download``, ``make install``), the test suite itself
(``make test``), other ``make`` targets, a GPU command, ``--resume`` (needs an interrupted run), a report of a sweep
that ran as --dry-run (run by the slow test), and commands needing the shared data when it is not beside the
repository.

What a command wrote to the paths it names (a train's --out, a partition file, the example's data) is kept for the
session (``made``): a later test that needs that command first gets a copy instead of running it again (the FEMNIST
report of docs/usage.md reads two trainings of about 10 s each). Each command is still run, and checked, by its own
test, but for one case: a planned-only sweep or study whose command, as run here (``--dry-run`` added), is one an
earlier test ran and checked in this session (``fedcli tune RECIPE --dry-run`` shown first, then the same command
without ``--dry-run``): it writes nothing and says the same, so its test checks that run's exit code and output
(``planned``; each such dry run of a paper-scale recipe times a model step and probes its data, seconds each).
"""

import csv
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from simkit import SHARED

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SMALL_ITERATIONS = "5"
FRONT_PAGE_LINES = 400


def doc_pages() -> list[Path]:
    """README.md, then the docs pages in mkdocs.yml's nav order, then any page the nav leaves out (sorted)."""
    nav = re.findall(r"^\s*-\s*(?:[^:\n]*:\s*)?([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = [ROOT / "docs" / name for name in nav]
    return [ROOT / "README.md", *pages, *sorted(set((ROOT / "docs").glob("*.md")) - set(pages))]


def block_commands(path: Path) -> list[tuple[str, str]]:
    """(id, command) of every command line in one page's ```bash blocks (continuations joined, comments dropped)."""
    text = path.read_text()
    out = []
    for b, block in enumerate(re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M), 1):
        joined = re.sub(r"\\\n\s*", " ", block)
        k = 0
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                k += 1
                out.append(
                    (
                        f"{path.stem}-block{b}-{k}-{words[0].rsplit('/', 1)[-1]}-{words[1] if len(words) > 1 else ''}",
                        " ".join(shlex.quote(w) for w in words),
                    )
                )
    return out


def readme_commands() -> list[tuple[str, str]]:
    """(id, command) of every command of README.md and the docs pages, in reading order; a command shown twice once."""
    seen, out = set(), []
    for path in doc_pages():
        for i, cmd in block_commands(path):
            if cmd not in seen:
                seen.add(cmd)
                out.append((i, cmd))
    return out


COMMANDS = readme_commands()


def set_option(argv: list[str], flag: str, value: str) -> list[str]:
    if flag in argv:
        i = argv.index(flag)
        return argv[: i + 1] + [value] + argv[i + 2 :]
    return argv + [flag, value]


def small_train(argv: list[str]) -> list[str]:
    argv = (
        set_option(argv, "--rounds", "1") if "--rounds" in argv else set_option(argv, "--iterations", SMALL_ITERATIONS)
    )
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
        self.dry_sweeps: dict[str, str] = {}  # the folder of a sweep planned with --dry-run -> its recipe
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def plan(self, argv: list[str]) -> tuple[list[str] | None, str | None]:  # noqa: C901
        """(the command to run, or None and why it is skipped)."""
        if "../shared/" in " ".join(argv) and not (self.repo.parent / "shared" / "datasets").is_dir():
            return None, f"the data beside the repository ({SHARED}) is not there"
        if argv[0] == "make":
            return None, {"install": "downloads packages (network)", "test": "it is this test suite"}.get(
                argv[1], "not a fedcli step"
            )
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
            self.dry_sweeps[sweep_out(argv)] = argv[2]
            return argv + ([] if "--dry-run" in argv else ["--dry-run"]), None
        if cmd == "tune" and not {"--promote", "--confirm"} & set(argv):  # a study for real: tests/sweep/test_tune_*.py
            return argv + ([] if "--dry-run" in argv else ["--dry-run"]), None
        if cmd == "report" and "--paper" in argv:
            return (
                None,
                "a paper's section reads real sweeps (test_readme_smoke_sweep_and_report runs it after the "
                "smoke sweep, slow)",
            )
        if cmd == "report" and len(argv) > 2 and argv[2] in self.dry_sweeps:
            recipe = self.dry_sweeps[argv[2]]
            if "--table" in argv:  # the table it asks for is one its recipe makes (the dry run checked the rest)
                with open(self.repo / recipe, "rb") as f:
                    tables = [t["name"] for t in tomllib.load(f).get("tables", [])]
                assert argv[argv.index("--table") + 1] in tables, f"{' '.join(argv)}: {recipe} has the tables {tables}"
            return None, (
                f"{argv[2]} is from a sweep that ran with --dry-run here (test_readme_smoke_sweep_and_report runs "
                "the first smoke sweep and its report for real, slow)"
            )
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


def outputs(argv: list[str]) -> list[str]:
    """The paths a README command writes (relative to the repository folder)."""
    if argv[:2] == ["fedcli", "train"] or (argv[0].endswith("mpiexec") and "train" in argv):
        return [argv[argv.index("--out") + 1]] if "--out" in argv else ["results"]
    if argv[:2] == ["fedcli", "partition"] and "--out" in argv:
        return [argv[argv.index("--out") + 1]]
    if argv[:2] == ["fedcli", "sweep"]:
        return [] if "--dry-run" in argv else [sweep_out(argv)]
    if argv[0] in ("python", "python3") and argv[1].startswith("examples/"):
        return [argv[-1]]
    return []


def inputs(argv: list[str]) -> list[str]:
    """The paths a README command reads that other README commands write."""
    if argv[:2] == ["fedcli", "report"]:
        paths = list(itertools.takewhile(lambda a: not a.startswith("-"), argv[2:]))  # the folders, before any option
        return paths or ["results"]
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--data-dir", "--partition-file", "--resume")]


def producers(index: int) -> list[str]:
    """The earlier README commands whose outputs command ``index`` reads (for the bare report, the first that writes
    under results/), in README order."""
    argv = shlex.split(COMMANDS[index][1])
    need, out = inputs(argv), []
    for k in range(index):
        made = outputs(shlex.split(COMMANDS[k][1]))
        # "results" (a train without --out: results/<algo>-<dataset>-s<seed>-<time>) feeds only the bare report
        if any(
            p == m or (m != "results" and p.startswith(m + "/")) or (p == "results" and m.startswith("results"))
            for p in need
            for m in made
        ):
            out.append(k)
            if need == ["results"]:
                break
    chain = [i for k in out for i in producers(k)] + [COMMANDS[k][1] for k in out]
    return list(dict.fromkeys(chain))  # each once, in order


class Made:
    """What README commands wrote, by command (as the README writes it), kept for the session: only commands whose
    every output is a path they name (not a train's generic results/<run>, which the bare report also reads)."""

    def __init__(self, root: Path):
        self.root = root
        self.kept: dict[str, Path] = {}

    @staticmethod
    def paths(cmd: str) -> list[str]:
        made = outputs(shlex.split(cmd))
        return made if made and "results" not in made else []

    def copy(self, cmd: str, src: Path, dst: Path) -> None:
        for rel in self.paths(cmd):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            if (src / rel).is_dir():
                shutil.copytree(src / rel, dst / rel, symlinks=True)
            else:
                shutil.copy2(src / rel, dst / rel, follow_symlinks=False)

    def keep(self, cmd: str, box: "Sandbox") -> None:
        """(a sweep planned with --dry-run wrote nothing: nothing is kept; a run's trackers are waited for first: their
        process writes into the run directory after the command returned)"""
        paths = self.paths(cmd)
        if cmd not in self.kept and paths and all((box.repo / rel).exists() for rel in paths):
            for rel in paths:
                trackers_done(box.repo / rel)
            dst = self.root / str(len(self.kept))
            self.copy(cmd, box.repo, dst)
            self.kept[cmd] = dst

    def restore(self, cmd: str, box: "Sandbox") -> bool:
        """Copy what ``cmd`` wrote into ``box``; False when it has not run in this session."""
        if cmd in self.kept:
            self.copy(cmd, self.kept[cmd], box.repo)
        return cmd in self.kept


def trackers_done(path: Path, timeout: float = 240) -> None:
    """Wait until no trackers' process works on a run directory under ``path`` (``fedcli.trackers.state.wait``). Every
    run directory (its manifest.json), not only those with a trackers.json: a trackers' process that has just started
    may still be writing its first one (a full run copied its .trackers.json.tmp while it was renamed)."""
    from fedcli.trackers import state

    for run in [m.parent for m in path.rglob("manifest.json")] if path.is_dir() else []:
        assert state.wait(run, timeout), f"the trackers of {run} were still at work after {timeout} s"


@pytest.fixture(scope="session")
def made(tmp_path_factory) -> Made:
    return Made(tmp_path_factory.mktemp("readme-made"))


@pytest.fixture(scope="session")
def box_base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme-box")


@pytest.fixture
def box_dir(box_base) -> Path:
    """The folder of a test's sandbox: created empty for each test, at the same path in all of them. What a run
    measures once and keeps in fedcli's cache folder (outside the sandbox, for every test alike) is keyed by the data's
    path: ``../shared/...`` resolves to one path here, so the data-loading probe of a sweep's or study's plan runs once
    a session instead of once a test (a fresh process, about 3.5 s of CPU each), as a user's repository would see it.
    A run's trackers are waited for before the folder is emptied for the next test."""
    root = box_base / "box"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    yield root
    trackers_done(root / "repo")


@pytest.fixture(scope="session")
def planned() -> dict:
    """(exit code, output) of each planned-only sweep or study run in this session, by the command as run (a
    ``--dry-run`` writes nothing: the same command says the same in any sandbox)."""
    return {}


def plan_only(argv: list[str]) -> bool:
    """A ``fedcli sweep``/``fedcli tune`` that only plans (``--dry-run``, nothing written, nothing read that another
    README command writes)."""
    return argv[:2] in (["fedcli", "sweep"], ["fedcli", "tune"]) and "--dry-run" in argv and not inputs(argv)


def run_dirs(repo: Path) -> set[Path]:
    return {p.parent for p in (repo / "results").rglob("manifest.json")} if (repo / "results").is_dir() else set()


def check_products(box: Sandbox, argv: list[str], planned: list[str], before: set[Path], out: str) -> None:
    """What the command produced (``argv`` as README writes it; ``planned``: as run)."""
    repo = box.repo
    if "train" in argv and "--resume" not in argv:
        made = [repo / argv[argv.index("--out") + 1]] if "--out" in argv else sorted(run_dirs(repo) - before)
        assert len(made) == 1, made
        run = made[0]
        man = json.loads((run / "manifest.json").read_text())
        assert man["status"] == "completed" and (run / "model.pt").stat().st_size > 0, man.get("status")
        with open(run / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        assert rows and 0.0 <= float(rows[-1]["test_acc"]) <= 1.0 and int(rows[-1]["comm_params"]) > 0
        if argv[0].endswith("mpiexec"):
            assert man["world_size"] == int(argv[argv.index("-n") + 1])
    elif argv[:2] == ["fedcli", "partition"]:
        part = json.loads((repo / argv[argv.index("--out") + 1]).read_text())
        assert str(int(argv[argv.index("--clients") + 1])) in json.dumps(part)[:100000] and out.strip()
    elif argv[:2] == ["fedcli", "report"]:
        assert out.strip(), "the report printed nothing"
        if "--figures" in argv:
            figs = list((repo / argv[argv.index("--figures") + 1]).glob("*"))
            assert any(f.suffix in (".png", ".pdf", ".svg") and f.stat().st_size > 1000 for f in figs), figs
    elif argv[:2] == ["fedcli", "sweep"]:
        assert "--dry-run" in planned and out.strip(), "the sweep's plan is empty"
    elif argv[0] in ("python", "python3") and argv[1] == "examples/own_data.py":
        assert (repo / argv[-1] / "femnist-digits.npz").stat().st_size > 0
        assert any((repo / argv[-1] / "femnist-digits-images" / "train").rglob("*.png"))
    elif argv[:2] == ["fedcli", "bench"]:
        assert out.strip()


def test_readme_is_a_front_page():
    """README.md stays a front page; the rest lives in docs/ (and its commands are still run here)."""
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= FRONT_PAGE_LINES, f"README.md has {lines} lines; at most {FRONT_PAGE_LINES}: move sections to docs/"


def test_readme_says_each_paragraph_once():
    """The README said its `--schedule ... --init overwrite|ala` paragraph twice (issue 57): no paragraph of prose is
    repeated, word for word up to its links."""
    import re

    paragraphs = [" ".join(p.split()) for p in (ROOT / "README.md").read_text().split("\n\n")]
    prose = [re.sub(r"\[([^]]*)\]\([^)]*\)", "", p) for p in paragraphs if p and not p.startswith(("```", "|", "#"))]
    prose = [p[:200] for p in prose if len(p) > 80]
    assert len(prose) == len(set(prose)), [p for p in prose if prose.count(p) > 1][:1]


def test_readme_has_commands():
    assert len(COMMANDS) >= 15
    assert any(i.startswith("README-") for i, _ in COMMANDS) and any(not i.startswith("README-") for i, _ in COMMANDS)
    assert all(cmd.split()[0].rsplit("/", 1)[-1] in ("fedcli", "make", "python", "mpiexec") for _, cmd in COMMANDS), (
        COMMANDS
    )


def _param(i: str, cmd: str, k: int):
    # slow: `fedcli bench` (three processes per workload: about a minute even at one step), and docs/scale.md's
    # 10,000-client Ditto run: at --rounds 1, the least it can be cut to, a round of 100 clients and the personal
    # evaluation of all 10,000 take 60 to 90 s on 2 cores (about a tenth of what the rest of `make test` costs)
    slow = cmd.startswith("fedcli bench") or "--clients 10000" in cmd
    long = [pytest.mark.long(reason=why) for start, why in LONG_COMMANDS.items() if cmd.startswith(start)]
    return pytest.param(k, id=i, marks=[pytest.mark.slow] if slow else long)


#: README commands whose point `make test` holds in another test (the same command with a smaller budget, read back
#: there): the long tier runs them as written
LONG_COMMANDS = {
    "fedcli train --tracker mlflow": (
        "a default training with a second tracker process (MLflow's imports, about 5 s of CPU); make test holds "
        "`fedcli train --tracker mlflow` in tests/trackers/test_trackers.py::"
        "test_tensorboard_and_mlflow_hold_every_evaluation_config_and_figures"
    ),
    "fedcli train --workers 2": (
        "a default training on 2 worker processes (one to spawn, about 3 s of CPU); make test holds `fedcli train "
        "--workers 2` in tests/comm/test_workers.py::test_results_are_bitwise_identical_for_any_number_of_workers and "
        "the default (auto) in parallel-block1-2 here"
    ),
    "fedcli train --tracker wandb": (
        "a default training with a tracker process (W&B offline); make test holds `fedcli train --tracker wandb` in "
        "tests/trackers/test_trackers.py::test_wandb_without_api_key_runs_offline_with_every_evaluation"
    ),
}


@pytest.mark.parametrize("index", [_param(i, c, k) for k, (i, c) in enumerate(COMMANDS)])
def test_readme_command(index, box_dir, capsys, made, planned):
    box = Sandbox(box_dir)
    argv = shlex.split(COMMANDS[index][1])
    first = []
    for cmd in producers(index):
        plan, why = box.plan(shlex.split(cmd))
        if plan is None:
            pytest.skip(f"needs `{cmd}` first, which is skipped: {why}")
        first.append((cmd, plan))
    run, why = box.plan(argv)
    if run is None:
        pytest.skip(why)
    for cmd, plan in first:
        if not made.restore(cmd, box):
            code, out = box.run(plan)
            assert code == 0, f"{' '.join(plan)} (run first)\nexit {code}\n{out}"
            made.keep(cmd, box)
    capsys.readouterr()
    before = run_dirs(box.repo)
    key = tuple(run)
    if plan_only(run) and key in planned:  # the same dry run, run and checked by an earlier test (docstring)
        code, out = planned[key]
    else:
        code, out = box.run(run, timeout=300 if "mpiexec" in run[0] else 600)
        out += capsys.readouterr().out
    assert code == 0, f"{' '.join(run)}\nexit {code}\n{out}"
    check_products(box, argv, run, before, out)
    made.keep(COMMANDS[index][1], box)
    if plan_only(run):
        planned[key] = (code, out)


@pytest.mark.slow
def test_readme_smoke_sweep_and_report(tmp_path, capsys):
    """The README's smoke sweep for real (one seed instead of three), then its report command as written, then every
    ``fedcli report DIR --paper NAME`` of the pages that reads that sweep (its section.tex and section.md written)."""
    box = Sandbox(tmp_path)
    lines = [shlex.split(c) for _, c in COMMANDS]
    sweep = next(a for a in lines if a[:2] == ["fedcli", "sweep"] and "smoke" in a)
    report = next(a for a in lines if a[:2] == ["fedcli", "report"] and len(a) > 2 and a[2] == sweep_out(sweep))
    if not (tmp_path / "shared" / "datasets").is_dir():
        pytest.skip(f"the data beside the repository ({SHARED}) is not there")
    assert box.run(set_option(sweep, "--seeds", "1"))[0] == 0
    assert box.run(report)[0] == 0
    assert "smoke scale of:" in capsys.readouterr().out
    papers = [
        a for a in lines if a[:2] == ["fedcli", "report"] and "--paper" in a and sweep_out(sweep).startswith(a[2] + "/")
    ]
    assert papers, "no `fedcli report DIR --paper NAME` of the pages reads the smoke sweep"
    for argv in papers:
        assert box.run(argv)[0] == 0, argv
        out = (
            argv[argv.index("--output") + 1]
            if "--output" in argv
            else f"{argv[2]}/paper-{argv[argv.index('--paper') + 1]}"
        )
        assert all((box.repo / out / f).stat().st_size > 0 for f in ("section.tex", "section.md")), out
