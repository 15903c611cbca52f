"""Round hooks: what the engine calls at round boundaries (the CSV writers, the checkpointer, a test's probe)."""

from __future__ import annotations


class RoundHook:
    """Something the engine calls at round boundaries (``Simulation.round_hooks``): ``begin`` once before the first
    round of ``run`` (also on resume), then the hook itself after every round, on every process.

    ``keeps``: the hook keeps the round for a resume (the checkpointer). Such hooks are called after the divergence
    guard's check of the round (``--diverge-factor``), the others (the CSV writers, the trackers) before it, so the
    round that diverged is recorded but never kept: a resume starts before it and diverges again."""

    keeps = False

    def begin(self, sim, state) -> None:
        pass

    def __call__(self, sim, state) -> None:
        raise NotImplementedError


class CallRoundHook(RoundHook):
    """A plain function ``fn(sim, state)`` as a round hook."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, sim, state) -> None:
        self.fn(sim, state)
