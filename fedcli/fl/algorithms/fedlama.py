"""FedLAMA (Lee et al., AAAI 2023, Algorithms 1 and 2): the layer-wise schedules ``lama`` and ``lama-accelerate``.

- :class:`Lama` is FedLAMA: intervals tau' or phi*tau', re-adjusted every phi*tau' iterations from the unit model
  discrepancy d_l (Eq. 2) by Algorithm 1 (Eqs. 3-4: ``fedcli.fl.layerwise.lama_intervals``, torch-free, so that
  ``fedcli report`` recomputes them without torch). Its defaults follow the authors' code where it differs from the
  text (the interval rule, kernels only, the delayed first adjustment); docs/fidelity-fedlama.md lists each
  difference and the option that gives the text's version.
- :class:`LamaAccelerate` is its "accelerate" variant (arXiv version's remark): intervals tau'//phi for
  the critical layers and tau' for the others, re-adjusted every tau'.

The schedules' base (``fedcli.fl.schedules.Schedule``) calls ``observe`` at each synchronization and ``adjust`` at a
round's end; the options (``--phi``, ``--lama-rule``, ...) are declared in ``fedcli/specs/fedlama.py``.
"""

from __future__ import annotations

from fedcli.fl.layerwise import lama_accelerate_intervals, lama_intervals, unit_discrepancy
from fedcli.fl.schedules import Adjustment, Schedule
from fedcli.params import bind


class Lama(Schedule):
    """FedLAMA (Algorithm 2 of the AAAI version, Algorithm 1 of the arXiv/ICLR ones): per-layer intervals in
    {tau', phi*tau'}, re-adjusted by Algorithm 1 at the end of a round of phi*tau' iterations.

    d_l (Eq. 2) is updated only when layer l is synchronized; other layers keep their last value (the paper
    and the author code alike). All layers start at tau'; a round (cohort resampling, adjustment) lasts
    phi*tau' iterations. ``--lama-first-adjust K``: a round end adjusts only once more than K*tau' local
    iterations have run. The author code's ``epoch_id > 5`` (an "epoch" there is tau' iterations, adjustments
    at (epoch_id + 1) % phi == 0) is K = 6; K = 0 adjusts at every round end, as the algorithm box.
    """

    label = "FedLAMA"

    needs_discrepancy = True
    layerwise = True
    keeps = Schedule.keeps + ("d",)  # the intervals and each layer's last d_l

    def __init__(self, params, layers):
        super().__init__(params, layers)
        p = self.params
        self.phi, self.rule, self.first_adjust = p.phi, p.lama_rule, p.lama_first_adjust
        self.eligible = [True] * len(layers) if p.lama_eligible == "all" else [li.kind == "kernel" for li in layers]
        self.d = [0.0] * len(layers)
        self.numel = [li.numel for li in layers]

    @classmethod
    def round_length(cls, cfg) -> int:
        p = bind(cls, cfg)
        return p.phi * p.tau  # a round of phi * tau' iterations (Algorithm 1)

    def observe(self, layer: int, discrepancy: float, steps: int) -> None:
        self.d[layer] = unit_discrepancy(discrepancy, steps, self.numel[layer])

    def compute(self) -> list[int]:
        return lama_intervals(self.d, self.numel, self.tau, self.phi, rule=self.rule, eligible=self.eligible)

    def adjust(self, round_idx: int, iteration: int) -> Adjustment | None:
        if iteration <= self.first_adjust * self.tau:
            return None
        self.intervals = self.compute()
        return Adjustment(round_idx, iteration, list(self.d), list(self.intervals))


class LamaAccelerate(Lama):
    """FedLAMA's accelerate variant: critical layers (largest d) every tau'//phi, the rest every tau'.

    d_l (Eq. 2) is observed as in :class:`Lama`; a round lasts tau' and the intervals are re-adjusted
    at its end by :func:`lama_accelerate_intervals`. Communicates *more* than FedAvg(tau').
    """

    @classmethod
    def round_length(cls, cfg) -> int:
        return bind(cls, cfg).tau

    def compute(self) -> list[int]:
        return lama_accelerate_intervals(self.d, self.numel, self.tau, self.phi, rule=self.rule, eligible=self.eligible)
