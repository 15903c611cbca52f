"""One run directory's life, in order (docs/run-directory.md, "A run directory's life"): the one object ``fedcli
train`` (``fedcli.runner``) holds for the folder it writes, called a handful of times:

1. :meth:`RunDirectory.open` (rank 0, before anything is written): the folder checked and its lock taken
   (fedcli/results/lock.py), a fresh folder or ``--overwrite`` or ``--resume``;
2. :meth:`RunDirectory.clean` (``--overwrite`` only): the previous run's files go, through the folder's descriptor;
3. :meth:`RunDirectory.begin`: the manifest ``running``, a fresh run or a resumed one (CSVs cut back to its checkpoint,
   fedcli/results/resume.py);
4. :meth:`RunDirectory.guard`: the rows written as rounds end (fedcli/results/runlog.py), a stop signal before the
   rounds marks the run ``interrupted``, the watchdog (fedcli/results/sentinel.py) watches the processes;
5. :meth:`RunDirectory.close`: the manifest's last status (``completed``, ``failed``, ``interrupted``), the CSVs closed;
   no row is written after it (:class:`~fedcli.results.rundir.RunClosed`);
6. :meth:`RunDirectory.release`: the lock goes (with the folder, when the run never got its manifest).

A step out of this order is a :class:`RunDirectoryOrder` (a programming error, not a user's). Nothing here calls back
into the runner: what the run should say comes back as lines (:meth:`RunDirectory.begin`).
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

from fedcli.errors import ConfigError, FedcliError
from fedcli.fl.context import DriverContext, LogContext
from fedcli.runtime import early

LOCKED, CLEANED, RUNNING, CLOSED, RELEASED = "locked", "cleaned", "running", "closed", "released"


class RunDirectoryOrder(RuntimeError):
    """A step of a run directory's life called out of its order (the module's docstring)."""


def is_run_dir(out: Path) -> bool:
    """Whether ``out`` holds a run of ``fedcli train``: its ``manifest.json`` is a readable manifest (a JSON object
    with the run's ``config``). Only then may ``--overwrite`` remove the run's files (:meth:`RunDirectory.clean`)."""
    from fedcli.results.runstate import CORRUPT, MISSING, read_manifest

    status, manifest = read_manifest(out)
    return status not in (MISSING, CORRUPT) and isinstance(manifest.get("config"), dict)


def discard_unstarted(out: Path, created: bool, locked: bool = True) -> bool:
    """A run folder that never got its manifest (a signal or an error during the setup) keeps nothing of it: its lock
    file goes (``locked``: only while this process holds it), and the folder too when this run created it and it is
    empty then. True if the folder is gone."""
    if (out / "manifest.json").exists() or (out / "manifest.json").is_symlink():
        return False
    from fedcli.results.lock import RUN_LOCK
    from fedcli.safefs import is_link

    lock = out / RUN_LOCK
    if locked and lock.exists() and not is_link(lock):
        lock.unlink(missing_ok=True)
    if created:
        try:
            out.rmdir()
            return True
        except OSError:
            return False
    return False


def discarder(out: Path, created: bool):
    """The early stop-signal handler of a folder being set up (fedcli/runtime/early.py): :func:`discard_unstarted`."""

    def discard(signum):
        if discard_unstarted(out, created, discard.locked):
            return f"; nothing was written ({out} removed)"
        return None

    discard.out, discard.created, discard.locked = out, created, False
    return discard


def _checked(out: Path, lock, *, overwrite: bool, resume: bool, promote: bool, own: tuple[str, ...]) -> None:
    """:meth:`RunDirectory.open`'s checks once the lock is held; the lock is released when one refuses."""
    from fedcli.results.lock import RUN_LOCK
    from fedcli.results.rundir import refuse_links
    from fedcli.results.stopfile import STOP_FILE  # a stop request for the run about to start: no other run's file

    try:
        refuse_links(out)  # no contract path is a symbolic link: refused before anything is written or deleted
        if resume and not promote:  # a pruned run is kept as it stands (fedcli/results/stopfile.py)
            from fedcli.results.runstate import read_manifest, refuse_pruned

            refuse_pruned(out, read_manifest(out)[1])
    except FedcliError:
        lock.release()
        raise
    if not resume and not overwrite and any(p.name not in (RUN_LOCK, STOP_FILE) for p in out.iterdir()):
        lock.release()
        raise ConfigError(f"--out {out} already holds files; choose another folder or pass --overwrite")
    locks = (RUN_LOCK, STOP_FILE, *own)  # fedcli's own, none a user's file
    if overwrite and not resume and not is_run_dir(out) and any(p.name not in locks for p in out.iterdir()):
        lock.release()
        raise ConfigError(
            f"--out {out} is not a run directory (no fedcli manifest.json in it), so --overwrite would "
            f"delete files that are not a run's; choose another folder",
            key="overwrite",
        )


def _is_dir(folder, name: str) -> bool:
    """Whether ``name`` in ``folder`` (a :class:`fedcli.safefs.Folder`) is a folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=folder.fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class RunDirectory:
    """A run directory through its life (the module's docstring): ``rows`` is the
    :class:`~fedcli.results.rundir.RunDir` written while it runs, ``watchdog`` its sentinel process."""

    def __init__(self, path: Path, lock, discard, folder):
        self.path, self.lock, self._discard, self.folder = Path(path), lock, discard, folder
        self.phase = LOCKED
        self.rows = None
        self.watchdog = None
        self.interrupt = None  # the stop-signal handler from the manifest's start to the rounds
        self._promoted = None  # --promote: the pruned entry that moves into the resume's entry

    def _need(self, *phases: str, doing: str) -> None:
        if self.phase not in phases:
            raise RunDirectoryOrder(
                f"{self.path}: cannot {doing} a run directory that is {self.phase} "
                f"(only one that is {' or '.join(phases)})"
            )

    @classmethod
    def open(
        cls, out: Path, *, overwrite: bool, resume: bool, promote: bool = False, own: tuple[str, ...] = ()
    ) -> RunDirectory:
        """Rank 0, before anything is written: ``out`` must be a folder this process can write, nobody else may be
        writing it (its lock is taken here and held to :meth:`release`), and without ``--overwrite`` or ``--resume`` it
        must not hold another run; a resume of a pruned run needs ``promote``. ``own``: names of files other fedcli
        parts keep there (the trackers' locks) that do not make a folder another's. Refused: nothing of it is left."""
        from fedcli.errors import os_error
        from fedcli.results.lock import RunLock
        from fedcli.safefs import Folder

        out = Path(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is a file; expected a folder for the run directory")
        created = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise os_error(e, out, "create the run directory") from None
        discard = early.on_interrupt(discarder(out, created))  # a signal before the manifest: no folder left behind
        why = (
            " (--overwrite would delete its results)"
            if overwrite
            else " (--resume would write beside it)"
            if resume
            else ""
        )
        try:
            lock = RunLock(out).take(why)  # the lock file is opened with O_NOFOLLOW (a planted link is refused)
        except FedcliError:
            early.forget(discard)  # another process's lock (or a link) is never removed
            raise
        discard.locked = True  # from now on the lock file is ours to remove
        try:
            _checked(out, lock, overwrite=overwrite, resume=resume, promote=promote, own=own)
            folder = Folder.at(out)  # the folder locked, held by its descriptor to the end (:meth:`clean`)
        except FedcliError:
            lock.release()
            early.forget(discard)
            discard_unstarted(out, created, False)  # the lock was released: its file is gone with it
            raise
        return cls(out, lock, discard, folder)

    def clean(self) -> None:
        """``--overwrite``: the previous run's files go (CSVs, model, manifest, checkpoints, client state; its stop
        request), removed through the descriptor of the folder :meth:`open` locked (:class:`fedcli.safefs.Folder`): a
        link met is removed itself, nothing it points to, and the folder moved away and replaced by a link since then
        is still the one cleaned. The trackers' files are the caller's to remove first."""
        from fedcli.errors import os_error
        from fedcli.fl.store import FOLDER
        from fedcli.results.checkpoint import FOLDER as CHECKPOINTS
        from fedcli.results.checkpoint import is_checkpoint
        from fedcli.results.rundir import APPEND_CSVS
        from fedcli.results.stopfile import STOP_FILE

        self._need(LOCKED, doing="clean")
        folder = self.folder
        if folder.size("manifest.json") >= 0:  # the previous run's stop request (none yet: this run's)
            try:
                folder.unlink(STOP_FILE)
            except OSError as e:
                raise os_error(e, self.path / STOP_FILE, "remove") from None
        for name in ("layers.csv", *APPEND_CSVS, "model.pt", "manifest.json"):  # every CSV a run appends to
            folder.unlink(name)
        if _is_dir(folder, CHECKPOINTS):
            with folder.sub(CHECKPOINTS, create=False) as ckpts:
                for name in sorted(filter(is_checkpoint, ckpts.names())):
                    ckpts.unlink(name)
                ckpts.sync()
        folder.remove_tree(FOLDER)  # another run's client state (this run writes after here)
        folder.sync()
        self.phase = CLEANED

    def begin(
        self,
        ctx: DriverContext,
        procs: dict,
        *,
        resume: bool = False,
        ckpt=None,
        state=None,
        manifest: dict | None = None,
        quiet: bool = False,
    ) -> list[str]:
        """The manifest ``running``: a fresh run's (``ctx.manifest()``, ``procs``, ``manifest``: more entries) or,
        with ``resume``, the run reopened at the checkpoint ``ckpt`` (fedcli/results/resume.py; after
        :meth:`resume_notes`, whose ``--promote`` moves the pruned mark into the ``resumes`` entry). Returns the lines
        the run says: the versions changed since a resumed run started (not with ``quiet``)."""
        from fedcli.results import resume as resumed
        from fedcli.results.runlog import extra_columns

        self._need(LOCKED, CLEANED, doing="begin")
        if not resume:
            from fedcli.results.rundir import RunDir

            self.rows = RunDir(self.path, extra_columns(ctx.context(LogContext)))
            self.rows.start({**ctx.manifest(), **procs, **(manifest or {})})
            self.phase = RUNNING
            return []
        self.rows = resumed.reopen_run_dir(
            self.path, ckpt, ctx.context(LogContext), procs, state, promoted=self._promoted
        )
        self.phase = RUNNING
        drift = resumed.version_drift(self.rows.manifest)
        if not drift or quiet:
            return []
        return [
            (
                f"warning: resuming with other versions ({'; '.join(drift)}): "
                "the result need not be bitwise identical to an uninterrupted run"
            )
        ]

    def resume_notes(self, ckpt, promote: bool = False) -> list[str]:
        """A resume, before :meth:`begin`: the lines it says first (how the previous attempt ended; the checkpoint
        ``ckpt`` it goes on from) and, with ``promote``, the stop request removed and the pruned entry kept for the
        ``resumes`` entry (``promoted``), with a line saying so."""
        from fedcli.results.resume import read_manifest
        from fedcli.results.runstate import killed_note

        self._need(LOCKED, doing="prepare the resume of")
        lines = []
        said = killed_note(
            self.path,
            read_manifest(self.path),
            probe=False,
            how=(
                f"resuming from {Path(ckpt['path']).name} (round {ckpt['round']})"
                if ckpt
                else "no checkpoint: starting again"
            ),
        )
        if said:  # the previous attempt died with its watchdog: the manifest was never closed (lock.py, sentinel.py)
            lines.append(f"note: the previous attempt was {said}")
        promoted = None
        if promote:
            from fedcli.results.stopfile import clear_stop
            from fedcli.results.validate import pruned

            promoted = pruned(read_manifest(self.path)) or {}
            if clear_stop(self.path) or promoted:
                what = "the run pruned at iteration " + str(promoted.get("iteration")) if promoted else "the run"
                lines.append(f"promoted: {what} goes on to completion (its stop request removed)")
        self._promoted = promoted
        return lines

    def guard(self, ctx: DriverContext, pids: list[int], world_size: int = 1, launcher: str = "mpi"):
        """From the manifest's start to the rounds: a stop signal marks the run interrupted (fedcli/runtime/early.py;
        saying how to continue with ``world_size`` processes started by ``launcher``), the simulation writes its rows
        here (``RunLog``), the watchdog watches the processes ``pids``. Returns the interrupt handler, to forget once
        the rounds take the signals."""
        from fedcli.results import sentinel
        from fedcli.results.runlog import RunLog
        from fedcli.results.runstate import resume_command

        self._need(RUNNING, doing="guard")
        resume_cmd = resume_command(self.path, world_size, launcher)

        def mark_interrupted(signum):  # a signal before the rounds run
            self.close("interrupted", error=f"Interrupted: {signal.Signals(signum).name} before training started")
            self.stop_watching()
            return f"; the run is marked interrupted; continue with: {resume_cmd}"

        self.interrupt = early.on_interrupt(mark_interrupted)
        ctx.attach(self.rows, RunLog(self.rows))
        self.watchdog = sentinel.start(self.path, pids)
        return self.interrupt

    @property
    def status(self):
        """The status the manifest says now."""
        return self.rows.manifest.get("status") if self.rows is not None else None

    def close(self, status: str, **entries) -> None:
        """The manifest's last status (``completed``, ``failed``, ``interrupted``) with ``entries`` (the error, the
        summary, a stop's reason), then the CSVs closed: no row after it. A failed close leaves the run open (a
        second close says ``failed``); a closed run may be closed again (a later, truer status), never reopened."""
        self._need(RUNNING, CLOSED, doing="close")
        self.rows.finish(status, **entries)
        self.phase = CLOSED

    def stop_watching(self) -> None:
        """The watchdog ends (the manifest no longer says ``running``, or is about to say ``failed``)."""
        from fedcli.results import sentinel

        sentinel.stop(self.watchdog)

    def release(self) -> None:
        """The end: the lock goes and, when the run never got its manifest (an error in the setup), the folder's lock
        file too, and the folder when this run created it and it is empty."""
        if self.phase == RELEASED:
            return
        early.forget(self._discard)
        discard_unstarted(self.path, self._discard.created, self._discard.locked)
        self.lock.release()
        self.folder.close()
        self.phase = RELEASED
