"""Per-client state across rounds, declared once by the part that keeps it: FedJAX's ``client_init`` /
``client_final`` as one small typed object.

A part declares each state it keeps for its clients with its name in the client store, its shape and its default::

    GRAD_I = ClientState("feddyn.grad_i")               # one tensor per model parameter, shaped like it, zeros
    P = ClientState("apple.p", shape=(n,), default=lambda client, like: like.fill_(1 / n))

and uses two calls: ``state.load(view, cohort)`` at the round's start (the stacked ``[K, *shape]`` rows of this
process's cohort; the default for a client without a row yet; ``[0, *shape]`` for an empty cohort) and
``state.save(view, cohort, values)`` at its end (a client skipped by ``--on-diverge skip-client`` keeps its row;
collective under MPI: every process calls it, with or without clients). The store keys are built here, never by a
method: ``name:tensor`` per model tensor (``name`` alone for a single tensor). Storage, MPI and disk are the
store's (``fedcli.fl.store.share``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import torch

from fedcli.fl.store import share

#: one row per model parameter tensor, shaped like it (``view.global_params``)
PARAMS = "params"
#: one row per model buffer (BatchNorm statistics), shaped like it (``view.global_buffers``)
BUFFERS = "buffers"
#: a row that starts as the client's current global tensor (the model it would receive)
GLOBAL = "global"

Default = Union[float, str, Callable[[int, torch.Tensor], torch.Tensor]]


@dataclass(frozen=True)
class ClientState:
    """One per-client state of a part.

    ``shape``: :data:`PARAMS` or :data:`BUFFERS` (one tensor per model tensor, name -> ``[K, *shape]``) or a tuple
    (one tensor, ``[K, *shape]``, of ``dtype``). ``default``: a client's row before it has one: a number (a tensor
    full of it, the model tensor's dtype), :data:`GLOBAL` (the global tensor) or ``f(client, zeros)`` returning the
    row (``zeros`` a zero tensor of the row's shape and dtype). ``everywhere``: rows keyed by something that moves
    between processes even with full participation (cohort slots, ``fedcli.fl.slots``). ``sep``: what separates the
    name from a model tensor's name in the key (":"; the adaptive methods' "/" keeps their older runs resumable).
    """

    name: str
    shape: str | tuple[int, ...] = PARAMS
    default: Default = 0.0
    dtype: torch.dtype = torch.float32
    everywhere: bool = False
    sep: str = ":"

    def key(self, tensor: str = "") -> str:
        """The store key of the row of model tensor ``tensor`` (of the single tensor: the name)."""
        return f"{self.name}{self.sep}{tensor}" if self.per_tensor else self.name

    @property
    def per_tensor(self) -> bool:
        return self.shape in (PARAMS, BUFFERS)

    def like(self, view) -> dict[str, torch.Tensor]:
        """Each row's template: the model's tensors, or one zero tensor of the declared shape under ''."""
        if self.shape == PARAMS:
            return view.global_params
        if self.shape == BUFFERS:
            return view.global_buffers
        return {"": torch.zeros(self.shape, dtype=self.dtype)}

    def initial(self, client: int, like: torch.Tensor) -> torch.Tensor:
        """The row of ``client`` before it has one (see ``default``)."""
        if callable(self.default):
            return self.default(client, torch.zeros(like.shape, dtype=like.dtype))
        if self.default == GLOBAL:
            return like
        if self.default == 0:
            return torch.zeros(like.shape, dtype=like.dtype)
        return torch.full(like.shape, float(self.default), dtype=like.dtype)

    def load(self, view, cohort, device=None, names=None):
        """The rows of ``cohort`` (a cohort, or a list of client ids or other keys), stacked: name -> ``[K, *shape]``
        per model tensor (those of ``names`` only, if given), or one ``[K, *shape]``. On ``device`` (default: each
        template's own device; the view's for a single tensor)."""
        clients = list(getattr(cohort, "clients", cohort))
        out = {}
        for n, t in self.like(view).items():
            if names is not None and n not in names:
                continue
            dev = device if device is not None else (t.device if self.per_tensor else view.device)
            if clients:
                out[n] = view.store.gather(self.key(n), clients, lambda c, t=t: self.initial(c, t), dev)
            else:
                out[n] = torch.zeros((0, *t.shape), dtype=t.dtype, device=dev)
        return out if self.per_tensor else out[""]

    def save(self, view, cohort, values, skipped=None) -> None:
        """Keep ``values`` (as :meth:`load` returns them, rows in the cohort's order) for the cohort's clients; a
        client in ``skipped`` (default: the cohort's ``--on-diverge skip-client`` skips) keeps its old row.
        Collective under MPI."""
        clients = list(getattr(cohort, "clients", cohort))
        skipped = getattr(cohort, "skipped", ()) if skipped is None else skipped
        tables = {self.key(n): t for n, t in values.items()} if self.per_tensor else {self.key(): values}
        share(view, clients, tables, skipped, everywhere=self.everywhere)

    def get(self, view, key: int, tensor: str = "") -> torch.Tensor | None:
        """One client's (or key's) stored row of ``tensor``, or None."""
        return view.store.get(self.key(tensor), key)
