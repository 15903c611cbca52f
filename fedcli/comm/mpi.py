"""MPI communicator (mpi4py): each rank simulates a share of the cohort.

Hot path: a layer synchronization is one ``Allreduce`` on a flat buffer through mpi4py's buffer
interface (``MPI.IN_PLACE`` on a contiguous CPU array), never the pickling lower-case calls. Those are
used only for one-off control messages (the validated config, setup errors, process ids). Imports no torch: MPI starts
and rank 0 checks the config before torch loads (``fedcli train``'s bad values are answered in a fraction of a second).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fedcli.comm.communicator import Communicator

if TYPE_CHECKING:  # tensors come with the run: the communicator is made before torch loads (fedcli/cli/train.py)
    import torch

_ENV_SIZE = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE", "SLURM_NTASKS_PER_JOB")


def launched_under_mpi() -> bool:
    """True when an MPI launcher started this process as one of several ranks."""
    for var in _ENV_SIZE:
        try:
            if int(os.environ.get(var, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


class MPICommunicator(Communicator):
    launcher = "mpi"

    def __init__(self):
        from mpi4py import MPI

        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        self.reduce_seconds = 0.0
        self.node = node_communicator(self.world, MPI)
        # the node-local rank: the shared-memory split's, else the launcher's variables, else 0
        self._local_rank = int(self.node.Get_rank()) if self.node is not None else launcher_local_rank() or 0

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def node_size(self) -> int:
        return int(self.node.Get_size()) if self.node is not None else 1

    def allreduce_(self, buf: torch.Tensor) -> torch.Tensor:
        import time

        t0 = time.perf_counter()
        host = buf if buf.device.type == "cpu" else buf.cpu()
        host = host.contiguous()
        arr = host.numpy()
        self.world.Allreduce(self.MPI.IN_PLACE, arr, op=self.MPI.SUM)
        if host is not buf:
            buf.copy_(host)
        self.reduce_seconds += time.perf_counter() - t0
        return buf

    def bcast(self, obj: Any) -> Any:
        return self.world.bcast(obj, root=0)

    def load_shared(self, load):
        """``load()`` on the first rank of each node, its arrays in one shared window that every rank of the node
        reads (``fedcli.comm.node_share``); without a node communicator, every rank loads."""
        if self.node is None:
            self.data_sharing = {"ranks": 1, "bytes": 0, "not_shared": "no MPI-3 shared-memory split of the ranks"}
            return load()
        from fedcli.comm.node_share import share_on_node

        data, self.data_sharing = share_on_node(self.node, self.MPI, load)
        return data

    def allgather(self, obj: Any) -> list:
        return self.world.allgather(obj)

    def barrier(self) -> None:
        self.world.Barrier()

    def abort(self, code: int = 1) -> None:
        self.world.Abort(code)

    def finalize(self) -> None:
        """MPI's end for this process (``MPI_Finalize``; every rank calls it), before an exit every rank makes with the
        same code: mpi4py then neither finalizes nor aborts at exit."""
        if not self.MPI.Is_finalized():
            self.MPI.Finalize()


# the node-local rank as launchers give it: Open MPI, MPICH/Hydra, Intel MPI/PMI, Slurm's srun, torchrun
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK")


def launcher_local_rank(env=None) -> int | None:
    """The node-local rank from the launcher's environment variables (the first of ``LOCAL_RANK_VARS`` set), or None."""
    env = os.environ if env is None else env
    for var in LOCAL_RANK_VARS:
        value = env.get(var, "")
        if value.strip().isdigit():
            return int(value)
    return None


def node_communicator(world, MPI):
    """The ranks that share this rank's node (MPI's shared-memory split of the world; collective: every rank calls it
    at start), or None for an MPI without MPI-3 shared-memory splits. Its rank is the node-local rank; the ranks
    share the loaded data through it (``load_shared``)."""
    try:
        return world.Split_type(MPI.COMM_TYPE_SHARED)
    except Exception:
        return None


CURRENT: dict = {}


def get_communicator() -> Communicator:
    """MPI when launched as one of several ranks, else the in-process communicator."""
    if "comm" not in CURRENT:
        CURRENT["comm"] = MPICommunicator() if launched_under_mpi() else Communicator()
    return CURRENT["comm"]
