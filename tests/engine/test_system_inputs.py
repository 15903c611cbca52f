"""The system model's inputs (``fedcli train --system ...``; fedcli/specs/system.py, fedcli/userfiles.py): every value
bounded so that a run's simulated time stays finite, a trace one row per client and a regular file of bounded size
read before anything is written, a trace edited under a stopped run refused by ``--resume``, a bare number a
constant, ``--on-deadline`` without a deadline refused, and a trace run's manifest recording only what it used."""

import hashlib
import json
import os
import signal
import time

import pytest

import runkit
from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.errors import ConfigError
from fedcli.fl.rng import np_gen
from fedcli.fl.system import draw
from runkit import error_lines, run_main
from systemkit import BASE, TRACE, system, table

ARGS = BASE + ["--algo", "fedavg", "--tau", "2", "--iterations", "4"]


def refused(capsys, tmp_path, extra, needle):
    """``fedcli train`` with ``extra`` exits 2 with one line holding ``needle`` and writes nothing."""
    out = tmp_path / "run"
    code, _, err = run_main(ARGS + ["--out", str(out), "--system", *extra], capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize(
    "flags, needle",
    [
        # values whose simulated time overflowed to inf (exit 0, sim_time_s = inf) or raised OverflowError (exit 1)
        (["--latency", "constant:1e308"], "--latency 'constant:1e308': its values must lie in [0, 1e+09] s"),
        (["--server-time", "1e308"], "--server-time must be <= 1000000000.0, got 1e+308"),
        (["--speed", "constant:1e-300"], "--speed 'constant:1e-300': its values must lie in [1, 1e+24] FLOP/s"),
        (["--deadline", "1e308"], "--deadline must be <= 1000000000.0, got 1e+308"),
        (["--uplink", "uniform:1,1e300"], "--uplink 'uniform:1,1e300': its values must lie in [1, 1e+18] bytes/s"),
        (["--downlink", "tiers:1e300@0.5,1@0.5"], "every tier's value must lie in [1, 1e+18] bytes/s"),
        (["--speed", "lognormal:1e9,1000"], "a log-normal's spread must be at most 10"),
        (["--speed", "lognormal:2,3"], "--speed 'lognormal:2,3': client 0's draw 0.16"),  # a draw below 1 FLOP/s
        (["--on-deadline", "keep-partial"], "--on-deadline keep-partial needs a --deadline"),
    ],
)
def test_unbounded_values_are_refused_before_anything_is_written(flags, needle, tmp_path, capsys):
    refused(capsys, tmp_path, flags, needle)


@pytest.mark.parametrize(
    "text, needle",
    [
        (
            TRACE + "1,1e9,1e6,1e6,0.1\n",
            "line 4: a second row for client 1 (the first is line 3); expected one row per client",
        ),
        (TRACE.replace("0,56832", "0,1e-300"), "line 2: speed 1e-300 is outside [1, 1e+24] FLOP/s"),
        (TRACE.replace("0.25\n", "1e308\n"), "line 3: latency 1e+308 is outside [0, 1e+09] s"),
        (TRACE + "-1,1e9,1e6,1e6,0.1\n", "line 4: client -1 is not a client index (from 0)"),
    ],
)
def test_a_bad_system_trace_is_refused_naming_the_line(text, needle, tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text(text)
    refused(capsys, tmp_path, ["--system-trace", str(path)], f"--system-trace {path}, {needle}")


def test_an_availability_interval_past_the_bound_is_refused(trace, tmp_path, capsys):
    path = tmp_path / "av.csv"
    path.write_text("client,start,end\n0,0,inf\n1,1e300,inf\n")
    refused(
        capsys, tmp_path, ["--availability-trace", str(path)], "line 3: the interval starts at 1e+300 s, after 1e+09 s"
    )


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


@pytest.mark.timeout(60)  # a FIFO was read forever, /dev/zero until the OOM killer
@pytest.mark.parametrize("option", ["--system-trace", "--availability-trace"])
@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "too big"])
def test_a_trace_must_be_a_regular_file_of_bounded_size(option, kind, tmp_path, capsys):
    path = tmp_path / "t.csv"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = "/dev/zero"
    elif kind == "folder":
        path.mkdir()
    else:  # a sparse file one byte over the limit (64 MiB): refused on its size, before a byte is read
        with open(path, "wb") as f:
            f.truncate(64 * 2**20 + 1)
    needle = {
        "fifo": "a FIFO, not a regular file",
        "device": "a character device, not a regular file",
        "folder": "a folder, not a regular file",
        "too big": "larger than its limit of 64 MiB",
    }[kind]
    refused(capsys, tmp_path, [option, str(path)], f"{option} {path}: {needle}")


def test_the_trace_is_checked_by_the_config_before_the_run_folder_is_made(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE + "0,1e9,1e6,1e6,0.1\n")
    with pytest.raises(ConfigError, match="line 4: a second row for client 0") as e:
        TrainConfig(system=True, system_trace=str(path)).validate()
    assert e.value.exit_code == 2 and e.value.key == "system_trace"


def test_a_bare_number_is_a_constant(tmp_path):
    g = np_gen(0, "system", "speed")
    assert draw("1e9", 3, g, "speed").tolist() == [1e9] * 3
    assert draw(" 0.05 ", 2, g, "latency").tolist() == [0.05] * 2
    TrainConfig(system=True, speed="1e9", uplink="3e4", latency="0").validate()


def test_a_trace_runs_manifest_records_what_it_used(trace, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(ARGS + ["--out", str(out), *system("trace.csv")]) == 0  # the path as typed, relative
    man = json.loads((out / "manifest.json").read_text())["system"]
    assert not {"speed", "uplink", "downlink", "latency"} & set(man)  # the draws the trace replaced: not used
    assert man["trace"] == {
        "path": "trace.csv",
        "resolved": str(trace.resolve()),
        "sha256": hashlib.sha256(TRACE.encode()).hexdigest(),
    }
    drawn = tmp_path / "drawn"
    assert main(ARGS + ["--out", str(drawn), "--system", "--speed", "1e9"]) == 0
    man = json.loads((drawn / "manifest.json").read_text())["system"]
    assert man["speed"] == "1e9" and man["latency"] == "constant:0.05" and "trace" not in man


def wait_stopped(out):
    for _ in range(300):  # the watchdog marks the killed run failed
        if json.loads((out / "manifest.json").read_text())["status"] != "running":
            return
        time.sleep(0.1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("edited", ["--system-trace", "--availability-trace"])
def test_resume_refuses_a_trace_edited_since_the_run_started(edited, trace, tmp_path, capsys):
    avail = tmp_path / "on.csv"
    avail.write_text("client,start,end\n0,0,inf\n1,0,inf\n")
    out = tmp_path / "run"
    args = BASE + [
        "--algo",
        "fedavg",
        "--tau",
        "2",
        "--iterations",
        "12",
        "--checkpoint-every",
        "2",
        "--workers",
        "1",
        *system(trace, "--availability-trace", str(avail)),
    ]
    p = runkit.run_killed(signal.SIGKILL, 4, args + ["--out", str(out)])
    assert p.returncode == -signal.SIGKILL, p.stderr
    wait_stopped(out)
    before = {name: (out / name).read_bytes() for name in ("metrics.csv", "system.csv", "manifest.json")}
    path = trace if edited == "--system-trace" else avail
    original = path.read_text()
    path.write_text(original.replace("0.25", "0.5") if path == trace else original.replace("1,0,inf", "1,0,1e6"))
    code, _, err = run_main(["train", "--resume", str(out), "--quiet"], capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and f"{edited} {path} changed since {out} started" in lines[0], err
    assert {name: (out / name).read_bytes() for name in before} == before  # nothing cut back or rewritten
    path.write_text(original)  # the file it started with: the run resumes
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert len(table(out / "system.csv")) == 6


def test_a_trace_error_names_the_files_line_past_blank_lines(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text(TRACE.replace("\n1,", "\n\n1,") + "0,1e9,1e6,1e6,0.1\n")  # a blank line 3: the rows on 4 and 5
    refused(capsys, tmp_path, ["--system-trace", str(path)], "line 5: a second row for client 0 (the first is line 2)")
