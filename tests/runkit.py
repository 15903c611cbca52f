"""Helpers for tests that run fedcli whole: in this process (exit code and output, a run interrupted by a signal), or
under ``mpiexec``. Test modules import these from here, never from each other."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedcli.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def rows(path: Path, drop=("wall_s",)) -> list[dict]:
    """A CSV's rows as text, without the timing columns ``drop``."""
    with open(path) as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


#: 10 rounds of FedLAMA's phi * tau = 4 iterations on digits (8 clients, half of them a round), a metrics row every
#: round: the in-process training of the signal and reliability tests (seconds)
TINY_RUN = {
    "mlp_hidden": 32,
    "clients": 8,
    "active_ratio": 0.5,
    "algo": "fedlama",
    "tau": 2,
    "phi": 2,
    "iterations": 40,
    "batch_size": 16,
    "lr": 0.05,
    "eval_every": 4,
}
#: the optimizer options of FedLAMA's reference code (tests/engine/test_author_optimizer.py): momentum 0.9 kept per
#: client slot across rounds, weight decay 2e-4 on the kernels and the final bias
AUTHOR_OPTIONS = (
    "--momentum 0.9 --momentum-persist slot --weight-decay 2e-4 --weight-decay-on kernels+final-bias".split()
)
#: a personalized method's run on digits: 5 clients of 2 classes each (pathological) with local test splits (a quarter),
#: 2 rounds of one local epoch, evaluated every round
PERSONAL_RUN = {
    "mlp_hidden": 32,
    "clients": 5,
    "partition": "pathological",
    "client_test_fraction": 0.25,
    "rounds": 2,
    "local_epochs": 1,
    "batch_size": 16,
    "lr": 0.3,
    "eval_every": 1,
}


def train_args(run: dict, device: str | None = "cpu", **flags) -> list[str]:
    """``fedcli train`` on digits with an MLP, one thread, quiet: the flags of ``run`` (:data:`TINY_RUN`,
    :data:`PERSONAL_RUN`) with ``flags`` over them, each ``name=value`` as ``--name value`` (dashes for underscores),
    then ``--device`` (None: fedcli's default, left out)."""
    args = ["train", "--dataset", "digits", "--model", "mlp"]
    for name, value in {**run, **flags}.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args + (["--device", device] if device else []) + ["--threads", "1", "--quiet"]


def error_lines(err: str) -> list[str]:
    """The non-empty lines of a command's stderr, less the loading line a log gets first (fedcli/cli/train.py): an
    error must be the one line left."""
    from fedcli.cli.train import LOADING_LINE

    return [l for l in err.strip().splitlines() if l.strip() and l.strip() != LOADING_LINE]


def run_main(args, capsys):
    """(exit code, stdout, stderr) of ``fedcli ARGS`` in this process, which must end by SystemExit."""
    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def interrupted(monkeypatch, capsys, out: Path, round_idx: int, sig, args: list[str]):
    """Run ``args`` in this process and send it ``sig`` inside round ``round_idx`` (at its 2nd local step); returns
    (exit code, stderr)."""
    from fedcli.fl import engine

    sync = engine.Simulation.synchronize

    def signal_me(self, cohort, layers, step, *a, **k):
        if cohort.round_idx == round_idx and step == 2:
            os.kill(os.getpid(), sig)
        return sync(self, cohort, layers, step, *a, **k)

    monkeypatch.setattr(engine.Simulation, "synchronize", signal_me)
    try:
        code, _, err = run_main(args + ["--out", str(out)], capsys)
    finally:
        monkeypatch.setattr(engine.Simulation, "synchronize", sync)
    return code, err


# Runs fedcli in a child process that sends itself ``SIG`` inside round KILL_ROUND (at its 2nd local step).
KILLER = """
import os, signal, sys
from fedcli.fl import engine
SIG, KILL_ROUND = int(sys.argv[1]), int(sys.argv[2])
orig = engine.Simulation.synchronize
def synchronize(self, cohort, layers, step, *a, **k):
    if cohort.round_idx == KILL_ROUND and step == 2:
        os.kill(os.getpid(), SIG)
    return orig(self, cohort, layers, step, *a, **k)
engine.Simulation.synchronize = synchronize
from fedcli.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


# ``fedcli ARGS`` in a child process (:func:`run_forked`): the command's own main, as a program importing fedcli runs it
FEDCLI = """
import sys
from fedcli.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def run_killed(sig: int, round_idx: int, args: list[str]) -> subprocess.CompletedProcess:
    """``fedcli ARGS`` in a child process that sends itself ``sig`` inside round ``round_idx`` (at its 2nd local
    step): a forked one (:func:`run_forked`), which fedcli cannot tell from a new interpreter but for the start."""
    return run_forked(KILLER, [str(int(sig)), str(round_idx), *args])


def imported_torch(stderr: str) -> bool:
    """Whether a process run with ``PYTHONPROFILEIMPORTTIME=1`` (python's ``-X importtime``) imported torch: its
    report names every module imported, one a line (``import time: SELF | CUMULATIVE | torch``)."""
    return re.search(r"\|\s+torch\s*$", stderr, flags=re.M) is not None


def mpirun(n, args, timeout=240, script=None, **kw):
    """``mpiexec -n N python -m mpi4py -m fedcli ARGS``, or ``python -c SCRIPT ARGS`` with ``script`` (1 OpenMP thread
    per rank)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    prog = ["-c", script] if script else ["-m", "mpi4py", "-m", "fedcli"]
    cmd = [MPIEXEC, "-n", str(n), sys.executable, *prog, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kw)


# one mpiexec, several ``fedcli`` commands in turn in the same processes: ``main`` per JSON argument list
SEQUENCE = """
import json, sys
from fedcli.cli.main import main
for args in json.loads(sys.argv[1]):
    code = main(args)
    if code not in (0, None):
        sys.exit(code)
"""


def mpirun_each(n, commands: list[list[str]], timeout=400):
    """``mpiexec -n N`` running each of ``commands`` (``fedcli`` argument lists) in turn, stopping at the first that
    fails: each rank imports torch once for all of them."""
    return mpirun(n, [json.dumps(commands)], timeout=timeout, script=SEQUENCE)


def make(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """``make ARGS`` in the repository with this interpreter as ``PY`` (and this checkout first on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), f"PY={sys.executable}", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: the files of a --system run that two ways of running it (workers, processes, a resume) must give to the bit
SYSTEM_FILES = ("system.csv", "layers.csv")


def assert_same_system_files(a: Path, b: Path) -> None:
    """``system.csv`` and ``layers.csv`` byte for byte, and metrics.csv's simulated times, of run folders a and b."""
    for name in SYSTEM_FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert [r["sim_time_s"] for r in rows(a / "metrics.csv")] == [r["sim_time_s"] for r in rows(b / "metrics.csv")]


def assert_same_system_run(a: Path, b: Path) -> None:
    """Every metrics.csv column but wall_s (sim_time_s included) and the system files, of run folders a and b."""
    assert rows(a / "metrics.csv") == rows(b / "metrics.csv")
    assert_same_system_files(a, b)


def assert_same_clients(a: Path, b: Path, n_rows: int) -> None:
    """clients.csv of run folders a and b (one run on 1 and on 2 processes): ``n_rows`` rows each, the same round,
    iteration, client and sample counts, each loss and accuracy within 1e-5 (an empty cell, a model not evaluated,
    empty in both)."""
    one, two = rows(a / "clients.csv"), rows(b / "clients.csv")
    assert len(one) == len(two) == n_rows
    for x, y in zip(one, two):
        for col in ("round", "iteration", "client", "train_samples", "test_samples"):
            assert x[col] == y[col], (a, col, x, y)
        for col in ("personal_loss", "personal_acc", "global_loss", "global_acc"):
            u, v = x[col], y[col]
            assert u == v if "" in (u, v) else abs(float(u) - float(v)) <= 1e-5, (a, col, x, y)


def mpi_1_and_2(tmp_path: Path, args: list[str], timeout: int = 150) -> dict[int, Path]:
    """``args`` (a ``train`` command without ``--out``) in one process (this one: what ``mpiexec -n 1`` runs, less an
    interpreter importing torch) and under ``mpiexec -n 2``: {n: its run folder}."""
    runs = {n: tmp_path / f"mpi{n}" for n in (1, 2)}
    assert main([*args, "--out", str(runs[1])]) == 0
    p = mpirun(2, [*args, "--out", str(runs[2])], timeout=timeout)
    assert p.returncode == 0, p.stderr
    return runs


def killed_and_resumed(args: list[str], ref: Path, out: Path, round_idx: int = 5) -> None:
    """``args`` (a ``train`` command without ``--out``, with checkpoints) run whole into ``ref``, and into ``out``
    SIGKILLed inside round ``round_idx``, then ``--resume``d once the watchdog has marked it: both are to be
    compared."""
    import signal
    import time

    from fedcli.cli.main import main

    assert main([*args, "--out", str(ref)]) == 0
    p = run_killed(signal.SIGKILL, round_idx, [*args, "--out", str(out)])
    assert p.returncode == -signal.SIGKILL, p.stderr
    for _ in range(300):  # the watchdog marks the run failed
        if json.loads((out / "manifest.json").read_text())["status"] != "running":
            break
        time.sleep(0.1)
    assert main(["train", "--resume", str(out), "--quiet"]) == 0


def run_forked(
    script: str, argv: list[str], env: dict | None = None, cwd: Path | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """What ``python -c SCRIPT ARGV`` gives (exit code, -N when signal N ended it; stdout; stderr), run in a forked copy
    of this process instead of a new interpreter: torch and fedcli are already imported (about 2 s of CPU saved a
    start). It is still a process of its own, for the tests that need one (a SIGKILL mid-run, a watchdog, a lock left by
    a dead pid): its own pid, file descriptors 0-2 (/dev/null, files read back here), default signal dispositions and
    ``env`` (else this process's environment) and ``cwd``; it ends by ``os._exit``, running nothing of this process's
    (no atexit, no pytest teardown)."""
    child = start_forked(script, argv, env=env, cwd=cwd)
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    out, err = child.communicate()
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


class Forked:
    """A child of :func:`start_forked` while it runs, asked as a ``subprocess.Popen`` is: ``pid``, ``args``,
    ``returncode`` (None while it runs; -N when signal N ended it), ``poll``, ``wait``, ``send_signal``, ``kill``,
    ``communicate`` (its stdout and stderr as text, once it has ended)."""

    def __init__(self, pid: int, args: list[str], out, err):
        self.pid, self.args, self.returncode = pid, args, None
        self._files = (out, err)

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        text = []
        for f in self._files:
            f.seek(0)
            text.append(f.read().decode(errors="replace"))
        return text[0], text[1]


def start_forked(script: str, argv: list[str], env: dict | None = None, cwd: Path | None = None) -> Forked:
    """:func:`run_forked`'s child, started and left running (as ``subprocess.Popen`` leaves a process): for a test that
    works beside it (reads its files, takes its lock, stops it)."""
    import tempfile

    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        _forked_child(script, argv, env, cwd, out, err)  # never returns
    return Forked(pid, ["<forked>", *map(str, argv)], out, err)


def _forked_child(script: str, argv: list[str], env: dict | None, cwd: Path | None, out, err) -> None:
    """The forked child (:func:`run_forked`): SCRIPT with ARGV as ``python -c`` runs it, then ``os._exit``."""
    import faulthandler
    import io
    import signal
    import traceback

    code = 1
    try:
        faulthandler.disable()
        signal.alarm(0)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = ["-c", *map(str, argv)]
        try:
            exec(compile(script, "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
