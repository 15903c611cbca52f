"""fedcli/runtime/warm.py: a process forked from the warm server gets what a spawned one got (the starter's
environment as it is at the start, its working directory, its standard output and error), finds torch imported, and
a process forked from a starter starts a server of its own."""

import os
import sys

from fedcli.runtime import warm


def _report(path: str, name: str) -> None:
    """A warm process's target: what it sees, into ``path`` and onto its standard output and error."""
    seen = {
        "env": os.environ.get(name),
        "cwd": os.getcwd(),
        "torch_loaded": "torch" in sys.modules,
        "ppid": os.getppid(),
    }
    with open(path, "w") as f:
        f.write(repr(seen))
    print(f"out of {os.getpid()}", flush=True)
    print(f"err of {os.getpid()}", file=sys.stderr, flush=True)


def _start(path, name):
    p = warm.context().Process(target=warm.run, args=(warm.inherit(), _report, (str(path), name)))
    p.start()
    p.join(60)
    return p


def test_a_warm_process_has_the_starters_environment_directory_and_output_of_its_start(tmp_path, monkeypatch, capfd):
    _start(tmp_path / "first", "FEDCLI_WARM_TEST")  # the server is running from here on (or was already)
    monkeypatch.setenv("FEDCLI_WARM_TEST", "set after the server started")
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    p = _start(tmp_path / "second", "FEDCLI_WARM_TEST")
    assert p.exitcode == 0
    seen = eval((tmp_path / "second").read_text())
    assert seen["env"] == "set after the server started"
    assert seen["cwd"] == str(tmp_path)
    assert seen["torch_loaded"]  # imported by the server once, before it forked this process
    assert seen["ppid"] != os.getpid()  # the server's child, not this process's
    cap = capfd.readouterr()
    assert f"out of {p.pid}" in cap.out and f"err of {p.pid}" in cap.err


def test_a_process_forked_from_a_starter_starts_its_own_server(tmp_path):
    _start(tmp_path / "parent", "HOME")  # this process's server runs
    pid = os.fork()
    if pid == 0:  # the child: the parent's server is not its child (waitpid on it fails), so it starts its own
        code = 1
        try:
            p = _start(tmp_path / "child", "HOME")
            code = 0 if p.exitcode == 0 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert eval((tmp_path / "child").read_text())["torch_loaded"]


def test_a_warm_command_is_the_program_with_its_own_group_log_and_exit_code(tmp_path, monkeypatch):
    """``warm.Command``: fedcli's main with the command line ``python -m fedcli ARGS`` (so its manifest records it),
    its output in the log, in a process group of its own, handling SIGTERM as the fedcli command does; a SIGTERM to
    every process (scancel) leaves the server, which reports the exit code."""
    import json
    import signal
    import time

    from fedcli.version import __version__

    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "version.log", "w") as log:
        cmd = warm.Command("fedcli", "fedcli.cli.main:main", ["--version"], log.fileno())
    assert cmd.wait(60) == 0 and cmd.returncode == 0
    assert __version__ in (tmp_path / "version.log").read_text()

    args = ["train", "--dataset", "digits", "--model", "mlp", "--iterations", "100000", "--workers", "1"]
    args += ["--out", "run", "--quiet"]
    with open(tmp_path / "train.log", "w") as log:
        cmd = warm.Command("fedcli", "fedcli.cli.main:main", args, log.fileno())
    try:
        for _ in range(600):
            if (tmp_path / "run" / "manifest.json").exists():
                break
            time.sleep(0.1)
        manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
        assert manifest["command"][1:] == args and manifest["command"][0].endswith("__main__.py")
        assert os.getpgid(cmd.pid) == cmd.pid != os.getpgid(0)
        assert cmd.poll() is None
        stat = open(f"/proc/{cmd.pid}/stat").read()
        assert stat.split()[1] == "(fedcli-train)"  # scanf's %s reads it whole (Slurm's proctrack/linuxproc does)
        server = int(stat.rsplit(")", 1)[1].split()[1])
        # scancel signals every process of the job: the server lives on to tell the code
        os.kill(server, signal.SIGTERM)
        os.kill(cmd.pid, signal.SIGTERM)  # fedcli's own handling, as in a new interpreter: checkpoint, interrupted, 143
        assert cmd.wait(60) == 128 + signal.SIGTERM
    finally:  # a failed check leaves no training of 100,000 iterations behind
        if cmd.poll() is None:
            os.killpg(cmd.pid, signal.SIGKILL)
            cmd.wait(60)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["status"] == "interrupted"


def test_a_warm_command_of_a_script_has_the_commands_first_signal_handlers(tmp_path):
    """Started by a program whose ``__main__`` is a script (the ``fedcli`` console script, as ``fedcli tune`` is), the
    command's process re-imports that script as ``__mp_main__`` (multiprocessing's preparation), which no longer says
    the process is the fedcli command: the first signal handlers are installed all the same."""
    import subprocess

    (tmp_path / "probe.py").write_text(
        "import signal\n"
        "from fedcli.runtime import early\n"
        "def main(argv):\n"
        "    print(early._STATE['installed'], signal.getsignal(signal.SIGTERM) is early._handler, flush=True)\n"
        "    return 0\n"
    )
    (tmp_path / "starter.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from fedcli.runtime import warm\n"
        "if __name__ == '__main__':\n"
        f"    with open({str(tmp_path / 'probe.log')!r}, 'w') as log:\n"
        "        cmd = warm.Command('fedcli', 'probe:main', ['x'], log.fileno())\n"
        "    sys.exit(cmd.wait(60))\n"
    )
    p = subprocess.run([sys.executable, str(tmp_path / "starter.py")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "probe.log").read_text().split() == ["True", "True"]
