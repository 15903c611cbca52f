"""The run directory (docs/run-directory.md), written as training goes.

- ``manifest.json``: resolved config, seeds, world size, versions, git commit, times, ``status``.
  Always replaced atomically (temp file in the same folder, flush, fsync, ``os.replace``).
- ``metrics.csv`` / ``intervals.csv`` / ``skipped.csv`` / ``clients.csv``: append-only; each row is flushed and fsynced
when written, so a
  crash loses at most the current round. Never rewritten in place. ``timing.csv`` (a run that can be re-timed,
  ``fedcli.fl.timing``) likewise, but fsynced at evaluations and at the close only (a row per round).
- ``layers.csv``: a per-layer summary, replaced atomically after every evaluation.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

from fedcli.safefs import atomic_write, open_file, refuse_link, replace  # noqa: F401 - atomic_write: its importers read it here

METRICS_COLUMNS = [
    "round",
    "iteration",
    "train_loss",
    "test_loss",
    "test_acc",
    "comm_params",
    "comm_bytes",
    "wall_s",
    "lr",
    "skipped_clients",
    "personal_acc",
]  # personal_acc: personalized methods only (empty otherwise)
LAYERS_COLUMNS = ["layer", "name", "kind", "numel", "syncs", "comm_params", "comm_bytes", "interval"]
INTERVALS_COLUMNS = ["round", "iteration", "layer", "name", "numel", "eligible", "d", "interval"]
SKIPPED_COLUMNS = ["round", "iteration", "step", "client", "reason"]
#: --system: one row per round, its simulated time and who took part (``fedcli.fl.system.SystemModel.round_row``)
SYSTEM_COLUMNS = [
    "round",
    "iteration",
    "round_s",
    "sim_time_s",
    "sampled",
    "participants",
    "unavailable",
    "dropped",
    "partial",
    "dropped_clients",
    "partial_clients",
    "wait_s",
]
#: personalized methods: one row per client per evaluation (``fedcli.fl.personal.client_table``)
CLIENTS_COLUMNS = [
    "round",
    "iteration",
    "client",
    "train_samples",
    "test_samples",
    "personal_loss",
    "personal_acc",
    "global_loss",
    "global_acc",
]
# rows a part records when asked (``Part.round_tables``): FedALA's Figures 3 and 5 (``--ala-trace``,
# fedcli/fl/algorithms/fedala.py)
PART_CSVS = {
    "ala.csv": ["round", "client", "pass", "stage", "loss"],
    "local_loss.csv": ["round", "client", "samples", "initialized", "trained"],
}
#: a run that can be re-timed (no deadline, no availability): one row per round, what its simulated time is a function
#: of (``fedcli.fl.timing``)
TIMING_COLUMNS = ["round", "iteration", "clients", "steps", "syncs", "work", "extra_up", "extra_down"]
#: append-only files a checkpoint records the length of
APPEND_CSVS = ("metrics.csv", "intervals.csv", "skipped.csv", "clients.csv", "system.csv", *PART_CSVS, "timing.csv")
#: append-only files synced at evaluations, not row by row (``AppendCSV(deferred=True)``): one that a crash of the
#: machine left shorter than a checkpoint recorded is removed on resume (the run goes on; re-timing it then refuses,
#: naming the rounds missing), not refused
LENIENT_CSVS = ("timing.csv",)


CLIENT_STATE = "client-state"  # per-client state on disk (fedcli/fl/store.py): g<gen>/r<rank>/<table>.bin
#: what ``fedcli train`` writes in a run directory besides ``.fedcli.lock`` (docs/run-directory.md)
RUN_FILES = ("manifest.json", "layers.csv", *APPEND_CSVS, "model.pt", "checkpoints", CLIENT_STATE)


def refuse_links(run_dir: str | Path) -> None:
    """Before ``fedcli train`` writes a run directory: none of its contract paths (no checkpoint file, nothing in
    ``client-state/`` down to its row files) is a symbolic link (:class:`~fedcli.safefs.LinkRefused`, exit 2,
    naming it)."""
    run_dir = Path(run_dir)
    for name in RUN_FILES:
        refuse_link(run_dir / name)
    ckpts = run_dir / "checkpoints"
    if ckpts.is_dir():
        for p in ckpts.iterdir():
            refuse_link(p)
    _refuse_links_below(run_dir / CLIENT_STATE, depth=3)  # its generations, their rank folders, their files


def _refuse_links_below(folder: Path, depth: int) -> None:
    if depth and folder.is_dir() and not folder.is_symlink():
        for p in folder.iterdir():
            _refuse_links_below(refuse_link(p), depth - 1)


def fmt(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def csv_text(columns: list[str], rows: list[dict], header: bool = True) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(columns)
    for r in rows:
        w.writerow([fmt(r.get(c, "")) for c in columns])
    return buf.getvalue()


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The rows of one of a run's CSVs (``csv_text``'s files) that were written whole, as text: the one reader of
    them (reports, ``fedcli.load``, the trackers, a sweep's progress). A row reaches the file whole, newline last
    (:class:`AppendCSV`), so a last line without its newline is a row cut by a run killed while writing it: it is
    not read (the file holds the rows before it). [] for a file that is missing, or cut within its header. Any other
    row whose cell count differs from the header's is a ``ValueError`` naming the file and line (the file was
    edited)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    text = data[: data.rfind(b"\n") + 1].decode("utf-8")  # up to the last whole line (nothing if none is whole)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    rows = []
    for cells in reader:
        if not cells:  # a blank line: no row
            continue
        if len(cells) != len(header):
            raise ValueError(
                f"{path.name} line {reader.line_num} has {len(cells)} cells where its header has {len(header)}"
            )
        rows.append(dict(zip(header, cells)))
    return rows


def _reopen_at(f, path: Path, size: int):
    """``f`` (opened for appending) cut back to ``size`` bytes and reopened: the buffered part of a failed write
    is dropped, so no partial row stays in the file."""
    try:
        os.ftruncate(f.fileno(), size)
    except OSError:
        pass
    try:
        f.close()
    except OSError:
        pass  # the close flushes the failed buffer again; the truncate below removes what got through
    f = open_file(path, "a", newline="")
    try:
        os.ftruncate(f.fileno(), size)
    except OSError:
        pass
    return f


class AppendCSV:
    """An append-only CSV whose rows reach the disk (fsync) as they are written."""

    def __init__(self, path: Path, columns: list[str], deferred: bool = False):
        self.path, self.columns = Path(path), list(columns)
        # deferred: a row reaches the operating system when written (a killed process loses none) and the disk at the
        # next ``drain`` (an evaluation, the close): no fsync per row of a file written every round
        self.deferred, self.unsynced = deferred, False
        data = self.path.read_bytes() if self.path.exists() else b""
        new = not data
        self.rows = max(0, data.count(b"\n") - 1)  # data rows (for checkpoints)
        if not new:  # a file an older fedcli began (a run resumed since): its rows go on with its own header's columns
            self.columns = _kept_header(data, self.columns)
        self.f = open_file(self.path, "a", newline="")  # never through a link; errors are one line
        if new:
            self._write(csv_text(self.columns, []))

    def _write(self, text: str) -> None:
        """Append ``text`` and fsync (a deferred file: at the next ``drain``); on a failed write (disk full, ...) the
        file is cut back to its last whole row."""
        from fedcli.errors import os_error

        self.f.flush()
        size = os.fstat(self.f.fileno()).st_size
        try:
            self.f.write(text)
            self.f.flush()
            if self.deferred:
                self.unsynced = True
            else:
                os.fsync(self.f.fileno())
        except OSError as e:
            self.f = _reopen_at(self.f, self.path, size)
            raise os_error(e, self.path) from None

    def append(self, rows: list[dict]) -> None:
        if rows:
            self._write(csv_text(self.columns, rows, header=False))
            self.rows += len(rows)

    def drain(self) -> None:
        """A deferred file: the rows written so far reach the disk (fsync)."""
        if self.unsynced:
            from fedcli.errors import os_error

            try:
                os.fsync(self.f.fileno())
            except OSError as e:
                raise os_error(e, self.path) from None
            self.unsynced = False

    def position(self) -> dict:
        """Where the file ends now (bytes, data rows): what a checkpoint records to rewind it on resume."""
        self.f.flush()
        return {"bytes": os.fstat(self.f.fileno()).st_size, "rows": self.rows}

    def close(self) -> None:
        try:
            self.drain()
        finally:
            self.f.close()


def _kept_header(data: bytes, columns: list[str]) -> list[str]:
    """The columns an existing CSV (its bytes ``data``) goes on with: its header where that is the first columns of
    ``columns`` (a column added since, such as system.csv's ``wait_s``, stays out of a file whose header lacks it, so
    that every row has its header's length), else ``columns``."""
    end = data.find(b"\n")
    header = next(csv.reader([data[:end].decode("utf-8", "replace")]), []) if end >= 0 else []
    return header if header and len(header) < len(columns) and columns[: len(header)] == header else columns


def versions() -> dict:
    import numpy
    import torch

    from fedcli.version import __version__

    out = {
        "python": platform.python_version(),
        "fedcli": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }
    for mod in ("mpi4py", "torchvision", "pandas"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out


def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class RunClosed(RuntimeError):
    """A row written to a run directory after it was closed (:meth:`RunDir.close`): its manifest already says how the
    run ended, so a later row would not be in the run it describes."""


class RunDir:
    """A run directory being written. ``extra``: columns some runs add after a file's own (``--system``'s
    ``sim_time_s`` in metrics.csv and layers.csv: ``fedcli.results.runlog.extra_columns``). Once closed
    (:meth:`close`), rows and ``layers.csv`` are refused (:class:`RunClosed`); the manifest may still be rewritten."""

    def __init__(self, path: str | Path, extra: dict[str, list[str]] | None = None):
        self.path = Path(path)
        extra = extra or {}
        self.layers_columns = LAYERS_COLUMNS + list(extra.get("layers.csv", ()))
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            from fedcli.errors import os_error

            raise os_error(e, self.path, "create") from None
        for name in ("manifest.json", "layers.csv", *APPEND_CSVS):  # refused before anything is written
            refuse_link(self.path / name)
        self.manifest: dict = {}
        self.metrics = AppendCSV(self.path / "metrics.csv", METRICS_COLUMNS + list(extra.get("metrics.csv", ())))
        self.intervals: AppendCSV | None = None
        self.skipped: AppendCSV | None = None
        self.system: AppendCSV | None = None
        self.clients: AppendCSV | None = None
        # timing.csv: reopened when a resumed run's file is there, so that a checkpoint before its next row records it
        self.timing = (
            AppendCSV(self.path / "timing.csv", TIMING_COLUMNS, deferred=True)
            if (self.path / "timing.csv").exists()
            else None
        )
        self.part_csvs: dict[str, AppendCSV] = {}  # PART_CSVS, opened when a part first records rows
        self.closed = False

    def _open(self) -> None:
        if self.closed:
            raise RunClosed(
                f"{self.path}: the run directory is closed (its manifest says "
                f"'{self.manifest.get('status')}'); no row is written after that"
            )

    def write_manifest(self, **updates) -> None:
        self.manifest.update(updates)
        atomic_write(
            self.path / "manifest.json", json.dumps(self.manifest, indent=2, sort_keys=False, default=str) + "\n"
        )

    def start(self, manifest: dict) -> None:
        base = {
            "status": "running",
            "start_time": now(),
            "end_time": None,
            "host": socket.gethostname(),
            "versions": versions(),
            "git_commit": git_commit(),
            "command": sys.argv,
        }
        base.update(manifest)
        self.write_manifest(**base)

    def finish(self, status: str, **extra) -> None:
        self.write_manifest(status=status, end_time=now(), **extra)
        self.close()

    def append_metrics(self, row: dict) -> None:
        self._open()
        if self.timing is not None:
            self.timing.drain()  # the rounds up to an evaluation are on the disk before it
        self.metrics.append([row])

    def append_timing(self, rows: list[dict]) -> None:
        """A run that can be re-timed: each round's records (``timing.csv``), written as the round ends and synced to
        the disk at the next evaluation or the close (a crash of the machine loses no more than the rows since the last
        evaluation, which re-timing does not read)."""
        self._open()
        if self.timing is None:
            self.timing = AppendCSV(self.path / "timing.csv", TIMING_COLUMNS, deferred=True)
        self.timing.append(rows)

    def append_intervals(self, rows: list[dict]) -> None:
        self._open()
        if self.intervals is None:
            self.intervals = AppendCSV(self.path / "intervals.csv", INTERVALS_COLUMNS)
        self.intervals.append(rows)

    def append_skipped(self, rows: list[dict]) -> None:
        """Client updates dropped by ``--on-diverge skip-client`` (one row per client and round)."""
        self._open()
        if self.skipped is None:
            self.skipped = AppendCSV(self.path / "skipped.csv", SKIPPED_COLUMNS)
        self.skipped.append(rows)

    def append_clients(self, rows: list[dict]) -> None:
        """Personalized methods: each evaluated client's numbers of one evaluation (``clients.csv``)."""
        self._open()
        if self.clients is None:
            self.clients = AppendCSV(self.path / "clients.csv", CLIENTS_COLUMNS)
        self.clients.append(rows)

    def append_system(self, rows: list[dict]) -> None:
        """``--system``: each round's simulated time and who took part (``system.csv``)."""
        self._open()
        if self.system is None:
            self.system = AppendCSV(self.path / "system.csv", SYSTEM_COLUMNS)
        self.system.append(rows)

    def append_part_rows(self, name: str, rows: list[dict]) -> None:
        """Rows a part recorded (``PART_CSVS[name]`` columns)."""
        self._open()
        if name not in self.part_csvs:
            self.part_csvs[name] = AppendCSV(self.path / name, PART_CSVS[name])
        self.part_csvs[name].append(rows)

    def write_layers(self, rows: list[dict]) -> None:
        self._open()
        atomic_write(self.path / "layers.csv", csv_text(self.layers_columns, rows))

    def csv_positions(self) -> dict:
        """Length (bytes, data rows) of each append-only CSV now; a file not created yet has 0 bytes."""
        files = {
            "metrics.csv": self.metrics,
            "intervals.csv": self.intervals,
            "skipped.csv": self.skipped,
            "clients.csv": self.clients,
            "system.csv": self.system,
            **{name: self.part_csvs.get(name) for name in PART_CSVS},
            "timing.csv": self.timing,
        }
        return {name: f.position() if f is not None else {"bytes": 0, "rows": 0} for name, f in files.items()}

    def close(self) -> None:
        """Every CSV closed (a deferred one synced first); from then on rows are refused (:class:`RunClosed`)."""
        self.metrics.close()
        for f in (self.intervals, self.skipped, self.clients, self.system, self.timing, *self.part_csvs.values()):
            if f is not None:
                f.close()
        self.closed = True


def rewind_csvs(folder: str | Path, positions: dict) -> None:
    """Cut the append-only CSVs of a run directory back to a checkpoint's ``positions`` (before resuming),
    so the rows written after that checkpoint are not duplicated. A file shorter than recorded, or with
    another number of rows, was not written by this run: DataError (exit 3)."""
    from fedcli.errors import DataError

    folder = Path(folder)
    positions = dict(positions)
    for name in LENIENT_CSVS:  # rows synced at evaluations only: one the machine's crash cut short is dropped
        pos = positions.get(name)
        path = refuse_link(folder / name)
        if pos and pos["bytes"] and (not path.exists() or path.stat().st_size < pos["bytes"]):
            positions[name] = {"bytes": 0, "rows": 0}
    for name, pos in positions.items():  # check every file first, then cut: all or nothing
        path = refuse_link(folder / name)
        size = path.stat().st_size if path.exists() else 0
        if size < pos["bytes"]:
            raise DataError(
                f"{path}: {size} bytes, shorter than the {pos['bytes']} bytes the checkpoint recorded; expected the "
                f"append-only CSV of this run (was it edited or truncated?)"
            )
        if pos["bytes"]:
            with open(path, "rb") as f:
                head = f.read(pos["bytes"])
            rows = head.count(b"\n") - 1
            if rows != pos["rows"] or not head.endswith(b"\n"):
                raise DataError(
                    f"{path}: its first {pos['bytes']} bytes hold {rows} rows where the checkpoint recorded "
                    f"{pos['rows']}; expected the append-only CSV of this run (was it edited?)"
                )
    for name, pos in positions.items():
        path = folder / name
        if not pos["bytes"]:
            path.unlink(missing_ok=True)
            continue
        with open_file(path, "r+b") as f:
            f.truncate(pos["bytes"])
            f.flush()
            os.fsync(f.fileno())
