"""A file a user names as input (a recipe, a partition, a trace: fedcli/userfiles.py) is read only when it is a regular
file of bounded size, checked on the opened file before a byte is read: a FIFO hung the command, a device such as
/dev/zero was read until the memory ran out."""

import os

import pytest

from fedcli.errors import ConfigError
from fedcli.userfiles import MiB, read_input
from runkit import error_lines, run_main


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "in.fifo"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["train", "--recipe", "FILE", "--out", "OUT"], 2, "recipe FILE: cannot be read (a FIFO, not a regular file)"),
        (["sweep", "FILE", "--dry-run"], 2, "recipe FILE: cannot be read (a FIFO, not a regular file)"),
        (
            ["train", "--partition-file", "FILE", "--device", "cpu", "--out", "OUT"],
            3,
            "FILE: a FIFO, not a regular file; expected a fedcli partition file",
        ),
    ],
)
def test_a_fifo_is_refused_not_read(args, code, needle, fifo, tmp_path, capsys):
    out = tmp_path / "run"
    args = [str(fifo) if a == "FILE" else str(out) if a == "OUT" else a for a in args]
    got, _, err = run_main(args, capsys)
    lines = error_lines(err)
    assert got == code and len(lines) == 1 and needle.replace("FILE", str(fifo)) in lines[0], err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_device_is_refused_not_read(tmp_path, capsys):
    got, _, err = run_main(["train", "--recipe", "/dev/zero", "--out", str(tmp_path / "run")], capsys)
    lines = error_lines(err)
    assert got == 2 and lines == [
        "fedcli: error: recipe /dev/zero: cannot be read (a character device, not a regular file)"
    ]


def test_read_input_bounds_the_size(tmp_path):
    path = tmp_path / "big"
    with open(path, "wb") as f:
        f.truncate(MiB + 1)
    with pytest.raises(ConfigError, match=f"--x {path}: larger than its limit of 1 MiB") as e:
        read_input(path, "--x", MiB, key="x")
    assert e.value.key == "x"
    path.write_bytes(b"a,b\n")
    assert read_input(path, "--x", MiB) == b"a,b\n"
    with pytest.raises(ConfigError, match="no such file"):
        read_input(tmp_path / "none", "--x", MiB)
