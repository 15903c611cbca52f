"""When ``fedcli tune`` stops a trial early (issue 58, "Pruning"; docs/tuning.md): torch-free arithmetic the
coordinator applies to a running trial's metrics.csv, and the Optuna pruner it configures.

- **Rungs**: the trials report at a fixed grid of local iterations, the same for every trial of a study whatever its
  tau or eval_every (a value at rung ``r`` is read once the trial has evaluated at ``r`` or beyond): the budget
  ``B`` halved, ``B/16`` doubled (``B/16, B/8, B/4, B/2`` when B is a multiple of 16), those above the floor. Successive
  halving (Optuna's, reduction factor 2,
  its first rung the grid's first) keeps the better half at each; ``median`` (Optuna's MedianPruner) stops a trial
  whose value is worse than the median of the other trials' at the same rung.
- **Best so far**: the value reported at a rung is the best of the objective's metric over the trial's evaluations up
  to the rung (not the value of the last one), so one noisy evaluation neither saves nor condemns a trial; the median
  pruner therefore compares best-so-far values.
- **Floor**: nothing is pruned at or below the floor, the latest of: the lr warm-up's end, the first lr decay, and for
  FedLAMA its first interval adjustment (``lama_first_adjust`` x tau': before it every phi is FedAvg, so a comparison
  there says nothing about phi). The largest tau of the space counts. Printed in the plan.
- **Hopeless** (always on, also with two objectives or ``--pruner none``): a trial whose best validation accuracy so
  far is at most chance (1 / classes) + :data:`HOPELESS_MARGIN` once it has trained a quarter of the budget (and
  passed the floor) is stopped.
"""

from __future__ import annotations

import math

from fedcli.tune.objectives import ACCURACY

#: the hopeless rule's margin over chance (absolute accuracy)
HOPELESS_MARGIN = 0.05
#: the rung grid's first rung: this fraction of the budget
RUNG_FIRST = 16


def floor_of(base: dict, space: dict) -> tuple[int, list[str]]:
    """(the floor in local iterations, the reasons) of a study whose trials start from ``base`` (resolved train values)
    and search ``space`` (name -> fedcli.tune.space.Param)."""

    def top(name, default):
        p = space.get(name)
        v = p.upper() if p is not None else base.get(name, default)
        return v if isinstance(v, (int, float)) else default

    tau = int(top("tau", 5))
    said, floor = [], 0
    warm = int(top("warmup_iterations", 0) or 0)
    if warm:
        floor = max(floor, warm)
        said.append(f"lr warm-up to iteration {warm}")
    decay = str(base.get("lr_decay_at", "") or "")
    pts = sorted(int(s) for s in decay.split(",") if s.strip().isdigit())
    if pts:
        first = pts[0] * (tau if base.get("lr_decay_unit", "iteration") == "round" else 1)
        floor = max(floor, first)
        said.append(f"first lr decay at iteration {first}")
    if reads(base, "lama_first_adjust"):  # a layer-wise adaptive schedule (FedLAMA's): its first adjustment
        adj = int(top("lama_first_adjust", 6)) * tau
        if adj:
            floor = max(floor, adj)
            said.append(
                f"FedLAMA's first interval adjustment after iteration {adj} (lama_first_adjust x the largest tau')"
            )
    return floor, said


def round_floor(base: dict) -> tuple[int, list[str]]:
    """The floor of a budget in rounds (``rounds``): the first lr decay when it is given in rounds, else 0."""
    pts = sorted(int(s) for s in str(base.get("lr_decay_at", "") or "").split(",") if s.strip().isdigit())
    if pts and base.get("lr_decay_unit") == "round":
        return pts[0], [f"first lr decay at round {pts[0]}"]
    return 0, []


def reads(base: dict, option: str) -> bool:
    """Whether a run with the resolved values ``base`` reads ``option`` (one of its parts declares it: fedcli/specs)."""
    from fedcli import specs

    specs.load()
    parts = specs.run_specs(base.get("algo", ""), base.get("schedule", ""), base.get("init", ""))
    return any(option in s.declared() for s in parts.values())


def rungs_of(budget: int, floor: int) -> list[int]:
    """The pruning grid: ``r0 = budget // 16`` (at least 1) doubled, ``r0, 2 r0, 4 r0, ...`` below the budget, those
    above ``floor`` (geometric, as successive halving with reduction factor 2 expects its rungs)."""
    r0 = max(1, budget // RUNG_FIRST)
    return [r0 * 2**k for k in range(64) if floor < r0 * 2**k < budget]


def hopeless_at(budget: int, floor: int) -> int:
    """The iteration from which the hopeless rule applies: a quarter of the budget, not before the floor."""
    return max(math.ceil(budget / 4), floor + 1)


def best_so_far(points: list[tuple[int, float]], upto: int, maximize: bool) -> float | None:
    vals = [v for it, v in points if it <= upto]
    if not vals:
        return None
    return max(vals) if maximize else min(vals)


def rung_values(
    points: list[tuple[int, float]], rungs: list[int], maximize: bool, finished: bool = False
) -> dict[int, float]:
    """The value at each rung the trial has passed: best so far up to the rung, known once an evaluation at or after
    the rung exists (or the run ended)."""
    last = points[-1][0] if points else -1
    out = {}
    for r in rungs:
        if last >= r or (finished and points):
            v = best_so_far(points, r, maximize)
            if v is not None:
                out[r] = v
    return out


def hopeless(
    points: list[tuple[int, float]], num_classes: int | None, budget: int, floor: int
) -> tuple[str, int] | None:
    """(why, the iteration that decided) when the trial is hopeless (its accuracy evaluations ``points``), else None:
    at its first evaluation at :func:`hopeless_at` or beyond, its best accuracy so far at most chance +
    :data:`HOPELESS_MARGIN`."""
    if not points or not num_classes:
        return None
    at = hopeless_at(budget, floor)
    upto = next((it for it, _ in points if it >= at), None)  # the first evaluation at or past the mark decides, so
    if upto is None:  # the verdict does not depend on when it is read
        return None
    best = max(v for it, v in points if it <= upto)
    limit = 1.0 / num_classes + HOPELESS_MARGIN
    if best <= limit:
        return (
            f"hopeless: best validation accuracy {best:.4f} by iteration {upto} is at most chance "
            f"1/{num_classes} + {HOPELESS_MARGIN} = {limit:.4f} after a quarter of the budget ({at} of {budget})"
        ), upto
    return None


def intermediate_metric(objectives) -> str | None:
    """The metric Optuna's pruner sees (one objective, an accuracy reduced over evaluations), else None: no Optuna
    pruning (two objectives, a cost, a to_target count)."""
    if len(objectives) != 1:
        return None
    o = objectives[0]
    return o.metric if o.metric in ACCURACY and o.target is None else None


def make_pruner(name: str, rungs: list[int]):
    """The Optuna pruner of ``--pruner`` (imports optuna)."""
    import optuna

    if name == "none" or not rungs:
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=rungs[0], reduction_factor=2, min_early_stopping_rate=0)
