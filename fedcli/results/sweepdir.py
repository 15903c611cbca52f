"""A sweep folder's manifest (``sweep.json``) and its planned runs' states: written by ``fedcli sweep``
(fedcli/sweep/run.py), read by ``fedcli report`` (fedcli/reports/core.py) and the Slurm status (fedcli/sweep/slurm.py).

Layout of a sweep folder: see fedcli/sweep/run.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fedcli.errors import ConfigError
from fedcli.results.rundir import atomic_write, now
from fedcli.results.runstate import DONE, MISSING

if TYPE_CHECKING:
    from fedcli.recipes import SweepRecipe

MANIFEST = "sweep.json"
FORMAT = 1


def default_out(recipe_path: Path, scale: str | None) -> Path:
    """The sweep folder ``fedcli sweep`` picks without ``--out``: ``results/<recipe name>-<scale>`` (read by the sweep
    and by the paper section, which leaves ``--out`` out of its command where the folder is this one)."""
    return Path("results") / f"{recipe_path.stem}-{scale or 'base'}"


@dataclass
class PlannedRun:
    name: str
    slug: str
    seed: int
    root: Path  # the sweep folder
    values: dict  # recipe values of this run (+ seed, out, threads)
    config: dict  # resolved TrainConfig as a dict
    hash: str
    status: str = MISSING  # done | stale | failed | running | missing | corrupt (before); completed | failed (after)
    exit_code: int | None = None
    wall_s: float | None = None
    error: str | None = None
    ran: bool = False
    resume: bool = False  # continue from the run's latest checkpoint instead of starting again
    job_id: str | None = None  # its Slurm job (--executor slurm)
    env: dict = field(
        default_factory=dict
    )  # more environment of its training (fedcli tune: the trial's manifest entry)

    @property
    def rel(self) -> str:
        return f"{self.slug}/seed{self.seed}"

    @property
    def dir(self) -> Path:
        return self.root / self.rel

    @property
    def recipe_file(self) -> Path:
        return self.root / f"{self.rel}.toml"

    @property
    def log(self) -> Path:
        return self.root / f"{self.rel}.log"

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"

    def entry(self) -> dict:
        return {
            "name": self.name,
            "seed": self.seed,
            "dir": self.rel,
            "recipe": f"{self.rel}.toml",
            "log": f"{self.rel}.log",
            "status": self.status,
            "config_hash": self.hash,
            "exit_code": self.exit_code,
            "wall_s": self.wall_s,
            "error": self.error,
            "config": self.config,  # config: what `fedcli report` checks the run against
            **({"job_id": self.job_id} if self.job_id else {}),
        }


def run_state(p: PlannedRun) -> tuple[str, str | None]:
    """(state, reason) of a planned run (:func:`fedcli.results.runstate.run_state`, the one every command uses):
    done, stale, corrupt, failed, interrupted, running, missing. Sets ``p.resume`` when the run stopped early with
    the same config and left a checkpoint."""
    from fedcli.results.runstate import run_state as decide

    st = decide(p.dir, p.config)
    p.resume = st.resumable
    return st.state, (None if st.state == DONE else st.reason)


class SweepManifest:
    def __init__(
        self,
        root: Path,
        recipe: SweepRecipe,
        seeds: list[int],
        runs: list[PlannedRun],
        products: dict,
        extra: dict | None = None,
    ):
        # extra: further keys of sweep.json (``tuned``: the tuning a --tuned sweep's values come from)
        self.root, self.recipe, self.seeds, self.runs, self.products = root, recipe, seeds, runs, products
        self.extra = extra or {}
        old = load_manifest(root, missing_ok=True) or {}
        self.created = old.get("created") or now()
        self.lock = threading.Lock()

    def write(self) -> None:
        r = self.recipe
        where = path_ref(r.path)
        data = {
            "fedcli_sweep": FORMAT,
            "recipe": where,  # absolute: the re-run commands work from any folder (recipe_of reads older files too)
            "recipe_from_sweep": os.path.relpath(where, Path(self.root).resolve()),  # a checkout moved with its results
            "recipe_sha256": text_sha256(r.text),  # the sweep's identity, with its scale (the paths are hints)
            "title": r.title,
            "paper": r.paper,
            "fidelity": r.fidelity,
            "scale": r.scale,
            "seeds": self.seeds,
            "created": self.created,
            "updated": now(),
            "run_names": r.run_names,
            # runs the report re-times from a trained run's records (a [[runs]] entry's ``retime``): not trained
            **({"retimed": [v.to_dict() for v in r.retimed]} if getattr(r, "retimed", None) else {}),
            **self.products,
            **self.extra,
            "runs": [p.entry() for p in self.runs],
        }
        with self.lock:
            atomic_write(self.root / MANIFEST, json.dumps(data, indent=2, default=str) + "\n")


def load_manifest(root: Path, missing_ok: bool = False) -> dict | None:
    f = Path(root) / MANIFEST
    if not f.exists():
        if missing_ok:
            return None
        raise ConfigError(f"{root}: no {MANIFEST} here; run `fedcli sweep RECIPE` first")
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{f}: not a readable sweep manifest ({e})") from None


def path_ref(path: str | Path) -> str:
    """The one form of a path (a sweep's recipe, its folder) that ``sweep.json`` keeps and every command printed from
    it uses: absolute, so that the command works from any folder."""
    return str(Path(path).resolve())


def recipe_of(manifest: dict, root: str | Path) -> Path | None:
    """The recipe file of the sweep in ``root`` (its ``sweep.json`` read into ``manifest``), wherever the reader is;
    None if it cannot be found. Written since issue 48: ``recipe`` is absolute and ``recipe_from_sweep`` relative to
    the sweep folder (a checkout moved with its results). Older files kept ``recipe`` as typed, relative to the folder
    the sweep was started in: looked for there (the current folder), in the sweep folder and in each folder above it.
    The file whose text has the recorded ``recipe_sha256`` comes first (:func:`recipe_by_text`: also a recipe renamed
    beside where it was), else the first that exists."""
    same = recipe_by_text(manifest, root)
    if same is not None:
        return same
    found = [c for c in recipe_hints(manifest, root) if c.is_file()]
    return found[0].resolve() if found else None


def recipe_hints(manifest: dict, root: str | Path) -> list[Path]:
    """Where ``sweep.json`` says its recipe was, most likely first: the recorded path (absolute since issue 48; as
    typed before, then tried from the current folder, the sweep folder and each folder above it) and the path relative
    to the sweep folder (``recipe_from_sweep``). Hints only: the recipe's identity is its text
    (:func:`recipe_by_text`)."""
    stored = str(manifest.get("recipe") or "")
    if not stored:
        return []
    root = Path(root).absolute()
    rel = manifest.get("recipe_from_sweep")
    candidates = (
        [Path(stored)]
        if Path(stored).is_absolute()
        else [Path.cwd() / stored, root / stored, *(d / stored for d in root.parents)]
    )
    if isinstance(rel, str) and rel:
        candidates.insert(1, root / rel)
    return candidates


def text_sha256(text: str) -> str:
    """A recipe's identity as ``sweep.json`` records it (``recipe_sha256``): the sha256 of its text."""
    return hashlib.sha256(text.encode()).hexdigest()


def recipe_by_text(manifest: dict, root: str | Path) -> Path | None:
    """The file that holds the text the sweep in ``root`` was run from (its ``recipe_sha256``): at one of
    :func:`recipe_hints`, else a ``.toml`` beside one of them (the recipe renamed in its folder); None when no such
    file is there (or ``sweep.json`` has no hash)."""
    sha = manifest.get("recipe_sha256")
    if not sha:
        return None
    hints = recipe_hints(manifest, root)
    beside = sorted({f for c in hints if c.parent.is_dir() for f in c.parent.glob("*.toml")} - set(hints))
    for c in [*hints, *beside]:
        try:
            if c.is_file() and text_sha256(c.read_text(encoding="utf-8")) == sha:
                return c.resolve()
        except (OSError, UnicodeDecodeError):
            continue
    return None


def recipe_shown(manifest: dict, root: str | Path) -> str:
    """The recipe of a sweep as messages print it: :func:`path_ref` of the file :func:`recipe_of` finds, else the
    path as ``sweep.json`` holds it."""
    found = recipe_of(manifest, root)
    return path_ref(found) if found is not None else str(manifest.get("recipe") or "RECIPE")


def rerun_command(manifest: dict, root: str | Path) -> str:
    """``fedcli sweep RECIPE --scale S --seeds N --out DIR``, the command that (re-)runs the sweep in ``root``: the
    recipe and the folder absolute, so that it works from any folder."""
    scale, seeds = manifest.get("scale"), [int(s) for s in manifest.get("seeds") or [0]]
    listed = seeds == list(range(len(seeds)))
    return " ".join(
        [
            "fedcli sweep",
            shlex.quote(recipe_shown(manifest, root)),
            *([f"--scale {shlex.quote(str(scale))}"] if scale else []),
            f"--seeds {len(seeds) if listed else ','.join(map(str, seeds))}",
            f"--out {shlex.quote(path_ref(root))}",
        ]
    )


def last_line(path: Path) -> str | None:
    try:
        lines = [l.strip() for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def entry_dirs(manifest: dict, root: Path) -> dict[tuple[str, int], Path]:
    return {(e["name"], int(e["seed"])): root / e["dir"] for e in manifest.get("runs", [])}
