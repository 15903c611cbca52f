"""The parts a method is made of.

A named method is a preset of five parts:

=================  ==============================================================local step         how a client turns a
stochastic gradient into a step (SGD, FedProx, ...)
schedule           when each layer is synchronized (``fedcli.fl.schedules``)
codec              what a client uploads for a layer (identity, stochastic quantization, ...)
init               how a client's local model starts a round (overwrite with the global model, ALA, ...)
server             how the server turns the cohort average into the new global layer
=================  ==============================================================
Each part family has a registry; a new method overrides one part in one small file.
All state is held on the cohort as stacked tensors ``[K, *shape]`` (K clients on this process).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from fedcli import specs
from fedcli.errors import ConfigError
from fedcli.fl import slots
from fedcli.params import bind


class Classes(Mapping):
    """A family's parts by name -> their torch classes, from the specs (``fedcli.specs.PARTS``): a class's module is
    imported when the class is first asked for."""

    def __init__(self, family: str):
        self.family = family

    def __getitem__(self, name: str) -> type:
        return specs.PARTS[self.family][name].load()

    def __iter__(self):
        return iter(specs.PARTS[self.family])

    def __len__(self) -> int:
        return len(specs.PARTS[self.family])


LOCAL_STEPS, CODECS, INITS, SERVERS = (Classes(f) for f in ("local_step", "codec", "init", "server"))


def run_parts(algo: str, schedule: str = "", init: str = "") -> dict[str, type]:
    """The part classes of a run (``fedcli.specs.run_specs``: ``--schedule`` / ``--init`` overriding the method's
    own)."""
    return {kind: spec.load() for kind, spec in specs.run_specs(algo, schedule, init).items()}


class Part:
    """Base of every part: optional hooks around a round, declarations the engine reads, state for checkpoints.

    ``view`` is the part interface of the run (:class:`fedcli.fl.view.PartView`: the config, the layers, the global
    model, the client store, the batch plans, the cohort sums, the ledger, the trainer, ...), never the engine itself;
    ``cohort`` the stacked clients of this process. Every hook and declaration a part of any family may have is
    declared here or on its family's base (:class:`LocalStep`, :class:`Codec`, :class:`Init`, :class:`Server`,
    ``fedcli.fl.schedules.Schedule``) with its default, so the engine never probes for one. A part keeps what it
    computes for a round on itself (or, for a local step's optimizer state, in ``cohort.opt_state``); another part
    reads it only through a declared capability (``provides`` / ``offer``, :meth:`fedcli.fl.view.PartView.offered`).
    """

    # the name a run's label adds when this part replaces its preset's own ("FedProx + ALA"); None: nothing (declared
    # in the spec, ``PartSpec.label``, and copied here)
    label: str | None = None
    # the store prefix of each client's evaluated model (``fedcli.fl.personal``); None: the trained local model
    personal_prefix: str | None = None
    # the engine keeps each client's trained model after local training (ALA and FedPHP mix it next round)
    keeps_local_models: bool = False
    # why SGD momentum cannot outlive a round with this part (its round-end logic assumes a fresh buffer:
    # SCAFFOLD's control variates, FedNova's normalization); None: it can
    fresh_momentum_needed: str | None = None
    # declared in the part's spec (``fedcli.specs.PartSpec``) and copied here when the class is defined: the part needs
    # every client in every round (cross-silo: APPLE's and FedAMP's per-client downloads; the config refuses
    # --active-ratio below 1 for it), and what it offers the run's other parts ("vhat": the server shares a second
    # moment v_hat) and needs of them: family -> capability ({"server": "vhat"}). Checked once, with the config
    # (``fedcli.specs.check_method_config``), so no part tests another part's type.
    full_participation: bool = False
    provides: frozenset = frozenset()
    # the part's work beyond FedAvg's, in forward-backward passes (``fedcli.specs.Cost``), declared in its spec and
    # charged by the system model (``fedcli.fl.system``); the extra bytes it moves are its ledger records
    cost: specs.Cost = specs.NO_COST
    requires: dict = {}
    # each client's round reads and writes only its own state and the global model, nothing of the cohort as a whole,
    # so the engine may take a round's cohort in chunks of clients end to end (``fedcli.fl.chunked``, --cohort-chunk).
    # Read from the class itself, not inherited: a subclass that adds round logic says so again
    separable: bool = False

    # the part's spec (``fedcli.specs.PartSpec``, found when the class is defined: ``__init_subclass__``): the
    # options it reads (its ``Params`` and the general fields it ``uses``, with those of the spec it extends) and the
    # declarations above. The part is built with exactly those options (``self.opts``, ``fedcli.params.bind``),
    # from a config or from them.
    spec: specs.PartSpec | None = None

    def __init_subclass__(cls, **kwargs):
        """Bind the class to the spec that names it (``fedcli.specs.spec_of``), if one does: the spec is the only
        registration of the part. The class must extend the class of the spec's ``base`` (the nearest ancestor
        bound to a spec is bound to that one), checked here, once; it gets the spec's name and declarations. A
        class no spec names (a helper base, a test's subclass) stays its nearest bound ancestor's part."""
        super().__init_subclass__(**kwargs)
        impl = f"{cls.__module__}:{cls.__qualname__}"
        spec = specs.spec_of(impl)
        if spec is None:
            return
        ancestor = next((vars(k)["spec"] for k in cls.__mro__[1:] if vars(k).get("spec") is not None), None)
        if spec.base is not ancestor:
            raise TypeError(
                f"{impl}: its spec extends {spec.base.impl if spec.base else 'nothing'}, the class "
                f"{ancestor.impl if ancestor else 'no part with a spec'}"
            )
        cls.spec = spec
        if spec.name:
            cls.name = spec.name
        for attr in specs.DECLARATIONS:
            setattr(cls, attr, spec.declaration(attr))

    def __init__(self, opts):
        self.opts = bind(type(self), opts)

    def separable_now(self) -> bool:
        """Whether this run's options keep a ``separable`` part separable (SGD's momentum kept by cohort slot does
        not)."""
        return True

    def kept_state(self, view) -> int:
        """Bytes of state this part keeps in the client store (``fedcli.fl.store``) across rounds, at most, for the
        whole run (SGD's momentum by cohort slot: the cohort size x the parameters' bytes); 0: none. The store's
        memory-or-disk choice is made by it (``fedcli.fl.store.projection``). A declaration holds for the class that
        makes it: a subclass with round hooks of its own (``fedcli.fl.store.STATE_HOOKS``) that does not declare
        again counts as unknown (one model per client, the least a method with per-client state keeps)."""
        return 0

    def setup(self, view) -> None:
        """Once, when the simulation is set up (data, partition, model and all parts exist); also on resume."""

    def begin_round(self, view, cohort) -> None:
        pass

    def end_round(self, view, cohort) -> None:
        pass

    def local_layers(self, view) -> list[int]:
        """Layers this part keeps on the clients and never synchronizes (FedRep's head)."""
        return []

    def training_indices(self, view) -> list[torch.Tensor] | None:
        """Each client's training sample indices when this part holds some back (FedFomo's validation split), read
        by the engine right after this part's ``setup``; None: every training sample trains."""
        return None

    def personalize(self, view, client: int) -> tuple[dict, dict] | None:
        """(params, buffers) of ``client``'s evaluated model when this part computes it on demand (Per-FedAvg:
        one step from the global model); None: the model the store keeps under ``personal_prefix``."""
        return None

    def round_tables(self, view) -> dict[str, list[dict]]:
        """Rows this part recorded in the round just done, by run-directory CSV (``fedcli.results.rundir.PART_CSVS``):
        the root process's run log appends them after the round and the part forgets them (ALA's ``--ala-trace``).
        Called on the root only: gather the rows from every process in ``end_round``."""
        return {}

    def offer(self, capability: str, view, cohort):
        """What this part offers the run's other parts for ``capability`` (one of its ``provides``) this round, for
        ``cohort``: read by a part that requires it through ``view.offered(capability, cohort)``."""
        raise LookupError(f"{type(self).__name__} offers no {capability!r}")

    # the attributes this part keeps across rounds (tensors, numbers, None, lists and dicts of them, or a part it
    # wraps): the one way a part's own state reaches checkpoints and ``--resume`` (FedDyn's server: ``keeps = ("h",)``;
    # a subclass adds its own: ``keeps = Schedule.keeps + ("d",)``). Per-client state is a ``ClientState`` instead.
    keeps: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the part: its ``keeps`` attributes, detached copies on the CPU (a wrapped part:
        its own ``state_dict``)."""
        return {a: _saved(getattr(self, a)) for a in self.keeps}

    def load_state_dict(self, state: dict) -> None:
        """Resume what :meth:`state_dict` kept (an attribute the checkpoint lacks keeps its initial value)."""
        for a in self.keeps:
            if a not in state:
                continue
            if _wrapped(getattr(self, a, None)):
                getattr(self, a).load_state_dict(state[a])
            else:
                setattr(self, a, _copied(state[a], torch.clone))


def _wrapped(value) -> bool:
    """Whether ``value`` is a part (one that another wraps: ALA's base init), kept by its own ``keeps``."""
    return hasattr(value, "keeps") and callable(getattr(value, "state_dict", None))


def _saved(value):
    """``value`` as a checkpoint keeps it: tensors detached on the CPU, containers copied, a part by its state."""
    if _wrapped(value):
        return value.state_dict()
    return _copied(value, lambda t: t.detach().cpu())


def _copied(value, copy):
    """``value`` with ``copy`` applied to each tensor in it (a tensor, or a list or dict of them), containers copied."""
    if isinstance(value, torch.Tensor):
        return copy(value)
    if isinstance(value, dict):
        return {k: _copied(v, copy) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v, copy) for v in value]
    return value


class LocalStep(Part):
    """Local steps: how a client turns its mini-batch gradient into a step.

    The step hooks (``gradients``, ``step``) read the current local step from ``cohort.ctx``
    (:class:`fedcli.fl.cohort.StepContext`: round, step j, iteration, lr, active mask, mini-batches), which the engine
    sets before each step; no part keeps its own step counter."""

    def gradients(self, view, cohort, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor):
        """(grads name -> [K, ...], losses [K]) of this step's mini-batches ``x`` [K, B, ...] at the
        cohort's parameters; a method that differentiates another model (pFedMe's personalized model) overrides it."""
        return view.trainer.grads(cohort, x, y, mask)

    def fused_lr(self, lr: float, active: torch.Tensor | None) -> float | None:
        """``lr`` when this step is x <- x - lr * grad itself, so a trainer that fuses SGD (``Trainer.fuses_sgd``)
        may apply it right after each client's backward instead of returning the gradients; else None."""
        return None

    def step(self, cohort, grads: dict[str, torch.Tensor], lr: float, active: torch.Tensor | None = None) -> None:
        """One step for every client; ``active`` [K] bool freezes clients whose local work is done."""
        raise NotImplementedError


class Codec(Part):
    """Codecs: what a client uploads for a layer."""

    lossless: bool = False  # the decoded upload is the client's layer itself (the engine skips encoding)

    def bits(self, numel: int) -> float:
        """Bits per element of one upload of a layer of ``numel`` elements."""
        raise NotImplementedError

    def encode_decode(self, delta: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        """Decoded upload of the stacked layer update ``delta`` [K, ...]; ``generators[k]`` is keyed by
        (seed, round, client, step, layer)."""
        raise NotImplementedError


class Init(Part):
    """Local initializations: how a client's local model starts a round.

    Every round the engine calls, on every process, ``download`` (the server's side of sending the models) and right
    after it ``initialize``; ``received`` is a query any part may make after ``download``, as often as it likes."""

    # an init that wraps the method's own (ALA mixes what the method's init receives): built with ``base=`` (spec)
    wraps_base: bool = False

    def download(self, view, cohort) -> None:
        """Prepare what the server sends each cohort client this round, kept on the part for ``received``: the
        exchanges between processes (collective under MPI: every process calls it, with or without clients), the
        communication beyond the engine's one model download per client (``view.ledger``) and the server's per-client
        state. Once per round, before ``initialize``. Default: nothing (the server sends the global model)."""

    def received(self, view, cohort) -> dict[str, torch.Tensor]:
        """What the server sends each cohort client, as ``download`` prepared it: name -> ``[1, *shape]`` (the same for
        all: the global model, the default) or ``[K, *shape]`` (one per client: FedAMP's u_i, FedFomo's aggregates).
        A query: it communicates nothing and changes no state. ALA (``--init ala``) mixes it with the client's old
        local model in place of this part's own initialization."""
        return {n: g.unsqueeze(0) for n, g in view.global_params.items()}

    def initialize(self, view, cohort) -> None:
        raise NotImplementedError

    def starts_from_global(self, view) -> bool:
        """Whether every cohort client starts its round from the global model itself (Ditto's anchor and
        Per-FedAvg's adaptation then use the global model; otherwise the client's start model). Default: not known
        to."""
        return False

    @classmethod
    def learned_weights(cls, config: dict, numels: list[int]) -> int | None:
        """How many weights this init learns for each client, from a run's recorded config and its layers' sizes in
        parameter order (FedALA Tables 1 and 6 count ALA's); None: it learns none. Declared in the spec
        (``PartSpec.learned_weights``), which the report reads without this class."""
        return cls.spec.weights_learned(config, numels) if cls.spec is not None else None

    def mixes_received(self, view) -> bool:
        """Whether this init replaces what the server sends with a learned mix of it and the client's old model (ALA
        with layers to mix), so a method that rebuilds its model from the downloads (APPLE) has nothing for it."""
        return False


class Server(Part):
    """Server updates: how the server turns the cohort average into the new global layer."""

    def update(self, name: str, previous: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def upload_scale(self, cohort) -> torch.Tensor | None:
        """Per-client factor [K] applied to each client's update x_i - u before it is encoded and
        averaged (FedNova's normalization); ``None`` means 1 for every client (the plain average)."""
        return None


def flat_rows(t: torch.Tensor) -> torch.Tensor:
    """A stacked tensor [K, ...] as one flat row per client [K, numel]; K may be 0 (a process with no client in a
    round, as the system model's availability and deadline leave it), where ``reshape(K, -1)`` cannot infer -1."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))


def expand(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-client vector [K] shaped to broadcast against a stacked tensor [K, ...]."""
    return (
        v.view(-1, *([1] * (like.dim() - 1))).to(like.dtype)
        if v.dtype != torch.bool
        else v.view(-1, *([1] * (like.dim() - 1)))
    )


# ---------------------------------------------------------------------------- local steps
def decayed_tensors(layers, on: str) -> set[str] | None:
    """Names of the parameter tensors SGD's weight decay acts on; None for all of them.

    ``"kernels+final-bias"`` is the FedLAMA author code's Keras model: ``kernel_regularizer=l2(c)`` on every
    Conv2D/Dense and ``bias_regularizer=l2(c)`` on the final Dense only, so BatchNorm gamma/beta and every
    other bias are not decayed. Here: every ``kernel`` tensor (``fedcli.models.layers``) and the bias of the
    module that owns the last kernel in parameter order (the output layer).
    """
    if on == "all":
        return None
    if on != "kernels+final-bias":
        raise ValueError(f"unknown weight-decay target {on!r}")
    kernels = [li.name for li in layers if li.kind == "kernel"]
    names = set(kernels)
    if kernels:
        owner = kernels[-1].rpartition(".")[0]
        bias = f"{owner}.bias" if owner else "bias"
        names.update(li.name for li in layers if li.name == bias)
    return names


MOMENTUM = "sgd.momentum"  # store prefix of persisted momentum buffers (fedcli.fl.slots)


class SGDStep(LocalStep):
    """Mini-batch SGD with heavy-ball momentum and L2 weight decay, as ``torch.optim.SGD``.

    g <- grad + wd * x;  b <- g (first step) or mu * b + g;  x <- x - lr * b.

    Options that reproduce the FedLAMA author code's Keras ``SGD(momentum=0.9)`` with ``l2(1e-4)`` regularizers:

    - ``--weight-decay-on kernels+final-bias`` (:func:`decayed_tensors`) with ``--weight-decay 2e-4``: Keras
      adds l2(c) = c * sum(w^2) to the loss, a gradient 2c * w, on conv/dense kernels and the final dense bias.
    - ``--momentum-persist slot`` (``fedcli.fl.slots``): the buffers outlive the round, by cohort slot as the
      author's per-worker optimizers (``client``: by client). Without it (``none``) they are reset when a
      round starts (a fresh local optimizer). A stored buffer b continues as mu * b + g; a slot or client
      without one starts from b = 0, i.e. b = g, as torch and Keras do on their first step. Keras keeps
      v = mu v - lr g: the same steps while lr is constant; right after an lr decay Keras's v still carries
      the old lr (a documented difference, docs/fidelity-fedlama.md).
    """

    separable = True

    def __init__(self, opts):
        super().__init__(opts)
        p = self.opts
        self.momentum = p.momentum
        self.weight_decay = p.weight_decay
        self.decay_on = p.weight_decay_on
        self.persist = p.momentum_persist if p.momentum else "none"
        self.kept_momentum = slots.state(MOMENTUM, self.persist)  # zeros for a slot or client without one yet
        self.decayed: set[str] | None = None

    def separable_now(self) -> bool:
        return self.persist == "none"

    def setup(self, view) -> None:
        self.decayed = decayed_tensors(view.layers, self.decay_on)
        if self.persist != "none":
            others = view.declared("fresh_momentum_needed")  # the other parts' reasons (the server's: FedNova's)
            reasons = [
                r for r in (self.fresh_momentum_needed, *(r for f, r in others.items() if f != "local_step")) if r
            ]
            if not _chains_end_round(type(self)):
                reasons.append(f"its local step ({self.name}) does not keep SGD's round-end state")
            if reasons:
                raise ConfigError(
                    f"--momentum-persist {self.persist} cannot be used with --algo {self.opts.algo}: {reasons[0]}"
                )

    def kept_state(self, view) -> int:
        """The persisted momentum buffers (``--momentum-persist``): one per cohort slot (``slot``: the cohort size)
        or per client (``client``), each the size of the parameters; none otherwise."""
        keys = {"slot": view.n_active, "client": len(view.client_indices)}.get(self.persist, 0)
        return keys * sum(p.numel() * p.element_size() for p in view.global_params.values())

    def begin_round(self, view, cohort) -> None:
        cohort.opt_state = {}
        if self.persist != "none":
            bufs = slots.restore(view, cohort, self.kept_momentum, self.persist)
            cohort.opt_state["momentum"] = [bufs[n] for n in cohort.params]

    def end_round(self, view, cohort) -> None:
        if self.persist != "none" and "momentum" in cohort.opt_state:
            slots.keep(
                view, cohort, self.kept_momentum, self.persist, dict(zip(cohort.params, cohort.opt_state["momentum"]))
            )

    def fused_lr(self, lr: float, active: torch.Tensor | None) -> float | None:
        """``lr`` for plain SGD (no momentum, no weight decay, every client active, no subclass changing anything,
        so also not its gradients): ``LoopTrainer.grads(lr=...)`` then applies it; else None."""
        plain = type(self) is SGDStep and not self.momentum and not self.weight_decay and active is None
        return lr if plain else None

    def direction(self, cohort, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The gradient the optimizer follows: the loss gradient plus method-specific terms."""
        return grads

    @torch.no_grad()
    def step(self, cohort, grads: dict[str, torch.Tensor], lr: float, active: torch.Tensor | None = None) -> None:
        grads = self.direction(cohort, grads)
        names = list(cohort.params)
        params = [cohort.params[n] for n in names]
        g = [grads[n] for n in names]
        if active is not None:
            g = [t * expand(active, t) for t in g]
        if self.weight_decay:
            sel = [k for k, n in enumerate(names) if self.decayed is None or n in self.decayed]
            wd = [params[k] * expand(active, params[k]) if active is not None else params[k] for k in sel]
            decayed = torch._foreach_add([g[k] for k in sel], wd, alpha=self.weight_decay)
            g = list(g)
            for k, t in zip(sel, decayed):
                g[k] = t
        if self.momentum:
            bufs = cohort.opt_state.get("momentum")
            if bufs is None:
                bufs = [t.clone() for t in g]
                cohort.opt_state["momentum"] = bufs
            elif active is None:
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, g)
            else:
                for b, t in zip(bufs, g):
                    b.copy_(torch.where(expand(active, b), b * self.momentum + t, b))
            g = bufs if active is None else [b * expand(active, b) for b in bufs]
        self.apply(cohort, names, params, g, lr, active)

    def apply(
        self,
        cohort,
        names: list[str],
        params: list[torch.Tensor],
        g: list[torch.Tensor],
        lr: float,
        active: torch.Tensor | None,
    ) -> None:
        """x <- x - lr * g with the final direction g (zero for frozen clients); SCAFFOLD also accumulates it."""
        torch._foreach_add_(params, g, alpha=-lr)


def _chains_end_round(cls) -> bool:
    """Whether ``cls.end_round`` is SGDStep's (no subclass in between replaces it), so persisted momentum is saved."""
    for k in cls.__mro__:
        if k is SGDStep:
            return True
        if "end_round" in k.__dict__:
            return False
    return False


# ---------------------------------------------------------------------------- codecs
class IdentityCodec(Codec):
    """Full-precision upload: 32 bits per element, the client's layer as it is."""

    separable = True
    lossless = True

    def bits(self, numel: int) -> float:
        return 32.0

    def encode_decode(self, delta: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        return delta


# ---------------------------------------------------------------------------- local initialization
class OverwriteInit(Init):
    """FedAvg: every client of the cohort starts the round from the global model."""

    separable = True
    kept_state = Part.kept_state  # nothing kept across rounds

    def initialize(self, view, cohort) -> None:
        cohort.load_global(view.global_params, view.global_buffers)

    def starts_from_global(self, view) -> bool:
        return type(self).initialize is OverwriteInit.initialize  # a subclass with its own start: not the global one


# ---------------------------------------------------------------------------- server updates
class AverageServer(Server):
    """The new global layer is the (weighted) cohort average: u_l <- sum_i p_i x_l^i."""

    separable = True
    kept_state = Part.kept_state  # nothing kept across rounds

    def update(self, name: str, previous: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        return average
