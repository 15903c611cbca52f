"""Communicators: how the processes simulating a cohort combine their partial sums.

A layer synchronization is a weighted sum over the cohort's clients; the layers synchronized at the
same step travel in one flat buffer. :meth:`Communicator.client_sum` adds the clients' contributions
p_i x_i one after another in cohort order, so in one process the result does not depend on how the
cohort is held. The worker pool (``fedcli.comm.workers``) keeps that order across its processes, so
``--workers N`` gives the same bits for every N. Under MPI (``fedcli.comm.mpi``) each rank adds its own
clients in that order and one ``Allreduce`` adds the ranks' partial sums (equal to float rounding).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where tensors are summed: a communicator is made before torch loads (fedcli/cli/train.py)
    import torch

#: columns per block of an ordered sum: the weighted rows of every client over one block of columns are made by one
#: multiply and added by one call, so a sum costs a few torch ops per block whatever the number of clients (GitHub
#: issue 38: ops per local iteration); the block's scratch holds clients x COLUMNS elements at most
COLUMNS = 1 << 19

_scratch: dict = {}


def scratch(numel: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A flat buffer of at least ``numel`` elements, reused from call to call (a fresh one of tens of megabytes per
    synchronization is page-faulted in again every time on the CPU: 1.5 s against 0.25 s a FEMNIST CNN sum, 32
    clients)."""
    import torch

    key_ = (dtype, str(device))
    buf = _scratch.get(key_)
    if buf is None or buf.numel() < numel:
        buf = _scratch[key_] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel]


def flat_rows(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], int, torch.dtype]:
    """Per-client rows [k, numel] of stacked tensors [k, ...], their total width and common dtype."""
    import torch

    rows = [t.reshape(t.shape[0], math.prod(t.shape[1:])) for t in tensors]
    dtype = rows[0].dtype if rows else torch.float32
    for r in rows[1:]:
        dtype = torch.promote_types(dtype, r.dtype)
    return rows, sum(r.shape[1] for r in rows), dtype


def unflatten(flat: torch.Tensor, shapes) -> list[torch.Tensor]:
    """Consecutive views of a flat sum shaped as ``shapes``, the inverse of concatenating flattened tensors
    (what :func:`ordered_sum` does with the rows of each client)."""
    out, offset = [], 0
    for shape in shapes:
        k = math.prod(shape)
        out.append(flat[offset : offset + k].view(shape))
        offset += k
    return out


def ordered_sum(
    tensors: list[torch.Tensor],
    weights: torch.Tensor | None,
    positions: list[int],
    skip: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    scan: bool | None = None,
) -> torch.Tensor:
    """sum_i w_i x_i over the k local rows in increasing ``positions``, flat (tensors concatenated).

    Each element is computed as ``acc = 0; acc = acc + fl(w_i * x_i)`` for i in order: one rounded
    product and one rounded addition per client, so any split of the work by columns gives the same
    bits. Rows with ``skip`` set add nothing (a client dropped by --on-diverge skip-client: 0 * NaN is NaN).
    ``out``: a running sum to continue (the clients of a round taken chunk by chunk, in cohort order, give the
    same bits as all of them at once); a new one starting at 0 when None. ``scan``: how the rows are added
    (:func:`add_rows_in_order`; None: the device's way).
    """
    import torch

    rows, width, dtype = flat_rows(tensors)
    device = rows[0].device if rows else torch.device("cpu")
    if out is None:
        out = torch.zeros(width, dtype=dtype, device=device)
    if not rows:
        return out
    k = rows[0].shape[0]
    order = sorted(range(k), key=lambda i: positions[i])
    if skip is not None:
        dead = skip.tolist()
        order = [i for i in order if not dead[i]]
    if not order:
        return out
    pick = None if order == list(range(k)) else torch.tensor(order, device=device)
    w = None if weights is None else weights.to(device=device, dtype=dtype)
    if w is not None and pick is not None:
        w = w[pick]
    live = len(order)
    offset = 0
    for r in rows:
        n = r.shape[1]
        if pick is not None:
            r = r.index_select(0, pick)
        for lo in range(0, n, COLUMNS):
            hi = min(n, lo + COLUMNS)
            block = r[:, lo:hi]
            if w is not None:  # fl(w_i * x_i), every client's row at once
                block = torch.mul(
                    block, w.view(-1, 1), out=scratch(live * (hi - lo), dtype, device).view(live, hi - lo)
                )
            elif block.dtype != dtype:
                block = scratch(live * (hi - lo), dtype, device).view(live, hi - lo).copy_(block)
            add_rows_in_order(out[offset + lo : offset + hi], block, scan)
        offset += n
    return out


def add_rows_in_order(acc: torch.Tensor, rows: torch.Tensor, scan: bool | None = None) -> None:
    """``acc = acc + rows[0]; acc = acc + rows[1]; ...``: one rounded addition per row, the rows in order, in one call.

    On the CPU ``index_add_`` over a one-row view adds its source rows one after another (each an ordinary elementwise
    add). On CUDA ``index_add_`` adds with atomics in no fixed order, while ``cumsum`` along the leading dimension runs
    each column's rows one after another in the tensor's dtype; its last row is the sum.

    ``scan``: the ``cumsum`` way (True) or the ``index_add_`` way (False); None (a run): ``cumsum`` exactly on CUDA.
    The seam lets a CPU test take the CUDA branch (tests/comm/test_cuda_branches.py): its arithmetic needs no GPU,
    but the CPU's ``cumsum`` accumulates float32 in float64 (one rounding at the end), so there it is the in-order
    sum only in float64, where it accumulates in the tensor's dtype as CUDA's does in float32."""
    import torch

    if (acc.device.type == "cuda") if scan is None else scan:
        acc.copy_(torch.cat([acc.unsqueeze(0), rows]).cumsum(0)[-1])
    else:
        acc.view(1, -1).index_add_(0, torch.zeros(rows.shape[0], dtype=torch.long, device=acc.device), rows)


class Communicator:
    """In-process communicator: a single rank that holds the whole cohort."""

    rank = 0
    size = 1
    launcher = "fedcli"  # what started the processes: "fedcli" (one process, or --workers) or "mpi" (mpiexec)
    workers = 1  # worker processes training shards of the cohort (a --workers pool); 1 otherwise
    workers_note: str | None = None  # why --workers auto chose the number it did (the manifest's workers_choice)
    data_sharing: dict | None = (
        None  # under MPI: how the node's ranks shared the loaded data (the manifest's data_sharing)
    )

    def allreduce_(self, buf: torch.Tensor) -> torch.Tensor:
        """Sum ``buf`` over all ranks, in place; returns it."""
        return buf

    def bcast(self, obj: Any) -> Any:
        return obj

    def allgather(self, obj: Any) -> list:
        return [obj]

    def barrier(self) -> None:
        pass

    def load_shared(self, load):
        """The data ``load()`` gives, for this process (under MPI: loaded once per node and shared by its ranks)."""
        return load()

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def node_size(self) -> int:
        """The processes of this run on this process's node (they share the node's memory budgets: the client-row
        cache, generated-data caches): here and in a worker pool, all of them."""
        return self.size

    @property
    def local_rank(self) -> int:
        """This process's rank among the processes on its node (which GPU ``--device cuda`` takes): here and in a
        worker pool, all on one node, the rank itself."""
        return self.rank

    def client_sum(
        self,
        tensors: list[torch.Tensor],
        weights: torch.Tensor | None,
        positions: list[int],
        total: int,
        skip: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """sum_i w_i x_i over every client of the cohort, flat, the clients added in cohort order.

        ``tensors``: this rank's stacked rows [k, ...]; ``weights`` [k] (None: 1); ``positions``: each local
        client's index in the cohort (0 .. total - 1). Every rank gets the whole sum. Here: the local
        :func:`ordered_sum` plus one all-reduce of the ranks' partial sums.
        """
        return self.allreduce_(ordered_sum(tensors, weights, positions, skip))

    def client_gather(self, values: torch.Tensor, positions: list[int], total: int) -> torch.Tensor:
        """[total, ...] with this rank's rows ``values`` [k, ...] at their cohort ``positions`` and every
        other rank's at theirs. Exact: each entry has one contributor, the others add zeros."""
        import torch

        out = torch.zeros((total, *values.shape[1:]), dtype=values.dtype, device=values.device)
        if len(positions):
            out[torch.as_tensor(positions, dtype=torch.long, device=values.device)] = values
        return self.allreduce_(out)


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
