"""Files a user names as input (a system or availability trace, a partition, a recipe): only a regular file of
bounded size is read, checked on the open descriptor before a byte is read, so a FIFO (which would block the read
forever), a device such as ``/dev/zero`` (which never ends) or a file larger than its limit is refused in one line
(ConfigError, exit 2) instead of hanging the run or filling the memory. A leaf: imports only fedcli.errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fedcli.errors import ConfigError

MiB = 1 << 20

#: the largest file read for each option (docs/reliability.md, docs/system-model.md): a trace (``--system-trace``,
#: ``--availability-trace``) of a million rows of 64 characters, a partition (``--partition-file``) of about a hundred
#: million samples' indices, a recipe
TRACE_LIMIT = 64 * MiB
PARTITION_LIMIT = 1024 * MiB
RECIPE_LIMIT = 16 * MiB


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_input(path: str | Path, what: str, limit: int, key: str | None = None, fail=None) -> bytes:
    """The bytes of the file ``path`` that the option ``what`` (``--system-trace``) names, at most ``limit`` bytes.

    The file is opened without blocking (a FIFO's open waits for no writer), then its descriptor must be a regular
    file of at most ``limit`` bytes; one that grows past ``limit`` while it is read is refused too. Otherwise
    ``fail(why)`` is raised (why: "no such file", "a FIFO, not a regular file", ...), by default a ConfigError (exit
    2) naming ``what``, the file and ``key`` (the config key it is about)."""
    fail = fail or (lambda why: ConfigError(f"{what} {path}: {why}", key=key))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise fail("no such file") from None
    except OSError as e:
        raise fail(f"cannot read it ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise fail(f"{_kind(st.st_mode)}, not a regular file")
        too_big = f"larger than its limit of {limit // MiB} MiB"
        if st.st_size > limit:
            raise fail(too_big)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise fail(too_big)
        return b"".join(chunks)
    except OSError as e:
        raise fail(f"cannot read it ({e.strerror or e})") from None
    finally:
        os.close(fd)
