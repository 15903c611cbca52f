"""The part interface: what a part of a method may read and call of the running experiment.

The engine (:class:`fedcli.fl.engine.Simulation`) passes every hook of every part (``fedcli.fl.parts.Part``: local
step, codec, init, server, schedule) a :class:`PartView` of itself, never itself. The view has the members listed in
:data:`MEMBERS`, and nothing else: a part cannot reach the engine's other state (its round loop, the round hooks,
the run directory, the other parts), so what a method depends on is written down here. Each member reads the
engine's current value (the client indices and sizes a part's ``training_indices`` set, the global model as the last
synchronization left it); the members that are data are read-only views where that is cheap (the layers and the
client indices are tuples, the sample counts a read-only numpy view, the local layers a frozenset). The global
model's name -> tensor tables are the engine's own dicts, updated in place at each synchronization: torch's
functional transforms and ``functional_call`` take plain dicts only, so they are not wrapped, and a part must not
write them (``tests/engine/test_part_interface.py`` checks that no part file assigns into them).

Another part is reached only through declared capabilities (``Part.provides`` / ``Part.requires``, checked with the
config in ``fedcli.specs.check_method_config``): :meth:`PartView.offered` returns what the part providing a
capability offers for a cohort (``Part.offer``: the v_hat a Fed-LAMB server shares with its clients), and
:meth:`starts_from_global`, :meth:`mixes_received` and :meth:`received` ask the run's init part its declared
questions (``fedcli.fl.parts.Init``).

Tests build one from keyword arguments with :meth:`PartView.fake` (only declared members are accepted).
"""

from __future__ import annotations

from types import SimpleNamespace

from fedcli.fl import sync, system

#: every member of the part interface, by kind (docs/method-contract.md, "The whole part interface")
DATA = (
    "seed",  # the run's --seed, which keys every random stream (fedcli.fl.rng); a part's own options
    # are its ``params``, bound when it is built (docs/method-contract.md)
    "layers",  # the model's layers (fedcli.models.layers.LayerInfo), in parameter order (tuple)
    "local_layers",  # indices of the layers the method keeps on the clients and never synchronizes (frozenset)
    "global_params",  # the global model: parameter name -> tensor (updated in place by the engine; read only)
    "global_buffers",  # the global model's buffers: name -> tensor (read only)
    "model",  # the model's module, for functional_call with stacked or per-client tensors (its own
    # parameters are not the global model)
    "device",  # this process's torch device
    "train_x",
    "train_y",  # the training samples (every client's, on the device), indexed by the batch plans
    "pad_fill",  # the padding value of the CIFAR augmentation (per channel), for batch plans with shifts
    "batch_size",  # the mini-batch size every part uses (--batch-size, clamped to the largest client)
    "drop_last",  # --drop-last: a client's incomplete last mini-batch of an epoch is dropped (epoch_steps)
    # each client's training sample indices (tuple of tensors; as the parts' training_indices left it)
    "client_indices",
    "sizes",  # each client's training sample count (read-only numpy array)
    "n_active",  # clients per round (the cohort size; with --system, the round's participants)
    "share",  # n_active / the number of clients: the round's share of the clients (|P_t| / m)
    "full_participation",  # every client takes part in every round (all sampled; --system leaves none out)
)
SERVICES = (
    "store",  # the client store: per-client state across rounds (through fedcli.fl.clientstate.ClientState)
    "comm",  # the communicator, for the collective exchanges of per-client state (allgather, ...)
    "ledger",  # the communication ledger: record_transfer for what a part sends beyond the model layers
    "trainer",  # the stacked trainer: grads(cohort, x, y, mask, ...) and eval_input
    "batches",  # the batch plans by purpose (fedcli.fl.cohort.BatchSource; None during setup)
)
CALLS = (
    "cohort_sum",  # cohort_sum(cohort, tensors, weights, skip=None): sum_i w_i x_i over the whole cohort, flat
    # (clients dropped by --on-diverge skip-client left out, unless ``skip`` says otherwise)
    "cohort_sums",  # cohort_sums(cohort, {name: [K, ...]}, weights): the same by name, one all-reduce
    "cohort_weights",  # cohort_weights(cohort_ids, clients): the aggregation weights p_i (--weighting)
    # client_steps(clients, default): each client's local steps in a round (--local-epochs, --system keep-partial)
    "client_steps",
    "run_plan",  # run_plan(): the run's rounds and local steps (fedcli.fl.budget.RunPlan)
)
CAPABILITIES = (
    "starts_from_global",  # starts_from_global(): the run's init starts every cohort client from the global model
    "mixes_received",  # mixes_received(): the run's init mixes what the server sends with the client's old model
    "received",  # received(cohort): what the server sends each cohort client (the init's Init.received)
    "provided",  # provided(capability): whether one of the run's parts provides it (Part.provides)
    "offered",  # offered(capability, cohort): what that part offers (Part.offer)
    "declared",  # declared(name): family -> each part's value of a declaration of the Part base
)
MEMBERS = DATA + SERVICES + CALLS + CAPABILITIES
# : data members computed from others (a fake view gets them from those: ``share`` from ``n_active`` and
# ``client_indices``)
DERIVED = ("share",)


class _Read:
    """A member of the view that is the engine's attribute of the same name, as it is now (``PartView`` below)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, view, owner=None):
        return self if view is None else getattr(view._src, self.name)


class PartView:
    """The part interface of one run (:data:`MEMBERS`); the engine builds it once, over itself."""

    __slots__ = ("_src", "_indices")

    def __init__(self, source):
        object.__setattr__(self, "_src", source)
        object.__setattr__(self, "_indices", (None, ()))

    def __setattr__(self, name, value):
        raise AttributeError(f"the part interface is read-only: {name} cannot be set")

    @classmethod
    def fake(cls, **members) -> "PartView":
        """A view over the given members only (tests): an undeclared name is refused, a member not given raises
        AttributeError when read. ``parts`` (family -> part) answers the capability questions."""
        unknown = sorted(set(members) - set(DATA + SERVICES + CALLS) - {"parts"})
        if unknown:
            raise TypeError(f"not members of the part interface: {', '.join(unknown)}")
        derived = sorted(set(members) & set(DERIVED))
        if derived:
            raise TypeError(f"computed from other members, not given: {', '.join(derived)}")
        members.setdefault("parts", {})
        if "n_active" in members:  # a round without the system model's plan (what ``n_active`` reads, below)
            members["system_round"] = None
        options = {k: members.pop(k) for k in ("seed", "drop_last") if k in members}
        if options:  # the engine's options they read (below)
            members["cfg"] = SimpleNamespace(**options)
        return cls(SimpleNamespace(**members))

    # ------------------------------------------------------------------ data
    @property
    def seed(self) -> int:
        return self._src.cfg.seed

    @property
    def drop_last(self) -> bool:
        return self._src.cfg.drop_last

    global_params = _Read()
    global_buffers = _Read()
    model = _Read()
    device = _Read()
    train_x = _Read()
    train_y = _Read()
    pad_fill = _Read()
    batch_size = _Read()

    @property
    def n_active(self) -> int:
        """Clients in the round: the sampled cohort's size, or with the system model (``--system``) the clients that
        take part in the round being run (what a part's extra transfers are counted for)."""
        plan = self._src.system_round
        return self._src.n_active if plan is None else len(plan.participants)

    @property
    def share(self) -> float:
        """The round's share of all clients, |P_t| / m: :attr:`n_active` over the number of clients."""
        return self.n_active / len(self._src.client_indices)

    full_participation = _Read()

    @property
    def layers(self) -> tuple:
        return tuple(self._src.layers)

    @property
    def local_layers(self) -> frozenset:
        return frozenset(self._src.local_layers)

    @property
    def client_indices(self) -> tuple:
        src = self._src.client_indices
        if self._indices[0] is not src:  # the engine replaced them (a part's training_indices): a new tuple
            object.__setattr__(self, "_indices", (src, tuple(src)))
        return self._indices[1]

    @property
    def sizes(self):
        sizes = self._src.sizes
        if hasattr(sizes, "flags"):  # numpy: a read-only view of the engine's array
            sizes = sizes.view()
            sizes.flags.writeable = False
        return sizes

    # ------------------------------------------------------------------ services
    store = _Read()
    comm = _Read()
    ledger = _Read()
    trainer = _Read()

    @property
    def batches(self):
        return getattr(self._src, "batches", None)

    # ------------------------------------------------------------------ calls
    def cohort_sum(self, cohort, tensors, weights, skip=None):
        """sum_i w_i x_i over the whole cohort, flat (``fedcli.fl.sync.cohort_sum`` over the run's communicator)."""
        return sync.cohort_sum(self._src.comm, cohort, tensors, weights, skip)

    def cohort_sums(self, cohort, stacked, weights, skip=None):
        """:meth:`cohort_sum` of named per-client tensors, one all-reduce (``fedcli.fl.sync.cohort_sums``)."""
        return sync.cohort_sums(self._src.comm, cohort, stacked, weights, skip)

    def cohort_weights(self, cohort_ids, clients):
        return self._src.cohort_weights(cohort_ids, clients)

    def client_steps(self, clients, default):
        """Each client's local steps in a round (``fedcli.fl.system.client_steps``: ``default``, --local-epochs, the
        system model's keep-partial), over the run's budget as the parts left the clients' data (``run_plan``)."""
        return system.client_steps(self._src.system_round, self._src.run_plan(), clients, default)

    def run_plan(self):
        return self._src.run_plan()

    # ------------------------------------------------------------------ capabilities
    def _init(self):
        return self._src.parts["init"]

    def starts_from_global(self) -> bool:
        """Whether the run's init starts every cohort client from the global model itself
        (``Init.starts_from_global``)."""
        return self._init().starts_from_global(self)

    def mixes_received(self) -> bool:
        """Whether the run's init mixes what the server sends with the client's old model (``Init.mixes_received``)."""
        return self._init().mixes_received(self)

    def received(self, cohort) -> dict:
        """What the server sends each cohort client this round (``Init.received``; after the init's ``download``)."""
        return self._init().received(self, cohort)

    def _provider(self, capability: str):
        return next((p for p in self._src.parts.values() if capability in p.provides), None)

    def provided(self, capability: str) -> bool:
        """Whether one of the run's parts provides ``capability`` (``Part.provides``)."""
        return self._provider(capability) is not None

    def offered(self, capability: str, cohort):
        """What the part that provides ``capability`` offers for ``cohort`` (``Part.offer``); a part that requires it
        (``Part.requires``) always finds it, the config check saw to that."""
        part = self._provider(capability)
        if part is None:
            raise LookupError(f"no part of this run provides {capability!r}")
        return part.offer(capability, self, cohort)

    def declared(self, name: str) -> dict:
        """family -> the value of declaration ``name`` of each of the run's parts (a class attribute declared on the
        ``Part`` base, such as ``fresh_momentum_needed``): what a part may know of the others, besides capabilities."""
        from fedcli.fl.parts import Part

        if name.startswith("_") or name not in vars(Part) or callable(vars(Part)[name]):
            raise AttributeError(f"{name!r} is not a declaration of the Part base")
        return {family: getattr(part, name) for family, part in self._src.parts.items()}
