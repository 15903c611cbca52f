"""Building a run's pieces from its config, before the first round (``Simulation.setup``): the device, the data and
its limits, the model. Each function returns what it built; the engine keeps it (docs/architecture.md, "The engine")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcli.errors import ConfigError

if TYPE_CHECKING:
    from fedcli.config import TrainConfig


def check_client_data(cfg: TrainConfig, sizes) -> int:
    """Limits checked before anything is allocated; returns the mini-batch size to use.

    Every client must hold training data (a partition file can name an empty client). A ``--batch-size`` larger
    than every client's training data is clamped to the largest client's sample count: a client smaller than a
    batch sees all its samples at every step either way (``fl.cohort.client_batches``), but the batch plans and
    the per-batch buffers are allocated at the batch size (10^8 would take gigabytes before the first step)."""
    from fedcli.errors import DataError

    empty = [i for i, n in enumerate(sizes) if n == 0]
    if empty:
        where, what = (cfg.partition_file, "a fedcli partition file") if cfg.partition_file else (f"the {cfg.partition} partition", "a partition")
        raise DataError(f"{where}: client {empty[0]} has no training samples ({len(empty)} client(s) are empty); expected {what} "
                        f"in which every client holds at least one (re-create it with fedcli partition)")
    largest = int(max(sizes)) if len(sizes) else 0
    return min(cfg.batch_size, largest)


def resolve_device(name: str, local_rank: int = 0, count: int | None = None) -> torch.device:
    """This process's device for ``--device``: cpu; cuda:K as given; cuda (and auto with a GPU): GPU ``local_rank mod
    count``, so the ranks of a node (MPI's node-local rank, ``Communicator.local_rank``) or a worker pool spread over
    its visible GPUs, one each while there are enough. ``count``: the visible CUDA devices (tests fake it)."""
    if name == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if count is None else int(count)
    if name == "auto":
        if count == 0:
            return torch.device("cpu")
        name = "cuda"
    if count == 0:
        raise ConfigError(f"--device {name} was asked for but no CUDA device is available", key="device")
    if name == "cuda":
        return torch.device("cuda", int(local_rank) % count)
    index = int(name.split(":", 1)[1])
    if index >= count:
        raise ConfigError(f"--device {name}: only {count} CUDA device(s) are visible (cuda:0 to cuda:{count - 1})", key="device")
    return torch.device("cuda", index)


def default_threads(cfg: TrainConfig) -> int:
    """Torch threads of each process: ``--threads``, or 1 (0, the default).

    Parallelism comes from the worker processes (``--workers``), one client shard each. Two torch
    threads in one process collapse when another process holds a core: every parallel region waits
    for the descheduled thread (the default digits run, 2 cores: 30 s of training with 2 threads against
    4 s with 1 at load average 2.3; 15.5 s against 7.1 s beside one busy process; 3.6 s with 2 threads
    at load 0.4).
    """
    return cfg.threads or 1


def build_run_model(cfg: TrainConfig, dataset) -> torch.nn.Module:
    """The run's model for ``dataset`` (on the CPU; the caller moves it)."""
    from fedcli.models import build_model

    vocab = dataset.source.get("vocab_size") if isinstance(dataset.source, dict) else None  # token-id datasets (agnews)
    return build_model(cfg.model, dataset.input_shape, dataset.num_classes, wrn_depth=cfg.wrn_depth,
                       wrn_width=cfg.wrn_width, mlp_hidden=cfg.hidden_sizes(),
                       **({"vocab_size": int(vocab)} if vocab else {}))



def place(cfg: TrainConfig, local_rank: int) -> torch.device:
    """This process's device (:func:`resolve_device`), made current, and its torch threads (:func:`default_threads`)."""
    from fedcli.runtime.heap import keep_heap_for_reuse

    device = resolve_device(cfg.device, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(default_threads(cfg))
    keep_heap_for_reuse()  # the steps' tensors reuse the heap instead of faulting fresh pages in (fedcli.runtime.heap)
    return device


@dataclass
class ClientData:
    """The run's data as :func:`load` left it: the dataset and partition, each client's training indices and sample
    count, the mini-batch size every part uses, the notes said about it, and the cohort size (clients per round)."""

    dataset: object
    partition: object
    client_indices: list
    sizes: np.ndarray
    batch_size: int
    notes: list
    active: int


def load(cfg: TrainConfig, comm, dataset=None, partition=None) -> ClientData:
    """The dataset and partition (``dataset``/``partition`` if given, else loaded once per node), each client's
    training indices, the mini-batch size and the cohort size; refuses more processes than clients per round."""
    from fedcli.data.setup import load_data_and_partition
    from fedcli.runtime.heap import release_free_heap

    if dataset is None or partition is None:
        dataset, partition = comm.load_shared(lambda: load_data_and_partition(cfg))
        release_free_heap()  # what loading freed (generated users, lists of labels) back to the OS
    dataset.share_caches(comm.node_size)
    client_indices = [torch.as_tensor(ix, dtype=torch.long) for ix in partition.train]
    sizes = np.array([len(ix) for ix in partition.train])
    # the mini-batch size every part uses (``--batch-size``, clamped to the largest client's training data)
    batch_size = check_client_data(cfg, sizes)
    notes = [] if batch_size == cfg.batch_size else [
        f"--batch-size {cfg.batch_size} is larger than every client's training data: using {batch_size}, the "
        f"largest client's sample count (each local step still sees all of a client's samples)"]
    n_clients = len(client_indices)
    active = max(1, int(round(cfg.active_ratio * n_clients)))
    if comm.size > active:  # every process trains at least one client of every round (the cohort sums, the batch
        # plans and the parts' hooks assume so): refused up-front
        how = "MPI processes" if comm.launcher == "mpi" else "worker processes (--workers)"
        raise ConfigError(f"--active-ratio {cfg.active_ratio} of {n_clients} clients gives {active} client(s) per "
                          f"round, fewer than the {comm.size} {how}: each process trains at least one client of "
                          f"every round; use at most {active} processes, or more clients per round", key="active_ratio")
    return ClientData(dataset, partition, client_indices, sizes, batch_size, notes, active)


def global_model(cfg: TrainConfig, dataset, device: torch.device) -> tuple:
    """The initial model (seeded by ``--init-seed``) on ``device``: (model, its layers, the global model's parameters
    and buffers, each layer's float buffers that travel with it under ``--bn-buffers with-layer``)."""
    from fedcli.fl.rng import key
    from fedcli.models import layer_info

    torch.manual_seed(key(cfg.model_seed(), "init"))  # --init-seed (default: --seed)
    model = build_run_model(cfg, dataset).to(device)
    layers = layer_info(model)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    sync_buffers = {li.index: [b for b in li.buffers if buffers[b].is_floating_point()] for li in layers}
    return model, layers, params, buffers, sync_buffers


def device_data(dataset, device: torch.device) -> tuple:
    """The training, test and validation tensors on ``device`` (train_x, train_y, test_x, test_y, val_x, val_y; the
    validation ones None without ``--val-fraction``) and the CIFAR augmentation's padding value."""
    on = lambda t: None if t is None else t.to(device)  # noqa: E731
    train_x, train_y, test_x, test_y = on(dataset.train_x), on(dataset.train_y), on(dataset.test_x), on(dataset.test_y)
    val_x, val_y = (None, None) if dataset.val_y is None else (on(dataset.val_x), on(dataset.val_y))
    # pad with black, as torchvision does before normalizing: fill = -mean / std per channel (a [C] tensor on
    # the device, built once; the CIFAR loaders' normalization has one mean and std per channel)
    norm = dataset.source.get("normalization") if isinstance(dataset.source, dict) else None
    pad_fill = (torch.tensor([-m / s for m, s in zip(norm["mean"], norm["std"])], dtype=train_x.dtype, device=device)
                if norm else 0.0)
    return train_x, train_y, test_x, test_y, val_x, val_y, pad_fill
