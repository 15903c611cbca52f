"""Aggregation schedules: *when* each layer is synchronized.

A schedule owns the per-layer aggregation intervals (in local iterations) and the length of a
round (``period``): the number of local iterations after which every layer has been synchronized
and the cohort is resampled. Within a round, layer ``l`` is synchronized after local step ``j``
(1-based) when ``j % interval[l] == 0``; every layer is synchronized at the end of the round.

- :class:`Periodic` is FedAvg's periodic full averaging (McMahan et al. 2017): every layer every tau.
- the layer-wise schedules build on :class:`Schedule` (per-layer intervals, ``observe`` / ``compute`` /
  ``adjust``) and on the torch-free interval arithmetic of ``fedcli.fl.layerwise``: FedLAMA's ``lama`` and
  ``lama-accelerate`` are in ``fedcli/fl/algorithms/fedlama.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedcli.fl.parts import Classes, Part, flat_rows
from fedcli.params import bind


SCHEDULES = Classes("schedule")


@dataclass
class Adjustment:
    """One row group of intervals.csv: the d and numel that Algorithm 1 used, and the result."""

    round: int
    iteration: int
    d: list[float]
    intervals: list[int]


class Schedule(Part):
    """Base: a fixed interval for every layer and no adjustment.

    The schedule is the fifth part of a method, with the hooks of every part (``setup``, ``begin_round``,
    ``end_round``: ``fedcli.fl.parts.Part``), called by the engine after the other four, and two of its own: ``due``
    (which layers to synchronize after a local step) and ``synchronized`` (after a synchronization, before the
    clients receive the new layers). It is built with the model's layers (its intervals are per layer) and knows
    its round length before it is built (``round_length``). ``end_round`` may re-adjust the intervals; the
    adjustment it made (or None) is ``adjustment`` until the next round begins (intervals.csv)."""

    name = "base"
    kept_state = Part.kept_state  # a schedule's state is its own (``keeps``), never per client
    keeps = ("intervals",)     # checkpointed and resumed with the run
    needs_discrepancy = False  # the engine computes the cohort discrepancy at each synchronization (FedLAMA Eq. 2)
    layerwise = False          # each layer has its own interval (a report's legend gives tau' and phi)

    def __init__(self, params, layers):
        super().__init__(params)
        self.layers = layers
        self.tau = self.params.tau
        self.intervals = [self.tau] * len(layers)
        self.eligible = [True] * len(layers)  # layers whose interval may change (intervals.csv)
        self.adjustment: Adjustment | None = None  # what the last round end adjusted (None: nothing)

    @classmethod
    def round_length(cls, cfg) -> int:
        """Local iterations of a round of this schedule under ``cfg`` (a config or the schedule's params; known before
        the schedule is built, so the budget's rounds and steps can be planned from a config alone:
        ``fedcli.fl.budget.plan_run``)."""
        return bind(cls, cfg).tau

    @property
    def period(self) -> int:
        """Local iterations of a round: every layer is synchronized at its end, and the cohort resampled."""
        return self.round_length(self.params)

    def separable_now(self) -> bool:
        """A round may be taken chunk by chunk (``fedcli.fl.chunked``) only when every layer is synchronized at the
        round's end alone and nothing is measured across the cohort at a synchronization."""
        return not self.needs_discrepancy and min(self.intervals, default=0) >= self.period

    def begin_round(self, view, cohort) -> None:
        self.adjustment = None

    def end_round(self, view, cohort) -> None:
        """At the round's end (``cohort.round_idx``; the run has reached global iteration ``cohort.end_iteration``):
        re-adjust the intervals and keep what changed in ``adjustment`` (intervals.csv)."""
        self.adjustment = self.adjust(cohort.round_idx, cohort.end_iteration)

    def adjust(self, round_idx: int, iteration: int) -> Adjustment | None:
        """The interval adjustment at the end of round ``round_idx`` (the run at ``iteration``); None: none."""
        return None

    def due(self, step: int, last_step: int) -> list[int]:
        """Layers to synchronize after local step ``step`` (1-based) of a round of ``last_step`` steps."""
        if step >= last_step:
            return list(range(len(self.layers)))
        return [l for l, t in enumerate(self.intervals) if step % t == 0]

    def synchronized(self, view, cohort, layers: list[int], step: int, last_sync: list[int]) -> None:
        """After the new global ``layers`` are computed at local step ``step``, before the clients receive them
        (``last_sync[l]``: the step of layer l's previous synchronization this round)."""
        if not self.needs_discrepancy:
            return
        # FedLAMA Eq. 2: the cohort's weighted sum_i p_i ||u_l - x_l^i||^2 of every synchronized layer (one cohort sum)
        per_client = torch.stack([
            flat_rows(cohort.params[self.layers[l].name] - view.global_params[self.layers[l].name]).double().pow(2).sum(1)
            for l in layers], 1)  # [K, layers]
        disc = view.cohort_sum(cohort, [per_client], cohort.weights).cpu().tolist()
        for l, dv in zip(layers, disc):
            self.observe(l, dv, step - last_sync[l])

    def observe(self, layer: int, discrepancy: float, steps: int) -> None:
        """Record the (weighted) mean squared distance sum_i p_i ||u_l - x_l^i||^2 at a sync."""


class Periodic(Schedule):
    """FedAvg: all layers synchronized every tau local iterations; the cohort resampled every tau."""

    separable = True
