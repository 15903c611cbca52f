"""Pure aggregation helpers of ``fedcli report``: seeds, communication ratios, early stopping.

- Mean and spread over seeds: the arithmetic mean and the *sample* standard deviation
  (``n - 1`` in the denominator, as in "mean +- std over three runs"); one seed has none (NaN: a sample std needs
  two values, and ``--format csv`` leaves its ``*_std`` cell empty rather than write 0.0).
- Communication is FedLAMA Eq. 8 (``comm_params``, parameters moved), as % of a baseline run's
  full-training communication (mean over its seeds).
- Early stopping (FedLAMA AAAI, Tables 1-4: "FedLAMA stops the training once it achieves a higher
  accuracy than FedAvg"): for each seed, the first evaluation of the layer-wise run whose test
  accuracy is at least the target: the paired periodic run's accuracy for the same seed
  (``mode="seed"``, the default: same seed = same initial model and cohort stream), or the mean over
  the paired run's seeds (``mode="mean"``). Reported: the accuracy there, the iteration, and the
  cumulative communication there as % of the baseline's full-training communication.
- Rounds to a target accuracy (Fed-LAMB, Section 5: "Fed-AMS requires 20 rounds to achieve 90% accuracy,
  while Fed-LAMB only takes 5 rounds"): for each seed, the first evaluation whose accuracy is at least a
  fixed target; mean and std, over the seeds that reach it, of the rounds completed there (metrics.csv
  ``round``), the local iterations done there (``iteration``: rounds of different methods are of different lengths)
  and the bytes moved so far (``comm_bytes``), and how many seeds reached it. Read off the evaluation grid, each is
  an upper bound, late by less than one evaluation interval (no interpolation between evaluations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float
    n: int
    dropped: int = 0  # values left out because they were not finite (nan, inf): the table flags them

    @property
    def ok(self) -> bool:
        return self.n > 0 and math.isfinite(self.mean)


NAN = Stat(float("nan"), float("nan"), 0)


def mean_std(values: Iterable[float]) -> Stat:
    """Mean and sample standard deviation (ddof=1; NaN for a single value, which has no spread to measure) of the
    finite values."""
    given = [float(v) for v in values if v is not None]
    xs = [x for x in given if math.isfinite(x)]
    n, dropped = len(xs), len(given) - len(xs)
    if n == 0:
        return Stat(float("nan"), float("nan"), 0, dropped)
    mean = math.fsum(xs) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else float("nan")
    return Stat(mean, std, n, dropped)


def pct(value: float, base: float) -> float:
    return 100.0 * value / base if base and math.isfinite(base) and math.isfinite(value) else float("nan")


def first_reach(metrics: Sequence[dict], target: float, tol: float = 1e-12, metric: str = "test_acc") -> dict | None:
    """The first evaluation row (by iteration) with ``metric >= target`` (``test_acc``); None if never."""
    for row in sorted(metrics, key=lambda r: r["iteration"]):
        acc = row.get(metric)
        if isinstance(acc, (int, float)) and math.isfinite(acc) and acc >= target - tol:
            return row
    return None


@dataclass(frozen=True)
class EarlyStop:
    acc: Stat  # accuracy at the stopping evaluation (fraction, not %)
    steps: Stat  # iteration of the stopping evaluation
    comm_pct: Stat  # cumulative comm_params there, % of the baseline's full-training comm_params
    reached: int  # seeds that reached the target
    n: int  # seeds in all


def early_stop(
    right: dict, left: dict, baseline_comm: float, accuracy: str = "best", mode: str = "seed", metric: str = "test_acc"
) -> EarlyStop:
    """Early-stopping columns of one paired row.

    ``right`` and ``left`` map seed -> RunData (the layer-wise run and the periodic run it is compared
    with); ``baseline_comm`` is the mean full-training ``comm_params`` of the table's baseline; ``metric`` the
    accuracy compared (``auto``: each run's own, ``RunData.acc_metric``).
    """
    if mode == "mean":
        common = mean_std(r.accuracy(accuracy, metric) for r in left.values()).mean
        targets = {s: common for s in right}
    elif mode == "seed":
        missing = sorted(set(right) - set(left))
        if missing:
            raise ValueError(f"early stopping pairs seeds; the paired run has no seed {missing[0]}")
        targets = {s: left[s].accuracy(accuracy, metric) for s in right}
    else:
        raise ValueError(f"unknown early-stopping target mode {mode!r}")
    accs, steps, comms = [], [], []
    for seed in sorted(right):
        col = right[seed].acc_metric(metric)
        row = first_reach(right[seed].metrics, targets[seed], metric=col)
        if row is None:
            continue
        accs.append(row[col])
        steps.append(row["iteration"])
        comms.append(pct(row["comm_params"], baseline_comm))
    return EarlyStop(mean_std(accs), mean_std(steps), mean_std(comms), len(steps), len(right))


@dataclass(frozen=True)
class Reach:
    rounds: Stat  # rounds completed at the first evaluation with accuracy >= target (seeds that reach it)
    comm_mb: Stat  # cumulative comm_bytes there, in MB (10^6 bytes)
    acc: Stat  # the accuracy there (fraction)
    reached: int  # seeds that reached the target
    n: int  # seeds in all
    time_s: Stat = NAN  # the simulated seconds there (--system runs: sim_time_s; NaN without)
    iterations: Stat = NAN  # the local iterations done there (metrics.csv ``iteration``)


def rounds_to_target(per_seed: dict, target: float, metric: str = "test_acc") -> Reach:
    """``per_seed`` maps seed -> RunData; seeds that never reach ``target`` are counted, not averaged. ``metric``:
    a metrics.csv accuracy column, or ``auto`` (each run's own, ``RunData.acc_metric``)."""
    rounds, its, mbs, accs, secs = [], [], [], [], []
    for seed in sorted(per_seed):
        col = per_seed[seed].acc_metric(metric)
        row = first_reach(per_seed[seed].metrics, target, metric=col)
        if row is None:
            continue
        rounds.append(row["round"])
        its.append(row["iteration"])
        mbs.append(row["comm_bytes"] / 1e6)
        accs.append(row[col])
        if isinstance(row.get("sim_time_s"), (int, float)):
            secs.append(row["sim_time_s"])
    return Reach(
        mean_std(rounds),
        mean_std(mbs),
        mean_std(accs),
        len(rounds),
        len(per_seed),
        mean_std(secs) if secs else NAN,
        mean_std(its),
    )


def seeds_drawn(runs: dict, names: list[str]) -> str:
    """How the runs ``names`` combine their seeds in a figure: "the mean over 2 seeds (0, 1)", "the mean over each
    run's seeds (of 0, 1, 2)" when some have fewer, "one seed (0)"."""
    per = [sorted(runs[n]) for n in names if runs.get(n)]
    seeds = sorted({s for p in per for s in p})
    if len(seeds) <= 1:
        return f"one seed ({seeds[0]})" if seeds else "no seed"
    listed = ", ".join(map(str, seeds))
    if all(len(p) == len(seeds) for p in per):
        return f"the mean over {len(seeds)} seeds ({listed})"
    return f"the mean over each run's seeds (of {listed})"
