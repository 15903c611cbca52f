"""``fedcli bench``: fedcli against what a researcher would use instead, on the same data and the same cores.

Two kinds of workload, each system measured in its own fresh process, one after another in one run:

``fedala`` (FedALA's MNIST setting, FedAvg rounds: 20 clients all active, 2 classes each, cnn4, batch 10,
1 local epoch, lr 0.1, 1 torch thread per process). Seconds per round (local training of the whole cohort,
aggregation, evaluation of the global model on the test set), median over the rounds after the first:

- ``fedcli``: ``fedcli train`` as a user runs it (``--workers`` auto: one process per physical core);
- ``loop``: what PFLlib does: one ``nn.Module`` and ``torch.optim.SGD`` per client, the clients one after
  another, FedAvg by a weighted sum of the clients' parameters;
- ``flower``: Flower's simulation engine (Ray, one CPU per client, as many clients at a time as cores), the
  same client training inside a ``ClientApp``, FedAvg and a centralized evaluation in the ``ServerApp``
  (needs the optional ``bench`` extra: ``make install-bench``; skipped with a note without it);
- ``bound``: cores x the one-thread training throughput of one cnn4 at batch K x B (200);
- ``floor``: cores x the one-thread training throughput of one cnn4 at batch B (10): the least training time
  of any system that trains each client's own model at the clients' batch size with these kernels.

All three draw each client's mini-batches from the same plan (keyed by seed, round, client) and start from the
same model, so their accuracy after the same rounds must agree up to float rounding: the table shows it.

Throughput workloads ``a`` (femnist_cnn, 32 clients, batch 32), ``b`` (resnet20, 32 clients) and ``c``
(mlp, 128 clients) on random data of the dataset's shape: client samples per second of local training for
fedcli (the engine with its worker pool, 5 local steps per round), the sequential per-client loop at 1 thread
and at one thread per core (the faster counts), and the bound above.
"""

from __future__ import annotations

import copy
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from fedcli.bench.startup import load_average


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    input_shape: tuple
    num_classes: int
    clients: int
    batch: int = 32


WORKLOADS = {
    "a": Workload("a: femnist_cnn, FEMNIST-shaped, 32 clients", "femnist_cnn", (1, 28, 28), 62, 32),
    "b": Workload("b: resnet20, CIFAR-shaped, 32 clients", "resnet20", (3, 32, 32), 10, 32),
    "c": Workload("c: mlp, MNIST-shaped, 128 clients", "mlp", (1, 28, 28), 10, 128),
}
ROUND_WORKLOADS = ("fedala",)
LOCAL_STEPS = 5  # local steps per round of the throughput workloads


def mnist_dir() -> Path | None:
    """The MNIST test split beside the repository (as the FedALA smoke recipes use it), or data/mnist."""
    for d in (Path("../shared/datasets/mnist-t10k"), Path("data/mnist")):
        if any(d.glob("t10k-images*")) or any(d.glob("train-images*")):
            return d
    return None


# --------------------------------------------------------------------------------------------- FedALA setting
@dataclass
class RoundSetting:
    rounds: int = 5
    clients: int = 20
    batch: int = 10
    lr: float = 0.1
    seed: int = 0
    data_dir: str = ""  # MNIST; empty: digits (8x8, so the mlp instead of cnn4)

    def config(self, workers: int = 0):
        from fedcli.config import TrainConfig

        mnist = bool(self.data_dir)
        return TrainConfig(
            algo="fedavg",
            dataset="mnist" if mnist else "digits",
            data_dir=self.data_dir,
            holdout_fraction=0.2 if mnist else 0.0,
            partition="pathological",
            classes_per_client=2,
            clients=self.clients,
            active_ratio=1.0,
            client_test_fraction=0.25,
            model="cnn4" if mnist else "mlp",
            batch_size=self.batch,
            local_epochs=1.0,
            rounds=self.rounds,
            lr=self.lr,
            weighting="samples",
            eval_every=1,
            seed=self.seed,
            device="cpu",
            threads=1,
            workers=workers,
            checkpoint_every=0,
        ).validate()


def setting_data(cfg):
    """Dataset, partition, per-client training indices and sizes, as ``fedcli train`` has them."""
    from fedcli.data.setup import load_data_and_partition

    dataset, partition = load_data_and_partition(cfg)
    indices = [torch.as_tensor(ix, dtype=torch.long) for ix in partition.train]
    return dataset, partition, indices


_CACHE: dict = {}


def cached_setting(setting: dict):
    """(config, dataset, client indices, a model to train in) of a round setting, made once per process
    (Flower's Ray workers run many clients one after another)."""
    key = json.dumps(setting, sort_keys=True)
    if key not in _CACHE:
        torch.set_num_threads(1)
        cfg = RoundSetting(**setting).config()
        dataset, _, indices = setting_data(cfg)
        _CACHE[key] = (cfg, dataset, indices, initial_model(cfg, dataset))
    return _CACHE[key]


def initial_model(cfg, dataset) -> torch.nn.Module:
    """The model every system starts from: fedcli's initialization for this seed."""
    from fedcli.fl.engine import build_run_model
    from fedcli.fl.rng import key

    torch.manual_seed(key(cfg.model_seed(), "init"))  # --init-seed (default: --seed)
    return build_run_model(cfg, dataset)


def client_plan(cfg, round_idx: int, client: int, indices):
    """Client ``client``'s mini-batches of round ``round_idx`` (fedcli's plan, keyed by seed, round, client):
    index rows [steps, B] and sample weights (0 for padding), the steps of ``epoch_steps``."""
    from fedcli.fl.budget import epoch_steps
    from fedcli.fl.cohort import BatchSource, make_plan

    steps = epoch_steps(int(indices[client].numel()), cfg.local_epochs, cfg.batch_size, cfg.drop_last)
    plan = make_plan(BatchSource(cfg.seed, indices, cfg.batch_size, cfg.drop_last), round_idx, [client], steps)
    return plan.idx[:, 0], plan.mask[:, 0]


def plain_client_update(model: torch.nn.Module, x_all, y_all, idx, mask, lr: float) -> None:
    """The per-client training loop of PFLlib-style code: forward, backward, ``torch.optim.SGD`` step per batch."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for j in range(idx.shape[0]):
        rows, w = idx[j], mask[j]
        opt.zero_grad(set_to_none=True)
        out = model(x_all[rows])
        if bool((w == 1).all()):
            loss = F.cross_entropy(out, y_all[rows])
        else:  # a client with fewer samples than a batch: its padding weighs 0, as in fedcli
            loss = (F.cross_entropy(out, y_all[rows], reduction="none") * w).sum() / w.sum()
        loss.backward()
        opt.step()


@torch.no_grad()
def plain_evaluate(model: torch.nn.Module, x, y, batch: int = 1024) -> tuple[float, float]:
    """(mean loss, accuracy) of ``model`` on (x, y)."""
    model.eval()
    loss, correct = 0.0, 0
    for s in range(0, len(y), batch):
        out = model(x[s : s + batch])
        loss += F.cross_entropy(out, y[s : s + batch], reduction="sum").item()
        correct += int((out.argmax(1) == y[s : s + batch]).sum())
    return loss / len(y), correct / len(y)


def _steady(times: list[float]) -> float:
    """Median round time after the first round (which pays the warm-up)."""
    return statistics.median(times[1:] if len(times) > 1 else times)


def run_fedcli_rounds(setting: dict) -> dict:
    """``fedcli train`` in this process with the worker pool it would choose; round times from metrics.csv."""
    import csv

    from fedcli.comm.communicator import Communicator
    from fedcli.runner import launch, run_train

    t0 = time.perf_counter()
    cfg = RoundSetting(**setting).config()
    with tempfile.TemporaryDirectory() as tmp:
        cfg.out = str(Path(tmp) / "run")
        with launch(cfg, Communicator()) as (comm, data):
            workers, note = comm.size, getattr(comm, "workers_note", "")
            run_train(cfg, comm=comm, quiet=True, data=data)
        with open(Path(cfg.out) / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
    walls = [float(r["wall_s"]) for r in rows]
    times = [walls[0]] + [b - a for a, b in zip(walls, walls[1:])]
    return {
        "system": "fedcli",
        "impl": f"fedcli train, {workers} worker(s) x 1 thread ({note})",
        "workers": workers,
        "round_s": _steady(times),
        "round_times": times,
        "acc": [float(r["test_acc"]) for r in rows],
        "total_s": time.perf_counter() - t0,
    }


def run_loop_rounds(setting: dict) -> dict:
    """The PFLlib-style loop: every client trains its own copy one after another, then a weighted average."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    cfg = RoundSetting(**setting).config()
    dataset, partition, indices = setting_data(cfg)
    model = initial_model(cfg, dataset)
    sizes = [int(ix.numel()) for ix in indices]
    weights = [n / sum(sizes) for n in sizes]
    clients = [copy.deepcopy(model) for _ in indices]
    times, accs = [], []
    for r in range(cfg.rounds):
        start = time.perf_counter()
        for c, local in enumerate(clients):
            local.load_state_dict(model.state_dict())
            idx, mask = client_plan(cfg, r, c, indices)
            plain_client_update(local, dataset.train_x, dataset.train_y, idx, mask, cfg.lr)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.zero_()
                for w, local in zip(weights, clients):
                    p.add_(local.get_parameter(name), alpha=w)
        accs.append(plain_evaluate(model, dataset.test_x, dataset.test_y)[1])
        times.append(time.perf_counter() - start)
    return {
        "system": "loop",
        "impl": "per-client nn.Module + torch.optim.SGD, one client after another, 1 thread",
        "workers": 1,
        "round_s": _steady(times),
        "round_times": times,
        "acc": accs,
        "total_s": time.perf_counter() - t0,
    }


def run_flower_rounds(setting: dict, python: str | None = None, cores: int = 0) -> dict:
    """Flower's simulation in a child process (``python``: an interpreter with flwr[simulation]; default this one)."""
    python = python or sys.executable
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    env.setdefault("RAY_DEDUP_LOGS", "0")
    probe = subprocess.run(
        [python, "-c", "import flwr, ray; print(flwr.__version__, ray.__version__)"],
        env=env,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return {
            "system": "flower",
            "skipped": "Flower's simulation (flwr with ray) is not installed for "
            + python
            + " (make install-bench, or --flower-python PATH)",
        }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "flower.json"
        t0 = time.perf_counter()
        p = subprocess.run(
            [python, "-m", "fedcli.bench.flower", json.dumps(setting), str(out), str(cores or physical_cores())],
            env=env,
            capture_output=True,
            text=True,
        )
        if p.returncode != 0 or not out.exists():
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            return {"system": "flower", "skipped": "Flower's simulation failed: " + " | ".join(tail)}
        res = json.loads(out.read_text())
    res["total_s"] = time.perf_counter() - t0
    res["round_s"] = _steady(res["round_times"])
    res["impl"] = f"Flower {probe.stdout.split()[0]} simulation (Ray {probe.stdout.split()[1]}), " + res["impl"]
    return res


def physical_cores() -> int:
    from fedcli.comm.workers import physical_cores as cores

    return cores()


# --------------------------------------------------------------------------------------------- per-step paths
def _data(w: Workload, steps: int, device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps, w.clients, w.batch, *w.input_shape, generator=g).to(device)
    y = torch.randint(0, w.num_classes, (steps, w.clients, w.batch), generator=g).to(device)
    return x, y


def _fedcli_step(model, x, y, w: Workload, trainer: str, device, lr: float):
    """The ``fedcli`` path's step (the stacked trainer's grads and SGDStep over all clients) and what it used."""
    from fedcli.config import TrainConfig
    from fedcli.fl.cohort import Cohort
    from fedcli.fl.parts import SGDStep
    from fedcli.fl.trainers import choose_trainer

    cfg = TrainConfig(lr=lr, trainer=trainer)
    tr = choose_trainer(trainer, model, device)
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    cohort = Cohort.from_global(list(range(w.clients)), torch.full((w.clients,), 1.0 / w.clients), params, buffers)
    opt = SGDStep(cfg)
    opt.begin_round(None, cohort)
    mask = torch.ones(w.clients, w.batch, device=device)

    def step(i):
        grads, _ = tr.grads(cohort, x[i], y[i], mask)
        opt.step(cohort, grads, lr)

    return step, tr.name


def _sequential_step(model, x, y, w: Workload, lr: float):
    """The ``sequential`` path's step (K nn.Modules + torch.optim.SGD, one after another) and what it used."""
    models = [copy.deepcopy(model) for _ in range(w.clients)]
    opts = [torch.optim.SGD(m.parameters(), lr=lr) for m in models]

    def step(i):
        for k, (m, o) in enumerate(zip(models, opts)):
            m.train()
            o.zero_grad(set_to_none=True)
            F.cross_entropy(m(x[i, k]), y[i, k]).backward()
            o.step()

    return step, f"per-client nn.Module + torch.optim.SGD, {torch.get_num_threads()} thread(s)"


def _single_step(model, x, y, w: Workload, lr: float, nhwc_path: bool):
    """The ``single`` / ``single-nhwc`` path's step (one model, batch K x B; channels-last) and what it used."""
    from fedcli.fl.trainers import channels_last

    opt = torch.optim.SGD(model.parameters(), lr=lr)
    xs, ys = x.flatten(1, 2), y.flatten(1, 2)
    nhwc = nhwc_path and xs.dim() == 5

    def step(i):
        model.train()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(channels_last(xs[i]) if nhwc else xs[i]), ys[i]).backward()
        opt.step()

    used = (
        f"one model, batch {w.clients * w.batch}{', channels-last' if nhwc else ''}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    return step, used


def _run_path(path: str, w: Workload, steps: int, warmup: int, device_name: str, trainer: str, threads: int) -> dict:
    """One local-training path of workload ``w`` in this process: ``fedcli`` (the stacked trainer, no workers),
    ``sequential`` (K nn.Modules + SGD one after another), ``single`` / ``single-nhwc`` (one model, batch K x B)."""
    from fedcli.models import build_model

    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device_name)
    torch.manual_seed(0)
    model = build_model(w.model, w.input_shape, w.num_classes).to(device)
    x, y = _data(w, steps + warmup, device)
    lr = 0.01
    if path == "fedcli":
        step, used = _fedcli_step(model, x, y, w, trainer, device, lr)
    elif path == "sequential":
        step, used = _sequential_step(model, x, y, w, lr)
    elif path in ("single", "single-nhwc"):
        step, used = _single_step(model, x, y, w, lr, path == "single-nhwc")
    else:
        raise ValueError(path)
    for i in range(warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "path": path,
        "impl": used,
        "seconds": secs,
        "samples_per_s": w.clients * w.batch * steps / secs,
        "peak_bytes": peak,
    }


def _random_dataset(w: Workload):
    """A FedDataset of standard-normal inputs of the workload's shape, enough for every client's LOCAL_STEPS
    batches (seeded: 0)."""
    from fedcli.data.datasets import FedDataset

    g = torch.Generator().manual_seed(0)
    n = w.clients * w.batch * LOCAL_STEPS
    return FedDataset(
        "random",
        torch.randn(n, *w.input_shape, generator=g),
        torch.randint(0, w.num_classes, (n,), generator=g),
        torch.randn(w.num_classes, *w.input_shape, generator=g),
        torch.arange(w.num_classes),
        w.num_classes,
        source={"name": "random", "shape": list(w.input_shape)},
    )


def run_fedcli_throughput(w: Workload, rounds: int) -> dict:
    """fedcli's engine with its worker pool on random data of the workload's shape: client samples / s of
    local training (FedAvg, LOCAL_STEPS steps per round, all clients active), median round after the first."""
    import csv

    from fedcli.comm.communicator import Communicator
    from fedcli.config import TrainConfig
    from fedcli.data.partition import PartitionOptions, make_partition
    from fedcli.runner import launch, run_train

    ds = _random_dataset(w)
    partition = make_partition(ds, PartitionOptions("iid", w.clients, 0))
    cfg = TrainConfig(
        algo="fedavg",
        model=w.model,
        clients=w.clients,
        active_ratio=1.0,
        batch_size=w.batch,
        tau=LOCAL_STEPS,
        rounds=rounds,
        eval_every=1,
        lr=0.01,
        device="cpu",
        threads=1,
        checkpoint_every=0,
    ).validate()
    with tempfile.TemporaryDirectory() as tmp:
        cfg.out = str(Path(tmp) / "run")
        with launch(cfg, Communicator(), data=(ds, partition)) as (comm, data):
            workers, note = comm.size, getattr(comm, "workers_note", "")
            run_train(cfg, comm=comm, quiet=True, data=data)
        with open(Path(cfg.out) / "metrics.csv") as f:
            walls = [float(r["wall_s"]) for r in csv.DictReader(f)]
    times = [walls[0]] + [b - a for a, b in zip(walls, walls[1:])]
    secs = _steady(times)
    return {
        "path": "fedcli",
        "impl": f"fedcli engine, {workers} worker(s) x 1 thread ({note})",
        "workers": workers,
        "seconds": secs,
        "samples_per_s": w.clients * w.batch * LOCAL_STEPS / secs,
        "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


# --------------------------------------------------------------------------------------------- processes
def _worker(q, fn, *args):
    try:
        q.put(fn(*args))
    except BaseException as e:
        import traceback

        q.put({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=4)})


def isolated(fn, *args) -> dict:
    """``fn(*args)`` in a fresh spawned process (its own memory peak, no torch state shared with other paths)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_worker, args=(q, fn, *args))
    p.start()
    res = q.get()
    p.join()
    if "error" in res:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}: {res['error']}\n{res.get('trace', '')}")
    return res


def measure(path: str, w: Workload, steps: int, warmup: int, device: str, trainer: str, threads: int) -> dict:
    return isolated(_run_path, path, w, steps, warmup, device, trainer, threads)


def machine() -> dict:
    return {
        "cpu": platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical_cores(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


# --------------------------------------------------------------------------------------------- the bench
def run_round_workload(setting: RoundSetting, flower_python: str | None, progress) -> dict:
    s = asdict(setting)
    cores = physical_cores()
    res = {"workload": "fedala", "setting": s, "load_before": load_average()}
    label = (
        f"FedALA's MNIST setting: FedAvg, {setting.clients} clients all active, 2 classes each, "
        f"{'cnn4' if setting.data_dir else 'mlp (digits: MNIST not found)'}, batch {setting.batch}, 1 local epoch, "
        f"{setting.rounds} rounds"
    )
    res["label"] = label
    systems = {}
    progress(f"{label}: fedcli")
    systems["fedcli"] = isolated(run_fedcli_rounds, s)
    progress(f"{label}: per-client loop")
    systems["loop"] = isolated(run_loop_rounds, s)
    progress(f"{label}: Flower simulation")
    systems["flower"] = run_flower_rounds(s, flower_python, cores)
    cfg = setting.config()
    samples = _round_samples(cfg)
    shape = (1, 28, 28) if setting.data_dir else (1, 8, 8)
    layouts = ("single", "single-nhwc") if cfg.model != "mlp" else ("single",)

    def training_only(name: str, clients: int, steps: int, warmup: int) -> dict:
        """A round's training samples at cores x the best one-thread throughput of one model at batch clients x B."""
        w = Workload(name, cfg.model, shape, 10, clients, setting.batch)
        best = max((measure(p, w, steps, warmup, "cpu", "auto", 1) for p in layouts), key=lambda r: r["samples_per_s"])
        return {
            "system": name,
            "impl": f"{cores} cores x ({best['impl']})",
            "train_s": samples / (cores * best["samples_per_s"]),
            "samples_per_round": samples,
        }

    progress(f"{label}: bound (one model at batch {setting.clients * setting.batch}, 1 thread)")
    systems["bound"] = training_only("bound", setting.clients, 10, 3)
    progress(f"{label}: floor (one client's model at batch {setting.batch}, 1 thread)")
    systems["floor"] = training_only("floor", 1, 200, 20)
    res["systems"] = systems
    res["load_after"] = load_average()
    f = systems["fedcli"]["round_s"]
    for name in ("loop", "flower"):
        if "round_s" in systems[name]:
            systems[name]["fedcli_speedup"] = systems[name]["round_s"] / f
    return res


def _round_samples(cfg) -> int:
    """Training samples of one round (every client's ``epoch_steps`` batches of B)."""
    _, partition = __import__("fedcli.data.setup", fromlist=["x"]).load_data_and_partition(cfg)
    from fedcli.fl.budget import epoch_steps

    return sum(
        epoch_steps(len(ix), cfg.local_epochs, cfg.batch_size, cfg.drop_last) * cfg.batch_size for ix in partition.train
    )


def run_throughput_workload(key: str, rounds: int, steps: int, warmup: int, progress) -> dict:
    w = WORKLOADS[key]
    cores = physical_cores()
    res = {"workload": key, "label": w.name, "clients": w.clients, "batch": w.batch, "load_before": load_average()}
    progress(f"{w.name}: fedcli")
    fed = isolated(run_fedcli_throughput, w, rounds)
    progress(f"{w.name}: sequential loop, 1 thread")
    seq1 = measure("sequential", w, steps, warmup, "cpu", "auto", 1)
    progress(f"{w.name}: sequential loop, {cores} threads")
    seqn = measure("sequential", w, steps, warmup, "cpu", "auto", cores) if cores > 1 else seq1
    progress(f"{w.name}: bound (one model at batch {w.clients * w.batch}, 1 thread)")
    singles = (
        [measure(p, w, max(2, steps // 2), 1, "cpu", "auto", 1) for p in ("single", "single-nhwc")]
        if len(w.input_shape) == 3
        else [measure("single", w, steps, warmup, "cpu", "auto", 1)]
    )
    best = max(singles, key=lambda r: r["samples_per_s"])
    seq = max((seq1, seqn), key=lambda r: r["samples_per_s"])
    res.update(
        {
            "fedcli": fed,
            "sequential_1": seq1,
            "sequential_n": seqn,
            "single": singles,
            "bound_sps": cores * best["samples_per_s"],
            "bound_impl": f"{cores} cores x ({best['impl']})",
            "speedup_vs_sequential": fed["samples_per_s"] / seq["samples_per_s"],
            "time_vs_bound": cores * best["samples_per_s"] / fed["samples_per_s"],
            "load_after": load_average(),
        }
    )
    return res


def run(
    workloads: list[str],
    *,
    rounds: int = 5,
    steps: int = 3,
    warmup: int = 1,
    data_dir: str | None = None,
    flower_python: str | None = None,
    progress=print,
) -> dict:
    out = {"machine": machine(), "workloads": []}
    for key in workloads:
        if key == "startup":
            from fedcli.bench import startup as bench_startup

            out["workloads"].append(bench_startup.run(progress=progress))
        elif key == "fedala":
            d = data_dir if data_dir is not None else str(mnist_dir() or "")
            out["workloads"].append(
                run_round_workload(RoundSetting(rounds=rounds, data_dir=d), flower_python, progress)
            )
        else:
            out["workloads"].append(run_throughput_workload(key, max(3, rounds - 1), steps, warmup, progress))
    return out


# --------------------------------------------------------------------------------------------- output
def _fedala_table(r: dict):
    """The table of the ``fedala`` workload: per system its round time, accuracy per round, fedcli's speed-up and
    whole run; the floor and bound by training time."""
    from rich.table import Table

    sy = r["systems"]
    t = Table(title=f"fedcli bench, {r['label']}", title_justify="left")
    for col, just in (
        ("system", "left"),
        ("how", "left"),
        ("round (s)", "right"),
        ("accuracy per round", "left"),
        ("fedcli faster by", "right"),
        ("whole run (s)", "right"),
    ):
        t.add_column(col, justify=just, overflow="fold")
    for name in ("fedcli", "loop", "flower"):
        s = sy[name]
        if "skipped" in s:
            t.add_row(name, s["skipped"], "-", "-", "-", "-")
            continue
        t.add_row(
            name,
            s["impl"],
            f"{s['round_s']:.2f}",
            " ".join(f"{a:.3f}" for a in s["acc"]),
            "-" if name == "fedcli" else f"{s['fedcli_speedup']:.2f}x",
            f"{s['total_s']:.1f}",
        )
    for name in ("floor", "bound"):
        if name in sy:
            b = sy[name]
            t.add_row(
                name,
                b["impl"],
                f"{b['train_s']:.2f} (training only)",
                "-",
                f"fedcli round / {name}: {sy['fedcli']['round_s'] / b['train_s']:.2f}x",
                "-",
            )
    t.caption = f"median round after the first; load average before {r['load_before']}, after {r['load_after']}"
    return t


def _throughput_table(r: dict):
    """The table of a throughput workload: client samples / s of fedcli, the sequential loops and the bound."""
    from rich.table import Table

    t = Table(
        title=f"fedcli bench, {r['label']}, batch {r['batch']}: local-training throughput (client samples / s)",
        title_justify="left",
    )
    for col, just in (("path", "left"), ("how", "left"), ("samples / s", "right"), ("fedcli / this", "right")):
        t.add_column(col, justify=just, overflow="fold")
    f = r["fedcli"]["samples_per_s"]
    t.add_row("fedcli", r["fedcli"]["impl"], f"{f:,.0f}", "-")
    for name, s in (("sequential", r["sequential_1"]), ("sequential", r["sequential_n"])):
        t.add_row(name, s["impl"], f"{s['samples_per_s']:,.0f}", f"{f / s['samples_per_s']:.2f}x")
    t.add_row("bound", r["bound_impl"], f"{r['bound_sps']:,.0f}", f"{f / r['bound_sps']:.2f}x")
    t.caption = (
        f"fedcli / best sequential {r['speedup_vs_sequential']:.2f}x; bound / fedcli "
        f"{r['time_vs_bound']:.2f}x; "
        f"load average before {r['load_before']}, after {r['load_after']}"
    )
    return t


def tables(results: dict) -> list:
    """One rich table per workload of ``results`` (startup, fedala, or a throughput workload)."""
    out = []
    for r in results["workloads"]:
        if r["workload"] == "startup":
            from fedcli.bench import startup as bench_startup

            out.append(bench_startup.table(r))
            continue
        out.append(_fedala_table(r) if r["workload"] == "fedala" else _throughput_table(r))
    return out


def targets(results: dict) -> list[str]:
    """The issue's targets, met or not, from this run's ratios."""
    lines = []
    for r in results["workloads"]:
        if r["workload"] == "startup":
            from fedcli.bench import startup as bench_startup

            lines += bench_startup.targets(r)
        elif r["workload"] == "fedala":
            for name, label in (("flower", "Flower's simulation"), ("loop", "the per-client loop")):
                s = r["systems"][name]
                if "fedcli_speedup" in s:
                    ok = s["fedcli_speedup"] >= 2.0
                    why = ""
                    if (
                        not ok and "floor" in r["systems"]
                    ):  # what 2x would take, against what per-client training costs at least
                        why = (
                            f" (2x needs a round of {s['round_s'] / 2:.2f} s; training every client at "
                            f"batch B on all cores "
                            f"takes at least {r['systems']['floor']['train_s']:.2f} s, before evaluation)"
                        )
                    lines.append(
                        f"FedALA setting: fedcli's round {s['fedcli_speedup']:.2f}x faster than {label} "
                        f"(target >= 2x): "
                        f"{'met' if ok else 'MISSED'}{why}"
                    )
                else:
                    lines.append(f"FedALA setting vs {label}: not measured ({s.get('skipped', '')})")
        elif r["workload"] == "a":
            ok1, ok2 = r["speedup_vs_sequential"] >= 1.5, r["time_vs_bound"] <= 1.25
            lines.append(
                f"workload a: {r['speedup_vs_sequential']:.2f}x the sequential loop (target >= 1.5x): "
                f"{'met' if ok1 else 'MISSED'}"
            )
            lines.append(
                f"workload a: {r['time_vs_bound']:.2f}x the bound's time (target <= 1.25x): "
                f"{'met' if ok2 else 'MISSED'}"
            )
    return lines


def to_json(results: dict) -> str:
    return json.dumps(results, indent=2, default=str)
