"""What a sweep will run and roughly how long it takes, said before it starts (``fedcli sweep``).

How the time is estimated (and what it leaves out):

- **Local training**: the number of client steps of each run (``iterations`` x clients per round; with a round budget,
  rounds x steps per round, ceil(E * n_i / B) per client for ``--local-epochs E``) times the *measured* seconds of one
  client step of the run's model: forward, cross-entropy, backward and an SGD update on random inputs of the dataset's
  shape at the run's batch size (the best of a few steps), on this machine with the torch threads each run gets
  (cores / jobs). A model whose step would take over 5 s is timed at batch 4 and scaled linearly to the run's batch.
- **Evaluation**: about 20 evaluations per run (``--eval-every 0``) of the model over the test set, timed the same way.
- Not in it: process start-up, data loading, the engine's per-step bookkeeping, methods' extra local work (Ditto's
  second model, ALA's weight learning, ...) and the stacked trainer's speed-up on dense models. So on a fresh sweep
  the figure is the model compute, a lower bound; once runs of the sweep folder are complete, their measured wall
  times calibrate it (ratio of measured to estimated, applied to the runs still to go).

Dataset shapes and sizes come from a table of the built-in datasets' standard splits (no file is read), except
your own data (``imagefolder``, ``tensors``) and runs with ``--local-epochs`` whose data is on disk: those are
loaded once, for their exact shape and size.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

#: (input shape, classes, training samples, test samples) of the built-in datasets' standard splits
NOMINAL = {
    "digits": ((1, 8, 8), 10, 1437, 360),
    "mnist": ((1, 28, 28), 10, 60000, 10000),
    "fmnist": ((1, 28, 28), 10, 60000, 10000),
    "emnist": ((1, 28, 28), 47, 112800, 18800),
    "femnist": ((1, 28, 28), 62, None, None),
    "cifar10": ((3, 32, 32), 10, 50000, 10000),
    "cifar100": ((3, 32, 32), 100, 50000, 10000),
    "tinyimagenet": ((3, 64, 64), 200, 100000, 10000),
    "agnews": (None, 4, 120000, 7600),
}
EVALS_PER_RUN = 21  # --eval-every 0: about 20 evaluations, plus the last


@dataclass
class DataFacts:
    shape: tuple[int, ...]
    classes: int
    n_train: int | None
    n_test: int | None
    tokens: int | None = None   # vocabulary size of token-id inputs
    how: str = "nominal"        # nominal | loaded


@dataclass
class Estimate:
    seconds: float = 0.0                          # estimated wall time of the runs to go, with the jobs in parallel
    compute_s: float = 0.0                        # sum over runs of the estimated compute
    client_steps: int = 0
    calibrated: int = 0                           # completed runs the estimate was calibrated on
    factor: float = 1.0
    unknown: list[str] = field(default_factory=list)  # runs that could not be estimated (and why)
    step_s: dict = field(default_factory=dict)    # model label -> seconds per client step
    threads: set = field(default_factory=set)     # torch threads per run the steps were timed with
    per_run: dict = field(default_factory=dict)   # id() of a planned run of todo -> its estimated seconds (calibrated)

    def text(self) -> str:
        if self.client_steps == 0 and not self.unknown:
            return "nothing to run"
        parts = [f"{self.client_steps:,} client steps"]
        per = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in list(self.step_s.items())[:4])
        if self.calibrated:
            how = (f"measured model step ({per}) x steps, calibrated on the {self.calibrated} completed run(s) here "
                   f"(x{self.factor:.3g}: start-up, data loading and bookkeeping included)")
            head = f"estimated ~{fmt_duration(self.seconds)}"
        else:
            how = (f"measured model step ({per}) x steps + evaluation; start-up, data loading and per-step bookkeeping "
                   f"come on top (a lower bound)")
            head = f"estimated >= {fmt_duration(self.seconds)} of model compute"
        threads = "/".join(str(t) for t in sorted(self.threads)) or "?"
        out = f"{parts[0]}; {head} on this machine at {threads} torch thread(s) per run ({how})"
        busy = busy_note()
        if busy:
            out += f"; {busy}"
        if self.unknown:
            out += f"; not estimated: {'; '.join(self.unknown[:3])}" + (f" and {len(self.unknown) - 3} more" if len(self.unknown) > 3 else "")
        return out


def busy_note() -> str:
    """A word when other processes keep the CPU busy: timings (and runs) are then slower than on an idle machine."""
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except (OSError, AttributeError):
        return ""
    return f"the machine is busy (load {load:.1f} on {cores} cores): timed under that load" if load > cores else ""


def fmt_duration(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    if s < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def _data_key(cfg: dict) -> tuple:
    import fedcli.fl.methods  # noqa: F401 - start-up: the method registry extends the config
    from fedcli.config import TrainConfig
    from fedcli.data.setup import data_dir, dataset_options

    c = TrainConfig(**cfg)
    return (c.dataset, str(data_dir(c)), c.holdout_fraction, tuple(sorted(dataset_options(c).items())))


def data_facts(cfg: dict, need_size: bool, cache: dict) -> DataFacts | None:
    """Shape, classes and split sizes of a run's data: the nominal table, or the data itself when it must be read."""
    name = cfg["dataset"]
    nominal = NOMINAL.get(name)
    own = name not in NOMINAL
    if name == "synthetic":
        nominal, own = None, True  # generated in a moment: exact
    if own or need_size:
        key = _data_key(cfg)
        if key not in cache:
            cache[key] = _load_facts(cfg)
        if cache[key] is not None:
            return cache[key]
        if own:
            return None
    shape, classes, n_train, n_test = nominal
    if name == "emnist":
        from fedcli.data.datasets import EMNIST_CLASSES

        classes = EMNIST_CLASSES.get(cfg.get("emnist_split", "balanced"), classes)
    tokens = None
    if name == "agnews":
        shape, tokens = (cfg.get("agnews_max_len", 200),), (cfg.get("agnews_vocab_size") or 98_635) + 2
    if name == "digits" and cfg.get("holdout_fraction"):
        n_test = math.ceil(1797 * cfg["holdout_fraction"])
        n_train = 1797 - n_test
    return DataFacts(tuple(shape), classes, n_train, n_test, tokens)


def _load_facts(cfg: dict) -> DataFacts | None:
    import fedcli.fl.methods  # noqa: F401 - start-up: the method registry extends the config
    from fedcli.config import TrainConfig
    from fedcli.data.setup import load_data
    from fedcli.errors import FedcliError

    try:
        d = load_data(TrainConfig(**cfg))
    except FedcliError:
        return None
    vocab = d.source.get("vocab_size") if isinstance(d.source, dict) else None
    return DataFacts(tuple(d.input_shape), d.num_classes, len(d.train_y), len(d.test_y), vocab, "loaded")


def client_steps(cfg: dict, facts: DataFacts | None) -> int | None:
    """Client steps of local training over the whole run (``fedcli.fl.budget.plan_run`` over clients of the nominal
    mean size; None when the data size it needs is unknown)."""
    import fedcli.fl.methods  # noqa: F401 - start-up: the method registry extends the config
    from fedcli.config import TrainConfig
    from fedcli.fl.budget import plan_run, schedule_round_length

    c = TrainConfig(**cfg)
    sizes = None
    if facts is not None and facts.n_train is not None:
        sizes = [facts.n_train * (1 - c.client_test_fraction) / c.clients] * c.clients
    plan = plan_run(c, schedule_round_length(c), sizes, active=max(1, int(round(c.active_ratio * c.clients))))
    return None if plan.expected_client_steps is None else int(round(plan.expected_client_steps))


def measure_step(cfg: dict, facts: DataFacts, threads: int) -> tuple[float, float]:
    """(seconds per client step at the run's batch size, seconds per evaluated test sample) of the run's model."""
    import torch

    import fedcli.fl.methods  # noqa: F401 - start-up: the method registry extends the config
    from fedcli.config import TrainConfig
    from fedcli.models import build_model

    c = TrainConfig(**cfg)
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = build_model(c.model, facts.shape, facts.classes, wrn_depth=c.wrn_depth, wrn_width=c.wrn_width,
                                mlp_hidden=c.hidden_sizes(), **({"vocab_size": facts.tokens} if facts.tokens else {}))
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)

            def batch(b: int):
                if facts.tokens:
                    x = torch.randint(0, facts.tokens, (b, *facts.shape))
                else:
                    x = torch.randn(b, *facts.shape)
                return x, torch.randint(0, facts.classes, (b,))

            def step(b: int) -> float:
                x, y = batch(b)
                t = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                return time.perf_counter() - t

            full = c.batch_size
            small = min(full, 4)
            model.train()
            step(small)  # warm-up: first calls set up kernels
            gauge = min(step(small) for _ in range(2))
            if gauge * full / small > 5.0:  # a large model: compute dominates, scale the small batch to the run's
                t = gauge * full / small
            else:  # the best of a few full-batch steps (the minimum is robust to a busy machine's hiccups)
                times = [step(full)]
                while len(times) < 5 and sum(times) < 1.0:
                    times.append(step(full))
                t = min(times)
            model.eval()
            with torch.no_grad():
                b = min(max(full, 32), 256)
                x, _ = batch(b)
                per_sample = float("inf")
                for _ in range(2):
                    t0 = time.perf_counter()
                    model(x)
                    per_sample = min(per_sample, (time.perf_counter() - t0) / b)
            return t, per_sample
    finally:
        torch.set_num_threads(old)


def estimate(todo: list, done: list, jobs: int = 1, mpi: int = 0, cache: dict | None = None) -> Estimate:
    """``todo`` and ``done``: planned runs (``.config``, ``.wall_s``) still to run and completed in the sweep folder."""
    from fedcli.errors import FedcliError

    cache = {} if cache is None else cache
    est = Estimate()
    procs = max(1, jobs) * max(1, mpi)
    steps_cache: dict = {}

    def run_estimate(cfg: dict) -> tuple[float, int] | None:
        facts = data_facts(cfg, need_size=bool(cfg.get("local_epochs")), cache=cache)
        if facts is None:
            return None
        n = client_steps(cfg, facts)
        if n is None:
            return None
        threads = cfg.get("threads") or max(1, (os.cpu_count() or 1) // procs)
        key = (cfg["model"], facts.shape, facts.classes, facts.tokens, cfg["batch_size"], cfg.get("mlp_hidden"),
               cfg.get("wrn_depth"), cfg.get("wrn_width"), threads)
        if key not in steps_cache:
            try:
                steps_cache[key] = measure_step(cfg, facts, threads)
            except (FedcliError, RuntimeError, ValueError) as e:
                steps_cache[key] = e
        got = steps_cache[key]
        if isinstance(got, Exception):
            return None
        t_step, t_sample = got
        est.threads.add(threads)
        est.step_s.setdefault(f"{cfg['model']}/b{cfg['batch_size']}", t_step)
        evals = EVALS_PER_RUN * (facts.n_test or 0) * t_sample
        return n * t_step / max(1, mpi) + evals / max(1, mpi), n

    per_run = []
    for p in todo:
        r = run_estimate(p.config)
        if r is None:
            est.unknown.append(f"{p.name} ({p.config['dataset']}: data size or shape unknown)")
            continue
        est.compute_s += r[0]
        est.client_steps += r[1]
        per_run.append(r[0])
        est.per_run[id(p)] = r[0]
    measured = [(p.wall_s, run_estimate(p.config)) for p in done if p.wall_s]
    measured = [(w, r[0]) for w, r in measured if r is not None and r[0] > 0]
    if measured:
        est.calibrated = len(measured)
        est.factor = sum(w for w, _ in measured) / sum(e for _, e in measured)
    est.per_run = {k: v * est.factor for k, v in est.per_run.items()}
    total = est.compute_s * est.factor
    longest = max(per_run, default=0.0) * est.factor
    est.seconds = max(total / max(1, jobs), longest)
    return est


def budget_text(runs: list) -> str:
    """``160 iterations`` / ``5 rounds of 1 local epoch`` / ``120-400 iterations``, over the runs' configs."""
    its = sorted({p.config["iterations"] for p in runs if not p.config.get("rounds")})
    rnds = sorted({(p.config["rounds"], p.config.get("local_epochs") or 0) for p in runs if p.config.get("rounds")})
    out = []
    if its:
        out.append(f"{its[0]:,} local iterations" if len(its) == 1 else f"{its[0]:,}-{its[-1]:,} local iterations")
    if rnds:
        r = sorted({x for x, _ in rnds})
        e = sorted({x for _, x in rnds if x})
        rounds = f"{r[0]:,} rounds" if len(r) == 1 else f"{r[0]:,}-{r[-1]:,} rounds"
        if e:
            rounds += f" of {'/'.join(f'{x:g}' for x in e)} local epoch(s)"
        out.append(rounds)
    return " and ".join(out) + " per run" if out else "no runs"


# --------------------------------------------------------------------------------------------- one run, --workers auto
#: ... from these rough single-core rates (femnist_cnn and cnn4 at batch 10-32 on this CPU: 25-55 GFLOP/s)
FLOPS_PER_S = 2e10
STEP_OVERHEAD_S = 2e-4


@dataclass
class WorkEstimate:
    client_steps: int        # local steps summed over clients and rounds
    flops_per_step: float    # forward + backward of one client's mini-batch
    seconds: float           # single-core estimate

    def describe(self) -> str:
        return f"about {self.seconds:.0f} s of single-core training ({self.client_steps:,} client steps)"


def estimate_work(cfg, dataset, partition) -> WorkEstimate:
    """Rough single-core training time of a run: client steps x (3 x forward FLOPs x batch / rate + overhead)."""
    import torch

    from fedcli.fl.budget import plan_run, schedule_round_length
    from fedcli.fl.engine import build_run_model
    from fedcli.models.flops import forward_flops

    steps = plan_run(cfg, schedule_round_length(cfg), [len(ix) for ix in partition.train]).expected_client_steps
    try:
        with torch.random.fork_rng(devices=[]):
            model = build_run_model(cfg, dataset)
        model.eval()
        fwd = forward_flops(model, dataset.train_x[:1])
    except Exception:  # noqa: BLE001 - an estimate only: count parameters instead
        fwd = 2.0 * sum(p.numel() for p in build_run_model(cfg, dataset).parameters())
    per_step = 3.0 * fwd * cfg.batch_size
    secs = steps * (per_step / FLOPS_PER_S + STEP_OVERHEAD_S)
    return WorkEstimate(int(steps), per_step, secs)
