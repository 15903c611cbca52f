"""The rounds and local steps of a run: the one place a budget (``--iterations``, ``--rounds``, ``--local-epochs``) and
a schedule's round length become the number of rounds, the steps of each round and the client steps of the whole run.

The engine runs the plan (:meth:`RunPlan.round_steps`, :meth:`RunPlan.done`), and everything that needs to know the
run's length asks :func:`plan_run` rather than working it out again: the sweep's time estimate
(``fedcli.sweep.estimate``),
the worker planner (``fedcli.runner.estimate_work``), FedPHP's mu_t = mu * t / T and APPLE's lambda schedule
(their T and R). The rules, with the schedule's round length P (its spec's ``round_length``: tau for FedAvg's periodic
schedule and FedLAMA's accelerate variant, phi * tau' for FedLAMA, whose round is phi * tau' iterations, Algorithm 1):

- ``--iterations I`` (the default budget): rounds of P local iterations, the last one cut at I, so
  R = ceil(I / P) rounds, I iterations, I x K client steps (K clients a round).
- ``--rounds R``: R full rounds of P iterations: R x P iterations, R x P x K client steps.
- ``--local-epochs E`` (the periodic schedule only): client i runs s_i = ``epoch_steps(n_i, E, B)`` steps a round and
the
  round lasts the longest s_i of its cohort (the whole model is synchronized at its end, McMahan et al. 2017, Alg. 1).
  With ``--rounds R``: R rounds. With ``--iterations I``, rounds run until the iteration count (the longest s_i of
  each round, summed) reaches I; the last round is not cut (a round is one local phase). Under full participation
  every round lasts max_i s_i, so R = ceil(I / max_i s_i); under partial participation R depends on which clients
  each round samples (``rounds`` is None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fedcli.errors import ConfigError


def clients_per_round(active_ratio: float, clients: int) -> int:
    """K, the clients of a round: ``--active-ratio`` x ``--clients``, rounded, at least 1 (FedLAMA Algorithm 1's
    sampled subset; 0.25 of 128 clients is 32)."""
    return max(1, int(round(active_ratio * clients)))


def check_processes(active_ratio: float, n_clients: int, size: int, launcher: str) -> None:
    """Refuses more processes (MPI ranks, or ``--workers``) than clients per round (:func:`clients_per_round` of
    ``n_clients``), up-front: every process trains at least one client of every round (the cohort sums, the batch
    plans and the parts' hooks assume so). As many processes as clients per round is allowed (one client each).
    Torch-free: ``fedcli train`` asks it as soon as the config holds (the clients are ``--clients`` unless a partition
    file decides them), and again once the data is loaded."""
    n_active = clients_per_round(active_ratio, n_clients)
    if size > n_active:
        how = "MPI processes" if launcher == "mpi" else "worker processes (--workers)"
        raise ConfigError(
            f"--active-ratio {active_ratio} of {n_clients} clients gives {n_active} client(s) per "
            f"round, fewer than the {size} {how}: each process trains at least one client of "
            f"every round; use at most {n_active} processes, or more clients per round",
            key="active_ratio",
        )


def epoch_steps(n: int, epochs: float, batch: int, drop_last: bool = False) -> int:
    """Local steps of ``epochs`` epochs over a client's ``n`` samples in batches of ``batch``: ceil(E * n / B), or with
    ``drop_last`` (each epoch floor(n / B) full batches, as PyTorch's ``DataLoader(drop_last=True)``)
    ceil(E * floor(n / B)). At least 1: a client with fewer samples than a batch runs one padded batch."""
    return max(1, math.ceil(epochs * (n // batch) if drop_last else epochs * n / batch))


@dataclass(frozen=True)
class RunPlan:
    """A run's budget resolved against its schedule and its clients' data (see the module docstring).

    ``rounds``, ``iterations`` and ``client_steps`` are None where they depend on the cohorts sampled
    (``--local-epochs``
    under partial participation); ``expected_client_steps`` is then an estimate (K clients of mean steps a round; under
    ``--iterations`` the fewest rounds, every round as long as the longest client's)."""

    round_length: int  # local iterations of a round without --local-epochs (the schedule's round length)
    by_rounds: bool  # the budget counts rounds (--rounds) rather than local iterations
    budget: int  # R of --rounds R, or I of --iterations I
    n_active: int  # clients per round
    steps: tuple[int, ...] = ()  # --local-epochs: each client's steps a round (empty: every client runs the round's)
    rounds: int | None = None
    iterations: int | None = None
    client_steps: int | None = None
    expected_client_steps: float | None = None  # None: unknown (--local-epochs without the clients' sizes)

    @property
    def per_client(self) -> bool:
        """Each client runs its own number of steps a round (``--local-epochs``)."""
        return bool(self.steps)

    def client_round_steps(self, clients: Sequence[int], default: int) -> list[int]:
        """Local steps of each of ``clients`` in a round: ``default`` (the round's), or each one's epochs."""
        if not self.steps:
            return [default] * len(clients)
        return [self.steps[c] for c in clients]

    def round_steps(self, iteration: int, cohort: Sequence[int]) -> int:
        """Local iterations of the round that starts at ``iteration`` with clients ``cohort``."""
        if self.steps:
            return max(self.steps[c] for c in cohort)
        if self.by_rounds:
            return self.round_length
        return min(self.round_length, self.budget - iteration)

    def done(self, round_idx: int, iteration: int) -> bool:
        """Whether a run that has completed ``round_idx`` rounds and ``iteration`` iterations has spent its budget."""
        return round_idx >= self.budget if self.by_rounds else iteration >= self.budget

    def progress(self, round_idx: int, iteration: int) -> int:
        """Where the budget (and evaluation points) are counted: rounds under --rounds, else iterations."""
        return round_idx if self.by_rounds else iteration


def plan_run(
    cfg,
    round_length: int,
    sizes: Sequence[float] | None = None,
    n_active: int | None = None,
    batch_size: int | None = None,
) -> RunPlan:
    """The rounds and local steps of a run of ``cfg`` (``iterations``, ``rounds``, ``local_epochs``, ``batch_size``,
    ``drop_last``, ``active_ratio``; a ``TrainConfig`` or anything with those attributes) whose schedule has rounds of
    ``round_length`` local iterations. ``sizes``: each client's training samples (needed only with ``--local-epochs``;
    None
    there leaves the counts unknown); ``n_active``: clients per round (default round(active_ratio x clients), at least
    1); ``batch_size``: the mini-batch size the clients use (default ``cfg.batch_size``)."""
    by_rounds = bool(cfg.rounds)
    budget = int(cfg.rounds) if by_rounds else int(cfg.iterations)
    n = len(sizes) if sizes is not None else None
    if n_active is None:
        if n is None:
            raise ValueError("plan_run needs the clients' sizes or the clients per round")
        n_active = clients_per_round(cfg.active_ratio, n)
    base = dict(round_length=round_length, by_rounds=by_rounds, budget=budget, n_active=n_active)
    if not cfg.local_epochs:
        rounds = budget if by_rounds else math.ceil(budget / round_length)
        iterations = budget * round_length if by_rounds else budget
        return RunPlan(
            **base,
            rounds=rounds,
            iterations=iterations,
            client_steps=iterations * n_active,
            expected_client_steps=float(iterations * n_active),
        )
    if sizes is None:
        return RunPlan(**base)
    b = batch_size or cfg.batch_size
    steps = tuple(epoch_steps(s, cfg.local_epochs, b, cfg.drop_last) for s in sizes)
    mean = sum(steps) / len(steps)
    longest = max(steps)
    full = n_active >= len(steps)
    if by_rounds:
        rounds = budget
    else:
        rounds = math.ceil(budget / longest)  # exact under full participation, the fewest rounds otherwise
    if full:
        return RunPlan(
            **base,
            steps=steps,
            rounds=rounds,
            iterations=rounds * longest,
            client_steps=rounds * sum(steps),
            expected_client_steps=float(rounds * sum(steps)),
        )
    return RunPlan(
        **base, steps=steps, rounds=budget if by_rounds else None, expected_client_steps=rounds * n_active * mean
    )


def schedule_round_length(cfg) -> int:
    """The round length of ``cfg``'s schedule (``--schedule``, or its method's): what its spec declares
    (``round_length=``, :meth:`fedcli.specs.PartSpec.iterations`), without importing its torch class."""
    from fedcli.specs import METHODS, PARTS

    return PARTS["schedule"][cfg.schedule or METHODS[cfg.algo].schedule].iterations(cfg)
