"""The "layers" of a model.

A layer is one trainable parameter tensor, in ``model.named_parameters()`` order, as in the
reference code of FedLAMA and FedALA. Layer-wise methods schedule, compress and count
communication per layer; ``numel`` is the per-sync cost of FedLAMA Eq. 8.

Buffers (BatchNorm ``running_mean``, ``running_var``, ``num_batches_tracked``) are not layers: they
travel with one parameter of their module, so that a layer-wise schedule that synchronizes that
parameter also synchronizes the statistics. The default attaches them to the module's *weight*
(its first parameter); ``buffers_with="bias"`` attaches them to its bias (its last parameter)
instead. A module that has buffers but no parameters of its own (e.g. ``BatchNorm2d(affine=False)``)
hands its buffers to the nearest layer before it in parameter order (the first layer if none is
before it). Every buffer of the model is attached to exactly one layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

KINDS = ("kernel", "bias", "norm")

_NORM_TYPES: tuple[type, ...] = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
if hasattr(nn, "RMSNorm"):  # torch >= 2.4
    _NORM_TYPES = (*_NORM_TYPES, nn.RMSNorm)
_KERNEL_TYPES: tuple[type, ...] = (nn.modules.conv._ConvNd, nn.Linear, nn.Bilinear)


@dataclass(frozen=True)
class LayerInfo:
    """One trainable parameter tensor of a model.

    index:   position in ``model.named_parameters()`` order
    name:    parameter name, e.g. ``"conv1.weight"``
    shape:   tensor shape
    numel:   number of elements (communication cost of one sync, FedLAMA Eq. 8)
    kind:    ``"kernel"`` (conv/linear weight), ``"bias"`` (conv/linear bias) or
             ``"norm"`` (BatchNorm/GroupNorm/LayerNorm weight or bias)
    buffers: full names (as in ``model.named_buffers()``) of the buffers that travel with this layer
    """

    index: int
    name: str
    shape: tuple[int, ...]
    numel: int
    kind: str
    buffers: tuple[str, ...] = ()


def _kind(module: nn.Module, local_name: str, param: nn.Parameter) -> str:
    if isinstance(module, _NORM_TYPES):
        return "norm"
    if isinstance(module, _KERNEL_TYPES):
        return "bias" if local_name == "bias" else "kernel"
    # Other modules (embeddings, custom parameters): matrices and larger are kernels, vectors biases.
    return "kernel" if param.dim() >= 2 else "bias"


def _new_buffers(module: nn.Module, buffer_name: dict[int, str], seen: set[int]) -> list[str]:
    """The model-level names of ``module``'s own buffers not met before (each then added to ``seen``)."""
    bufs = []
    for _, b in module.named_buffers(recurse=False):
        if id(b) in buffer_name and id(b) not in seen:
            seen.add(id(b))
            bufs.append(buffer_name[id(b)])
    return bufs


def _carrier(own: list[tuple[str, nn.Parameter]], buffers_with: str) -> nn.Parameter:
    """The parameter of a module that carries its buffers: the one named ``buffers_with`` ("weight" or "bias"), else
    the first (weight) or last (bias) parameter."""
    local_names = [n for n, _ in own]
    if buffers_with in local_names:
        return own[local_names.index(buffers_with)][1]
    return own[0][1] if buffers_with == "weight" else own[-1][1]


def layer_info(model: nn.Module, buffers_with: str = "weight") -> list[LayerInfo]:
    """Describe the layers of ``model`` in ``named_parameters()`` order.

    ``buffers_with`` chooses the parameter of a module that carries that module's buffers:
    ``"weight"`` (default: the parameter named ``weight``, else the module's first parameter) or
    ``"bias"`` (the parameter named ``bias``, else the module's last parameter).
    """
    if buffers_with not in ("weight", "bias"):
        raise ValueError(f"buffers_with must be 'weight' or 'bias', got {buffers_with!r}")

    named = list(model.named_parameters())
    index_of = {id(p): i for i, (_, p) in enumerate(named)}
    buffer_name = {id(b): n for n, b in model.named_buffers()}
    kinds: dict[int, str] = {}
    attached: dict[int, list[str]] = {i: [] for i in range(len(named))}
    seen_buffers: set[int] = set()
    pending: list[str] = []  # buffers of parameterless modules before the first layer
    last_index: int | None = None

    for _, module in model.named_modules():
        own = [(n, p) for n, p in module.named_parameters(recurse=False)]
        bufs = _new_buffers(module, buffer_name, seen_buffers)
        for local, p in own:
            i = index_of[id(p)]
            kinds.setdefault(i, _kind(module, local, p))
        if own:
            target = index_of[id(_carrier(own, buffers_with))]
            attached[target].extend(bufs)
            own_indices = [index_of[id(p)] for _, p in own]
            last_index = max(own_indices if last_index is None else [last_index, *own_indices])
        elif bufs:
            if last_index is None:
                pending.extend(bufs)
            else:
                attached[last_index].extend(bufs)

    if pending:
        if not named:
            raise ValueError("model has buffers but no trainable parameters to attach them to")
        attached[0][:0] = pending

    return [
        LayerInfo(
            index=i,
            name=n,
            shape=tuple(p.shape),
            numel=p.numel(),
            kind=kinds[i],
            buffers=tuple(attached[i]),
        )
        for i, (n, p) in enumerate(named)
    ]
