"""The engine's declared contexts: what a helper module may read of the running experiment.

As a part sees the run only through :class:`fedcli.fl.view.PartView`, no function outside ``fedcli/fl/engine.py``
takes the engine (``Simulation``) itself: each helper gets the context of its job, a read-only object with the
members its class lists in ``MEMBERS`` and nothing else (reading another name raises AttributeError). Each member
reads the engine's attribute of the same name as it is now. ``tests/engine/test_engine_context.py`` checks, on the
syntax tree, that no function outside the engine has a parameter ``sim`` or a ``Simulation`` annotation and that each
helper module reads only the members of its context (docs/architecture.md, "The engine and its contexts").

Tests build one from keyword arguments with ``fake`` (only declared members are accepted).
"""

from __future__ import annotations

from types import SimpleNamespace


class Context:
    """A read-only view of the engine's members listed in ``MEMBERS`` (a subclass per job)."""

    MEMBERS: tuple[str, ...] = ()
    __slots__ = ("_src",)

    def __init__(self, source):
        object.__setattr__(self, "_src", source)

    def __getattr__(self, name):
        if name in type(self).MEMBERS:
            return getattr(self._src, name)
        raise AttributeError(f"{name} is not a member of {type(self).__name__} ({', '.join(type(self).MEMBERS)})")

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only: {name} cannot be set")

    @classmethod
    def fake(cls, **members) -> Context:
        """A context over the given members only (tests): an undeclared name is refused, a member not given raises
        AttributeError when read."""
        unknown = sorted(set(members) - set(cls.MEMBERS))
        if unknown:
            raise TypeError(f"not members of {cls.__name__}: {', '.join(unknown)}")
        return cls(SimpleNamespace(**members))


class SyncContext(Context):
    """A synchronization's averaging (``fedcli.fl.sync``) and a chunked round's sum of it (``fedcli.fl.chunked``)."""

    MEMBERS = (
        "cfg",  # the run's options (--bn-buffers, --seed, --cohort-chunk, --on-diverge)
        "comm",  # the communicator: the chunked round's all-reduce
        "layers",  # the model's layers (LayerInfo)
        "sync_buffers",  # layer -> the float buffers that travel with it
        "global_params",  # the global model, updated in place
        "global_buffers",
        "server",  # the server part (upload_scale, update)
        "codec",  # the codec part (lossless, encode_decode, bits)
        "ledger",  # the communication ledger (record_sync)
        "parts",  # the run's parts by family (may a round be chunked)
        "sizes",  # each client's training sample count (the processes' shares of a cohort)
        "chunk_blocker",  # why rounds are not taken chunk by chunk, or None
    )


class GuardContext(Context):
    """The divergence guard (``fedcli.fl.guard``)."""

    MEMBERS = (
        "cfg",  # --on-diverge, --diverge-factor
        "comm",  # the gather of the non-finite codes, the cohort sums (fedcli.fl.sync.cohort_sum)
        "device",
        "dataset",  # its number of classes (the blow-up rule's ln C)
        "global_params",  # what a skipped client is reset to
        "global_buffers",
        "record",  # the round's metrics row
        "store",  # the client store (a skipped client's non-finite state forgotten)
        "cohort_weights",  # cohort_weights(cohort_ids, clients)
    )


class StoreContext(Context):
    """The client store's and the personalization's set-up (``fedcli.fl.store``, ``fedcli.fl.personal``)."""

    MEMBERS = (
        "cfg",  # --client-state-limit-mb, --bn-buffers, --personal-eval, ...
        "comm",
        "method",  # the method's spec (personalized)
        "parts",  # the run's parts by family
        "view",  # the part interface, for the parts' declarations
        "partition",  # each client's local test (and validation) split
        "n_active",  # clients per round
        "client_indices",  # each client's training indices
        "global_params",  # the global model, for the size of per-client copies
        "global_buffers",
    )


class SystemContext(Context):
    """What the system model measures of the run (``fedcli.fl.system.measure`` / ``build``)."""

    MEMBERS = (
        "cfg",  # the system options (bound once: SystemParams), --drop-last
        "model",
        "train_x",  # the forward FLOPs of one sample
        "layers",  # each layer's size
        "codec",  # bits per uploaded value
        "init",  # an init wrapping the method's own (its work counted too)
        "parts",  # the parts' declared costs
        "partition",  # each client's training split
        "sizes",  # each client's training samples (as the parts left them)
        "batch_size",
        "client_indices",  # the number of clients
        "n_active",  # clients per round
        "plan",  # the run's budget (RunPlan): the first round's steps
        "sync_plan",  # sync_plan(steps): the synchronizations of a round
    )


class EvalContext(Context):
    """An evaluation point (``fedcli.fl.evaluation.evaluate_and_log``)."""

    MEMBERS = (
        "cfg",
        "comm",
        "model",  # the model's module, called with the global model's tensors
        "global_params",
        "global_buffers",  # the global model
        "trainer",  # its eval_input (the layout the trainer trains in)
        "test_x",
        "test_y",  # the test set
        "val_x",
        "val_y",  # the validation set (--val-fraction), or None
        "personal",  # the personalization (each client's own model evaluated), or None
        "view",  # the part interface, for the personalization
        "ledger",  # what was communicated so far
        "system",  # the system model, or None (sim_time_s)
        "eval_every",
        "progress_point",  # the evaluation interval; progress_point(state): where points are counted
        "record",  # what the round produced: its metrics row is set here
        "progress",  # called with each metrics row, or None
    )


class ManifestContext(Context):
    """What the manifest records of a set-up run (``fedcli.fl.build.manifest``)."""

    MEMBERS = (
        "cfg",
        "comm",
        "device",
        "method",
        "part_names",  # the method's spec and its parts' names
        "schedule",
        "init",  # what a report asks of the parts (layerwise, learned_weights)
        "layers",  # the model's size
        "trainer",
        "chunk_blocker",  # how the cohort is trained (--cohort-chunk)
        "dataset",
        "partition",
        "client_indices",
        "n_active",
        "batch_size",
        "eval_every",
        "planned_evaluations",  # the evaluation interval, the rows a complete run writes
        "store",  # the client store's plan (its info)
        "system",
        "timing",  # the system model and the re-timing records, or None
    )


class LogContext(Context):
    """The run's records as training goes: the CSV writers (``fedcli.results.runlog``), the trackers
    (``fedcli.trackers.hook``), a reopened run directory (``fedcli.results.resume``), the progress display."""

    MEMBERS = (
        "cfg",
        "comm",
        "layers",  # the model's layers
        "local_layers",  # layers the method never synchronizes
        "ledger",  # the communication counts
        "schedule",  # the schedule part (intervals, eligibility, needs_discrepancy)
        "parts",  # the run's parts (the rows they record)
        "part_names",  # family -> part name
        "personal",  # the personalization (its per-client rows), or None
        "system",  # the system model, or None
        "record",  # what the last round produced (RoundRecord)
        "view",  # the part interface, for the parts' round tables
        "plan",  # the run's budget (the progress display's total)
    )


class CheckpointContext(Context):
    """Checkpoints and the stop signals (``fedcli.results.checkpoint``, ``fedcli.results.signals``)."""

    MEMBERS = (
        "cfg",
        "comm",
        "model",  # its state_dict's names (model.pt)
        "global_params",  # the global model, saved and restored in place
        "global_buffers",
        "schedule",  # its state_dict
        "ledger",  # its counts
        "parts",  # each part's state_dict
        "store",  # the client store's state
        "run_dir",  # the CSVs' positions
        "done",  # done(state): the run's budget is spent
    )


class DriverContext(Context):
    """What the runner (``fedcli.runner``) does with a set-up engine: describe it, hook it, run it, close it."""

    MEMBERS = (
        "cfg",
        "comm",
        "device",
        "partition",
        "schedule",
        "store",
        "client_indices",
        "n_active",
        "batch_size",
        "notes",  # what setup says once (a clamped --batch-size)
        "manifest",  # manifest(): the run directory's manifest
        "choices",  # choices(): what the run chose once it ran
        "personal_tables",  # personal_tables(): the store prefixes of the personal models
        "attach",  # attach(run_dir, writers)
        "add_round_hook",  # add_round_hook(hook)
        "add_step_hook",  # add_step_hook(fn): fn(ctx, state) after every local step
        "run",  # run(state, progress): the rounds
        "context",  # context(cls): another of these contexts, for the results modules
    )
