"""State that outlives a round, kept by cohort slot or by client (``--momentum-persist``, ``--bn-buffers never``).

The FedLAMA author code (TensorFlow + mpi4py) simulates the m clients of a round with m model objects and m
Keras SGD optimizers, its "workers" (``num_workers`` is the cohort size, e.g. 32 of 128 clients). Every
phi*tau' iterations it draws a new cohort as an *ordered* random sample of m clients, and worker s trains the
s-th client drawn with worker s's model object and optimizer. Whatever those objects hold that no
synchronization overwrites carries over to the next client in that slot: the SGD momentum buffers (FedAvg and
FedLAMA alike) and, since its FedLAMA averages trainable variables only, each model object's BatchNorm moving
statistics.

fedcli's faithful equivalent: a slot is a position in a random permutation of the round's cohort keyed by
(seed, round), so the client-to-slot map is uniformly random each round as in the author's ordered draw (the
cohort list itself is sorted by client id). Slot state is stored under the slot index, and with ``client``
under the client id instead (each client keeps its own buffers: what a deployment with stateful clients
would do; not the author code). The state is a ``fedcli.fl.clientstate.ClientState`` keyed by slot or client;
under MPI every process can read every key, so results do not depend on the number of processes.
"""

from __future__ import annotations

import torch

from fedcli.fl.clientstate import BUFFERS, GLOBAL, PARAMS, ClientState
from fedcli.fl.rng import np_gen


def slot_of(seed: int, round_idx: int, cohort_ids: list[int]) -> dict[int, int]:
    """Client id -> slot (0 .. m-1) for one round: the position of the client in a permutation of the cohort
    keyed by (seed, round)."""
    perm = np_gen(seed, "slots", round_idx).permutation(len(cohort_ids))
    return {int(c): int(s) for c, s in zip(cohort_ids, perm)}


def keys(view, cohort, by: str) -> list[int]:
    """The store keys of this process's cohort clients: their slots (``by="slot"``) or their ids (``"client"``)."""
    if by == "client":
        return list(cohort.clients)
    if by != "slot":
        raise ValueError(f"unknown state key {by!r}")
    where = slot_of(view.seed, cohort.round_idx, list(cohort.cohort_ids) or list(cohort.clients))
    return [where[c] for c in cohort.clients]


def state(prefix: str, by: str, shape: str = PARAMS, default=0.0) -> ClientState:
    """The state ``prefix`` kept by slot (``by="slot"``) or by client (``"client"``): one row per model tensor
    (``shape``: ``PARAMS`` or ``BUFFERS``), ``default`` for a key without one. Every process can read every key."""
    return ClientState(f"{prefix}.{by}", shape, default, everywhere=True)


def restore(view, cohort, kept: ClientState, by: str) -> dict[str, torch.Tensor]:
    """Stacked state ``[K, *shape]`` per model tensor for this process's cohort (the keys of ``by``)."""
    return kept.load(view, keys(view, cohort, by))


def keep(view, cohort, kept: ClientState, by: str, stacked: dict[str, torch.Tensor]) -> None:
    """Store stacked state ``[K, *shape]`` per model tensor for this process's cohort. Collective under MPI: every
    process calls it at the same point, and every process can then read every key (``fedcli.fl.store.publish``)."""
    kept.save(view, keys(view, cohort, by), stacked, skipped=())


# ---------------------------------------------------------------------------- BatchNorm statistics per slot
#: each slot's BatchNorm statistics, the initial ones for a slot without any yet
BN = state("bn", "slot", BUFFERS, GLOBAL)


def restore_buffers(view, cohort) -> None:
    """``--bn-buffers never``: each cohort client starts the round with its slot's running statistics (the
    initial ones for a slot that has none yet), as the author code's worker s keeps its model object's."""
    bufs = restore(view, cohort, BN, "slot")
    for n, b in bufs.items():
        cohort.buffers[n].copy_(b)


def keep_buffers(view, cohort) -> None:
    """``--bn-buffers never``: store each slot's statistics after the round; the global model (evaluated and
    checkpointed) takes slot 0's, as the author code evaluates worker 0's model object."""
    keep(view, cohort, BN, "slot", cohort.buffers)
    for n, b in view.global_buffers.items():
        t = BN.get(view, 0, n)
        if t is not None:
            b.copy_(t.to(b.device))
