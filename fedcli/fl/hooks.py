"""Round hooks: what the engine calls at round boundaries (the CSV writers, the checkpointer, a test's probe)."""

from __future__ import annotations

from fedcli.fl.context import LogContext


class RoundHook:
    """Something the engine calls at round boundaries (``Simulation.round_hooks``): ``begin`` once before the first
    round of ``run`` (also on resume), then the hook itself after every round, on every process.

    Each is called with the engine's context of the class ``context`` (``fedcli.fl.context``), never with the engine:
    what a hook reads of the run is declared there.

    ``keeps``: the hook keeps the round for a resume (the checkpointer). Such hooks are called after the divergence
    guard's check of the round (``--diverge-factor``), the others (the CSV writers, the trackers) before it, so the
    round that diverged is recorded but never kept: a resume starts before it and diverges again."""

    keeps = False
    context: type = LogContext

    def begin(self, ctx, state) -> None:
        pass

    def __call__(self, ctx, state) -> None:
        raise NotImplementedError
