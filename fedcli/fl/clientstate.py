"""Per-client state across rounds, declared once by the part that keeps it: FedJAX's ``client_init`` /
``client_final`` as one small typed object.

A part declares each state it keeps for its clients as a class attribute, with its shape and its default::

    class FedDynStep(SGDStep):
        grad_i = ClientState()          # one tensor per model parameter, shaped like it, zeros at first

and the engine does the rest: before the part's ``begin_round`` it sets ``self.grad_i`` to the cohort's rows
(name -> ``[K, *shape]``, stacked; the default for a client without a row yet; ``[0, *shape]`` rows for an empty
cohort), and after its ``end_round`` it keeps what ``self.grad_i`` then holds (assigned anew or changed in place) for
those clients (a client skipped by ``--on-diverge skip-client`` keeps its old row; collective under MPI) and drops the
attribute (:func:`open_round`, :func:`close_round`). FedJAX's ``client_init`` / ``client_final``, with nothing for the
method to call.

The store key is the part's name and the attribute's (``feddyn.grad_i``, and ``:tensor`` per model tensor), built
here, never by a method. Storage, MPI and disk are the store's (``fedcli.fl.store.publish``). A state a part reads
elsewhere than around a round (FedFomo's affinities, APPLE's p, for other clients or at evaluation) is a named
object with the same two calls, ``state.load(view, cohort)`` and ``state.save(view, cohort, values)``::

    P = ClientState("apple.p", shape=(n,), default=lambda client, like: like.fill_(1 / n))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Union

import torch

from fedcli.fl.store import publish

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

    ``name``: its key in the client store; empty for a class attribute, whose key is the part's name and the
    attribute's (``feddyn.grad_i``). ``shape``: :data:`PARAMS` or :data:`BUFFERS` (one tensor per model tensor, name ->
    ``[K, *shape]``) or a tuple
    (one tensor, ``[K, *shape]``, of ``dtype``). ``default``: a client's row before it has one: a number (a tensor
    full of it, the model tensor's dtype), :data:`GLOBAL` (the global tensor) or ``f(client, zeros)`` returning the
    row (``zeros`` a zero tensor of the row's shape and dtype). ``everywhere``: rows keyed by something that moves
    between processes even with full participation (cohort slots, ``fedcli.fl.slots``). ``sep``: what separates the
    name from a model tensor's name in the key (":"; the adaptive methods' "/" keeps their older runs resumable).
    """

    name: str = ""
    shape: str | tuple[int, ...] = PARAMS
    default: Default = 0.0
    dtype: torch.dtype = torch.float32
    everywhere: bool = False
    sep: str = ":"

    def __set_name__(self, owner, attr: str) -> None:
        """A class attribute of a part: the engine loads and saves it around each round (:func:`open_round`)."""
        object.__setattr__(self, "attr", attr)
        object.__setattr__(self, "owner", owner)

    @property
    def store_name(self) -> str:
        """``name``, or for a class attribute declared without one: ``part name.attribute``."""
        if self.name:
            return self.name
        owner = getattr(self, "owner", None)
        if owner is None:
            raise TypeError("a ClientState without a name must be a class attribute of a part")
        return f"{owner.name}.{self.attr}"

    def key(self, tensor: str = "") -> str:
        """The store key of the row of model tensor ``tensor`` (of the single tensor: the name)."""
        return f"{self.store_name}{self.sep}{tensor}" if self.per_tensor else self.store_name

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
        publish(view, clients, tables, skipped, everywhere=self.everywhere)

    def get(self, view, key: int, tensor: str = "") -> torch.Tensor | None:
        """One client's (or key's) stored row of ``tensor``, or None."""
        return view.store.get(self.key(tensor), key)


@cache
def declared(cls) -> tuple[tuple[str, ClientState], ...]:
    """(attribute, state) of every :class:`ClientState` class attribute of part class ``cls`` and its bases."""
    found: dict[str, ClientState] = {}
    for k in reversed(cls.__mro__):
        found.update({a: v for a, v in vars(k).items() if isinstance(v, ClientState)})
    return tuple(found.items())


def open_round(part, view, cohort) -> None:
    """The part's round begins for ``cohort``: each declared state's rows set as the part's attribute, the copies its
    cost declares each client downloads (``Cost.down``) recorded, then its ``begin_round`` (the engine's call;
    collective under MPI, as ``begin_round``)."""
    for attr, state in declared(type(part)):
        part.__dict__[attr] = state.load(view, cohort)
    if part.cost.down:
        view.ledger.record_transfer(view.n_active, down=part.cost.down)
    part.begin_round(view, cohort)


def close_round(part, view, cohort) -> None:
    """The part's round ends for ``cohort``: its ``end_round``, the copies its cost declares each client uploads
    (``Cost.up``) recorded, then each declared state's rows, as the attribute now holds them, kept for the cohort's
    clients (skipped clients keep theirs) and the attribute dropped."""
    part.end_round(view, cohort)
    if part.cost.up:
        view.ledger.record_transfer(view.n_active, up=part.cost.up)
    for attr, state in declared(type(part)):
        state.save(view, cohort, part.__dict__.pop(attr))
