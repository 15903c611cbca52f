"""Data loaded once per node under MPI and shared by the node's ranks.

Without it every rank of ``mpiexec -n 8 fedcli train`` loads the dataset and builds the partition itself, so a node
holds eight copies of the same arrays (FEMNIST's 800,000 images: 2.5 GB a copy). Here the first rank of each node
(MPI's shared-memory split of the world) loads them, and every rank of the node reads the same physical pages:

1. the node's leader loads ``(dataset, partition)`` and pickles them with protocol 5, every contiguous array (numpy
   arrays, and CPU tensors of a dtype numpy has, as numpy arrays) out of band (PEP 574);
2. one MPI-3 shared window (``MPI.Win.Allocate_shared``) of the arrays' total size is allocated on the leader, the
   leader copies the arrays into it, and broadcasts the pickle (its small in-band part) over the node;
3. every rank, the leader included, unpickles with the window's memory as the out-of-band buffers: its arrays and
   tensors are views of the window, read-only for numpy (a write raises), and the leader's private copies are freed.

A loading error on the leader (a missing file, a bad option) is broadcast and raised on every rank of the node, so no
rank waits for data that will not come. Arrays that would not fit in the node's ``/dev/shm`` are not shared: every
rank then loads its own copy, as without this module, and the manifest says why. Ranks on different nodes load
independently (the same data: it is a function of the config). The window lives until the process ends (MPI frees it at
finalization).
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from typing import Any, Callable

import numpy as np
import torch

ALIGN = 64  # each array starts on a 64-byte boundary of the window (cache lines, SIMD loads)
_WINDOWS: list = []  # the windows this process holds (a window must outlive every view of it)
_RANGES: list[tuple[int, int]] = []  # the address ranges of those windows in this process
SHM_MARGIN = 256 * 2**20  # bytes of /dev/shm left free for MPI's own segments and everything else on the node


def _tensor_from_array(arr: np.ndarray) -> torch.Tensor:
    """A tensor over ``arr``'s memory (the window's, after unpickling). ``arr`` may be read-only: torch does not
    check writes, and nothing writes into a loaded dataset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.from_numpy(arr)


class _Pickler(pickle.Pickler):
    """Protocol 5 with CPU tensors pickled as numpy arrays, so that their memory goes out of band too."""

    def reducer_override(self, obj):
        if (
            type(obj) is torch.Tensor
            and obj.device.type == "cpu"
            and obj.layout == torch.strided
            and not obj.requires_grad
            and obj.dtype != torch.bfloat16
            and obj.is_contiguous()
        ):
            return _tensor_from_array, (obj.numpy(),)
        return NotImplemented


def pack(obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """``obj`` as an in-band pickle and the list of its out-of-band buffers (contiguous arrays)."""
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffers.append).dump(obj)
    return out.getvalue(), buffers


def layout(sizes: list[int]) -> tuple[list[int], int]:
    """Offsets of buffers of ``sizes`` bytes placed one after another at ``ALIGN``-byte boundaries, and the total."""
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at)
        at += -(-n // ALIGN) * ALIGN
    return offsets, at


def shm_free(path: str = "/dev/shm") -> int | None:
    """Free bytes of the file system where MPI places shared windows (MPICH and Open MPI: ``/dev/shm``), or None
    when there is none to check."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def in_window(ptr: int) -> bool:
    """True when address ``ptr`` lies in a window this process shares (a test's check that a tensor is shared)."""
    return any(lo <= ptr < hi for lo, hi in _RANGES)


def _packed(obj) -> tuple[bytes | None, list | str, list]:
    """(pickle, sizes of its buffers, the buffers) of ``obj``, or (None, why it cannot be shared, [])."""
    try:
        meta, buffers = pack(obj)
    except Exception as e:
        return None, f"the data does not pickle ({type(e).__name__}: {e})", []
    sizes = [b.raw().nbytes for b in buffers]
    total, free = layout(sizes)[1], shm_free()
    if free is not None and total > free - SHM_MARGIN:
        return None, f"{total / 1e6:.1f} MB of arrays, {free / 1e6:.1f} MB free in /dev/shm", []
    return meta, sizes, buffers


def share_on_node(node, MPI, load: Callable[[], Any]) -> tuple[Any, dict]:
    """``load()`` run by rank 0 of ``node`` (a communicator of the ranks sharing a node's memory) and its result
    given to every rank of ``node`` in one shared window; with it, what was shared (for the manifest): ``ranks``
    of the node and ``bytes`` of arrays in the window, or ``not_shared``, why every rank loaded its own copy (the
    arrays would not fit in ``/dev/shm`` with ``SHM_MARGIN`` to spare: a container's default is 64 MB, and a window
    past it dies of SIGBUS at the first write). Collective over ``node``."""
    ranks = node.Get_size()
    if ranks == 1:
        return load(), {"ranks": 1, "bytes": 0}
    leader = node.Get_rank() == 0
    head, obj, buffers = None, None, []
    if leader:
        try:
            obj = load()
        except Exception as e:
            head = (e, None, None)
        else:
            meta, sizes, buffers = _packed(obj)
            head = (None, meta, sizes)
    err, meta, sizes = node.bcast(head, root=0)
    if err is not None:
        raise err
    if meta is None:  # not picklable, or too big for the node's shared memory: every rank loads its own
        return (obj if leader else load()), {"ranks": ranks, "bytes": 0, "not_shared": sizes}
    del obj
    offsets, total = layout(sizes)
    win = MPI.Win.Allocate_shared(max(total, 1) if leader else 0, 1, comm=node)
    _WINDOWS.append(win)
    mem, _ = win.Shared_query(0)
    memory = np.frombuffer(mem, dtype=np.uint8, count=max(total, 1))
    if leader:
        for off, n, b in zip(offsets, sizes, buffers):
            memory[off : off + n] = np.frombuffer(b.raw(), dtype=np.uint8)
        del buffers
    node.Barrier()  # the leader has written every array
    base = memory.ctypes.data
    _RANGES.append((base, base + max(total, 1)))
    views = [memoryview(memory[off : off + n]).toreadonly() for off, n in zip(offsets, sizes)]
    return pickle.loads(meta, buffers=views), {"ranks": ranks, "bytes": total}
