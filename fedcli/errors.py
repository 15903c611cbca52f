"""Error types with the exit codes listed in docs/usage.md (Exit codes).

Every error the user can cause is raised as one of these; the CLI entry point prints
``fedcli: error: <one sentence>`` on stderr and exits with ``exit_code``, never a traceback.
"""

from __future__ import annotations


class FedcliError(Exception):
    """Base class: a user-facing error with a one-sentence message."""

    exit_code = 1


class ConfigError(FedcliError):
    """Bad usage or invalid configuration (exit 2). The message names the key; ``key`` is the config key it is
    about when there is one (a recipe error then names that key's file and line)."""

    exit_code = 2

    def __init__(self, message: str = "", key: str | None = None):
        super().__init__(message)
        self.key = key


class DataError(FedcliError):
    """Missing or corrupt dataset or partition file (exit 3). Names the file and the expected format."""

    exit_code = 3


class DivergenceError(FedcliError):
    """Training diverged: a non-finite loss or update (exit 4). Names the round and client."""

    exit_code = 4


class Pruned(FedcliError):
    """Stopped on request (exit 5): a stop file (``RUN/stop.json``, fedcli/results/stopfile.py) asked the run to stop,
    and it did at a round boundary, with a checkpoint, its manifest ``interrupted`` with ``reason: pruned``
    (``fedcli tune``'s pruning). ``where``: the manifest's ``pruned`` entry (iteration, round, why). Raised by every
    process together."""

    exit_code = 5
    collective = True

    def __init__(self, message: str = "", where: dict | None = None):
        super().__init__(message)
        self.where = dict(where or {})


class StorageError(FedcliError):
    """A file fedcli writes could not be written: disk full, quota, I/O error (exit 3). Names the file; what
    was written before stays intact (appends are cut back to their last whole row, replacements are atomic)."""

    exit_code = 3
    remedy = ""  # what to do first, before the command that continues ("free some space and ")


class PlaceError(ConfigError):
    """An output place that cannot be written: permissions, read-only, a file where a folder is wanted (exit 2 before
    a run writes anything; once a run has started, ``fedcli train`` reports it as a StorageError, exit 3)."""

    path = why = doing = None


class ResourceError(FedcliError):
    """Out of memory (CPU or CUDA): exit 3, like a full disk (the machine ran out of something; the files written
    before are intact and the run resumes from its last checkpoint). The message gives a hint."""

    exit_code = 3
    remedy = ""


def memory_error(e: BaseException) -> ResourceError | None:
    """A one-sentence ResourceError for an out-of-memory exception (``MemoryError``, ``torch.OutOfMemoryError``, the
    CPU allocator's "can't allocate memory"), else None."""
    text = str(e).strip()
    first = text.splitlines()[0][:200] if text else type(e).__name__
    cuda = type(e).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text
    cpu = (
        isinstance(e, MemoryError)
        or (isinstance(e, RuntimeError) and ("can't allocate memory" in text or "DefaultCPUAllocator" in text))
        or (
            isinstance(e, (ImportError, OSError))
            and ("failed to map segment" in text or "Cannot allocate memory" in text)
        )
    )
    if not (cuda or cpu):
        return None
    where = "GPU" if cuda else "CPU"
    err = ResourceError(
        f"out of {where} memory ({first}); try --trainer loop (one client at a time), fewer --workers, a "
        f"smaller --batch-size or a smaller model"
    )
    err.remedy = "with more memory free (or --trainer loop / fewer --workers, which a resume may change), "
    return err


#: errno values that mean "this place cannot take the file" (a usage problem: choose another place, exit 2)
_PLACE_ERRNOS = {"EACCES", "EPERM", "EROFS", "ENOTDIR", "EISDIR", "ENAMETOOLONG", "EEXIST", "ENOENT", "ELOOP"}


def os_error(e: OSError, path=None, doing: str = "write") -> FedcliError:
    """One-sentence FedcliError for an OSError met while reading or writing ``path``.

    Permission, read-only and path-kind problems (``--out`` naming a file, a folder where a file is wanted) are
    usage errors (exit 2: choose another place); disk full, quota and I/O errors are StorageError (exit 3)."""
    import errno as _errno

    path = path if path is not None else (e.filename or "?")
    why = e.strerror or type(e).__name__
    name = _errno.errorcode.get(e.errno or 0, "")
    if name in _PLACE_ERRNOS:
        err = PlaceError(f"cannot {doing} {path} ({why}); choose a place you can write to")
        err.path, err.why, err.doing = path, why, doing
        return err
    err = StorageError(f"cannot {doing} {path} ({why}); the files written before are intact")
    err.remedy = "free some space and " if name in ("ENOSPC", "EDQUOT") else "when the disk works again, "
    return err
