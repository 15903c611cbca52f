"""The system model (``--system``): simulated time from each client's device and network (docs/system-model.md).

Per client i, drawn once from the run's seed and the client id (``fedcli.specs.system``'s distributions) or read
from a CSV trace: compute speed v_i (FLOP/s), uplink and downlink bandwidth U_i, D_i (bytes/s), one-way latency
lat_i (s). With F the model's forward FLOPs per sample (``fedcli.models.flops``) and b_i the samples of one of its
mini-batches (min(B, n_i)):

- a local step costs c_i = 3 F b_i / v_i (forward and backward: the backward pass costs twice the forward, Kaplan
  et al. 2020, "Scaling Laws for Neural Language Models", Sec. 2.1; the factor ``fedcli.sweep.estimate`` uses too);
- a synchronization of the layers L costs client i
  x_i(L) = 2 lat_i + sum_{l in L} up_l / U_i + sum_{l in L} down_l / D_i, with up_l = numel_l x (the codec's bits) / 8
  and down_l = numel_l x 32 / 8 bytes: what the ledger (``fedcli.comm.ledger``) counts per client, so FedLAMA's
  partial synchronizations cost what they move;
- a synchronization is a barrier: the k-th one of a round, after local step j_k, ends
  t_k = max_i (s_ik c_i + x_i(L_k)) after the previous one, s_ik the steps client i runs between them, and the
  round lasts T = sum_k t_k (+ the deadline's wait, + the server's constant time);
- a method's work beyond FedAvg's (each part's ``fedcli.specs.Cost``, declared with the part): a local step of
  P_i forward-backward passes of its mini-batch costs P_i c_i; client i's extra work of the round, e_i = (its extra
  single-sample passes) 3 F / v_i + (its extra round trips) 2 lat_i + the transfer time of the whole-model copies it
  moved beyond the synchronizations (``Ledger.record_transfer``: SCAFFOLD's control variates, FedFomo's downloads,
  per layer, up / U_i and down / D_i), counts in its time before the round's first synchronization:
  t_1 = max_i (s_i1 P_i c_i + e_i + x_i(L_1)).

A client is available in a round with probability ``--availability`` (keyed by seed, round and client) and, with
``--availability-trace``, when the round's simulated start lies in one of its on-intervals. With a
deadline D, client i's own time s c_i + sum_k x_i(L_k) decides: over D, ``drop`` leaves it out of the round (not
aggregated; the server waits until D), ``keep-partial`` runs the s_i = floor((D - sum_k x_i(L_k)) / c_i) steps
that fit (dropped when none does) and aggregates them (FedProx's stragglers; FedNova normalizes the unequal steps).
Nothing here depends on the process count or on a resume: every draw is keyed by (seed, client) or
(seed, round, client) and the round's syncs come from the schedule's own ``due``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedcli.errors import ConfigError
from fedcli.fl.budget import epoch_steps
from fedcli.fl.context import SystemContext
from fedcli.fl.rng import np_gen
from fedcli.models.flops import TRAIN_FLOPS_PER_FORWARD, forward_flops
from fedcli.specs import NO_COST, CostInput
from fedcli.specs.system import (
    AVAILABILITY_COLUMNS,  # noqa: F401
    QUANTITIES,
    TRACE_COLUMNS,  # noqa: F401
    SystemParams,
    in_range,
    parse_distribution,
    range_text,
    read_availability_rows,
    read_trace_rows,
)


def draw(distribution: str, n: int, gen: np.random.Generator, option: str = "speed") -> np.ndarray:
    """``n`` values of the distribution ``distribution`` (``NAME:ARGS``), one per client index, from ``gen``. Tiers are
    shares,
    not chances: ``tiers:1e10@0.1,1e8@0.9`` of 10 clients makes exactly one fast client (which one: ``gen``). A
    log-normal draw outside the quantity's range (``fedcli.specs.system.BOUNDS``) is refused (ConfigError, exit 2)."""
    name, args = parse_distribution(distribution, option, QUANTITIES[option][1])
    if name == "constant":
        return np.full(n, args[0], dtype=np.float64)
    if name == "lognormal":  # median m, spread s: m * exp(s z)
        with np.errstate(over="ignore", under="ignore"):
            values = args[0] * np.exp(args[1] * gen.standard_normal(n))
        bad = [i for i, v in enumerate(values.tolist()) if not in_range(option, v)]
        if bad:
            raise ConfigError(
                f"--{option} {distribution!r}: client {bad[0]}'s draw {values[bad[0]]:g} lies outside "
                f"{range_text(option)}, the range that keeps a run's simulated time finite "
                f"({len(bad)} client(s)); lower the spread or move the median (docs/system-model.md)",
                key=option,
            )
        return values
    if name == "uniform":
        return gen.uniform(args[0], args[1], n)
    # tiers: round(P_k n) clients in tier k exactly (cumulative shares rounded), which ones a permutation of the clients
    values = np.array([v for v, _ in args], dtype=np.float64)
    bounds = np.rint(np.cumsum([p for _, p in args]) * n).astype(np.int64)
    out = np.empty(n, dtype=np.float64)
    out[gen.permutation(n)] = values[np.searchsorted(bounds, np.arange(n), side="right")]
    return out


def read_trace(path: str, n: int) -> tuple[dict[str, np.ndarray], str]:
    """The columns of a system trace (one row per client, ``TRACE_COLUMNS``) for clients 0..n-1, and the file's
    sha256. ConfigError (exit 2, naming the file) for a file that is not a regular file of bounded size, a missing
    column, a second row for a client, fewer rows than clients, or a value that is not a finite number in its range
    (``fedcli.specs.system.read_trace_rows``)."""
    rows, digest = read_trace_rows(path)
    out = {q: np.full(n, np.nan) for q in QUANTITIES}
    for _line, client, values in rows:
        if client < n:
            for q, v in values.items():
                out[q][client] = v
    absent = [i for i in range(n) if math.isnan(out["speed"][i])]
    if absent:
        raise ConfigError(
            f"--system-trace {path}: {len(rows)} row(s) for a run of {n} clients; no row for client "
            f"{absent[0]} ({len(absent)} client(s) missing): expected one row per client",
            key="system_trace",
        )
    return out, digest


def read_availability(path: str, n: int) -> tuple[list[list[tuple[float, float]]], str]:
    """Each client's on-intervals [start, end) in simulated seconds (``AVAILABILITY_COLUMNS``; a client without a
    row is never available), and the file's sha256. ConfigError (exit 2) for an interval that is not
    0 <= start <= end (end may be inf) or starts after ``MAX_SECONDS``
    (``fedcli.specs.system.read_availability_rows``)."""
    rows, digest = read_availability_rows(path)
    on: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    for _line, client, v in rows:
        if client < n:
            on[client].append((v["start"], v["end"]))
    return on, digest


@dataclass
class RoundPlan:
    """Who takes part in a round and how many local steps each runs (``SystemModel.plan_round``)."""

    sampled: list[int]
    participants: list[int]
    steps: dict[int, int]  # each participant's local steps
    unavailable: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)  # missed the deadline: not aggregated
    partial: list[int] = field(default_factory=list)  # kept with fewer steps than the round's
    syncs: list = field(default_factory=list)  # the round's synchronizations (step, layers), set by the engine
    wait_s: float = 0.0  # simulated seconds the round waited for a client to come online
    surplus: list = field(default_factory=list)  # --overcommit: finished after the first K, not aggregated
    round_idx: int = 0
    # the bytes per layer each participant moved beyond the synchronizations (``Ledger.take_round``), set by the engine
    extra_up: list | None = None
    extra_down: list | None = None

    @property
    def uneven(self) -> bool:
        """Some participant runs fewer steps than the round's longest."""
        return bool(self.partial)


class Work:
    """What the run's parts do beyond FedAvg's work: their declared costs (``fedcli.specs.Cost``; parts without one
    are left out) over the clients' data: ``split`` (each client's training split) and ``samples`` (what it trains on)
    [n], the run's mini-batch size ``batch`` and ``drop_last``."""

    def __init__(self, parts=(), split=(), samples=(), batch: int = 1, drop_last: bool = False):
        self.costs = [(p.cost, p.opts) for p in parts if p.cost is not NO_COST]
        self.split, self.samples = [int(v) for v in split], [int(v) for v in samples]
        self.batch, self.drop_last = int(batch), bool(drop_last)

    def __bool__(self) -> bool:
        return bool(self.costs)

    def per_client(self, round_idx: int, clients, n_round: int) -> np.ndarray:
        """[3, len(clients)]: each client's extra passes per local step, extra single-sample passes and extra round
        trips in round ``round_idx`` of ``n_round`` clients."""
        out = np.zeros((3, len(clients)))
        for cost, params in self.costs:
            for k, c in enumerate(clients):
                n = self.samples[c]
                given = CostInput(
                    params,
                    round_idx,
                    self.split[c],
                    n,
                    self.batch,
                    self.drop_last,
                    n_round,
                    lambda e, n=n: epoch_steps(n, e, self.batch, self.drop_last),
                )
                out[:, k] += (cost.step_passes(given), cost.round_passes(given), cost.round_trips(given))
        return out


class SystemModel:
    """Each client's speed, bandwidths and latency, and the time of what a round does (module docstring).

    ``forward_flops``: the model's forward FLOPs per sample; ``batch``: each client's samples per step [n];
    ``up_bytes`` / ``down_bytes``: one client's bytes per layer up and down [layers]; ``work``: the parts' work beyond
    FedAvg's (:class:`Work`; none by default)."""

    def __init__(self, options: SystemParams, seed: int, n_clients: int, shape: Shape):
        self.options, self.seed = options, int(seed)
        self.work = shape.work if shape.work is not None else Work()
        self.n = n_clients
        self.forward_flops = float(shape.forward_flops)
        self.up_bytes = np.asarray(shape.up, dtype=np.float64)
        self.down_bytes = np.asarray(shape.down, dtype=np.float64)
        self.trace_sha256 = self.availability_sha256 = None
        self.on = None  # each client's on-intervals (--availability-trace), or None
        if options.availability_trace:
            self.on, self.availability_sha256 = read_availability(options.availability_trace, n_clients)
        if options.system_trace:
            values, self.trace_sha256 = read_trace(options.system_trace, n_clients)
        else:
            values = {q: draw(getattr(options, q), n_clients, np_gen(self.seed, "system", q), q) for q in QUANTITIES}
        self.speed, self.uplink, self.downlink, self.latency = (values[q] for q in QUANTITIES)
        batch = np.asarray(shape.batch, dtype=np.float64)
        self.step_s = TRAIN_FLOPS_PER_FORWARD * self.forward_flops * batch / self.speed

    # ------------------------------------------------------------------ costs
    def client_work(self, round_idx: int, clients: np.ndarray, n_round: int) -> tuple[np.ndarray, np.ndarray]:
        """(each client's seconds per local step, its extra seconds of the round) in round ``round_idx`` of ``n_round``
        clients: P_i c_i, and its extra passes' 3 F / v_i seconds plus 2 lat_i per extra round trip (the method's
        declared costs, :class:`Work`; c_i and 0 without). Its extra transfers are the round's ledger records
        (:meth:`round_seconds`)."""
        step = self.step_s[clients]
        if not self.work:
            return step, np.zeros(len(clients))
        extra_step, passes, trips = self.work.per_client(round_idx, clients.tolist(), n_round)
        own = (
            TRAIN_FLOPS_PER_FORWARD * self.forward_flops * passes / self.speed[clients]
            + 2.0 * trips * self.latency[clients]
        )
        return step * (1.0 + extra_step), own

    def layer_seconds(self, clients: np.ndarray, layers: list[int]) -> np.ndarray:
        """[len(clients), len(layers)]: each client's transfer time of each layer, up and down (no latency)."""
        return (
            self.up_bytes[layers][None, :] / self.uplink[clients][:, None]
            + self.down_bytes[layers][None, :] / self.downlink[clients][:, None]
        )

    def sync_seconds(self, clients: np.ndarray, layers: list[int], each: np.ndarray | None = None) -> np.ndarray:
        """x_i(L): each client's time of one synchronization of ``layers``: 2 lat_i + its transfers (``each``: their
        :meth:`layer_seconds`, where the caller has them already)."""
        each = self.layer_seconds(clients, layers) if each is None else each
        return 2.0 * self.latency[clients] + each.sum(axis=1)

    def comm_seconds(self, clients: np.ndarray, syncs: list[tuple[int, list[int]]]) -> np.ndarray:
        """Each client's time in all of a round's synchronizations ``syncs`` ((step, layers), in order)."""
        total = np.zeros(len(clients))
        for _, layers in syncs:
            total += self.sync_seconds(clients, layers)
        return total

    # ------------------------------------------------------------------ a round
    @property
    def may_leave_out(self) -> bool:
        """Some round may have fewer participants than sampled clients (availability below 1, an availability trace,
        a deadline): which process trains a client then changes from round to round."""
        return float(self.options.availability) < 1.0 or self.on is not None or float(self.options.deadline) > 0

    def online(self, client: int, now: float) -> bool:
        """``client`` is inside one of its on-intervals at simulated time ``now`` (always, without a trace)."""
        return self.on is None or any(a <= now < b for a, b in self.on[client])

    def next_online(self, clients, now: float) -> float | None:
        """The first simulated time t >= ``now`` at which one of ``clients`` is inside one of its on-intervals
        (``now`` itself without a trace); None: none of them ever is again."""
        if self.on is None:
            return now
        starts = [max(a, now) for c in clients for a, b in self.on[c] if b > now and a < b]
        return min(starts) if starts else None

    def round_cohort(self, round_idx: int, sampled: list[int], now: float, keep: int) -> tuple[list[int], float]:
        """Whom round ``round_idx`` asks and when it starts (>= ``now``, the end of the last round): with ``--sampling
        cohort`` the ``sampled`` cohort, once one of it is online (a round whose cohort is all offline waits for the
        first of it to come online); with ``--sampling available`` (FedScale's), ceil(``--overcommit`` x ``keep``) of
        the clients available at its start (drawn keyed by (seed, round)), once any client is online. ConfigError
        (exit 2) when no client will ever be online again: the rest of the run could not train."""
        everyone = range(self.n)
        if self.next_online(everyone, now) is None:
            raise ConfigError(
                f"--availability-trace {self.options.availability_trace}: no client is online at or "
                f"after simulated time {now:g} s (round {round_idx + 1}): nobody could train in the rest of the "
                f"run; the rounds before are in system.csv and metrics.csv (give intervals that reach "
                f"further, or a smaller budget)",
                key="availability_trace",
            )
        if self.options.sampling == "cohort":
            start = self.next_online(sampled, now)
            return list(sampled), (now if start is None else start)  # None: this cohort never again, the round idles
        start = self.next_online(everyone, now)
        ready = self.available(round_idx, list(everyone), start)
        want = min(len(ready), math.ceil(float(self.options.overcommit) * keep - 1e-9))
        if want >= len(ready):
            return ready, start
        pick = np_gen(self.seed, "available-cohort", round_idx).choice(len(ready), size=want, replace=False)
        return sorted(ready[int(i)] for i in pick), start

    def available(self, round_idx: int, cohort: list[int], now: float = 0.0) -> list[int]:
        """The clients of ``cohort`` available in round ``round_idx``, which starts at simulated time ``now``: inside
        one of their on-intervals (``--availability-trace``), and with probability ``--availability`` (one uniform
        draw per client, keyed by (seed, round) and the client's index: the same for any process count)."""
        if self.on is not None:
            cohort = [c for c in cohort if self.online(c, now)]
        p = float(self.options.availability)
        if p >= 1.0:
            return list(cohort)
        u = np_gen(self.seed, "available", round_idx).random(self.n)
        return [c for c in cohort if u[c] < p]

    def plan_round(
        self,
        round_idx: int,
        cohort: list[int],
        steps: dict[int, int],
        syncs: list[tuple[int, list[int]]],
        now: float = 0.0,
        keep: int | None = None,
    ) -> RoundPlan:
        """Round ``round_idx``'s participants among the sampled ``cohort``: the available ones (at ``now``, the
        round's simulated start) that meet the deadline (``--on-deadline``), each with its local steps (``steps``:
        each client's full steps this round); with ``keep`` (``--overcommit``), the first ``keep`` of them to finish
        (their own time, as for the deadline; ties by client id), the others ``surplus``."""
        ready = self.available(round_idx, cohort, now)
        on = set(ready)
        unavailable = [c for c in cohort if c not in on]
        plan = RoundPlan(list(cohort), [], {}, unavailable, round_idx=round_idx)
        deadline = float(self.options.deadline)
        ids = np.array(ready, dtype=np.int64)
        fits = self.steps_within(ids, syncs, deadline, round_idx) if deadline > 0 and len(ids) else None
        for k, c in enumerate(ready):
            want = steps[c]
            got = want if fits is None else min(want, int(fits[k]))
            if got < want and (self.options.on_deadline == "drop" or got < 1):
                plan.dropped.append(c)
                continue
            if got < want:
                plan.partial.append(c)
            plan.participants.append(c)
            plan.steps[c] = got
        if keep is not None and len(plan.participants) > keep:
            self.keep_first(plan, syncs, keep)
        return plan

    def keep_first(self, plan: RoundPlan, syncs, keep: int) -> None:
        """Over-commitment: only the first ``keep`` participants to finish (own time s_i P_i c_i + e_i + sum_k x_i(L_k),
        as for the deadline) stay in the round; the others are its ``surplus`` (not aggregated, no bytes; the server
        does not wait for them)."""
        ids = np.array(plan.participants, dtype=np.int64)
        step, extra = self.client_work(plan.round_idx, ids, len(ids))
        own = np.array([plan.steps[c] for c in plan.participants]) * step + extra + self.comm_seconds(ids, syncs)
        first = sorted(np.lexsort((ids, own))[:keep].tolist())  # stable: equal times by client id
        plan.surplus = [c for k, c in enumerate(plan.participants) if k not in first]
        plan.participants = [plan.participants[k] for k in first]
        plan.steps = {c: plan.steps[c] for c in plan.participants}
        plan.partial = [c for c in plan.partial if c in plan.steps]

    def steps_within(self, clients: np.ndarray, syncs, deadline: float, round_idx: int = 0) -> np.ndarray:
        """The most local steps each client can run within ``deadline`` beside its synchronizations and its declared
        extra work of round ``round_idx`` (may be < 1)."""
        step, own = self.client_work(round_idx, clients, len(clients))
        spare = deadline - self.comm_seconds(clients, syncs) - own
        # a relative 1e-9 keeps an exact fit (D = s c_i + x_i computed back) from losing a step to rounding
        return np.floor(spare / step * (1.0 + 1e-9))

    def round_seconds(
        self, plan: RoundPlan, syncs: list[tuple[int, list[int]]], n_layers: int
    ) -> tuple[float, list[float]]:
        """(T, per-layer seconds) of a round that ran ``plan``: T = sum_k max_i (s_ik P_i c_i + x_i(L_k)), with each
        participant's extra work e_i (:meth:`client_work` and the copies ``plan.extra_up`` / ``extra_down``) in the
        first synchronization's term, at least the deadline when a client was dropped (the server waited for it), plus
        the server's time; a layer's seconds are, per synchronization of it, the slowest participant's transfer of that
        layer, plus the slowest participant's transfer of that layer's extra copies."""
        ids = np.array(plan.participants, dtype=np.int64)
        steps = np.array([plan.steps[c] for c in plan.participants], dtype=np.float64)
        step_s, extra = self.client_work(plan.round_idx, ids, len(ids))
        per_layer = [0.0] * n_layers
        if plan.extra_up is not None and len(ids):  # the whole-model copies moved beyond the synchronizations
            moved = (
                np.asarray(plan.extra_up, dtype=np.float64)[None, :] / self.uplink[ids][:, None]
                + np.asarray(plan.extra_down, dtype=np.float64)[None, :] / self.downlink[ids][:, None]
            )
            extra = extra + moved.sum(axis=1)
            per_layer = [a + b for a, b in zip(per_layer, moved.max(axis=0).tolist())]
        total, prev = 0.0, 0
        for j, layers in syncs:
            if len(ids):
                seg = np.clip(np.minimum(steps, j) - prev, 0, None)
                each = self.layer_seconds(ids, layers)  # once: for x_i(L) and for each layer's slowest transfer
                total += float(np.max(seg * step_s + self.sync_seconds(ids, layers, each) + extra))
                extra = 0.0  # the round's extra work counts before its first synchronization
                for l, s in zip(layers, each.max(axis=0).tolist()):
                    per_layer[l] += s
            prev = j
        if len(ids) and steps.max() > prev:  # local steps after the last synchronization (none in fedcli's schedules)
            total += float(np.max(np.clip(steps - prev, 0, None) * step_s + extra))
        if plan.dropped or not len(ids):
            total = max(total, float(self.options.deadline))
        return total + float(self.options.server_time), per_layer

    # ------------------------------------------------------------------ checks and records
    def check_deadline(self, steps: list[int], syncs: list[tuple[int, list[int]]], n_round: int | None = None) -> None:
        """Before training: some client can meet the deadline in a first round of ``syncs`` and ``n_round`` clients
        (its full ``steps`` under ``drop``, one step under ``keep-partial``, and its declared extra work);
        ConfigError (exit 2) otherwise."""
        n_round = self.n if n_round is None else n_round
        deadline = float(self.options.deadline)
        if deadline <= 0:
            return
        ids = np.arange(self.n)
        need = np.array(steps, dtype=np.float64) if self.options.on_deadline == "drop" else np.ones(self.n)
        step, extra = self.client_work(0, ids, n_round)
        own = need * step + extra + self.comm_seconds(ids, syncs)
        if float(own.min()) > deadline:
            fastest = int(np.argmin(own))
            what = "its round's local steps" if self.options.on_deadline == "drop" else "one local step"
            raise ConfigError(
                f"--deadline {deadline:g}: no client can meet it; the fastest, client {fastest}, needs "
                f"{float(own[fastest]):.6g} s for {what} and its synchronizations (raise --deadline, or "
                f"see the speeds and bandwidths in docs/system-model.md)",
                key="deadline",
            )

    def check_online(self) -> None:
        """Before training: some client is online at some time (``--availability-trace``); ConfigError (exit 2)
        otherwise, since nobody would ever train."""
        if self.next_online(range(self.n), 0.0) is None:
            raise ConfigError(
                f"--availability-trace {self.options.availability_trace}: no client of the run's {self.n} "
                f"is ever online (no interval with start < end for clients 0 to {self.n - 1}): nobody would "
                f"train",
                key="availability_trace",
            )

    def check_trained(self, synchronized: int, rounds: int) -> None:
        """After the last round: some client took part in some round (``synchronized``: the parameters the ledger
        counted); ConfigError (exit 2) otherwise: a run in which nobody trained is an error, not a completion."""
        if synchronized == 0 and rounds > 0:
            raise ConfigError(
                f"--system: nobody took part in any of the run's {rounds} round(s) (system.csv: every "
                f"sampled client was unavailable or missed the deadline), so nothing was trained; raise "
                f"--availability, widen the availability trace's intervals or the deadline",
                key="availability",
            )

    def describe(self) -> dict:
        """The manifest's ``system`` entry: the options, the model's FLOPs, each quantity's range, the trace digest."""
        cfg = self.options
        spread = {
            q: {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}
            for q, v in zip(QUANTITIES, (self.speed, self.uplink, self.downlink, self.latency))
        }
        trace = lambda path, digest: {"path": path, "resolved": str(Path(path).resolve()), "sha256": digest}  # noqa: E731
        # a trace replaces the four draws: their options are not recorded beside it (they were not used)
        draws = {} if cfg.system_trace else {q: getattr(cfg, q) for q in QUANTITIES}
        return {
            **draws,
            "units": {q: u for q, (u, _) in QUANTITIES.items()},
            "availability": cfg.availability,
            "deadline": cfg.deadline,
            "on_deadline": cfg.on_deadline,
            "server_time": cfg.server_time,
            "sampling": cfg.sampling,
            **({"overcommit": cfg.overcommit} if cfg.sampling == "available" else {}),
            "forward_flops_per_sample": self.forward_flops,
            "train_flops_per_forward": TRAIN_FLOPS_PER_FORWARD,
            **({"costs": [c.source for c, _ in self.work.costs]} if self.work else {}),
            **({"trace": trace(cfg.system_trace, self.trace_sha256)} if cfg.system_trace else {}),
            **(
                {"availability_trace": trace(cfg.availability_trace, self.availability_sha256)}
                if cfg.availability_trace
                else {}
            ),
            "clients": spread,
        }

    def round_row(self, plan: RoundPlan, round_idx: int, iteration: int, seconds: float, sim_time: float) -> dict:
        """system.csv: one row per round (``round`` counted from 1, as in metrics.csv)."""
        ids = lambda cs: " ".join(str(c) for c in cs)  # noqa: E731
        return {
            "round": round_idx + 1,
            "iteration": iteration,
            "round_s": seconds,
            "sim_time_s": sim_time,
            "wait_s": plan.wait_s,
            "sampled": len(plan.sampled),
            "participants": len(plan.participants),
            "unavailable": len(plan.unavailable),
            "dropped": len(plan.dropped),
            "partial": len(plan.partial),
            "dropped_clients": ids(plan.dropped),
            "partial_clients": ids(plan.partial),
        }


def plan_system_round(model: SystemModel, budget, state, sampled: list[int], n_active: int, sync_plan) -> RoundPlan:
    """The round ``state.round_idx`` under the system model: of the ``sampled`` cohort, the clients asked (available;
    ``--sampling available``: drawn among those online) and of them the ones that take part (meeting the deadline or
    keeping partial work), with their local steps (``budget``: the run's ``RunPlan``; ``n_active``: clients per round;
    ``sync_plan(steps)``: the synchronizations of a round of ``steps``)."""
    now = state.sim_time_s
    asked, start = model.round_cohort(state.round_idx, sampled, now, n_active)
    steps = budget.round_steps(state.iteration, asked or sampled)
    full = dict(zip(asked, budget.client_round_steps(asked, steps)))  # each one's steps without the model
    keep = n_active if model.options.sampling == "available" else None  # over-commitment: the first K to finish
    plan = model.plan_round(state.round_idx, asked, full, sync_plan(steps), start, keep)
    plan.wait_s = start - now
    who = plan.participants
    # the synchronizations the round will make, taken now: the schedule's end_round may change its intervals
    plan.syncs = sync_plan(budget.round_steps(state.iteration, who)) if who else []
    return plan


def client_steps(plan: RoundPlan | None, budget, clients: list[int], default: int) -> list[int]:
    """Local steps of each of ``clients`` in a round: ``default``, or E epochs with --local-epochs E (``budget``: the
    run's ``RunPlan``), or the steps the system model's deadline leaves it (``plan``: the round's plan under
    ``--system``, uneven with ``--on-deadline keep-partial``; None without the system model)."""
    if plan is not None and plan.uneven:
        return [plan.steps[c] for c in clients]
    return budget.client_round_steps(clients, default)


def close_system_round(model: SystemModel, plan: RoundPlan, state, ledger, n_layers: int, idle_steps: int = 0) -> dict:
    """The round's simulated time (``SystemModel.round_seconds`` over the synchronizations it made, the parts' extra
    copies taken from the ``ledger``) added to ``state`` (``idle_steps``: a round with no participant, whose steps pass
    with no training); returns its system.csv row."""
    plan.extra_up, plan.extra_down = ledger.take_round()  # the copies its parts moved beyond the syncs
    seconds, per_layer = model.round_seconds(plan, plan.syncs, n_layers)
    state.sim_time_s += plan.wait_s + seconds
    state.layer_time_s = [a + b for a, b in zip(state.layer_time_s or [0.0] * len(per_layer), per_layer)]
    state.iteration += idle_steps
    return model.round_row(plan, state.round_idx, state.iteration, seconds, state.sim_time_s)


@dataclass
class Shape:
    """What the system model prices of a run, whatever the network: the model's forward FLOPs per sample, each
    client's samples per step [n], one client's bytes per layer up and down as the ledger counts them, and the parts'
    work beyond FedAvg's (:class:`Work`). ``fedcli.fl.timing`` records it in the manifest for re-timing."""

    forward_flops: float
    batch: np.ndarray
    up: list
    down: list
    work: Work


def system_options(config) -> SystemParams:
    """The system model's options (``SystemParams``, the ``[system]`` section) read once from ``config`` (a
    TrainConfig, or anything with those fields): :class:`SystemModel` is built from them and reads nothing else."""
    return SystemParams(**{f.name: getattr(config, f.name) for f in dataclasses.fields(SystemParams)})


def measure(ctx: SystemContext) -> Shape:
    """The :class:`Shape` of the run whose context is ``ctx`` (set up up to its budget)."""
    was_training = ctx.model.training
    ctx.model.eval()  # no statistics update, no dropout draw: the run's random streams stay as they are
    try:
        fwd = forward_flops(ctx.model, ctx.train_x[:1])
    finally:
        ctx.model.train(was_training)
    numel = [li.numel for li in ctx.layers]
    up = [n * ctx.codec.bits(n) / 8.0 for n in numel]
    down = [n * 32.0 / 8.0 for n in numel]
    batch = np.minimum(ctx.sizes, ctx.batch_size)
    parts = list(ctx.parts.values())
    if ctx.init.wraps_base:  # an init built around the method's own (ALA): that one's work is done too
        parts.append(ctx.init.base)
    work = Work(parts, [len(ix) for ix in ctx.partition.train], ctx.sizes, ctx.batch_size, ctx.cfg.drop_last)
    return Shape(fwd, batch, up, down, work)


def build(ctx: SystemContext, shape: Shape | None = None) -> SystemModel | None:
    """The run's system model (None without ``--system``): the model's FLOPs, each client's batch, the bytes per layer
    as the ledger counts them (``shape``: :func:`measure`'s, measured here when not given), and the deadline checked
    against the first round's synchronizations."""
    options = system_options(ctx.cfg)  # the system options, bound once: the model reads no config after this
    if not options.system:
        return None
    shape = shape or measure(ctx)
    model = SystemModel(options, ctx.cfg.seed, len(ctx.client_indices), shape)
    everyone = list(range(model.n))
    steps = ctx.plan.round_steps(0, everyone)
    model.check_deadline(ctx.plan.client_round_steps(everyone, steps), ctx.sync_plan(steps), ctx.n_active)
    model.check_online()
    return model
