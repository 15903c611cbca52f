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
  round lasts T = sum_k t_k (+ the deadline's wait, + the server's constant time).

A client is available in a round with probability ``--availability`` (keyed by seed, round and client) and, with
``--availability-trace``, when the round's simulated start lies in one of its on-intervals. With a
deadline D, client i's own time s c_i + sum_k x_i(L_k) decides: over D, ``drop`` leaves it out of the round (not
aggregated; the server waits until D), ``keep-partial`` runs the s_i = floor((D - sum_k x_i(L_k)) / c_i) steps
that fit (dropped when none does) and aggregates them (FedProx's stragglers; FedNova normalizes the unequal steps).
Nothing here depends on the process count or on a resume: every draw is keyed by (seed, client) or
(seed, round, client) and the round's syncs come from the schedule's own ``due``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedcli.errors import ConfigError
from fedcli.fl.rng import np_gen
from fedcli.models.flops import TRAIN_FLOPS_PER_FORWARD, forward_flops
from fedcli.specs.system import (AVAILABILITY_COLUMNS, QUANTITIES, TRACE_COLUMNS, in_range,  # noqa: F401
                                 parse_distribution, range_text, read_availability_rows, read_trace_rows)


def draw(distribution: str, n: int, gen: np.random.Generator, option: str = "speed") -> np.ndarray:
    """``n`` values of the distribution ``distribution`` (``NAME:ARGS``), one per client index, from ``gen``. Tiers are shares,
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
            raise ConfigError(f"--{option} {distribution!r}: client {bad[0]}'s draw {values[bad[0]]:g} lies outside "
                              f"{range_text(option)}, the range that keeps a run's simulated time finite "
                              f"({len(bad)} client(s)); lower the spread or move the median (docs/system-model.md)",
                              key=option)
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
        raise ConfigError(f"--system-trace {path}: {len(rows)} row(s) for a run of {n} clients; no row for client "
                          f"{absent[0]} ({len(absent)} client(s) missing): expected one row per client", key="system_trace")
    return out, digest


def read_availability(path: str, n: int) -> tuple[list[list[tuple[float, float]]], str]:
    """Each client's on-intervals [start, end) in simulated seconds (``AVAILABILITY_COLUMNS``; a client without a
    row is never available), and the file's sha256. ConfigError (exit 2) for an interval that is not
    0 <= start <= end (end may be inf) or starts after ``MAX_SECONDS`` (``fedcli.specs.system.read_availability_rows``)."""
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
    steps: dict[int, int]                              # each participant's local steps
    unavailable: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)   # missed the deadline: not aggregated
    partial: list[int] = field(default_factory=list)   # kept with fewer steps than the round's
    syncs: list = field(default_factory=list)          # the round's synchronizations (step, layers), set by the engine

    @property
    def uneven(self) -> bool:
        """Some participant runs fewer steps than the round's longest."""
        return bool(self.partial)


class SystemModel:
    """Each client's speed, bandwidths and latency, and the time of what a round does (module docstring).

    ``forward_flops``: the model's forward FLOPs per sample; ``batch``: each client's samples per step [n];
    ``up_bytes`` / ``down_bytes``: one client's bytes per layer up and down [layers]."""

    def __init__(self, cfg, n_clients: int, forward_flops: float, batch, up_bytes, down_bytes):
        self.cfg = cfg
        self.n = n_clients
        self.forward_flops = float(forward_flops)
        self.up_bytes = np.asarray(up_bytes, dtype=np.float64)
        self.down_bytes = np.asarray(down_bytes, dtype=np.float64)
        self.trace_sha256 = self.availability_sha256 = None
        self.on = None  # each client's on-intervals (--availability-trace), or None
        if cfg.availability_trace:
            self.on, self.availability_sha256 = read_availability(cfg.availability_trace, n_clients)
        if cfg.system_trace:
            values, self.trace_sha256 = read_trace(cfg.system_trace, n_clients)
        else:
            values = {q: draw(getattr(cfg, q), n_clients, np_gen(cfg.seed, "system", q), q) for q in QUANTITIES}
        self.speed, self.uplink, self.downlink, self.latency = (values[q] for q in QUANTITIES)
        self.step_s = TRAIN_FLOPS_PER_FORWARD * self.forward_flops * np.asarray(batch, dtype=np.float64) / self.speed

    # ------------------------------------------------------------------ costs
    def layer_seconds(self, clients: np.ndarray, layers: list[int]) -> np.ndarray:
        """[len(clients), len(layers)]: each client's transfer time of each layer, up and down (no latency)."""
        return (self.up_bytes[layers][None, :] / self.uplink[clients][:, None]
                + self.down_bytes[layers][None, :] / self.downlink[clients][:, None])

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
    def available(self, round_idx: int, cohort: list[int], now: float = 0.0) -> list[int]:
        """The clients of ``cohort`` available in round ``round_idx``, which starts at simulated time ``now``: inside
        one of their on-intervals (``--availability-trace``), and with probability ``--availability`` (one uniform
        draw per client, keyed by (seed, round) and the client's index: the same for any process count)."""
        if self.on is not None:
            cohort = [c for c in cohort if any(a <= now < b for a, b in self.on[c])]
        p = float(self.cfg.availability)
        if p >= 1.0:
            return list(cohort)
        u = np_gen(self.cfg.seed, "available", round_idx).random(self.n)
        return [c for c in cohort if u[c] < p]

    def plan_round(self, round_idx: int, cohort: list[int], steps: dict[int, int],
                   syncs: list[tuple[int, list[int]]], now: float = 0.0) -> RoundPlan:
        """Round ``round_idx``'s participants among the sampled ``cohort``: the available ones (at ``now``, the
        round's simulated start) that meet the deadline (``--on-deadline``), each with its local steps (``steps``:
        each client's full steps this round)."""
        ready = self.available(round_idx, cohort, now)
        on = set(ready)
        unavailable = [c for c in cohort if c not in on]
        plan = RoundPlan(list(cohort), [], {}, unavailable)
        deadline = float(self.cfg.deadline)
        ids = np.array(ready, dtype=np.int64)
        fits = self.steps_within(ids, syncs, deadline) if deadline > 0 and len(ids) else None
        for k, c in enumerate(ready):
            want = steps[c]
            got = want if fits is None else min(want, int(fits[k]))
            if got < want and (self.cfg.on_deadline == "drop" or got < 1):
                plan.dropped.append(c)
                continue
            if got < want:
                plan.partial.append(c)
            plan.participants.append(c)
            plan.steps[c] = got
        return plan

    def steps_within(self, clients: np.ndarray, syncs, deadline: float) -> np.ndarray:
        """The most local steps each client can run within ``deadline`` beside its synchronizations (may be < 1)."""
        spare = deadline - self.comm_seconds(clients, syncs)
        # a relative 1e-9 keeps an exact fit (D = s c_i + x_i computed back) from losing a step to rounding
        return np.floor(spare / self.step_s[clients] * (1.0 + 1e-9))

    def round_seconds(self, plan: RoundPlan, syncs: list[tuple[int, list[int]]], n_layers: int) -> tuple[float, list[float]]:
        """(T, per-layer seconds) of a round that ran ``plan``: T = sum_k max_i (s_ik c_i + x_i(L_k)), at least the
        deadline when a client was dropped (the server waited for it), plus the server's time; a layer's seconds
        are, per synchronization of it, the slowest participant's transfer of that layer."""
        ids = np.array(plan.participants, dtype=np.int64)
        steps = np.array([plan.steps[c] for c in plan.participants], dtype=np.float64)
        per_layer = [0.0] * n_layers
        total, prev = 0.0, 0
        for j, layers in syncs:
            if len(ids):
                seg = np.clip(np.minimum(steps, j) - prev, 0, None)
                each = self.layer_seconds(ids, layers)  # once: for x_i(L) and for each layer's slowest transfer
                total += float(np.max(seg * self.step_s[ids] + self.sync_seconds(ids, layers, each)))
                for l, s in zip(layers, each.max(axis=0).tolist()):
                    per_layer[l] += s
            prev = j
        if len(ids) and steps.max() > prev:  # local steps after the last synchronization (none in fedcli's schedules)
            total += float(np.max(np.clip(steps - prev, 0, None) * self.step_s[ids]))
        if plan.dropped or not len(ids):
            total = max(total, float(self.cfg.deadline))
        return total + float(self.cfg.server_time), per_layer

    # ------------------------------------------------------------------ checks and records
    def check_deadline(self, steps: list[int], syncs: list[tuple[int, list[int]]]) -> None:
        """Before training: some client can meet the deadline in a round of ``syncs`` (its full ``steps`` under
        ``drop``, one step under ``keep-partial``); ConfigError (exit 2) otherwise."""
        deadline = float(self.cfg.deadline)
        if deadline <= 0:
            return
        ids = np.arange(self.n)
        need = np.array(steps, dtype=np.float64) if self.cfg.on_deadline == "drop" else np.ones(self.n)
        own = need * self.step_s + self.comm_seconds(ids, syncs)
        if float(own.min()) > deadline:
            fastest = int(np.argmin(own))
            what = "its round's local steps" if self.cfg.on_deadline == "drop" else "one local step"
            raise ConfigError(f"--deadline {deadline:g}: no client can meet it; the fastest, client {fastest}, needs "
                              f"{float(own[fastest]):.6g} s for {what} and its synchronizations (raise --deadline, or "
                              f"see the speeds and bandwidths in docs/system-model.md)", key="deadline")

    def describe(self) -> dict:
        """The manifest's ``system`` entry: the options, the model's FLOPs, each quantity's range, the trace digest."""
        cfg = self.cfg
        spread = {q: {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}
                  for q, v in zip(QUANTITIES, (self.speed, self.uplink, self.downlink, self.latency))}
        trace = lambda path, digest: {"path": path, "resolved": str(Path(path).resolve()), "sha256": digest}  # noqa: E731
        # a trace replaces the four draws: their options are not recorded beside it (they were not used)
        draws = {} if cfg.system_trace else {q: getattr(cfg, q) for q in QUANTITIES}
        return {**draws, "units": {q: u for q, (u, _) in QUANTITIES.items()}, "availability": cfg.availability,
                "deadline": cfg.deadline, "on_deadline": cfg.on_deadline, "server_time": cfg.server_time,
                "forward_flops_per_sample": self.forward_flops, "train_flops_per_forward": TRAIN_FLOPS_PER_FORWARD,
                **({"trace": trace(cfg.system_trace, self.trace_sha256)} if cfg.system_trace else {}),
                **({"availability_trace": trace(cfg.availability_trace, self.availability_sha256)}
                   if cfg.availability_trace else {}),
                "clients": spread}

    def round_row(self, plan: RoundPlan, round_idx: int, iteration: int, seconds: float, sim_time: float) -> dict:
        """system.csv: one row per round (``round`` counted from 1, as in metrics.csv)."""
        ids = lambda cs: " ".join(str(c) for c in cs)  # noqa: E731
        return {"round": round_idx + 1, "iteration": iteration, "round_s": seconds, "sim_time_s": sim_time,
                "sampled": len(plan.sampled), "participants": len(plan.participants),
                "unavailable": len(plan.unavailable), "dropped": len(plan.dropped), "partial": len(plan.partial),
                "dropped_clients": ids(plan.dropped), "partial_clients": ids(plan.partial)}


def build(sim) -> SystemModel | None:
    """The run's system model (None without ``--system``): the model's FLOPs, each client's batch, the bytes per layer
    as the ledger counts them, and the deadline checked against the first round's synchronizations."""
    cfg = sim.cfg
    if not cfg.system:
        return None
    was_training = sim.model.training
    sim.model.eval()  # no statistics update, no dropout draw: the run's random streams stay as they are
    try:
        fwd = forward_flops(sim.model, sim.train_x[:1])
    finally:
        sim.model.train(was_training)
    numel = [li.numel for li in sim.layers]
    up = [n * sim.codec.bits(n) / 8.0 for n in numel]
    down = [n * 32.0 / 8.0 for n in numel]
    batch = np.minimum(sim.sizes, sim.batch_size)
    model = SystemModel(cfg, len(sim.client_indices), fwd, batch, up, down)
    everyone = list(range(model.n))
    steps = sim.plan.round_steps(0, everyone)
    model.check_deadline(sim.plan.client_round_steps(everyone, steps), sim.sync_plan(steps))
    return model
