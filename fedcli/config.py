"""Typed experiment configuration: one dataclass, shared by CLI flags and TOML recipes.

Every field of :class:`TrainConfig` is a ``fedcli train`` option (``--active-ratio``) and a recipe
key (``active_ratio``). Each field carries its help text and validation rule in its metadata, so the
CLI, recipes and validation cannot drift apart. Invalid values raise :class:`~fedcli.errors.ConfigError`
(exit 2) with one sentence naming the key.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from fedcli.errors import ConfigError


def opt(default, help: str, *, choices=None, lo=None, hi=None, lo_open=False, hi_open=False, group="general"):
    """A config field with its CLI help and its validation rule (closed or open bounds, or choices)."""
    return field(
        default=default,
        metadata={
            "help": help,
            "choices": choices,
            "lo": lo,
            "hi": hi,
            "lo_open": lo_open,
            "hi_open": hi_open,
            "group": group,
        },
    )


@dataclass
class TrainConfig:
    """One experiment. Defaults run a small real FedLAMA experiment offline (scikit-learn digits)."""

    # what to run
    algo: str = opt("fedlama", "Method preset (see `fedcli train --list-algos`).", group="method")
    schedule: str = opt("", "Override the method's aggregation schedule: periodic | lama | lama-accelerate.", group="method")
    # data
    dataset: str = opt("digits", "Dataset: digits, synthetic, mnist, fmnist, emnist, femnist, cifar10, cifar100, tinyimagenet, agnews; your own: imagefolder (--data-dir DIR of class folders) or tensors (--data-dir FILE.npz or FILE.pt).", group="data")
    data_dir: str = opt("", "Folder with the dataset in its standard on-disk layout (--dataset tensors: the .npz or .pt file).", group="data")
    download: bool = opt(False, "Download through torchvision if missing (needs internet).", group="data")
    holdout_fraction: float = opt(0.0, "Hold out this stratified fraction of the train pool as the test set (uses the test split as the pool when only it is on disk).", lo=0.0, hi=1.0, hi_open=True, group="data")
    data_seed: int = opt(0, "Seed of generated datasets (synthetic).", lo=0, group="data")
    emnist_split: str = opt("balanced", "EMNIST split.", choices=["balanced", "byclass", "bymerge", "digits", "letters", "mnist"], group="data")
    synthetic_alpha: float = opt(1.0, "Synthetic(alpha, beta): model heterogeneity alpha.", lo=0.0, group="data")
    synthetic_beta: float = opt(1.0, "Synthetic(alpha, beta): data heterogeneity beta.", lo=0.0, group="data")
    synthetic_users: int = opt(30, "Synthetic: number of generated users (writers).", lo=1, group="data")
    synthetic_dim: int = opt(60, "Synthetic: input dimension.", lo=1, group="data")
    synthetic_classes: int = opt(10, "Synthetic: number of classes.", lo=2, group="data")
    synthetic_iid: bool = opt(False, "Synthetic: the IID variant (one shared model for all users).", group="data")
    agnews_vocab_size: int = opt(0, "AG News: keep this many most frequent training words (0: the whole training vocabulary, as FedALA's reference).", lo=0, group="data")
    agnews_max_len: int = opt(200, "AG News: token ids per text (truncated or padded at the end; FedALA/PFLlib: 200).", lo=1, group="data")
    # partition
    clients: int = opt(16, "Number of clients.", lo=1, group="partition")
    partition: str = opt("dirichlet", "Inline partition scheme.", choices=["iid", "dirichlet", "pathological", "natural"], group="partition")
    partition_file: str = opt("", "Use a partition written by `fedcli partition` instead of an inline one.", group="partition")
    alpha: float = opt(0.5, "Dirichlet concentration over labels (smaller is more non-IID).", lo=0.0, lo_open=True, group="partition")
    classes_per_client: int = opt(2, "Pathological: classes (label-sorted shards) per client.", lo=1, group="partition")
    writers_per_client: int = opt(2, "Natural: LEAF writers per client.", lo=1, group="partition")
    client_test_fraction: float = opt(0.0, "Fraction of each client's data held out as its local test split.", lo=0.0, hi=1.0, hi_open=True, group="partition")
    personal_clients: str = opt("all", "Personalized evaluation (personal_acc) over every client's model, or only the clients that trained in the evaluated round (cohort: FedALA Table 7's rho = 0.5*).", choices=["all", "cohort"], group="personalized")
    min_size: int = opt(10, "Dirichlet: minimum samples per client (FedML's retry loop).", lo=1, group="partition")
    # model
    model: str = opt("mlp", "Model: mlp, cnn4, femnist_cnn, lamb_cnn, resnet20, wrn, resnet18, fasttext; your own: package.module:Factory or path/to/file.py:Factory, called as Factory(input_shape, num_classes).", group="model")
    wrn_depth: int = opt(28, "Wide-ResNet depth (6n+4).", lo=10, group="model")
    wrn_width: int = opt(10, "Wide-ResNet width factor.", lo=1, group="model")
    mlp_hidden: str = opt("200,200", "MLP hidden sizes, comma separated.", group="model")
    # federated schedule
    iterations: int = opt(600, "Budget in local iterations (each active client runs this many SGD steps in all).", lo=1, group="federated")
    rounds: int = opt(0, "Budget in rounds instead of iterations (0: use --iterations); --eval-every then counts rounds.", lo=0, group="federated")
    local_epochs: float = opt(0.0, "Local epochs per round instead of tau steps: client i runs ceil(E * n_i / batch) steps (0: off; periodic schedule only).", lo=0.0, group="federated")
    drop_last: bool = opt(False, "Mini-batches as PyTorch's DataLoader(shuffle=True, drop_last=True), FedALA's training loader: every epoch is a fresh permutation cut into floor(n/B) full batches and its last n mod B samples go unused, so --local-epochs E runs E * floor(n/B) steps (default: ceil(E n / B) steps, batches running on across epochs).", group="federated")
    tau: int = opt(5, "Aggregation interval tau (FedLAMA: the base interval tau').", lo=1, group="federated")
    phi: int = opt(2, "FedLAMA interval increase factor phi (phi=1 is FedAvg); lama-accelerate: the critical layers' interval is tau // phi.", lo=1, group="federated")
    active_ratio: float = opt(0.5, "Fraction of clients sampled into each round's cohort.", lo=0.0, hi=1.0, lo_open=True, group="federated")
    weighting: str = opt("uniform", "Average uniformly over the cohort (FedLAMA Alg. 2, author code) or by sample count p_i = n_i/n (ICLR version).", choices=["uniform", "samples"], group="federated")
    lama_rule: str = opt("reference", "FedLAMA Algorithm 1: 'reference' (the author code, default: walking the layers by increasing d, each gets phi*tau' until the first one with 1 - lambda_l < delta_l, which gets it too) or 'paper' (the text: phi*tau' iff delta_l < 1 - lambda_l). See docs/fidelity-fedlama.md.", choices=["reference", "paper"], group="federated")
    lama_eligible: str = opt("kernels", "FedLAMA: layers that may get the long interval: kernels (the author code, default: conv/dense weights; lambda over their elements, the delta denominator over all tensors) or all (the paper text).", choices=["kernels", "all"], group="federated")
    lama_first_adjust: int = opt(6, "FedLAMA: adjust the intervals only at round ends after more than this many times tau' local iterations (the author code's 'epoch > 5': 6, default; 0: at every round end).", lo=0, group="federated")
    bn_buffers: str = opt("with-layer", "BatchNorm running statistics: averaged whenever their module's weight tensor is synchronized (with-layer), only at round ends when the whole model is (round-end), or never (the author code's FedLAMA: each cohort slot keeps its own, the global model is evaluated with slot 0's).", choices=["with-layer", "round-end", "never"], group="federated")
    # options of the FedLAMA comparison methods (fedprox, fedpaq, fedcom; fedcli/fl/parts_prox.py, fedcli/fl/codecs.py)
    mu: float = opt(0.01, "FedProx proximal coefficient mu: the local gradient gets mu * (x - u), u the layer's last synchronized global value (AAAI Table 4 uses 0.001; 0 is FedAvg).", lo=0.0, group="method")
    feddyn_alpha: float = opt(0.1, "FedDyn: coefficient alpha of the dynamic regularizer (alpha/2)||theta - theta^{t-1}||^2 and of the server state h (Acar et al. 2021 report 0.1, 0.01, 0.001).", lo=0.0, lo_open=True, group="method")
    quant_levels: int = opt(16, "FedPAQ/FedCOM: levels s of the stochastic uniform (QSGD) quantizer of each client's layer update, on |v|/||v|| (the paper's compression level 16); 0: no quantization.", lo=0, group="method")
    # local optimizer
    lr: float = opt(0.1, "Local learning rate.", lo=0.0, lo_open=True, group="optimizer")
    momentum: float = opt(0.0, "Local SGD heavy-ball momentum mu (b <- mu b + g; reset each round unless --momentum-persist).", lo=0.0, hi=1.0, hi_open=True, group="optimizer")
    momentum_persist: str = opt("none", "SGD momentum buffers across rounds: none (fresh each round), slot (kept by cohort position, as the author code's per-worker optimizers of FedLAMA/FedAvg) or client (kept by client).", choices=["none", "slot", "client"], group="optimizer")
    weight_decay: float = opt(0.0, "Local weight decay: SGD adds it times w to the gradient (Keras l2(c) is 2c), the decoupled lambda of Fed-LAMB Eq. 3 for the adaptive local steps.", lo=0.0, group="optimizer")
    weight_decay_on: str = opt("all", "SGD weight decay on all parameter tensors, or on conv/dense kernels and the final dense layer's bias only (kernels+final-bias: the author code's Keras regularizers; BatchNorm and other biases undecayed).", choices=["all", "kernels+final-bias"], group="optimizer")
    batch_size: int = opt(32, "Local mini-batch size.", lo=1, group="optimizer")
    warmup_iterations: int = opt(0, "Linear learning-rate warm-up over this many local iterations.", lo=0, group="optimizer")
    lr_decay_at: str = opt("", "Multiply the lr by --lr-decay-factor at these points, comma separated (in --lr-decay-unit).", group="optimizer")
    lr_decay_factor: float = opt(0.1, "Step decay factor.", lo=0.0, lo_open=True, group="optimizer")
    lr_decay_unit: str = opt("iteration", "Unit of --lr-decay-at.", choices=["iteration", "round"], group="optimizer")
    server_lr: float = opt(1.0, "Server learning rate eta on the averaged update (fedcom, scaffold: u <- u + eta * mean update, 1 is the plain average; fedadam: Adam step size on it, its default 10^-2.5).", lo=0.0, lo_open=True, group="optimizer")
    # adaptive methods (fedlamb, mimelamb, fedams, mime, fedadam; fedcli/fl/adaptive.py)
    beta1: float = opt(0.9, "First-moment decay: local AMSGrad/LAMB m, Mime's server m, Adp-Fed's server Adam.", lo=0.0, hi=1.0, hi_open=True, group="adaptive")
    beta2: float = opt(0.999, "Second-moment decay of the same optimizers.", lo=0.0, hi=1.0, hi_open=True, group="adaptive")
    eps: float = opt(1e-8, "Adaptive methods' epsilon: with --vhat-eps floor, Algorithm 1's v_hat_0 = eps (the step divides by sqrt(v_hat) >= sqrt(eps)); with outside, m / (sqrt(v_hat) + eps).", lo=0.0, group="adaptive")
    vhat_eps: str = opt("floor", "Where eps enters the adaptive step: floor (Fed-LAMB Algorithm 1: v_hat starts at eps and only grows, psi = m / sqrt(v_hat)) or outside (the authors' prototype code and fedcli before: v_hat starts at 0, m / (sqrt(v_hat) + eps)).", choices=["floor", "outside"], group="adaptive")
    vhat_every: int = opt(1, "Skip synchronization Z: the server updates and sends v_hat (Mime: its optimizer state) every Z rounds only.", lo=1, group="adaptive")
    vhat_start: str = opt("eps", "fedlamb, mimelamb, fedams: until v_hat is first synchronized, clients divide by the server's v_hat_0 (eps: Algorithm 1's v_hat_0 = eps) or by their own running v (local: a departure).", choices=["eps", "local"], group="adaptive")
    local_v: str = opt("server", "fedlamb, mimelamb, fedams: a client's v at a round's start: the server's v_hat (server: Algorithm 1, line 6) or its own v from its last round (keep: the authors' prototype code).", choices=["server", "keep"], group="adaptive")
    trust_ratio: str = opt("auto", "LAMB layer-wise trust ratio phi(||p||) / ||r + lambda p||: the method's default (on for fedlamb, mimelamb), on, or off (fedlamb with it off is fedams).", choices=["auto", "on", "off"], group="adaptive")
    phi_bounds: str = opt("", "Bounded LAMB scaling function (Assumption 4) as 'ZETA,MAX': phi(a) = min(a + ZETA, MAX); empty: identity phi(a) = a.", group="adaptive")
    server_eps: float = opt(1e-3, "Adp-Fed server Adam adaptivity tau: m / (sqrt(v) + tau) (Reddi et al. 2021).", lo=0.0, lo_open=True, group="adaptive")
    # personalized FL (fedala, fedavg-c, fedprox-c, ditto, fedrep; fedcli/fl/ala.py, fedcli/fl/personal.py)
    init: str = opt("", "Override the method's local initialization: overwrite | ala (ALA on any method; it is then evaluated on each client's local model, personal_acc).", group="personalized")
    ala_layers: int = opt(2, "ALA range p: the last p parameter tensors get element-wise weights, lower ones are overwritten with the global model (2: the final Linear weight and bias; 0: no ALA, the plain overwrite).", lo=0, group="personalized")
    ala_sample_percent: float = opt(80.0, "ALA: percent s of the client's training data the weights are learned on (a contiguous slice at a random offset).", lo=0.0, hi=100.0, lo_open=True, group="personalized")
    ala_lr: float = opt(1.0, "ALA weight learning rate eta.", lo=0.0, lo_open=True, group="personalized")
    ala_threshold: float = opt(0.1, "ALA initial stage: passes repeat until the std of the last --ala-num-pre-loss pass losses is below this (reference code 0.1; the paper used 0.01).", lo=0.0, group="personalized")
    ala_num_pre_loss: int = opt(10, "ALA initial stage: number of recorded pass losses the std is taken over (more than this many are needed).", lo=1, group="personalized")
    ala_max_passes: int = opt(50, "ALA initial stage: at most this many passes (the reference code has no cap).", lo=1, group="personalized")
    ditto_lambda: float = opt(0.1, "Ditto: proximal coefficient lambda of the personalized model toward the global model (FedALA appendix: 0.1).", lo=0.0, group="personalized")
    ditto_epochs: float = opt(2.0, "Ditto: local epochs s of the personalized model per round (FedALA appendix: 2).", lo=0.0, lo_open=True, group="personalized")
    head_layers: int = opt(2, "FedRep: the last this many parameter tensors are the client's head (kept local, never synchronized; 2: the final Linear; 0: no head, FedAvg-C).", lo=0, group="personalized")
    perfedavg_beta: float = opt(0.0, "Per-FedAvg: outer (meta) step size beta; the inner step size alpha is --lr (FedALA appendix); 0: beta = --lr (PFLlib's default).", lo=0.0, group="personalized")
    head_epochs: float = opt(5.0, "FedRep: local epochs of head training (body frozen) before the body epochs (FedALA appendix: tau = 5).", lo=0.0, lo_open=True, group="personalized")
    apple_dr_lr: float = opt(0.01, "APPLE: learning rate eta_2 of the directed-relationship (DR) vector p_i (FedALA appendix: 0.01).", lo=0.0, group="personalized")
    apple_mu: float = opt(0.1, "APPLE: coefficient mu of the proximal term lambda(t) * mu * (p_i - p0) on the DR vector (FedALA appendix: 0.1).", lo=0.0, group="personalized")
    apple_l: float = opt(0.2, "APPLE: the 'cos' loss scheduler lambda(t) decays to 0 over the first L * rounds rounds (FedALA appendix: 0.2).", lo=0.0, hi=1.0, group="personalized")
    apple_m: int = opt(0, "APPLE: number M of core models each client downloads per round; 0: all clients, M = N (FedALA appendix); N - 1: all but its own.", lo=0, group="personalized")
    apple_upload: str = opt("personal", "APPLE: what a client uploads as its core model: personal (its personalized model of the last batch, PFLlib's code) or core (its trained core model, the paper).", choices=["personal", "core"], group="personalized")
    partialfed_tau: float = opt(5.0, "PartialFed: initial Gumbel-softmax temperature tau of the per-layer global/local choice (FedALA appendix: 5.0).", lo=0.0, lo_open=True, group="personalized")
    partialfed_decay: float = opt(0.965, "PartialFed: the temperature is multiplied by this each round (FedALA appendix: 0.965).", lo=0.0, hi=1.0, lo_open=True, group="personalized")
    partialfed_fm: int = opt(8, "PartialFed: of every f_m + f_s local batches, the first f_m update the model weights (FedALA appendix: 8).", lo=0, group="personalized")
    partialfed_fs: int = opt(2, "PartialFed: ... and the next f_s update the selection strategy (FedALA appendix: 2).", lo=0, group="personalized")
    amp_alpha: float = opt(1000.0, "FedAMP: server step size alpha_k of the attention-inducing update and of the proximal coefficient lambda / alpha_k (FedALA appendix: 1000).", lo=0.0, lo_open=True, group="personalized")
    amp_lambda: float = opt(1.0, "FedAMP: regularization lambda of the local proximal term lambda / (2 alpha_k) ||w - u_i||^2 (FedALA appendix: 1; 0: no proximal gradient, as in PFLlib's clientamp.py).", lo=0.0, group="personalized")
    amp_sigma: float = opt(0.1, "FedAMP: sigma of the attention-inducing function A(x) = 1 - exp(-x / sigma) (FedALA appendix: 0.1).", lo=0.0, lo_open=True, group="personalized")
    fomo_m: int = opt(0, "FedFomo: number M of client models each client downloads (top-M of the server's affinity row); 0: all clients (FedALA appendix: M = number of clients).", lo=0, group="personalized")
    fomo_val_ratio: float = opt(0.2, "FedFomo: fraction of each client's training split held out to weigh the received models (PFLlib: 0.2); it trains on the rest.", lo=0.0, hi=1.0, hi_open=True, group="personalized")
    pfedme_lambda: float = opt(15.0, "pFedMe: regularization lambda tying the personalized model theta to the local model w (FedALA appendix: 15).", lo=0.0, group="personalized")
    pfedme_lr: float = opt(0.01, "pFedMe: personalized learning rate of the K inner steps on theta (FedALA appendix: 0.01).", lo=0.0, lo_open=True, group="personalized")
    pfedme_k: int = opt(5, "pFedMe: inner steps K on theta per local mini-batch (FedALA appendix: 5).", lo=1, group="personalized")
    pfedme_beta: float = opt(1.0, "pFedMe: server mix beta: global <- (1 - beta) * previous + beta * average (FedALA appendix: 1.0).", lo=0.0, lo_open=True, group="personalized")
    php_mu: float = opt(0.9, "FedPHP: moving-average coefficient mu; round t starts from (1 - mu_t) * global + mu_t * local with mu_t = mu * t / rounds (FedALA appendix: 0.9).", lo=0.0, hi=1.0, group="personalized")
    php_lambda: float = opt(0.01, "FedPHP: weight lambda of the MMD between local and global representations: (1 - lambda) * CE + lambda * MMD (FedALA appendix: 0.01).", lo=0.0, hi=1.0, group="personalized")
    # run
    seed: int = opt(0, "Seed; all randomness is keyed by (seed, round, client).", lo=0, group="run")
    eval_every: int = opt(0, "Evaluate the global model at the first round end at or after every multiple of this many iterations (0: about 20 evaluations).", lo=0, group="run")
    device: str = opt("auto", "Device: cpu, cuda, or auto (cuda when available).", choices=["auto", "cpu", "cuda"], group="run")
    trainer: str = opt("auto", "Local-training path: vmap (stacked cohort under torch.func), loop (per-client), or auto (CPU: loop for convolutional models, vmap otherwise; CUDA: vmap).", choices=["auto", "vmap", "loop"], group="run")
    threads: int = opt(0, "Torch CPU threads per process (0: 1; parallelism comes from --workers, and two threads in one process collapse when another program holds a core).", lo=0, group="run")
    workers: int = opt(0, "Worker processes that train shards of each round's cohort at the same time; results are the same for any number (0: auto, the physical cores when the run is long enough to pay for starting them, else 1).", lo=0, group="run")
    out: str = opt("", "Run directory.", group="run")
    # crash safety (fedcli/results/checkpoint.py)
    checkpoint_every: int = opt(10, "Write a checkpoint (RUN_DIR/checkpoints/) every this many rounds, and on SIGINT/SIGTERM (0: only on a signal).", lo=0, group="crash safety")
    keep_checkpoints: int = opt(2, "Keep the last this many checkpoints.", lo=1, group="crash safety")
    on_diverge: str = opt("stop", "A client's non-finite loss or update: stop (exit 4, naming round and client) or skip-client (drop its update for the round, renormalize the others, record it in skipped.csv).", choices=["stop", "skip-client"], group="crash safety")

    # ------------------------------------------------------------------
    def validate(self) -> "TrainConfig":
        """Check types and ranges of every field; raise ConfigError naming the first bad key."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            check_value(f, value)
        from fedcli.fl.methods import METHODS  # late import: the registry imports the parts

        if self.algo not in METHODS:
            raise ConfigError(f"--algo: unknown method '{self.algo}'; choose one of: {', '.join(sorted(METHODS))}")
        if self.schedule:
            from fedcli.fl.schedules import SCHEDULES

            if self.schedule not in SCHEDULES:
                raise ConfigError(f"--schedule: unknown schedule '{self.schedule}'; choose one of: {', '.join(sorted(SCHEDULES))}")
        if self.init:
            from fedcli.fl.parts import INITS

            if self.init not in INITS:
                raise ConfigError(f"--init: unknown local initialization '{self.init}'; choose one of: {', '.join(sorted(INITS))}")
        self.hidden_sizes()
        self.decay_points()
        self.phi_values()
        if self.local_epochs and (self.schedule or METHODS[self.algo].schedule) != "periodic":
            raise ConfigError(f"--local-epochs {self.local_epochs:g} needs the periodic schedule (layer-wise schedules need equal local "
                              "steps); --local-epochs 0 runs --tau steps per round (personalized presets default to 1 epoch)")
        self.check_cross_field()
        return self

    def check_cross_field(self) -> None:
        """Rules between fields (issue 5); each error names its key (``ConfigError.key``) for recipe lines."""
        if not self.partition_file and self.active_ratio * self.clients < 0.5:
            raise keyed("active_ratio", f"--active-ratio {self.active_ratio} of --clients {self.clients} is "
                                        f"{self.active_ratio * self.clients:.3g} clients per round; use at least {1 / self.clients:.4g} (one client)")
        if self.active_ratio < 1.0:
            from fedcli.fl import parts
            from fedcli.fl.methods import METHODS

            names = {**METHODS[self.algo].parts(), **({"init": self.init} if self.init else {})}
            tables = {"local_step": parts.LOCAL_STEPS, "codec": parts.CODECS, "init": parts.INITS, "server": parts.SERVERS}
            needs = [f"{kind.replace('_', ' ')} '{name}'" for kind, name in names.items()
                     if getattr(tables.get(kind, {}).get(name), "full_participation", False)]
            if needs:
                raise keyed("active_ratio", f"--algo {self.algo} needs every client in every round (a cross-silo method: its "
                                            f"{' and '.join(needs)}): use --active-ratio 1, not {self.active_ratio}")

    def hidden_sizes(self) -> tuple[int, ...]:
        try:
            sizes = tuple(int(s) for s in self.mlp_hidden.split(",") if s.strip())
        except ValueError:
            raise ConfigError(f"--mlp-hidden must be comma-separated positive integers, got '{self.mlp_hidden}'") from None
        if any(s < 1 for s in sizes):
            raise ConfigError(f"--mlp-hidden must be comma-separated positive integers, got '{self.mlp_hidden}'")
        return sizes

    def decay_points(self) -> tuple[int, ...]:
        try:
            pts = tuple(sorted(int(s) for s in str(self.lr_decay_at).split(",") if s.strip()))
        except ValueError:
            raise ConfigError(f"--lr-decay-at must be comma-separated non-negative integers, got '{self.lr_decay_at}'") from None
        if any(p < 0 for p in pts):
            raise ConfigError(f"--lr-decay-at must be comma-separated non-negative integers, got '{self.lr_decay_at}'")
        return pts

    def phi_values(self) -> tuple[float, float] | None:
        """(zeta, phi_max) of the bounded scaling function, or None for the identity."""
        if not str(self.phi_bounds).strip():
            return None
        try:
            zeta, top = (float(s) for s in str(self.phi_bounds).split(","))
        except ValueError:
            raise ConfigError(f"--phi-bounds must be 'ZETA,MAX' (two numbers), got '{self.phi_bounds}'") from None
        if not (0.0 < zeta < top < math.inf):
            raise ConfigError(f"--phi-bounds needs 0 < ZETA < MAX, got '{self.phi_bounds}'")
        return zeta, top

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> "TrainConfig":
        """Build from a mapping (recipe or manifest); unknown keys and wrong types raise ConfigError."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in values.items():
            k = key.replace("-", "_")
            if k not in known:
                raise ConfigError(f"{where}: unknown key '{key}'")
            kwargs[k] = coerce(known[k], value, where)
        return cls(**kwargs)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def keyed(key: str, message: str) -> ConfigError:
    """A ConfigError that remembers the config key it is about (recipes add that key's file and line)."""
    err = ConfigError(message)
    err.key = key
    return err


def error_key(err: ConfigError) -> str | None:
    """The config key a ConfigError is about: its ``key``, else the first ``--flag`` its message names."""
    import re

    if getattr(err, "key", None):
        return err.key
    for m in re.finditer(r"--([a-z0-9][a-z0-9-]*)", str(err)):
        name = m.group(1).replace("-", "_")
        if name in FIELDS:
            return name
    return None


def field_type(f) -> type:
    return {"str": str, "int": int, "float": float, "bool": bool}[f.type if isinstance(f.type, str) else f.type.__name__]


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
        raise ConfigError(f"{where}: key '{f.name}' must be {t.__name__}, got {type(value).__name__} {value!r}")
    return value


def check_value(f, value) -> None:
    m = f.metadata
    name = flag(f.name)
    t = field_type(f)
    if t is float and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value}")
    if m.get("choices") and value not in m["choices"]:
        raise ConfigError(f"{name} must be one of {', '.join(m['choices'])}, got '{value}'")
    lo, hi = m.get("lo"), m.get("hi")
    if lo is not None and (value < lo or (m["lo_open"] and value == lo)):
        raise ConfigError(f"{name} must be {'>' if m['lo_open'] else '>='} {lo}, got {value}")
    if hi is not None and (value > hi or (m["hi_open"] and value == hi)):
        raise ConfigError(f"{name} must be {'<' if m['hi_open'] else '<='} {hi}, got {value}")
