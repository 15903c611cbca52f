"""Which ``fedcli train`` runs belong together in a report: runs that differ only in ``--seed`` are one experiment
(reported as mean ± std over their seeds, k/n of them completed), and runs on different datasets, models or budgets
are not one comparison (the report names what differs). No torch import: ``fedcli report`` and ``fedcli.load`` use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fedcli.results.runstate import NEUTRAL_KEYS

#: config keys that differ between the seeds of one experiment without changing what is compared: the seed itself, and
#: where and how the run computed (device, trainer, client-state store, checkpoints), besides the neutral keys of
#: ``fedcli sweep`` (output folder, threads, workers, trackers)
SEED_NEUTRAL = (
    *NEUTRAL_KEYS,
    "seed",
    "device",
    "trainer",
    "client_state",
    "client_state_limit_mb",
    "cohort_chunk",
    "client_cache_mb",
    "checkpoint_every",
    "keep_checkpoints",
    "data_dir",
    "download",
)


def experiment_key(run) -> str:
    """The run's config without the keys in which seeds of one experiment may differ (JSON, sorted keys)."""
    return json.dumps(
        {k: v for k, v in sorted(run.config.items()) if k not in SEED_NEUTRAL}, sort_keys=True, default=str
    )


@dataclass
class SeedGroup:
    """Runs of one experiment, by seed (one run: a group of one)."""

    name: str
    runs: list = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    @property
    def first(self):
        return self.runs[0]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def per_seed(self) -> dict:
        """{seed: RunData}, as the figures of a sweep take them (mean over seeds with a ± std band)."""
        return {r.seed: r for r in self.runs}


def group_name(names: list[str]) -> str:
    """A group's name: the folder its runs share (``a`` for ``a/s0``, ``a/s1``), else the runs' names joined."""
    if len(names) == 1:
        return names[0]
    parents = {n.rsplit("/", 1)[0] for n in names if "/" in n}
    if len(parents) == 1 and all("/" in n for n in names):
        return parents.pop()
    return "+".join(names)


def seed_groups(runs: list, names: list[str]) -> list[SeedGroup]:
    """``runs`` (with their short names) grouped by experiment, in the order each experiment first appears; two runs
    with one seed and one config (a copy) stay apart, so that no seed is counted twice."""
    groups: list[tuple[str, list]] = []
    for run, name in zip(runs, names):
        key = experiment_key(run)
        home = next((g for k, g in groups if k == key and run.seed not in [r.seed for r, _ in g]), None)
        if home is None:
            groups.append((key, home := []))
        home.append((run, name))
    out = []
    for _, members in groups:
        members.sort(key=lambda rn: rn[0].seed)
        out.append(SeedGroup(group_name([n for _, n in members]), [r for r, _ in members], [n for _, n in members]))
    return out


def budget(run) -> str:
    """What the run was given to do, as the comparison needs it: ``200 iterations``, ``30 rounds``, ``E=1 x 30
    rounds``."""
    cfg = run.config
    if cfg.get("rounds"):
        return f"{cfg['rounds']} rounds" + (f" of E={cfg['local_epochs']:g}" if cfg.get("local_epochs") else "")
    return f"{cfg.get('iterations', '?')} iterations"


#: what makes two runs' numbers comparable, and how to read it from a run
COMPARED = (
    ("dataset", lambda r: str(r.config.get("dataset", "?"))),
    ("model", lambda r: str(r.config.get("model", "?"))),
    ("budget", budget),
)


def differences(runs: list, names: list[str]) -> list[str]:
    """One phrase per aspect in which ``runs`` differ (dataset, model, budget), naming the runs of each value:
    ``dataset: digits (a, b), femnist (c)``; [] when they are one comparison."""
    out = []
    for what, read in COMPARED:
        values: dict[str, list[str]] = {}
        for run, name in zip(runs, names):
            values.setdefault(read(run), []).append(name)
        if len(values) > 1:
            out.append(f"{what}: " + ", ".join(f"{v} ({', '.join(ns)})" for v, ns in values.items()))
    return out


def differs_from(run, ref) -> list[str]:
    """The aspects (dataset, model, budget) in which ``run`` differs from ``ref``: ``dataset femnist, not digits``."""
    return [f"{what} {read(run)}, not {read(ref)}" for what, read in COMPARED if read(run) != read(ref)]


def iterations_per_round(run) -> float:
    """Local iterations per communication round of a run, from its last evaluation (nan before the first)."""
    last = run.metrics[-1] if run.metrics else {}
    it, rnd = last.get("iteration"), last.get("round")
    return it / rnd if isinstance(it, (int, float)) and isinstance(rnd, (int, float)) and rnd else float("nan")
