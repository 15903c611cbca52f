"""Never write through a symbolic link: the one place fedcli opens, creates, truncates or replaces a file it writes.

Run and sweep folders get shared, copied and downloaded; a link planted at ``manifest.json``, ``.fedcli.lock``,
``checkpoints/`` or any other path of the run-directory contract (docs/run-directory.md) must never let fedcli
write outside its own folder. Every write therefore goes through these helpers:

- :func:`open_fd` / :func:`open_file`: ``os.open`` with ``O_NOFOLLOW`` (the kernel refuses a link as the last
  path component, ``ELOOP``);
- :func:`refuse_link`: an ``lstat`` check where an API takes no flags (the target of ``os.replace``, a folder
  fedcli creates or writes into, a file handed to a library);
- :func:`make_dir`: ``mkdir -p`` whose last component must be a real folder;
- :func:`atomic_write`: a file replaced whole (temp file in the same folder, fsync, replace);
- :func:`open_dir` / :class:`Folder`: a folder held by a descriptor, reached from the folder the user named one
  component at a time (``openat`` with ``O_NOFOLLOW``), and the files in it opened, created and replaced relative to
  that descriptor: no window between a check and a write in which a link planted in the path redirects the write
  (``fedcli report``'s figures, ``--paper``'s section, ``--output``). :func:`writing_into` names the folder the user
  named for the code below it.

Below the results layer, so that the engine's client store (``fedcli.fl.store``) writes by the same rule.

A link is refused with one sentence naming it (:class:`LinkRefused`, exit 2: the folder holds something fedcli
will not write through; remove the link). The folder a user names (``--out``, a sweep folder) may itself be a
link: that is the user's choice of place; what fedcli creates inside it may not. Reading through a link is fine.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from fedcli.errors import ConfigError, os_error


class LinkRefused(ConfigError):
    """A path fedcli would write is a symbolic link (exit 2); the message names it and where it points."""


def _refused(path: Path) -> LinkRefused:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return _refused_to(path, target)


def _refused_to(path: Path, target: str) -> LinkRefused:
    return LinkRefused(
        f"{path} is a symbolic link (to {target}); fedcli never writes through a link, so that nothing "
        f"outside the run folder changes: remove the link (or replace it by a copy of the file) and run again"
    )


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


def open_fd(
    path: str | Path, flags: int, mode: int = 0o644, doing: str = "write", name: str | Path | None = None
) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC)``; a link is :class:`LinkRefused`, other errors one line naming
    ``name`` (the file a temporary ``path`` stands for) or ``path``."""
    path = Path(path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno in (errno.EEXIST, errno.ENOENT) and is_link(path)):
            raise _refused(path) from None
        raise os_error(e, name or path, doing) from None


_MODES = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "r+": os.O_RDWR,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}


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
    """Write ``data`` to ``path`` atomically: temp file in the same folder, flush, fsync, replace, fsync the folder
    (:meth:`Folder.atomic_write` in ``path``'s folder, itself reached as a path). An OSError (disk full, read-only,
    ...) is one sentence naming ``path`` (``fedcli.errors.os_error``); the old file is untouched."""
    path = refuse_link(path)
    with Folder.at(path.parent, name=path) as folder:
        folder.atomic_write(path.name, data)


#: the folders the user named for what runs now (:func:`writing_into`), innermost last
_ROOTS: ContextVar[tuple[Path, ...]] = ContextVar("fedcli_write_roots", default=())

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC


@contextmanager
def writing_into(*roots: str | Path):
    """While it lasts, each of ``roots`` is a folder the user named (``--figures DIR``, ``--output DIR``, a run
    directory): :func:`open_dir` reaches a folder below one of them from it, one component at a time without following
    a link. The root itself may be a link: that is the user's choice of place."""
    token = _ROOTS.set(_ROOTS.get() + tuple(Path(os.path.abspath(r)) for r in roots))
    try:
        yield
    finally:
        _ROOTS.reset(token)


class Folder:
    """A folder held by a descriptor (``fd``; ``path`` names it in messages). Files in it are opened, created and
    replaced relative to the descriptor with ``O_NOFOLLOW``, so a link planted at any folder of the path after the
    descriptor was taken changes nothing, and one planted at the file's own name is refused (:class:`LinkRefused`)."""

    def __init__(self, fd: int, path: Path, name: Path | None = None):
        self.fd, self.path, self._name = fd, Path(path), name

    @classmethod
    def at(cls, path: str | Path, name: str | Path | None = None) -> "Folder":
        """The existing folder ``path``, reached as a path (links in it followed: the caller's choice of place);
        ``name``: the file to name in an error instead of ``path``."""
        try:
            return cls(os.open(path, _DIR), Path(path), name)
        except OSError as e:
            raise os_error(e, name or path) from None

    def __enter__(self) -> "Folder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _link(self, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def _refused(self, name: str) -> LinkRefused:
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError:
            target = "?"
        return _refused_to(self.path / name, target)

    def open_fd(self, name: str, flags: int, mode: int = 0o644, doing: str = "write", shown: Path | None = None) -> int:
        """``openat(fd, name, flags | O_NOFOLLOW)``: :func:`open_fd` relative to the folder (``shown``: the file to
        name in an error, a temporary file's target)."""
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP or (e.errno in (errno.EEXIST, errno.ENOENT) and self._link(name)):
                raise self._refused(name) from None
            raise os_error(e, shown or self.path / name, doing) from None

    def open_file(self, name: str, mode: str = "w", **kwargs):
        """:func:`open_file` relative to the folder (``matplotlib``'s ``savefig`` writes into the file object)."""
        fd = self.open_fd(name, _MODES[mode.replace("b", "")])
        try:
            return os.fdopen(fd, mode.replace("x", "w"), **kwargs)
        except BaseException:
            os.close(fd)
            raise

    def read_text(self, name: str) -> str:
        """The text of file ``name`` in this folder, read without following a link (what fedcli wrote there, never
        what a link planted since points to)."""
        with os.fdopen(self.open_fd(name, os.O_RDONLY, doing="read"), encoding="utf-8") as f:
            return f.read()

    def names(self) -> list[str]:
        """The names in this folder (``os.listdir`` of the descriptor)."""
        return os.listdir(self.fd)

    def refuse_link(self, name: str) -> None:
        """Refuse (:class:`LinkRefused`) a link at ``name`` in this folder."""
        if self._link(name):
            raise self._refused(name)

    def size(self, name: str) -> int:
        """The size of file ``name`` in this folder, -1 when missing; a link there is refused."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return -1
        except OSError as e:
            raise os_error(e, self.path / name, "read") from None
        if stat.S_ISLNK(st.st_mode):
            raise self._refused(name)
        return st.st_size

    def unlink(self, name: str) -> None:
        """Remove file ``name`` of this folder (a link there is removed, never what it points to); gone already:
        fine."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def rmdir(self, name: str) -> None:
        """Remove the folder ``name`` of this folder if it is empty (a link there stays); otherwise nothing."""
        try:
            os.rmdir(name, dir_fd=self.fd)
        except OSError:
            pass

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` of this folder and everything in it, relative to the descriptor (``rmtree`` with
        ``dir_fd``, which opens each folder below without following a link and removes a link met there, never what it
        points to); a link at ``name`` is refused; gone already: fine."""
        import shutil

        self.refuse_link(name)
        shutil.rmtree(name, ignore_errors=True, dir_fd=self.fd)

    def sub(self, name: str, create: bool = True) -> "Folder | None":
        """The folder ``name`` in this one, held by its own descriptor; a link there is refused. Missing: created
        (``create``), else None."""
        if create:
            try:
                os.mkdir(name, 0o777, dir_fd=self.fd)
            except FileExistsError:
                pass
            except OSError as e:
                raise os_error(e, self.path / name, "create") from None
        try:
            return Folder(os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd), self.path / name)
        except OSError as e:
            if e.errno == errno.ENOENT and not create:
                return None
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and self._link(name):
                raise self._refused(name) from None
            raise os_error(e, self.path / name, "create" if create else "open") from None

    def atomic_write(self, name: str, data: str | bytes | memoryview) -> None:
        """Replace ``name`` by ``data`` whole: a temp file in this folder, flush, fsync, rename over ``name`` (a link
        there is refused: the rename would swap the link, but the user learns of it), fsync the folder."""
        target = self._name or self.path / name
        tmp = f".{name}.tmp{os.getpid()}"
        done = False
        try:
            with os.fdopen(self.open_fd(tmp, _MODES["w"], shown=target), "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
            if self._link(name):
                raise self._refused(name)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            done = True
        except OSError as e:  # disk full, read-only, ...: the old file is untouched
            raise os_error(e, target) from None
        finally:
            if not done:
                try:
                    os.unlink(tmp, dir_fd=self.fd)
                except OSError:
                    pass
        self.sync()

    def sync(self) -> None:
        """Make the renames and removals in this folder durable, where the OS allows fsync on a folder (POSIX)."""
        try:
            os.fsync(self.fd)
        except OSError:
            pass


def open_dir(path: str | Path) -> Folder:
    """The folder ``path`` for writing into, created where missing, held by a descriptor (:class:`Folder`). The folder
    the user named that holds it (the innermost of :func:`writing_into`'s roots; none: ``path``'s parent) is reached
    as a path and may be a link; each folder below it is created and opened from the one above, never following a
    link (a link there is :class:`LinkRefused`, whenever it was planted)."""
    given, path = Path(os.path.normpath(path)), Path(os.path.abspath(path))
    roots = [r for r in _ROOTS.get() if r == path or r in path.parents]
    root = max(roots, key=lambda r: len(r.parts)) if roots else path.parent
    below = path.relative_to(root).parts
    if 0 < len(below) <= len(given.parts):  # messages name the folders as the user gave them (relative stays relative)
        root = given.parents[len(below) - 1]
    elif not below:
        root = given
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(e, root, "create") from None
    folder = Folder.at(root)
    try:
        for piece in below:
            inner = folder.sub(piece)
            folder.close()
            folder = inner
    except BaseException:
        folder.close()
        raise
    return folder


def write_named(path: str | Path, data: str | bytes | memoryview) -> None:
    """Replace a file the user named (``report --output FILE``, ``bench --json-out FILE``) by ``data`` whole: its folder
    is the user's choice of place (created if missing, may be a link); the file is replaced through the folder's
    descriptor (:meth:`Folder.atomic_write`), and a link at its own name is refused."""
    path = Path(path)
    with writing_into(path.parent), open_dir(path.parent) as folder:
        folder.atomic_write(path.name, data)
