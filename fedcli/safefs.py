"""Never write through a symbolic link: the one place fedcli opens, creates, truncates or replaces a file it writes.

Run and sweep folders get shared, copied and downloaded; a link planted at ``manifest.json``, ``.fedcli.lock``,
``checkpoints/`` or any other path of the run-directory contract (docs/run-directory.md) must never let fedcli
write outside its own folder. Every write therefore goes through these helpers:

- :func:`open_fd` / :func:`open_file`: ``os.open`` with ``O_NOFOLLOW`` (the kernel refuses a link as the last
  path component, ``ELOOP``);
- :func:`refuse_link`: an ``lstat`` check where an API takes no flags (the target of ``os.replace``, a folder
  fedcli creates or writes into, a file handed to a library);
- :func:`make_dir`: ``mkdir -p`` whose last component must be a real folder;
- :func:`atomic_write`: a file replaced whole (temp file in the same folder, fsync, replace).

Below the results layer, so that the engine's client store (``fedcli.fl.store``) writes by the same rule.

A link is refused with one sentence naming it (:class:`LinkRefused`, exit 2: the folder holds something fedcli
will not write through; remove the link). The folder a user names (``--out``, a sweep folder) may itself be a
link: that is the user's choice of place; what fedcli creates inside it may not. Reading through a link is fine.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from fedcli.errors import ConfigError, os_error


class LinkRefused(ConfigError):
    """A path fedcli would write is a symbolic link (exit 2); the message names it and where it points."""


def _refused(path: Path) -> LinkRefused:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return LinkRefused(f"{path} is a symbolic link (to {target}); fedcli never writes through a link, so that nothing "
                       f"outside the run folder changes: remove the link (or replace it by a copy of the file) and run again")


def is_link(path: str | Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def refuse_link(path: str | Path) -> Path:
    """``path``, after checking that it is not a symbolic link (it may not exist yet)."""
    path = Path(path)
    if is_link(path):
        raise _refused(path)
    return path


def open_fd(path: str | Path, flags: int, mode: int = 0o644, doing: str = "write", name: str | Path | None = None) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC)``; a link is :class:`LinkRefused`, other errors one line naming
    ``name`` (the file a temporary ``path`` stands for) or ``path``."""
    path = Path(path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno in (errno.EEXIST, errno.ENOENT) and is_link(path)):
            raise _refused(path) from None
        raise os_error(e, name or path, doing) from None


_MODES = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "r+": os.O_RDWR, "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def open_file(path: str | Path, mode: str = "w", name: str | Path | None = None, **kwargs):
    """``open(path, mode)`` for writing that never follows a link: ``mode`` is one of w, a, r+, x (each with an
    optional ``b``); ``name``: the file to name in an error (a temporary file's target); ``kwargs`` go to
    ``os.fdopen`` (``newline``, ``encoding``)."""
    fd = open_fd(path, _MODES[mode.replace("b", "")], name=name)
    try:
        return os.fdopen(fd, mode.replace("x", "w"), **kwargs)
    except BaseException:
        os.close(fd)
        raise


def make_dir(path: str | Path, doing: str = "create") -> Path:
    """``mkdir -p path``; its last component must be a real folder (a link there is refused)."""
    path = refuse_link(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(e, path, doing) from None
    return refuse_link(path)


def replace(tmp: str | Path, path: str | Path) -> None:
    """``os.replace(tmp, path)`` unless ``path`` is a link (the rename would swap the link, but a link planted
    there is refused like everywhere else, so that the user learns of it)."""
    refuse_link(path)
    os.replace(tmp, path)


def fsync_dir(path: str | Path) -> None:
    """Make the renames and removals in folder ``path`` durable, where the OS allows fsync on a folder (POSIX)."""
    try:
        dfd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def atomic_write(path: Path, data: str | bytes | memoryview) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, flush, fsync, replace, fsync the folder.
    An OSError (disk full, read-only, ...) is one sentence naming ``path`` (``fedcli.errors.os_error``); the old file
    is untouched."""
    path = refuse_link(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    done = False
    try:
        with open_file(tmp, "wb", name=path) as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        replace(tmp, path)
        done = True
    except OSError as e:  # disk full, read-only, ...: the old file is untouched
        raise os_error(e, path) from None
    finally:
        if not done:
            tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
