"""Building a run's pieces from its config, before the first round (``Simulation.setup``): the device, the data and
its limits, the model. Each function returns what it built; the engine keeps it (docs/architecture.md, "The engine")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcli.errors import ConfigError
from fedcli.fl.context import ManifestContext

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
        where, what = (
            (cfg.partition_file, "a fedcli partition file")
            if cfg.partition_file
            else (f"the {cfg.partition} partition", "a partition")
        )
        raise DataError(
            f"{where}: client {empty[0]} has no training samples ({len(empty)} client(s) are empty); "
            f"expected {what} in which every client holds at least one "
            f"(re-create it with fedcli partition)"
        )
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
        raise ConfigError(
            f"--device {name}: only {count} CUDA device(s) are visible (cuda:0 to cuda:{count - 1})", key="device"
        )
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
    return build_model(
        cfg.model,
        dataset.input_shape,
        dataset.num_classes,
        wrn_depth=cfg.wrn_depth,
        wrn_width=cfg.wrn_width,
        mlp_hidden=cfg.hidden_sizes(),
        **({"vocab_size": int(vocab)} if vocab else {}),
    )


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
    n_active: int


def load(cfg: TrainConfig, comm, dataset=None, partition=None) -> ClientData:
    """The dataset and partition (``dataset``/``partition`` if given, else loaded once per node), each client's
    training indices, the mini-batch size and the cohort size; refuses more processes than clients per round."""
    from fedcli.data.setup import load_data_and_partition
    from fedcli.fl.budget import check_processes, clients_per_round
    from fedcli.runtime.heap import release_free_heap

    if dataset is None or partition is None:
        dataset, partition = comm.load_shared(lambda: load_data_and_partition(cfg))
        release_free_heap()  # what loading freed (generated users, lists of labels) back to the OS
    dataset.share_caches(comm.node_size)
    client_indices = [torch.as_tensor(ix, dtype=torch.long) for ix in partition.train]
    sizes = np.array([len(ix) for ix in partition.train])
    # the mini-batch size every part uses (``--batch-size``, clamped to the largest client's training data)
    batch_size = check_client_data(cfg, sizes)
    notes = (
        []
        if batch_size == cfg.batch_size
        else [
            f"--batch-size {cfg.batch_size} is larger than every client's training data: using {batch_size}, the "
            f"largest client's sample count (each local step still sees all of a client's samples)"
        ]
    )
    n_clients = len(client_indices)
    n_active = clients_per_round(cfg.active_ratio, n_clients)
    check_processes(cfg.active_ratio, n_clients, comm.size, comm.launcher)
    return ClientData(dataset, partition, client_indices, sizes, batch_size, notes, n_active)


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
    pad_fill = (
        torch.tensor([-m / s for m, s in zip(norm["mean"], norm["std"])], dtype=train_x.dtype, device=device)
        if norm
        else 0.0
    )
    return train_x, train_y, test_x, test_y, val_x, val_y, pad_fill


FAMILIES = ("local_step", "codec", "init", "server", "schedule")  # the order the engine calls the parts' hooks in


def method_parts(cfg: TrainConfig, layers) -> tuple:
    """The method of ``--algo`` (its spec), the name of each of its five parts by family, and the parts themselves by
    family (in :data:`FAMILIES` order), each built with the options it declares (``Part.Params`` / ``Part.uses``);
    the schedule gets the model's ``layers``. An init that wraps the method's own (ALA: it mixes what the method's
    init receives) gets that one as ``base``."""
    from fedcli.fl.parts import run_parts
    from fedcli.specs import METHODS

    method = METHODS[cfg.algo]
    classes = run_parts(cfg.algo, cfg.schedule, cfg.init)
    names = {kind: classes[kind].name for kind in ("local_step", "schedule", "codec", "init", "server")}
    made = {"local_step": classes["local_step"](cfg), "codec": classes["codec"](cfg)}
    made["init"] = (
        classes["init"](cfg, base=classes["method_init"](cfg)) if "method_init" in classes else classes["init"](cfg)
    )
    made["server"] = classes["server"](cfg)
    made["schedule"] = classes["schedule"](cfg, layers)
    return method, names, made


def check_custom_model(cfg: TrainConfig, model, dataset, trainer_name: str) -> None:
    """``--model`` a factory of your own (``module:function``): logits of the right shape, and vmap-able if the
    vmap trainer trains it (``fedcli.models.custom.check_model``); nothing for a model of the zoo."""
    from fedcli.models.custom import check_model, is_factory_ref

    if is_factory_ref(cfg.model):
        source = dataset.source
        vocab = source.get("vocab_size") if isinstance(source, dict) else None
        check_model(
            cfg.model,
            model,
            dataset.input_shape,
            dataset.num_classes,
            token_ids=bool(vocab),
            vmap=trainer_name == "vmap",
        )


def check_client_val(cfg: TrainConfig, personal) -> None:
    """``--client-val-fraction`` measures each client's own model: refused for a run that evaluates none."""
    if cfg.client_val_fraction > 0 and (personal is None or not personal.evaluate_models):
        raise ConfigError(
            f"--client-val-fraction measures each client's own model (personal_val_acc), and --algo "
            f"{cfg.algo} has none evaluated: use a personalized method, or --val-fraction for the "
            f"global model",
            key="client_val_fraction",
        )


def manifest(ctx: ManifestContext) -> dict:
    """The run directory's manifest (docs/run-directory.md, ``manifest.json``): the config and the method's options by
    section, what the run is made of (method and parts, processes, device, trainer, data, model, budget, client store,
    system model) as set up, before the first round."""
    from fedcli.models.custom import model_source
    from fedcli.params import section_values
    from fedcli.specs import run_sections

    cfg, layers = ctx.cfg, ctx.layers
    return {
        "config": cfg.to_dict(),
        # the options of the run's parts by params section ([fedlama] phi, ...): the same values as in "config"
        "params": section_values(cfg, run_sections(cfg.algo, cfg.schedule, cfg.init)),
        "method": _method_entry(ctx),
        "seed": cfg.seed,
        **_execution_entry(ctx),
        "dataset": ctx.dataset.source,
        "partition": {"hash": ctx.partition.hash, **ctx.partition.config},
        "clients": len(ctx.client_indices),
        "active_clients": ctx.n_active,
        "model": {
            "name": cfg.model,
            "parameters": sum(li.numel for li in layers),
            "layers": len(layers),
            **model_source(cfg.model),
        },
        "eval_every": ctx.eval_every,
        "evaluations": ctx.planned_evaluations(),
        **({"batch_size_used": ctx.batch_size} if ctx.batch_size != cfg.batch_size else {}),
        "torch_threads": torch.get_num_threads(),
        "client_state": ctx.store.info,
        **({"system": ctx.system.describe()} if ctx.system is not None else {}),
        **({"timing": ctx.timing.describe()} if ctx.timing is not None else {}),
    }


def _method_entry(ctx: ManifestContext) -> dict:
    """The manifest's ``method``: the method, its parts, its defaults and what a report asks of the parts."""
    cfg, method, layers = ctx.cfg, ctx.method, ctx.layers
    return {
        "name": method.name,
        "label": method.label_for(cfg.algo),
        "style": list(method.style),
        **ctx.part_names,
        "personalized": method.personalized,
        "defaults": method.effective_defaults(),
        # what a report asks of the parts, recorded so that reading a run needs no part (nor torch)
        "layerwise": ctx.schedule.layerwise,
        "learned_weights": ctx.init.learned_weights(cfg.to_dict(), [li.numel for li in layers]),
    }


def _execution_entry(ctx: ManifestContext) -> dict:
    """The manifest's entries on how the run executes: its processes, device, trainer, precision, cohort chunks."""
    cfg, comm, trainer = ctx.cfg, ctx.comm, ctx.trainer
    return {
        "world_size": comm.size,
        "workers": comm.workers,
        **({"workers_choice": comm.workers_note} if comm.workers_note else {}),
        # under MPI: the root's node loaded the data once, its ranks read it in shared memory (fedcli.comm.node_share)
        **({"data_sharing": comm.data_sharing} if comm.data_sharing else {}),
        "device": str(ctx.device),  # the root's; "devices" (fedcli train) lists every process's
        "trainer": trainer.name,
        "precision": cfg.precision,  # the arithmetic of local training (--precision; evaluations are fp32)
        **({"cohort_chunk": "auto" if trainer.chunk is None else trainer.chunk} if trainer.name == "vmap" else {}),
        **(
            {
                "cohort_chunk_rounds": "whole rounds chunk by chunk"
                if ctx.chunk_blocker is None
                else f"the trainer's call only: {ctx.chunk_blocker}"
            }
            if cfg.cohort_chunk
            else {}
        ),
    }
