"""Per-client state that lives across rounds, kept off the device.

Personalized models, optimizer moments, control variates and ALA weights belong to a client, not
to a cohort slot. The store keeps one CPU tensor per (name, client), created on first use, and
gathers/scatters them as stacked ``[K, *shape]`` tensors for the cohort on this process.
"""

from __future__ import annotations

from typing import Callable

import torch


class ClientStore:
    def __init__(self):
        self.tables: dict[str, dict[int, torch.Tensor]] = {}

    def gather(self, name: str, clients: list[int], init: Callable[[int], torch.Tensor], device) -> torch.Tensor:
        """Stacked state of ``clients``; a client without state yet gets ``init(client)``."""
        table = self.tables.setdefault(name, {})
        rows = [table[c] if c in table else init(c).detach().cpu() for c in clients]
        return torch.stack(rows).to(device)

    def scatter(self, name: str, clients: list[int], stacked: torch.Tensor) -> None:
        table = self.tables.setdefault(name, {})
        cpu = stacked.detach().cpu()
        for k, c in enumerate(clients):
            table[c] = cpu[k].clone()

    def has(self, name: str, client: int) -> bool:
        return client in self.tables.get(name, {})

    def state_dict(self) -> dict:
        return {n: dict(t) for n, t in self.tables.items()}

    def load_state_dict(self, state: dict) -> None:
        self.tables = {n: {int(c): v for c, v in t.items()} for n, t in state.items()}


def share(sim, clients: list[int], tables: dict[str, torch.Tensor], skipped=()) -> None:
    """Keep stacked per-client tensors (table name -> ``[K, ...]``, rows in the order of ``clients``, this process's
    cohort clients) in the client store across rounds: the one way parts store per-client state.

    Skip-aware: a client in ``skipped`` (``--on-diverge skip-client``) keeps its previous state. Collective under
    MPI: every process calls it at the same point, with or without clients of its own. One process, or full
    participation (a client always trains and is evaluated on the same process): the process's own store. Partial
    participation under MPI: every process gets every update (one allgather), so the next process to train or
    evaluate a client finds its state.
    """
    keep = [k for k, c in enumerate(clients) if c not in skipped]
    kept = [clients[k] for k in keep]
    rows = torch.tensor(keep, dtype=torch.long)
    cpu = {name: t.detach().cpu()[rows] for name, t in tables.items()}
    if sim.comm.size == 1 or sim.full_participation:
        shares = [(kept, cpu)]
    else:
        shares = sim.comm.allgather((kept, cpu))
    for cl, tabs in shares:
        if cl:
            for name, t in tabs.items():
                sim.store.scatter(name, cl, t)
