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
would do; not the author code). The state is kept in ``view.store`` (``fedcli.fl.store``); under MPI every process can read every key
(``share``), so results do not depend on the number of processes.
"""

from __future__ import annotations

import torch

from fedcli.fl.rng import np_gen
from fedcli.fl.store import share


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
    where = slot_of(view.cfg.seed, cohort.round_idx, list(cohort.cohort_ids) or list(cohort.clients))
    return [where[c] for c in cohort.clients]


def restore(view, cohort, prefix: str, like: dict[str, torch.Tensor], by: str, fresh) -> dict[str, torch.Tensor]:
    """Stacked state ``[K, *shape]`` per name of ``like`` for this process's cohort; a key without stored state
    gets ``fresh(name)`` (an unstacked tensor of that name's shape)."""
    ks = keys(view, cohort, by)
    out = {}
    for n, t in like.items():
        if ks:
            out[n] = view.store.gather(f"{prefix}.{by}:{n}", ks, lambda _k, n=n: fresh(n), t.device)
        else:
            out[n] = t.new_zeros((0, *t.shape))
    return out


def keep(view, cohort, prefix: str, stacked: dict[str, torch.Tensor], by: str) -> None:
    """Store stacked state ``[K, *shape]`` per name for this process's cohort. Collective under MPI: every
    process calls it at the same point, and every process can then read every key (``fedcli.fl.store.share``)."""
    share(view, keys(view, cohort, by), {f"{prefix}.{by}:{n}": t for n, t in stacked.items()}, everywhere=True)


def stored(view, prefix: str, by: str, key: int, name: str) -> torch.Tensor | None:
    """One key's stored tensor (or None)."""
    return view.store.get(f"{prefix}.{by}:{name}", key)


# ---------------------------------------------------------------------------- BatchNorm statistics per slot
BUFFERS = "bn"


def restore_buffers(view, cohort) -> None:
    """``--bn-buffers never``: each cohort client starts the round with its slot's running statistics (the
    initial ones for a slot that has none yet), as the author code's worker s keeps its model object's."""
    bufs = restore(view, cohort, BUFFERS, view.global_buffers, "slot", lambda n: view.global_buffers[n])
    for n, b in bufs.items():
        cohort.buffers[n].copy_(b)


def keep_buffers(view, cohort) -> None:
    """``--bn-buffers never``: store each slot's statistics after the round; the global model (evaluated and
    checkpointed) takes slot 0's, as the author code evaluates worker 0's model object."""
    keep(view, cohort, BUFFERS, cohort.buffers, "slot")
    for n, b in view.global_buffers.items():
        t = stored(view, BUFFERS, "slot", 0, n)
        if t is not None:
            b.copy_(t.to(b.device))
