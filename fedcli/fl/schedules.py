"""Aggregation schedules: *when* each layer is synchronized.

A schedule owns the per-layer aggregation intervals (in local iterations) and the length of a
round (``round_length``): the number of local iterations after which every layer has been synchronized
and the cohort is resampled. Within a round, layer ``l`` is synchronized after local step ``j``
(1-based) when ``j % interval[l] == 0``; every layer is synchronized at the end of the round.

- :class:`Periodic` is FedAvg's periodic full averaging (McMahan et al. 2017): every layer every tau.
- :class:`LayerwiseSchedule` is the base of the layer-wise schedules: it measures each layer's unit model
  discrepancy d_l at its synchronizations (FedLAMA Eq. 2), keeps it, and re-adjusts the intervals at a round's end
  with the one pure function a method writes, ``intervals_of`` (FedLAMA's Algorithm 1 and its accelerate variant:
  ``fedcli/fl/algorithms/fedlama.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedcli.fl.parts import Classes, Part, flat_rows

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
    keeps = ("intervals",)  # checkpointed and resumed with the run
    needs_discrepancy = False  # it measures the cohort's discrepancy at each synchronization (FedLAMA Eq. 2)
    layerwise = False  # each layer has its own interval (declared in the spec, ``PartSpec.layerwise``)

    def __init__(self, opts, layers):
        super().__init__(opts)
        self.layers = layers
        self.tau = self.opts.tau
        self.intervals = [self.tau] * len(layers)
        self.eligible = [True] * len(layers)  # layers whose interval may change (intervals.csv)
        self.adjustment: Adjustment | None = None  # what the last round end adjusted (None: nothing)

    @property
    def round_length(self) -> int:
        """Local iterations of a round (every layer is synchronized at its end, and the cohort resampled): what its
        spec declares (``round_length=`` of ``fedcli.specs.part``, :meth:`fedcli.specs.PartSpec.iterations`) of its
        options, so the budget's rounds and steps are planned from a config alone, without this class
        (``fedcli.fl.budget``)."""
        return self.spec.iterations(self.opts)

    def separable_now(self) -> bool:
        """A round may be taken chunk by chunk (``fedcli.fl.chunked``) only when every layer is synchronized at the
        round's end alone and nothing is measured across the cohort at a synchronization."""
        return not self.needs_discrepancy and min(self.intervals, default=0) >= self.round_length

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
        (``last_sync[l]``: the step of layer l's previous synchronization this round). Default: nothing."""


class Periodic(Schedule):
    """FedAvg: all layers synchronized every tau local iterations; the cohort resampled every tau."""

    separable = True


def unit_discrepancy(mean_sq_dist: float, steps: int, numel: int) -> float:
    """FedLAMA Eq. 2: d_l = (1/m) sum_i ||u_l - x_l^i||^2 / (tau_l * dim(u_l)).

    ``mean_sq_dist`` is the cohort mean (or p_i-weighted mean) of the squared distances and
    ``steps`` the local iterations since the layer was last synchronized (tau_l in a full round).
    """
    return float(mean_sq_dist) / (steps * numel)


class LayerwiseSchedule(Schedule):
    """Base of the layer-wise schedules (FedLAMA, Lee et al., AAAI 2023, Algorithms 1 and 2): per-layer intervals
    re-adjusted from each layer's unit model discrepancy d_l (Eq. 2). A method writes one pure function,
    ``intervals_of(d, numel, tau, phi, rule=..., eligible=...)`` -> each layer's interval; this base does the rest:

    - at each synchronization of layer l it measures the cohort's weighted sum_i p_i ||u_l - x_l^i||^2 (one cohort
      sum for every synchronized layer) and keeps d_l (:func:`unit_discrepancy`); a layer not synchronized keeps its
      last d_l (the paper and the author code alike);
    - at a round's end it re-adjusts the intervals with ``intervals_of`` (an ``Adjustment``, intervals.csv), once more
      than ``--lama-first-adjust`` K times tau' local iterations have run (the author code's ``epoch_id > 5`` is
      K = 6; K = 0 adjusts at every round end, as the algorithm box);
    - ``--lama-eligible``: the layers whose interval may change (the author code: conv/dense kernels);
    - d and the intervals are checkpointed (``keeps``).

    Its options are FedLAMA's (``fedcli/specs/fedlama.py``); the round length is its spec's ``round_length``.
    """

    needs_discrepancy = True
    keeps = Schedule.keeps + ("d",)  # the intervals and each layer's last d_l
    kept_state = Part.kept_state  # no per-client state (declared again beside its own ``synchronized``)

    def __init__(self, opts, layers):
        super().__init__(opts, layers)
        p = self.opts
        self.eligible = [True] * len(layers) if p.lama_eligible == "all" else [li.kind == "kernel" for li in layers]
        self.d = [0.0] * len(layers)
        self.numel = [li.numel for li in layers]

    @staticmethod
    def intervals_of(
        d: list[float], numel: list[int], tau: int, phi: int, *, rule: str, eligible: list[bool]
    ) -> list[int]:
        """The method's rule: each layer's interval from the unit discrepancies ``d`` and the layers' sizes."""
        raise NotImplementedError

    def synchronized(self, view, cohort, layers: list[int], step: int, last_sync: list[int]) -> None:
        # Eq. 2: the cohort's weighted sum_i p_i ||u_l - x_l^i||^2 of every synchronized layer (one cohort sum)
        per_client = torch.stack(
            [
                flat_rows(cohort.params[self.layers[l].name] - view.global_params[self.layers[l].name])
                .double()
                .pow_(2)  # in place: the float64 copy is this sum's own
                .sum(1)
                for l in layers
            ],
            1,
        )  # [K, layers]
        disc = view.cohort_sum(cohort, [per_client], cohort.weights).cpu().tolist()
        for l, dv in zip(layers, disc):
            self.observe(l, dv, step - last_sync[l])

    def observe(self, layer: int, discrepancy: float, steps: int) -> None:
        """Keep d_l (Eq. 2) from the (weighted) mean squared distance sum_i p_i ||u_l - x_l^i||^2 at a sync."""
        self.d[layer] = unit_discrepancy(discrepancy, steps, self.numel[layer])

    def adjust(self, round_idx: int, iteration: int) -> Adjustment | None:
        p = self.opts
        if iteration <= p.lama_first_adjust * self.tau:
            return None
        self.intervals = self.intervals_of(
            self.d, self.numel, self.tau, p.phi, rule=p.lama_rule, eligible=self.eligible
        )
        return Adjustment(round_idx, iteration, list(self.d), list(self.intervals))
