"""What a run records to be re-timed under another network without training again (docs/system-model.md,
"Re-timing a run").

Without a deadline and without availability (nothing that makes who trains depend on the simulated clock), a run's
training does not depend on the system model, and its simulated time is a function of what each round did: who took
part with how many local steps, which layers it synchronized after which step, the method's declared work and the
copies its ledger recorded beyond the synchronizations. :class:`Recorder` writes that, one ``timing.csv`` row per
round (``fedcli.results.rundir.TIMING_COLUMNS``), for every such run, with ``--system`` or without; the manifest's
``timing`` entry
(:meth:`Recorder.describe`) holds what does not change from round to round (the model's forward FLOPs per sample, each
client's samples per step, the bytes per layer). :func:`retime` replays the rows through
``fedcli.fl.system.SystemModel.round_seconds``, the function training calls, so that a re-timed run's ``sim_time_s``
is the one training it with the same options gives, to the last bit.

A row's cells: ``clients`` the participants' ids in the round's order; ``steps`` their local steps (one number when
all equal); ``syncs`` ``STEP:LAYERS`` separated by ``;`` (layers as ranges, ``0-3 5``); ``work`` (methods that declare
a cost) each participant's extra passes per step, extra single-sample passes and extra round trips, ``a/b/c``
(one triple when all equal); ``extra_up`` / ``extra_down`` each participant's bytes per layer moved beyond the
synchronizations (empty: none).
"""

from __future__ import annotations

import numpy as np

#: the manifest's ``timing`` entry's format
VERSION = 1
#: the system options a run is re-timed under (``SystemParams``' fields that price what a round did: the devices, the
#: links, the server; not those that decide who trains): ``fedcli report --uplink ...`` and a recipe run's ``retime``
OPTIONS = ("speed", "uplink", "downlink", "latency", "system_trace", "server_time")


def refusal(cfg: dict) -> str | None:
    """Why a run of config ``cfg`` (a dict: the manifest's ``config``) cannot be re-timed, or None: its training
    depended on the system model (who took part followed the simulated clock or the availability draws)."""
    if float(cfg.get("deadline") or 0) > 0:
        return (
            f"it was trained with --deadline {float(cfg['deadline']):g} (who took part, and with how many steps, "
            f"followed the simulated time)"
        )
    if float(cfg.get("availability", 1.0)) < 1.0:
        return f"it was trained with --availability {float(cfg['availability']):g} (who took part followed the draws)"
    if cfg.get("availability_trace"):
        return (
            f"it was trained with --availability-trace {cfg['availability_trace']} (who took part followed the "
            f"simulated time)"
        )
    if cfg.get("sampling", "cohort") != "cohort":
        return (
            f"it was trained with --sampling {cfg['sampling']} (its cohorts followed the simulated time and the "
            f"clients' speeds)"
        )
    return None


# ---------------------------------------------------------------------- cells
def _floats(values) -> str:
    return " ".join(repr(float(v)) for v in values)


def _layers(layers) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``0-3 5``."""
    out, run = [], []
    for l in layers:
        if run and l == run[-1] + 1:
            run.append(l)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [l]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return " ".join(out)


def _read_layers(text: str) -> list[int]:
    out = []
    for piece in text.split():
        a, _, b = piece.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def _same_or_each(cells: list[str]) -> str:
    return cells[0] if cells and all(c == cells[0] for c in cells) else " ".join(cells)


def _each(text: str, n: int) -> list[str]:
    cells = text.split()
    return cells * n if len(cells) == 1 and n != 1 else cells


class Recorder:
    """The run's timing records: ``shape`` (``fedcli.fl.system.measure``) once, a row per round (:meth:`row`)."""

    def __init__(self, shape):
        self.shape = shape

    def describe(self) -> dict:
        """The manifest's ``timing`` entry: what re-timing needs beside timing.csv."""
        s = self.shape
        batch = [int(b) for b in s.batch]
        return {
            "version": VERSION,
            "file": "timing.csv",
            "forward_flops_per_sample": s.forward_flops,
            "clients": len(batch),
            "batch": batch[0] if len(set(batch)) == 1 else batch,
            "up_bytes": [float(v) for v in s.up],
            "down_bytes": [float(v) for v in s.down],
            "costs": bool(s.work),
        }

    def row(self, plan, iteration: int) -> dict:
        """timing.csv's row of a round that ran ``plan`` (a ``fedcli.fl.system.RoundPlan`` with its ``syncs`` and its
        ``extra_up`` / ``extra_down`` set), ending at ``iteration``; ``round`` counted from 1 as in metrics.csv."""
        ids = list(plan.participants)
        work = ""
        if self.shape.work and ids:
            each = self.shape.work.per_client(plan.round_idx, ids, len(ids))
            work = _same_or_each(["/".join(repr(float(v)) for v in each[:, k]) for k in range(len(ids))])
        up, down = (v if v is not None and any(v) else () for v in (plan.extra_up, plan.extra_down))
        return {
            "round": plan.round_idx + 1,
            "iteration": iteration,
            "clients": " ".join(map(str, ids)),
            "steps": _same_or_each([str(plan.steps[c]) for c in ids]),
            "syncs": ";".join(f"{j}:{_layers(ls)}" for j, ls in plan.syncs),
            "work": work,
            "extra_up": _floats(up),
            "extra_down": _floats(down),
        }


# ---------------------------------------------------------------------- replay
class _Replay:
    """A ``fedcli.fl.system.Work`` that gives each round's recorded work (``per_client``) instead of computing it."""

    def __init__(self, costs: bool):
        self.costs, self.now = costs, None

    def __bool__(self) -> bool:
        return self.costs

    def per_client(self, round_idx, clients, n_round) -> np.ndarray:
        return self.now


def plans(entry: dict, rows: list[dict]):
    """Each recorded round as (round, iteration, RoundPlan with its syncs and extra copies, its work [3, k] or None)."""
    from fedcli.fl.system import RoundPlan

    n_layers = len(entry["up_bytes"])
    for r in rows:
        ids = [int(c) for c in str(r["clients"]).split()]
        steps = [int(s) for s in _each(str(r["steps"]), len(ids))]
        plan = RoundPlan(list(ids), list(ids), dict(zip(ids, steps)), round_idx=int(r["round"]) - 1)
        plan.syncs = [
            (int(j), _read_layers(ls)) for j, _, ls in (s.partition(":") for s in str(r["syncs"]).split(";") if s)
        ]
        plan.extra_up, plan.extra_down = (
            [float(v) for v in str(r[k]).split()] or [0.0] * n_layers for k in ("extra_up", "extra_down")
        )
        work = None
        if str(r.get("work") or "").strip():
            work = np.array([[float(v) for v in cell.split("/")] for cell in _each(str(r["work"]), len(ids))]).T
        yield int(r["round"]), int(r["iteration"]), plan, work


def retime(entry: dict, rows: list[dict], cfg) -> list[tuple[int, float]]:
    """(round, simulated seconds at its end) of every recorded round under the system options ``cfg`` (speed,
    uplink, downlink, latency, system_trace, server_time, seed: what ``SystemModel`` reads), from the manifest's
    ``timing`` ``entry`` and the run's timing.csv ``rows``: the sum training makes, round by round."""
    from fedcli.fl.system import Shape, SystemModel, system_options

    batch = entry["batch"]
    n = int(entry["clients"])
    batch = [batch] * n if isinstance(batch, int) else batch
    work = _Replay(bool(entry.get("costs")))
    shape = Shape(entry["forward_flops_per_sample"], batch, entry["up_bytes"], entry["down_bytes"], work)
    model = SystemModel(system_options(cfg), cfg.seed, n, shape)
    n_layers = len(entry["up_bytes"])
    out, now = [], 0.0
    for round_no, _, plan, each in plans(entry, rows):
        work.now = each if each is not None else np.zeros((3, len(plan.participants)))
        seconds, _ = model.round_seconds(plan, plan.syncs, n_layers)
        now += plan.wait_s + seconds
        out.append((round_no, now))
    return out
