"""Typed experiment configuration: the general fields here, each method's own in its spec; one TrainConfig.

Every config field is a ``fedcli train`` option (``--active-ratio``) and a recipe key (``active_ratio``). Each
field carries its help text and validation rule in its metadata (``fedcli.params.opt``), so the CLI, recipes and
validation cannot drift apart. The general fields (data, partition, model, schedule, optimizer, run) are
:class:`GeneralConfig`'s; a method's own hyperparameters are a params dataclass in its spec (``fedcli/specs/``),
registered with ``fedcli.params.register_params``. ``TrainConfig`` (both together) and ``FIELDS`` are assembled when
this module is imported, after the spec registries have loaded (``fedcli.specs.load``): nothing of torch is imported,
and a method file of your own is imported before this module (before ``fedcli.cli.main.main``), which neither
``fedcli.params`` nor ``fedcli.specs`` imports. Invalid values raise :class:`~fedcli.errors.ConfigError` (exit 2)
with one sentence and the key it is about (``ConfigError.key``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from fedcli import specs
from fedcli.errors import ConfigError
from fedcli.params import PARAMS, Open, current_names, group_rank, opt, repeatable

__all__ = ["GeneralConfig", "opt", "flag", "field_type", "coerce", "check_value", "with_method_defaults"]


@dataclass
class GeneralConfig:
    """The fields every method shares, and the validation of the whole config (the fields of TrainConfig)."""

    # what to run
    algo: str = opt("fedlama", "Method preset (see `fedcli train --list-algos`).", group="method")
    schedule: str = opt(
        "", "Override the method's aggregation schedule: periodic | lama | lama-accelerate.", group="method"
    )
    # data
    dataset: str = opt(
        "digits",
        "Dataset: digits, synthetic, mnist, fmnist, emnist, femnist, cifar10, cifar100, tinyimagenet, "
        "agnews; your own: imagefolder (--data-dir DIR of class folders) or tensors (--data-dir FILE.npz "
        "or FILE.pt).",
        group="data",
    )
    data_dir: str = opt(
        "",
        "Folder with the dataset in its standard on-disk layout (--dataset tensors: the .npz or .pt file).",
        group="data",
    )
    download: bool = opt(False, "Download through torchvision if missing (needs internet).", group="data")
    holdout_fraction: float = opt(
        0.0,
        "Hold out this stratified fraction of the train pool as the test set (uses the test split as the "
        "pool when only it is on disk).",
        lo=0.0,
        hi=Open(1.0),
        group="data",
    )
    val_fraction: float = opt(
        0.0,
        "Hold out this stratified fraction of the training pool as a validation set (keyed by --seed; "
        "never trained on): every evaluation also measures the global model on it (val_loss, val_acc). 0: "
        "none.",
        lo=0.0,
        hi=Open(1.0),
        group="data",
    )
    data_seed: int = opt(0, "Seed of generated datasets (synthetic).", lo=0, group="data")
    emnist_split: str = opt(
        "balanced",
        "EMNIST split.",
        choices=["balanced", "byclass", "bymerge", "digits", "letters", "mnist"],
        group="data",
    )
    synthetic_alpha: float = opt(1.0, "Synthetic(alpha, beta): model heterogeneity alpha.", lo=0.0, group="data")
    synthetic_beta: float = opt(1.0, "Synthetic(alpha, beta): data heterogeneity beta.", lo=0.0, group="data")
    synthetic_users: int = opt(
        30,
        "Synthetic: number of generated users (writers); each user's samples are generated on demand from "
        "a stream keyed by (--data-seed, user), so memory does not grow with it.",
        lo=1,
        group="data",
    )
    synthetic_dim: int = opt(60, "Synthetic: input dimension.", lo=1, group="data")
    synthetic_classes: int = opt(10, "Synthetic: number of classes.", lo=2, group="data")
    synthetic_iid: bool = opt(False, "Synthetic: the IID variant (one shared model for all users).", group="data")
    agnews_vocab_size: int = opt(
        0,
        "AG News: keep this many most frequent training words (0: the whole training vocabulary, as "
        "FedALA's reference).",
        lo=0,
        group="data",
    )
    agnews_max_len: int = opt(
        200, "AG News: token ids per text (truncated or padded at the end; FedALA/PFLlib: 200).", lo=1, group="data"
    )
    # partition
    clients: int = opt(16, "Number of clients.", lo=1, group="partition")
    partition: str = opt(
        "dirichlet",
        "Inline partition scheme.",
        choices=["iid", "dirichlet", "pathological", "natural"],
        group="partition",
    )
    partition_file: str = opt(
        "", "Use a partition written by `fedcli partition` instead of an inline one.", group="partition"
    )
    alpha: float = opt(
        0.5, "Dirichlet concentration over labels (smaller is more non-IID).", lo=Open(0.0), group="partition"
    )
    classes_per_client: int = opt(2, "Pathological: classes (label-sorted shards) per client.", lo=1, group="partition")
    writers_per_client: int = opt(2, "Natural: LEAF writers per client.", lo=1, group="partition")
    client_test_fraction: float = opt(
        0.0,
        "Fraction of each client's data held out as its local test split.",
        lo=0.0,
        hi=Open(1.0),
        group="partition",
    )
    client_test_split: str = opt(
        "fedcli",
        "How a client's local test split is drawn: fedcli (floor(F n) samples, at least 1, from a stream "
        "of the seed) or pfllib (PFLlib's train_test_split(train_size=1-F): n - floor((1-F) n) samples, "
        "drawn from numpy's legacy RandomState(seed), continuing the stream of --pathological-rule "
        "classes).",
        choices=["fedcli", "pfllib"],
        group="partition",
    )
    data_pool: str = opt(
        "train",
        "What the partition splits over the clients: the training split (its test split, or the "
        "--holdout-fraction part, is the global test set) or train+test (PFLlib's pipeline, FedALA's "
        "numbers: both splits merged into one pool; needs --client-test-fraction, and the global test set "
        "is then the union of the clients' local test splits).",
        choices=["train", "train+test"],
        group="partition",
    )
    pathological_rule: str = opt(
        "shards",
        "Pathological: shards (McMahan et al.: equal label-sorted shards, a client can hold 1 to 2K "
        "classes) or PFLlib's rule (classes: the classes dealt in order to the first clients with slots "
        "left, every client exactly --classes-per-client classes, random unbalanced amounts as FedALA's "
        "generation; classes-balanced: equal amounts).",
        choices=["shards", "classes", "classes-balanced"],
        group="partition",
    )
    client_val_fraction: float = opt(
        0.0,
        "Personalized methods: hold out this fraction of each client's training data as its own validation "
        "samples (floor(F n), at least 1, keyed by --seed and the client; never trained on): every "
        "evaluation also measures each client's model on them (personal_val_acc). 0: none.",
        lo=0.0,
        hi=Open(1.0),
        group="personalized",
    )
    personal_clients: str = opt(
        "all",
        "Personalized evaluation (personal_acc) over every client's model, or only the clients that "
        "trained in the evaluated round (cohort: FedALA Table 7's rho = 0.5*).",
        choices=["all", "cohort"],
        group="personalized",
    )
    min_size: int = opt(10, "Dirichlet: minimum samples per client (FedML's retry loop).", lo=1, group="partition")
    # model
    model: str = opt(
        "mlp",
        "Model: mlp, cnn4, femnist_cnn, lamb_cnn, resnet20, wrn, resnet18, resnet18-cifar (3x3 stem, no "
        "max-pool), fasttext; your own: package.module:Factory or path/to/file.py:Factory, called as "
        "Factory(input_shape, num_classes).",
        group="model",
    )
    wrn_depth: int = opt(28, "Wide-ResNet depth (6n+4).", lo=10, group="model")
    wrn_width: int = opt(10, "Wide-ResNet width factor.", lo=1, group="model")
    mlp_hidden: str = opt("200,200", "MLP hidden sizes, comma separated.", group="model")
    # federated schedule
    iterations: int = opt(
        600, "Budget in local iterations (each active client runs this many SGD steps in all).", lo=1, group="federated"
    )
    rounds: int = opt(
        0,
        "Budget in rounds instead of iterations (0: use --iterations); --eval-every then counts rounds.",
        lo=0,
        group="federated",
    )
    local_epochs: float = opt(
        0.0,
        "Local epochs per round instead of tau steps: client i runs ceil(E * n_i / batch) steps (0: off; "
        "periodic schedule only).",
        lo=0.0,
        group="federated",
    )
    drop_last: bool = opt(
        False,
        "Mini-batches as PyTorch's DataLoader(shuffle=True, drop_last=True), FedALA's training loader: "
        "every epoch is a fresh permutation cut into floor(n/B) full batches and its last n mod B samples "
        "go unused, so --local-epochs E runs E * floor(n/B) steps (default: ceil(E n / B) steps, batches "
        "running on across epochs).",
        group="federated",
    )
    tau: int = opt(
        5,
        "Aggregation interval tau (FedLAMA: the base interval tau').",
        lo=1,
        group="federated",
        search={"choices": [2, 5, 10, 20]},
    )
    active_ratio: float = opt(
        0.5, "Fraction of clients sampled into each round's cohort.", lo=Open(0.0), hi=1.0, group="federated"
    )
    weighting: str = opt(
        "uniform",
        "Average uniformly over the cohort (FedLAMA Alg. 2, author code) or by sample count p_i = n_i/n "
        "(ICLR version).",
        choices=["uniform", "samples"],
        group="federated",
    )
    bn_buffers: str = opt(
        "with-layer",
        "BatchNorm running statistics: averaged whenever their module's weight tensor is synchronized "
        "(with-layer), only at round ends when the whole model is (round-end), or never (the author code's "
        "FedLAMA: each cohort slot keeps its own, the global model is evaluated with slot 0's).",
        choices=["with-layer", "round-end", "never"],
        group="federated",
    )
    # local optimizer
    lr: float = opt(0.1, "Local learning rate.", lo=Open(0.0), group="optimizer", search={"log": [0.001, 1.0]})
    momentum: float = opt(
        0.0,
        "Local SGD heavy-ball momentum mu (b <- mu b + g; reset each round unless --momentum-persist).",
        lo=0.0,
        hi=Open(1.0),
        group="optimizer",
    )
    momentum_persist: str = opt(
        "none",
        "SGD momentum buffers across rounds: none (fresh each round), slot (kept by cohort position, as "
        "the author code's per-worker optimizers of FedLAMA/FedAvg) or client (kept by client).",
        choices=["none", "slot", "client"],
        group="optimizer",
    )
    weight_decay: float = opt(
        0.0,
        "Local weight decay: SGD adds it times w to the gradient (Keras l2(c) is 2c), the decoupled lambda "
        "of Fed-LAMB Eq. 3 for the adaptive local steps.",
        lo=0.0,
        group="optimizer",
        search={"choices": [0.0, 0.01, 0.1]},
    )
    weight_decay_on: str = opt(
        "all",
        "SGD weight decay on all parameter tensors, or on conv/dense kernels and the final dense layer's "
        "bias only (kernels+final-bias: the author code's Keras regularizers; BatchNorm and other biases "
        "undecayed).",
        choices=["all", "kernels+final-bias"],
        group="optimizer",
    )
    batch_size: int = opt(32, "Local mini-batch size.", lo=1, group="optimizer")
    warmup_iterations: int = opt(
        0, "Linear learning-rate warm-up over this many local iterations.", lo=0, group="optimizer"
    )
    lr_decay_at: str = opt(
        "",
        "Multiply the lr by --lr-decay-factor at these points, comma separated (in --lr-decay-unit).",
        group="optimizer",
    )
    lr_decay_factor: float = opt(0.1, "Step decay factor.", lo=Open(0.0), group="optimizer")
    lr_decay_unit: str = opt("iteration", "Unit of --lr-decay-at.", choices=["iteration", "round"], group="optimizer")
    server_lr: float = opt(
        1.0,
        "Server learning rate eta on the averaged update (fedcom, scaffold: u <- u + eta * mean update, 1 "
        "is the plain average; fedadam: Adam step size on it, its default 10^-2.5).",
        lo=Open(0.0),
        group="optimizer",
    )
    # personalized FL (each method's own options are in its file: fedcli/specs/<method>.py)
    init: str = opt(
        "",
        "Override the method's local initialization: overwrite | ala (ALA on any method; it is then "
        "evaluated on each client's local model, personal_acc).",
        group="personalized",
    )
    # run
    seed: int = opt(0, "Seed; all randomness is keyed by (seed, round, client).", lo=0, group="run")
    init_seed: int = opt(
        -1,
        "Seed of the initial model only (-1: --seed): runs of several --seed values with one --init-seed "
        "start from the same model and differ in everything else (Fed-LAMB: three runs from the same "
        "initialization).",
        lo=-1,
        group="run",
    )
    eval_every: int = opt(
        0,
        "Evaluate the global model at the first round end at or after every multiple of this many "
        "iterations (0: about 20 evaluations).",
        lo=0,
        group="run",
    )
    device: str = opt(
        "auto",
        "Device: cpu, cuda (each process takes GPU local-rank mod visible GPUs: MPI ranks by their "
        "node-local rank, --workers one each), cuda:K (GPU K on every process), or auto (cuda when "
        "available).",
        group="run",
    )
    trainer: str = opt(
        "auto",
        "Local-training path: vmap (stacked cohort under torch.func), loop (per-client), or auto (CPU: "
        "loop for convolutional models, vmap otherwise; CUDA: vmap).",
        choices=["auto", "vmap", "loop"],
        group="run",
    )
    precision: str = opt(
        "fp32",
        "Arithmetic of local training: fp32, or bf16 (the forward and backward passes in bfloat16 with "
        "fp32 master weights and optimizer state: the parameters, BatchNorm statistics and inputs are cast "
        "to bfloat16 inside the step, the gradients come back fp32; evaluations stay fp32). "
        "docs/gpu-speed.md.",
        choices=["fp32", "bf16"],
        group="run",
    )
    threads: int = opt(
        0,
        "Torch CPU threads per process (0: 1; parallelism comes from --workers, and two threads in one "
        "process collapse when another program holds a core).",
        lo=0,
        group="run",
    )
    workers: int = opt(
        0,
        "Worker processes that train shards of each round's cohort at the same time; results are the same "
        "for any number (0: auto, the physical cores when the run is long enough to pay for starting them, "
        "else 1).",
        lo=0,
        group="run",
    )
    out: str = opt("", "Run directory.", group="run")
    tracker: str = repeatable(
        "",
        "Also send the run to an experiment tracker: tensorboard, wandb or mlflow (repeat the flag, or a "
        "list in a recipe, for several); the CSVs stay the source of truth (docs/tracking.md).",
        group="run",
    )
    # scale (fedcli/fl/store.py, fedcli/fl/trainers.py)
    client_state: str = opt(
        "auto",
        "Where per-client state across rounds lives (personal models, optimizer moments, control "
        "variates): memory, disk (RUN_DIR/client-state: raw rows + CRC-32 index, only the clients of the "
        "round in memory), or auto (disk when the projected state exceeds --client-state-limit-mb).",
        choices=["auto", "memory", "disk"],
        group="scale",
    )
    client_state_limit_mb: int = opt(
        512,
        "--client-state auto: keep client state in memory while the state the run's parts keep (e.g. "
        "momentum per cohort slot: active clients x model size; personal models: clients x model size) is "
        "at most this many MiB, on disk beyond.",
        lo=0,
        group="scale",
    )
    client_state_keep: str = opt(
        "personal",
        "What RUN_DIR/client-state keeps once a run completes: personal (each client's personal model, "
        "where the method has one, with client-state/index.pt; everything else is removed) or none (the "
        "folder is removed).",
        choices=["personal", "none"],
        group="scale",
    )
    cohort_chunk: int = opt(
        0,
        "At most this many clients at a time, with the same results: a round whose method treats each "
        "client on its own (FedAvg, Ditto) is taken end to end in chunks (memory bounded by the chunk, not "
        "the cohort); otherwise the stacked (vmap) trainer's vectorized call is chunked (0: the whole "
        "cohort on the CPU; on CUDA as many as fit in 80% of the free memory).",
        lo=0,
        group="scale",
    )
    client_cache_mb: int = opt(
        64,
        "--client-state disk: MiB of recently used client rows kept in memory on each node, shared evenly "
        "by the node's processes (MPI ranks, --workers).",
        lo=0,
        group="scale",
    )
    # crash safety (fedcli/results/checkpoint.py, signals.py, resume.py)
    checkpoint_every: int = opt(
        10,
        "Write a checkpoint (RUN_DIR/checkpoints/) every this many rounds, and on SIGINT/SIGTERM (0: only "
        "on a signal).",
        lo=0,
        group="crash safety",
    )
    keep_checkpoints: int = opt(2, "Keep the last this many checkpoints.", lo=1, group="crash safety")
    diverge_factor: float = opt(
        100.0,
        "A finite blow-up is divergence too: stop (exit 4) when an evaluation's train loss, or its test "
        "loss at two evaluations in a row, exceeds this many times ln(classes), the loss of a uniform "
        "guess (0: off; a run stopped so is reported as diverged).",
        lo=0.0,
        group="crash safety",
    )
    on_diverge: str = opt(
        "stop",
        "A client's non-finite loss or update: stop (exit 4, naming round and client) or skip-client (drop "
        "its update for the round, renormalize the others, record it in skipped.csv).",
        choices=["stop", "skip-client"],
        group="crash safety",
    )

    # ------------------------------------------------------------------
    def validate(self) -> "TrainConfig":
        """Check types and ranges of every field; raise ConfigError naming the first bad key."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            check_value(f, value)
        specs.check_method_config(self)  # the registries' rules (the method's name first: FedLAMA -> fedlama)
        self.hidden_sizes()
        self.decay_points()
        if self.tracker:
            from fedcli.specs.trackers import check_trackers  # the trackers' declarations, torch-free (no tracker code)

            self.tracker = ",".join(check_trackers(self.tracker))
        for params in PARAMS:  # rules a method's params class keeps for its own fields
            if "check" in vars(params):
                params.check(self)
        self.check_cross_field()
        return self

    def check_cross_field(self) -> None:
        """Rules between fields (issue 5); each error names its key (``ConfigError.key``) for recipe lines."""
        import re

        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ConfigError(
                f"--device {self.device!r}: expected cpu, cuda, cuda:K (a GPU index) or auto", key="device"
            )
        if self.data_pool == "train+test" and not self.client_test_fraction and not self.partition_file:
            raise ConfigError(
                "--data-pool train+test leaves no global test set of its own: give --client-test-fraction "
                "(FedALA/PFLlib: 0.25), whose local test splits together are then the global test set",
                key="data_pool",
            )
        if not self.partition_file and self.active_ratio * self.clients < 0.5:
            raise ConfigError(
                f"--active-ratio {self.active_ratio} of --clients {self.clients} is "
                f"{self.active_ratio * self.clients:.3g} "
                f"clients per round; use at least {1 / self.clients:.4g} (one client)",
                key="active_ratio",
            )

    def model_seed(self) -> int:
        """The seed of the initial model: ``--init-seed``, or ``--seed`` when it is -1 (the default)."""
        return self.seed if self.init_seed < 0 else self.init_seed

    def hidden_sizes(self) -> tuple[int, ...]:
        try:
            sizes = tuple(int(s) for s in self.mlp_hidden.split(",") if s.strip())
        except ValueError:
            sizes = (0,)
        if any(s < 1 for s in sizes):
            raise ConfigError(
                f"--mlp-hidden must be comma-separated positive integers, got '{self.mlp_hidden}'", key="mlp_hidden"
            )
        return sizes

    def decay_points(self) -> tuple[int, ...]:
        try:
            pts = tuple(sorted(int(s) for s in str(self.lr_decay_at).split(",") if s.strip()))
        except ValueError:
            pts = (-1,)
        if any(p < 0 for p in pts):
            raise ConfigError(
                f"--lr-decay-at must be comma-separated non-negative integers, got '{self.lr_decay_at}'",
                key="lr_decay_at",
            )
        return pts

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> "TrainConfig":
        """Build from a mapping (recipe or manifest); unknown keys and wrong types raise ConfigError."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in current_names(values).items():  # a manifest written before a field's rename
            k = key.replace("-", "_")
            if k not in known:
                raise ConfigError(f"{where}: unknown key '{key}'", key=k)
            kwargs[k] = coerce(known[k], value, where)
        return cls(**kwargs)


def _assemble() -> type:
    """TrainConfig: GeneralConfig's fields, then each registered params class's (a subclass of all of them, so a
    part can also take ``cfg`` as its own params class)."""
    general = {f.name for f in dataclasses.fields(GeneralConfig)}
    for params in PARAMS:
        for f in dataclasses.fields(params):
            if f.name in general:
                raise TypeError(
                    f"{params.__qualname__}.{f.name}: the option is already a general field of fedcli/config.py"
                )
    # reversed: the dataclass collects fields from the last base of the MRO to the first
    cls = dataclass(
        type(
            "TrainConfig",
            (*reversed(PARAMS), GeneralConfig),
            {
                "__module__": __name__,
                "__qualname__": "TrainConfig",
                "__doc__": "One experiment. Defaults run a small real FedLAMA experiment offline (scikit-learn "
                "digits).",
            },
        )
    )
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        """The dataclass's ``__init__``; a field's old name (``fedcli.params.RENAMED``: a sweep folder's stored
        configs, a caller's keyword) is the field."""
        init(self, *args, **current_names(kwargs))

    cls.__init__ = __init__
    return cls


specs.load()  # every spec module of fedcli: their params classes register before TrainConfig is made of them
#: the config of one run: :class:`GeneralConfig` and every registered params class (fedcli's specs, and a method file
#: of your own imported before this module)
TrainConfig = _assemble()
#: every config field by name, in ``--help`` order (panels as ``fedcli.params.GROUPS``)
FIELDS = {f.name: f for f in sorted(dataclasses.fields(TrainConfig), key=group_rank)}


def with_method_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (recipe keys and flags) completed with the chosen method's defaults for the keys they do
    not set: an explicit value always wins. An explicit ``tau`` (local steps per round) also wins over a default
    number of local epochs, which would otherwise replace it. An unknown method is left for validation to report."""
    from fedcli.method_names import resolve_method

    values = dict(values)
    try:
        algo = resolve_method(values.get("algo", GeneralConfig.algo), specs.method_labels())
    except ConfigError:
        return values
    if "algo" in values:
        values["algo"] = algo  # the registered name: FedLAMA -> fedlama
    defaults = specs.METHODS[algo].effective_defaults()
    if "tau" in values and "local_epochs" not in values:
        defaults.pop("local_epochs", None)
    return {**defaults, **values}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def field_type(f) -> type:
    return {"str": str, "int": int, "float": float, "bool": bool}[
        f.type if isinstance(f.type, str) else f.type.__name__
    ]


def coerce(f, value, where: str = "config"):
    """Convert a recipe/manifest value to the field's type, strictly (no bool for int, no lossy float->int)."""
    t = field_type(f)
    ok = False
    if t is bool:
        ok = isinstance(value, bool)
    elif t is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif t is str:
        if isinstance(value, list) and all(isinstance(v, (int, str)) for v in value):
            value, ok = ",".join(str(v) for v in value), True
        else:
            ok = isinstance(value, str)
    if not ok:
        raise ConfigError(
            f"{where}: key '{f.name}' must be {t.__name__}, got {type(value).__name__} {value!r}", key=f.name
        )
    return value


def check_value(f, value) -> None:
    m = f.metadata
    name = flag(f.name)
    t = field_type(f)
    if t is float and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value}", key=f.name)
    if m.get("choices") and value not in m["choices"]:
        raise ConfigError(f"{name} must be one of {', '.join(m['choices'])}, got '{value}'", key=f.name)
    lo, hi = m.get("lo"), m.get("hi")
    if lo is not None and (value < lo or (m["lo_open"] and value == lo)):
        raise ConfigError(f"{name} must be {'>' if m['lo_open'] else '>='} {lo}, got {value}", key=f.name)
    if hi is not None and (value > hi or (m["hi_open"] and value == hi)):
        raise ConfigError(f"{name} must be {'<' if m['hi_open'] else '<='} {hi}, got {value}", key=f.name)
