"""Round hooks: what the engine calls at round boundaries (the CSV writers, the checkpointer, a test's probe)."""

from __future__ import annotations


class RoundHook:
    """Something the engine calls at round boundaries (``Simulation.round_hooks``): ``begin`` once before the first
    round of ``run`` (also on resume), then the hook itself after every round, on every process."""

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
