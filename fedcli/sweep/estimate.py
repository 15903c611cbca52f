"""What a sweep will run and roughly how long it takes, said before it starts (``fedcli sweep``).

How the time is estimated (an estimate: the plan line says its basis):

- **Local training**: the number of client steps of each run (``iterations`` x clients per round; with a round budget,
  rounds x steps per round, ceil(E * n_i / B) per client for ``--local-epochs E``) times the *measured* seconds of one
  client step of the run's model: forward, cross-entropy, backward and an SGD update on random inputs of the dataset's
  shape at the run's batch size (the best of a few steps), on this machine with the torch threads each run gets
  (cores / jobs). A model whose step would take over 5 s is timed at batch 4 and scaled linearly to the run's batch.
- **Evaluation**: about 20 evaluations per run (``--eval-every 0``) of the model over the test set, timed the same way.
- **Start-up, data loading, setup and bookkeeping** (:func:`overheads`), measured once on this machine in a child
  process (data alone, for the default workers: forked from their warm server, :func:`_probe`) and cached
  (``estimate-timings-v2.json`` in fedcli's cache folder, see fedcli/cli/catalog.py; the machine's part is measured
  again after a week): the seconds a fresh process takes to import what a training needs (python,
  torch, fedcli); per dataset the seconds to load it and per partition to make it (a dataset whose loading outlasts
  the probe's time limit counts with the time it took until then; one whose files are not on disk, by the sweep's data
  check, is not probed: :func:`_not_on_disk`); and from a reference training (FedAvg on the
  built-in digits, N and 5N iterations) a run's fixed setup and the engine's bookkeeping per client step beyond the
  model's own step. How they add up follows the executor: the default worker processes start once each (``jobs``
  of them, in parallel) and keep the last dataset loaded, so a run pays its partition and, when its worker held
  other data, the load; ``--mpi`` (and a Slurm job) starts a process and loads the data for every run;
  ``--in-process`` loads the data for every run in the sweep's own process.
- Not in it: methods' extra local work (Ditto's second model, ALA's weight learning, ...), bookkeeping that grows
  with the model (the reference's MLP is small) and the stacked trainer's speed-up on dense models. On a busy
  machine (1-minute load average plus the sweep's own threads above the cores) the plan says the time at that load
  beside the idle machine's (:class:`Load`: every thread gets its share of the cores), until completed runs calibrate
  it. Once runs of the sweep folder are complete, their measured wall times calibrate
  the per-run part (ratio of measured to estimated, applied to the runs still to go); while the sweep runs, its
  progress recalibrates on the runs it has finished (fedcli/cli/sweep.py).

Dataset shapes and sizes come from the built-in datasets' declarations of their standard splits
(``fedcli/data/datasets/<name>.py``: ``Dataset.nominal``; no file is read), except
your own data (``imagefolder``, ``tensors``) and runs with ``--local-epochs`` whose data is on disk: those are
loaded once, for their exact shape and size.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

EVALS_PER_RUN = 21  # --eval-every 0: about 20 evaluations, plus the last


@dataclass
class DataFacts:
    shape: tuple[int, ...]
    classes: int
    n_train: int | None
    n_test: int | None
    tokens: int | None = None  # vocabulary size of token-id inputs
    how: str = "nominal"  # nominal | loaded


@dataclass
class Estimate:
    seconds: float = 0.0  # estimated wall time of the runs to go, with the jobs in parallel
    compute_s: float = 0.0  # sum over runs of the estimated compute
    client_steps: int = 0
    calibrated: int = 0  # completed runs the estimate was calibrated on
    factor: float = 1.0
    unknown: list[str] = field(default_factory=list)  # runs that could not be estimated (and why)
    step_s: dict = field(default_factory=dict)  # model label -> seconds per client step
    threads: set = field(default_factory=set)  # torch threads per run the steps were timed with
    per_run: dict = field(default_factory=dict)  # id() of a planned run of todo -> its estimated seconds (calibrated)
    startup_s: float = 0.0  # start-up time in the wall estimate, before any run (worker processes)
    overhead: "Overheads | None" = None  # the measured start-up and data-loading times it used
    executor: str = "pool"
    load: "Load | None" = None  # the machine's load when estimated (load_factor); None: not known

    @property
    def loaded_s(self) -> float:
        """The wall time at the machine's current load: :attr:`seconds` (an idle machine's) x the load factor."""
        return self.seconds * (self.load.factor if self.load is not None else 1.0)

    def text(self) -> str:
        if self.client_steps == 0 and not self.unknown:
            return "nothing to run"
        per = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in list(self.step_s.items())[:4])
        basis = [
            f"model compute {short_s(self.compute_s)} in all: measured model step ({per}) x client steps + evaluation"
        ]
        if self.overhead is not None:
            basis.append(self.overhead.text(self.executor))
        if self.calibrated:
            basis.append(f"calibrated on the {self.calibrated} completed run(s) here (x{self.factor:.3g})")
        else:
            basis.append("not yet calibrated on runs of this sweep")
        threads = "/".join(str(t) for t in sorted(self.threads)) or "?"
        busy = self.load is not None and self.load.factor > 1.0
        said = (
            (
                f"{short_s(self.loaded_s)} on this machine at its current load ({self.load.text()}; "
                f"~{short_s(self.seconds)} idle)"
            )
            if busy
            else f"{short_s(self.seconds)} on this machine"
        )
        out = (
            f"{self.client_steps:,} client steps; estimated ~{said} at {threads} "
            f"torch thread(s) per run (an estimate; basis: {'; '.join(basis)})"
        )
        if self.unknown:
            out += f"; not estimated: {'; '.join(self.unknown[:3])}" + (
                f" and {len(self.unknown) - 3} more" if len(self.unknown) > 3 else ""
            )
        return out


@dataclass(frozen=True)
class Load:
    """The machine's load when the sweep is planned: ``average`` runnable processes (the 1-minute load average) on
    ``cores``, and the threads the sweep's own runs will add (``ours``: jobs x torch threads, at most ``cores``)."""

    average: float
    cores: int
    ours: int

    @property
    def factor(self) -> float:
        """How much slower than on an idle machine the runs go: with ``average`` other runnable processes beside the
        ``ours`` threads of the sweep, every thread gets ``cores / (average + ours)`` of a core when that is below one
        (the steps were timed at their best, as on an idle machine: a sweep estimated at 13 s took 58 s on 2 cores at
        load ~7; issue 57)."""
        return max(1.0, (self.average + self.ours) / max(1, self.cores))

    def text(self) -> str:
        return f"load {self.average:.1f} on {self.cores} cores, runs about x{self.factor:.2g} slower than idle"


def load_factor(jobs: int, threads: int) -> Load | None:
    """The machine's :class:`Load` for ``jobs`` runs of ``threads`` torch threads at a time; None where the load
    average is not known (no ``os.getloadavg``)."""
    try:
        average, cores = os.getloadavg()[0], os.cpu_count() or 1
    except (OSError, AttributeError):
        return None
    return Load(average, cores, min(cores, max(1, jobs) * max(1, threads)))


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
    from fedcli.config import TrainConfig
    from fedcli.data.setup import data_dir, dataset_options

    c = TrainConfig(**cfg)
    return (c.dataset, str(data_dir(c)), c.holdout_fraction, tuple(sorted(dataset_options(c).items())))


def data_facts(cfg: dict, need_size: bool, cache: dict) -> DataFacts | None:
    """Shape, classes and split sizes of a run's data: its declaration's nominal facts, or the data itself when it
    must be read."""
    from fedcli.data.datasets import DECLARED

    declared = DECLARED.get(cfg["dataset"])
    own = declared is None or declared.classes is None  # your own data, or generated from its options (synthetic)
    if own or need_size:
        key = _data_key(cfg)
        if key not in cache:
            cache[key] = _load_facts(cfg)
        if cache[key] is not None:
            return cache[key]
        if own:
            return None
    shape, classes, n_train, n_test, tokens = declared.nominal(cfg)
    return DataFacts(tuple(shape), classes, n_train, n_test, tokens)


def _load_facts(cfg: dict) -> DataFacts | None:
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
    from fedcli.config import TrainConfig
    from fedcli.fl.budget import clients_per_round, plan_run, schedule_round_length

    c = TrainConfig(**cfg)
    sizes = None
    if facts is not None and facts.n_train is not None:
        sizes = [facts.n_train * (1 - c.client_test_fraction) / c.clients] * c.clients
    plan = plan_run(c, schedule_round_length(c), sizes, n_active=clients_per_round(c.active_ratio, c.clients))
    return None if plan.expected_client_steps is None else int(round(plan.expected_client_steps))


def _random_batch(facts: DataFacts, b: int):
    """``b`` random inputs of the data's shape (token ids for a text model) and random labels."""
    import torch

    if facts.tokens:
        x = torch.randint(0, facts.tokens, (b, *facts.shape))
    else:
        x = torch.randn(b, *facts.shape)
    return x, torch.randint(0, facts.classes, (b,))


def _train_step_s(model, facts: DataFacts, full: int) -> float:
    """Seconds of one SGD step at the batch size ``full``: from a small batch for a large model, else the best of a
    few full-batch steps."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(b: int) -> float:
        x, y = _random_batch(facts, b)
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        return time.perf_counter() - t

    small = min(full, 4)
    step(small)  # warm-up: first calls set up kernels
    gauge = min(step(small) for _ in range(2))
    if gauge * full / small > 5.0:  # a large model: compute dominates, scale the small batch to the run's
        return gauge * full / small
    times = [step(full)]  # the best of a few full-batch steps (the minimum is robust to a busy machine's hiccups)
    while len(times) < 5 and sum(times) < 1.0:
        times.append(step(full))
    return min(times)


def _eval_sample_s(model, facts: DataFacts, full: int) -> float:
    """Seconds per evaluated sample: the best of two forward passes of one batch (32 to 256 samples)."""
    import torch

    with torch.no_grad():
        b = min(max(full, 32), 256)
        x, _ = _random_batch(facts, b)
        per_sample = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            model(x)
            per_sample = min(per_sample, (time.perf_counter() - t0) / b)
    return per_sample


def measure_step(cfg: dict, facts: DataFacts, threads: int) -> tuple[float, float]:
    """(seconds per client step at the run's batch size, seconds per evaluated test sample) of the run's model."""
    import torch

    from fedcli.config import TrainConfig
    from fedcli.models import build_model

    c = TrainConfig(**cfg)
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = build_model(
                c.model,
                facts.shape,
                facts.classes,
                wrn_depth=c.wrn_depth,
                wrn_width=c.wrn_width,
                mlp_hidden=c.hidden_sizes(),
                **({"vocab_size": facts.tokens} if facts.tokens else {}),
            )
            model.train()
            t = _train_step_s(model, facts, c.batch_size)
            model.eval()
            return t, _eval_sample_s(model, facts, c.batch_size)
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------ start-up and data loading (measured once, cached)

_SHARED: dict | None = None  # inside shared_measurements(): kind -> {key: what was measured}


@contextmanager
def shared_measurements():
    """Within: every :func:`estimate` shares what it measured that is not cached on disk, a model step's time and a
    dataset that failed to load, with the later ones. One command that estimates twice measures once: `fedcli sweep
    --executor slurm --dry-run` (the plan, then each job's time) took 7 s, 4 of them timing the same model step and
    probing the same missing dataset a second time."""
    global _SHARED
    outer = _SHARED
    _SHARED = {} if outer is None else outer
    try:
        yield
    finally:
        _SHARED = outer


def _shared(kind: str) -> dict:
    """This command's measurements of one kind (``step``, ``failed``); outside shared_measurements(), a new dict."""
    return {} if _SHARED is None else _SHARED.setdefault(kind, {})


#: the measuring child process stops after this many seconds (a dataset still loading then counts with the time so far)
PROBE_LIMIT_S = 60.0
#: a cached start-up time older than this is measured again (a new torch, another load on the machine)
STARTUP_MAX_AGE_S = 7 * 86400
TIMINGS_FILE = "estimate-timings-v2.json"  # the number changes with the file's layout


#: the reference training that measures a run's fixed setup and the engine's bookkeeping per client step: FedAvg on
#: the built-in digits (no file read), an MLP, 4 clients a round, one torch thread, the default trainer; run for N and
#: 5N iterations
REFERENCE = {
    "dataset": "digits",
    "model": "mlp",
    "mlp_hidden": "64",
    "clients": 8,
    "active_ratio": 0.5,
    "algo": "fedavg",
    "tau": 5,
    "iterations": 40,
    "threads": 1,
}


def reference_costs(walls: list[float], model_step: float) -> tuple[float, float]:
    """(seconds of a run's fixed setup, seconds of bookkeeping per client step) from the reference training's wall
    times at N and 5N iterations: the slope per client step, less the model step it timed, is the engine's
    bookkeeping; the wall time at N less N's client steps at that slope is the setup (model, evaluations, files)."""
    per_run_steps = REFERENCE["iterations"] * round(REFERENCE["clients"] * REFERENCE["active_ratio"])
    short, long = walls
    slope = max(0.0, (long - short) / (4 * per_run_steps))
    return max(0.0, short - per_run_steps * slope), max(0.0, slope - model_step)


@dataclass
class Overheads:
    """Seconds a fresh process takes to start (imports), and per dataset to load it and per partition to make it."""

    startup_s: float
    load_s: dict  # data key -> seconds to load the dataset once
    part_s: dict  # partition key -> seconds to partition it (the dataset loaded)
    names: dict = field(default_factory=dict)  # data key -> dataset name
    measured: str = "cached"  # "measured now" / "cached"
    at: float = 0.0  # when the oldest value used was measured (epoch seconds)
    lower: set = field(default_factory=set)  # data keys whose load outlasted the probe: a lower bound
    failed: dict = field(default_factory=dict)  # data key -> why it could not be loaded
    setup_s: float = 0.0  # a run's fixed setup (reference training)
    book_s: float = 0.0  # the engine's bookkeeping per client step (reference training)

    def text(self, executor: str) -> str:
        start = {
            "pool": f"start-up {short_s(self.startup_s)} per worker process, once",
            "process": f"start-up {short_s(self.startup_s)} per run (a fresh process each)",
            "inline": "no process start-up (the runs go in this process)",
        }[executor]
        keeps = " (a worker keeps its last dataset)" if executor == "pool" else " a run"
        data = []
        for key, name in self.names.items():
            if key in self.failed:
                data.append(f"{name} not measured ({self.failed[key]})")
                continue
            load = self.load_s.get(key)
            if load is None:
                continue
            data.append(f"{name} {'> ' if key in self.lower else ''}{short_s(load)}")
        when = time.strftime("%Y-%m-%d", time.localtime(self.at)) if self.at else "now"
        parts = max(self.part_s.values(), default=0.0)
        measured = (
            "measured now on this machine" if self.measured == "measured now" else f"measured on this machine {when}"
        )
        return (
            f"{start}; data loading {', '.join(data) or 'none'}{keeps} and partitioning up to {short_s(parts)} a run; "
            f"setup {short_s(self.setup_s)} a run and the "
            f"engine's bookkeeping {self.book_s * 1e3:.2g} ms a client step (a reference FedAvg training on digits); "
            f"these {measured} (cached)"
        )


def short_s(s: float) -> str:
    """``0.31 s``, ``3.1 s``, ``< 0.01 s``; a minute and more as :func:`fmt_duration`."""
    if s < 0.01:
        return "< 0.01 s"
    return f"{s:.2g} s" if s < 10 else fmt_duration(s)


def _timings_path():
    from fedcli.paths import cache_dir

    return cache_dir() / TIMINGS_FILE


def _read_timings() -> dict:
    import json

    try:
        got = json.loads(_timings_path().read_text())
        return got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_timings(data: dict) -> None:
    import json

    path = _timings_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a folder that cannot be written only costs a measurement next time


def _startup_key() -> str:
    import sys
    from importlib import metadata

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "?"
    return f"{sys.executable}|torch {torch}|{os.cpu_count()} cores"


def _dir_stamp(path) -> str:
    try:
        st = os.stat(path)
        return f"{st.st_size}:{st.st_mtime_ns}"
    except (OSError, TypeError):
        return "-"


def _keys(cfg: dict) -> tuple[str, str]:
    """(data key, partition key) of a run's config: what its loading and its partitioning depend on."""
    from fedcli.config import TrainConfig
    from fedcli.data.setup import data_dir

    c = TrainConfig(**cfg)
    data = repr((_data_key(cfg), _dir_stamp(data_dir(c))))
    partition_key = repr(
        (
            data,
            c.partition,
            c.clients,
            c.alpha,
            c.classes_per_client,
            c.writers_per_client,
            c.client_test_fraction,
            c.min_size,
            c.partition_file,
            _dir_stamp(c.partition_file),
        )
    )
    return data, partition_key


def _probe(jobs: list[dict], reference: bool, warm: bool = False) -> tuple[dict, bool]:
    """Run the measuring child (``python -m fedcli.sweep.probe``: the datasets of ``jobs``, then the reference training
    when asked); its JSON lines (what it finished within :data:`PROBE_LIMIT_S`) and whether it was stopped.

    ``warm`` (the sweep's runs go to the default worker processes, forked from the warm server): a probe of data alone
    is forked from that server too (fedcli/runtime/warm.py), so the sweep imports torch once for the probe and its
    workers instead of twice; it loads the data as those workers will. A probe that measures the start-up (the
    reference, a stale cache) is always a new interpreter: the start-up it times is a fresh process's."""
    import json

    argv = [repr(time.time()), "reference" if reference else "-"]
    forked = warm and not reference
    if forked:
        try:
            out, stopped = _probe_warm(argv, jobs)
        except (OSError, RuntimeError):  # no warm server here (multiprocessing could not start one): a new interpreter
            forked = False
    if not forked:
        out, stopped = _probe_fresh(argv, jobs)
    got: dict = {"data": {}, "part": {}, "failed": {}}
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "startup" in rec:
            if not forked:  # a fork's start-up is not a new process's: the cached one stands
                got["startup"] = rec["startup"]
        elif "reference" in rec:
            got["reference"] = reference_costs(rec["reference"], rec["step"])
        elif "data" in rec:
            got["data"][rec["data"]] = rec["s"]
        elif "part" in rec:
            got["part"][rec["part"]] = rec["s"]
        elif "failed" in rec:
            got["failed"][rec["failed"]] = rec["why"]
    return got, stopped


def _probe_fresh(argv: list[str], jobs: list[dict]) -> tuple[str, bool]:
    """The probe as a new interpreter, the jobs on its standard input: (its standard output, stopped at the limit)."""
    import json
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "fedcli.sweep.probe", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        return proc.communicate(json.dumps(jobs), timeout=PROBE_LIMIT_S)[0], False
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0], True


def _probe_warm(argv: list[str], jobs: list[dict]) -> tuple[str, bool]:
    """The probe forked from the warm server, the jobs as its third argument, its output (standard output and error)
    into an unnamed temporary file: (that output, stopped at the limit)."""
    import json
    import signal
    import subprocess
    import tempfile

    from fedcli.runtime import warm

    with tempfile.TemporaryFile("w+") as log:
        proc = warm.Command("fedcli.sweep.probe", "fedcli.sweep.probe:main", [*argv, json.dumps(jobs)], log.fileno())
        stopped = False
        try:
            proc.wait(PROBE_LIMIT_S)
        except subprocess.TimeoutExpired:
            stopped = True
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        log.seek(0)
        return log.read(), stopped


def _uncached(configs: list[dict], data_c: dict, part_c: dict, failed: dict) -> tuple[dict, dict]:
    """Each config's dataset name by data key, and the loads to measure: by data key, a config and its partitions
    whose times the cache lacks (datasets that failed to load left out; those not on disk, :func:`_not_on_disk`, added
    to ``failed`` and left out)."""
    names, wanted = {}, {}
    for cfg in configs:
        dk, pk = _keys(cfg)
        names.setdefault(dk, cfg["dataset"])
        if dk not in failed and (dk not in data_c or pk not in part_c):
            job = wanted.setdefault(dk, {"key": dk, "config": cfg, "parts": {}})
            job["parts"].setdefault(pk, cfg)
    for dk, why in _not_on_disk(wanted).items():  # a process started to load these would only fail
        failed[dk] = why
        del wanted[dk]
    return names, wanted


def _not_on_disk(wanted: dict) -> dict:
    """Of the datasets to measure, those whose files are not where their runs read them (the sweep's own data check,
    fedcli/data/preflight.py: a look at the files, no load, no torch), by data key with the check's reason: not probed,
    their load could only fail (a paper recipe planned before its data is downloaded). A run that would download its
    data (``download``) is probed as before."""
    from fedcli.data.preflight import look

    out = {}
    for dk, job in wanted.items():
        if job["config"].get("download"):
            continue
        try:
            problem = look(job["config"]).problem
        except Exception:  # a config the check cannot read: the probe says what is wrong
            continue
        if problem:
            out[dk] = problem
    return out


def _bound_stopped(ov: Overheads, got: dict, wanted: dict, failed: dict, elapsed: float) -> None:
    """A probe stopped at its limit: the dataset it was loading gets the time left over as a lower bound."""
    spent = elapsed - ov.startup_s - sum(got["data"].values()) - sum(got["part"].values())
    for dk in wanted:
        if dk not in got["data"] and dk not in failed:
            ov.load_s[dk], spent = max(0.0, spent), 0.0
            ov.lower.add(dk)


def overheads(configs: list[dict], warm: bool = False) -> Overheads:
    """Start-up and data-loading times for these runs' configs: from the cache, else measured now in a child process
    (at most :data:`PROBE_LIMIT_S` seconds; forked warm with ``warm`` when only data is measured: :func:`_probe`) and
    cached for the next sweep."""
    cache = _read_timings()
    now = time.time()
    skey = _startup_key()
    start = cache.get("startup", {}).get(skey)
    fresh_start = isinstance(start, dict) and now - start.get("at", 0) < STARTUP_MAX_AGE_S
    data_c, part_c = cache.setdefault("data", {}), cache.setdefault("part", {})
    failed = _shared("failed")  # data key -> why it could not be loaded (not cached on disk)
    names, wanted = _uncached(configs, data_c, part_c, failed)
    ov = Overheads(start["s"] if fresh_start else 0.0, {}, {}, names)
    if fresh_start:
        ov.setup_s, ov.book_s = start.get("setup", 0.0), start.get("book", 0.0)
    ats = [start["at"]] if fresh_start else []
    if wanted or not fresh_start:
        jobs = [{"key": j["key"], "config": j["config"], "parts": list(j["parts"].items())} for j in wanted.values()]
        t0 = time.time()
        got, stopped = _probe(jobs, reference=not fresh_start, warm=warm)
        ov.measured = "measured now"
        if "startup" in got and (fresh_start or "reference" in got):
            ov.startup_s = got["startup"]
            if "reference" in got:
                ov.setup_s, ov.book_s = got["reference"]
            cache.setdefault("startup", {})[skey] = {
                "s": ov.startup_s,
                "setup": ov.setup_s,
                "book": ov.book_s,
                "at": now,
            }
            ats.append(now)
        elif "startup" in got:  # the reference training did not finish: start-up measured, the rest not
            ov.startup_s = got["startup"]
        elif not fresh_start:  # it never finished its imports: the start-up took at least that long
            ov.startup_s = time.time() - t0
        for dk, s in got["data"].items():
            data_c[dk] = {"s": s, "at": now}
        for pk, s in got["part"].items():
            part_c[pk] = {"s": s, "at": now}
        failed.update(got["failed"])
        if stopped:  # the dataset it was loading when stopped: at least the time it had spent on it
            _bound_stopped(ov, got, wanted, failed, time.time() - t0)
        _write_timings(cache)
    ov.failed = {dk: failed[dk] for dk in names if dk in failed}
    for cfg in configs:
        dk, pk = _keys(cfg)
        if dk in data_c and dk not in ov.lower:
            ov.load_s[dk] = data_c[dk]["s"]
            ats.append(data_c[dk].get("at", now))
        if pk in part_c:
            ov.part_s[pk] = part_c[pk]["s"]
    ov.at = min(ats, default=now)
    return ov


def run_overhead(cfg: dict, steps: int, ov: Overheads, executor: str, loads: bool = True) -> float:
    """Seconds of one run of ``steps`` client steps beside its model compute: its fixed setup, the engine's
    bookkeeping per client step, its partitioning, its data loading (``loads``: the default workers keep the last
    dataset loaded, so only a worker's first run of a dataset loads it) and its process start-up when each run is a
    fresh process."""
    dk, pk = _keys(cfg)
    fixed = ov.setup_s + steps * ov.book_s + ov.part_s.get(pk, 0.0)
    if executor == "pool":
        return fixed + (ov.load_s.get(dk, 0.0) if loads else 0.0)
    return fixed + ov.load_s.get(dk, 0.0) + (ov.startup_s if executor == "process" else 0.0)


def first_loads(configs: list[dict], jobs: int) -> list[bool]:
    """Which runs, in plan order, load their dataset in the default worker processes: the first ``jobs`` runs of each
    dataset (one per worker; a worker keeps its last dataset)."""
    seen: dict = {}
    out = []
    for cfg in configs:
        dk = _keys(cfg)[0]
        seen[dk] = seen.get(dk, 0) + 1
        out.append(seen[dk] <= jobs)
    return out


def _run_compute(cfg: dict, est: Estimate, cache: dict, steps_cache: dict, mpi: int) -> tuple[float, int] | None:
    """One run's compute seconds (its client steps at the measured step time, and its evaluations) and its client
    steps; None when its data's size or shape is unknown or its step cannot be measured here."""
    from fedcli.errors import FedcliError

    facts = data_facts(cfg, need_size=bool(cfg.get("local_epochs")), cache=cache)
    if facts is None:
        return None
    n = client_steps(cfg, facts)
    if n is None:
        return None
    threads = cfg.get("threads") or 1  # as the run: fedcli/fl/engine.py, default_threads
    key = (
        cfg["model"],
        facts.shape,
        facts.classes,
        facts.tokens,
        cfg["batch_size"],
        cfg.get("mlp_hidden"),
        cfg.get("wrn_depth"),
        cfg.get("wrn_width"),
        threads,
    )
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


def estimate(
    todo: list, done: list, jobs: int = 1, mpi: int = 0, cache: dict | None = None, executor: str | None = None
) -> Estimate:
    """``todo`` and ``done``: planned runs (``.config``, ``.wall_s``) still to run and completed in the sweep folder.
    ``executor``: ``pool`` (the default worker processes), ``process`` (a fresh process per run: ``--mpi``, a Slurm
    job) or ``inline`` (``--in-process``); default ``process`` under ``--mpi``, else ``pool``."""
    cache = {} if cache is None else cache
    executor = executor or ("process" if mpi else "pool")
    est = Estimate(executor=executor)
    steps_cache = _shared("step")

    def run_estimate(cfg: dict) -> tuple[float, int] | None:
        return _run_compute(cfg, est, cache, steps_cache, mpi)

    computed = [(p, run_estimate(p.config)) for p in todo]  # the model steps are timed first: a child process
    # that has just used the cores leaves torch here slow for a second or two (seen on a busy 2-core machine)
    measured = [(p.wall_s, run_estimate(p.config), p) for p in done if p.wall_s]
    # start-up and data loading beside the compute (measured once on this machine, cached: overheads())
    ran = [p for p in done if p.wall_s]
    ov = est.overhead = overheads([p.config for p in todo + ran], warm=executor == "pool") if todo or ran else None
    loads = {
        id(p): first
        for runs in (todo, ran)  # each sweep call starts its own workers
        for p, first in zip(runs, first_loads([p.config for p in runs], max(1, jobs)) if ov else [])
    }

    def extra(p, steps: int) -> float:
        return run_overhead(p.config, steps, ov, executor, loads[id(p)]) if ov else 0.0

    for p, r in computed:
        if r is None:
            est.unknown.append(f"{p.name} ({p.config['dataset']}: data size or shape unknown)")
            continue
        est.compute_s += r[0]
        est.client_steps += r[1]
        est.per_run[id(p)] = r[0] + extra(p, r[1])
    measured = [(w, r[0] + extra(p, r[1])) for w, r, p in measured if r is not None and r[0] > 0]
    if measured:
        est.calibrated = len(measured)
        est.factor = sum(w for w, _ in measured) / sum(e for _, e in measured)
    est.per_run = {k: v * est.factor for k, v in est.per_run.items()}
    est.startup_s = ov.startup_s if ov and executor == "pool" and est.per_run else 0.0
    total = sum(est.per_run.values())
    longest = max(est.per_run.values(), default=0.0)
    est.seconds = est.startup_s + max(total / max(1, jobs), longest)
    # the load now, unless completed runs calibrated the estimate: their wall times carry the load they ran under
    est.load = None if est.calibrated else load_factor(jobs * max(1, mpi), max(est.threads, default=1))
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
