"""Communicators: how the processes simulating a cohort combine their partial sums.

A layer synchronization is a local weighted sum over this process's clients followed by one
all-reduce; the layers synchronized at the same step travel in one flat buffer. In one process the
all-reduce is the identity. Under MPI (``fedcli.comm.mpi``) it is one ``Allreduce`` on the buffer.
"""

from __future__ import annotations

from typing import Any

import torch


class Communicator:
    """In-process communicator: a single rank that holds the whole cohort."""

    rank = 0
    size = 1

    def allreduce_(self, buf: torch.Tensor) -> torch.Tensor:
        """Sum ``buf`` over all ranks, in place; returns it."""
        return buf

    def bcast(self, obj: Any) -> Any:
        return obj

    def allgather(self, obj: Any) -> list:
        return [obj]

    def barrier(self) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def assign_clients(cohort: list[int], sizes, rank: int, world: int) -> list[int]:
    """This rank's share of the cohort, balanced by sample count.

    Greedy longest-processing-time assignment: clients in decreasing size (ties by id) go to the
    rank with the least load (ties by rank). Deterministic, so every rank computes the same split.
    Returned in increasing client id.
    """
    if world == 1:
        return sorted(cohort)
    load = [0] * world
    owner = {}
    for c in sorted(cohort, key=lambda c: (-int(sizes[c]), c)):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[c] = r
        load[r] += int(sizes[c])
    return sorted(c for c in cohort if owner[c] == rank)
