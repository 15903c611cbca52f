"""The paper-scale check: every recipe's every ``[[runs]]`` entry at ``--scale paper``, on data in the real on-disk
formats (tests/paperdata.py), with only its budget cut, trained in this process; it must build, train, evaluate and
write its CSVs.

The cut (:func:`cut`): one round (``rounds = 1``) with one evaluation (``eval_every = 1``); a cohort of
``COHORT`` clients (``active_ratio = COHORT / clients``), or, for the methods that need every client in every round
(APPLE, FedAMP: the config refuses a smaller ratio), that many clients in all (more where a pathological partition
needs them to deal every class); ``--local-epochs`` cut to about ``EPOCH_STEPS`` steps for a client of the mean size;
the data folder of the generated dataset; one process, one thread, the CPU. Every other key is the recipe's,
resolved by the sweep's own code (``read_sweep`` and ``run_config``: the recipe's ``[base]``, ``[scale.paper]``, the
run and its ``scale.paper``). Entries whose one round is slow on a CPU (``LIGHT_MODELS``, ``LIGHT_ALGOS``: the
ResNet18/WRN models, pFedMe, FedRep, APPLE, FedAMP) get a smaller cut of their local work: two clients, at most
``LIGHT_STEPS`` local steps (tau) or about that many a client (local epochs).

``python tests/paperkit.py`` (``make paper-check``) runs them all and prints and writes the table (entry, outcome,
seconds); tests/sweep/test_paper_scale.py runs one entry per dataset and model family in ``make test``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(Path(__file__).resolve().parent) not in sys.path:  # run as a script: paperdata beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from paperdata import WRITERS  # noqa: E402

RECIPES = ROOT / "recipes"
COHORT = 3  # clients per round after the cut
LIGHT_STEPS = 2  # local steps per round of a LIGHT entry
EPOCH_STEPS = 5  # at most about this many local steps per round for a client of the mean size (--local-epochs)
LIGHT_MODELS = {"resnet18", "resnet18-cifar", "wrn"}
LIGHT_ALGOS = {"pfedme", "fedrep", "apple", "fedamp"}
#: entries the divergence guard stops at paper scale (exit 4, "training diverged"), each with the evidence that the same
#: entry diverges on real data too: such an entry passes as "diverged" when its run folder is whole (manifest status
#: diverged, an evaluation in metrics.csv, layers.csv). Any other exit 4 fails. All three are Fed-AMS on MNIST's MLP:
#: without LAMB's trust ratio, the first round's steps are m / sqrt(v_hat_0) = m / sqrt(eps) (Algorithm 1).
_FEDAMS_REAL = (
    "on the real MNIST test split too (8,000 images over 10 clients, the entry's other keys): exit 4 in "
    "round 1, train loss {} at iteration {}"
)
DIVERGES = {
    "recipes/fedlamb/claim-rounds-to-target.toml | MLP Fed-AMS lr 0.003": "every seed of the recipe's own cpu-scale sweep stops in round 1 "  # noqa: E501
    "(results/reproduce/fedlamb/README.md); " + _FEDAMS_REAL.format("2,373", 7),
    "recipes/fedlamb/fig3-noniid.toml | MNIST-MLP E1 Fed-AMS": _FEDAMS_REAL.format("7,696", 7),
    "recipes/fedlamb/fig3-noniid.toml | MNIST-MLP E3 Fed-AMS": _FEDAMS_REAL.format("4,977", 19),
}
#: samples written per dataset: enough for the recipes' partitions (Dirichlet(0.1) over 128 clients of at least 10
#: samples each needs about 30,000 CIFAR-10 or MNIST images; 50 clients of 5 FEMNIST writers), small images otherwise
SIZES = {
    "cifar10": dict(n_train=30000, n_test=100),
    "cifar100": dict(n_train=3000, n_test=100),
    "tinyimagenet": dict(per_class=4, n_val=100),
    "femnist": dict(writers=300, per_writer=6),
    "mnist": dict(n_train=30000, n_test=100),
    "fmnist": dict(n_train=30000, n_test=100),
    "emnist": dict(n_train=3000, n_test=100),
    "agnews": dict(n_train=4000, n_test=100),
}


def write_data(root: Path, names=None) -> dict[str, Path]:
    """Every dataset (``names``: those) in its real format under ``root/<name>``; returns the ``--data-dir`` of each."""
    dirs = {}
    for name, writer in WRITERS.items():
        if names is not None and name not in names:
            continue
        d = Path(root) / name
        if not (d / ".complete").is_file():
            writer(d, **SIZES[name])
            (d / ".complete").write_text("")
        dirs[name] = d
    return dirs


@dataclass
class Entry:
    recipe: str  # path relative to the repository
    run: object  # fedcli.recipes.SweepRun at --scale paper
    outcome: str = ""
    seconds: float = 0.0
    detail: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.recipe} | {self.run.name}"

    @property
    def values(self) -> dict:
        return self.run.values


def entries(scale: str = "paper") -> list[Entry]:
    """Every ``[[runs]]`` entry of every recipe that exists at ``scale``, in file order, as the sweep reads them."""
    from fedcli.recipes import read_sweep

    out = []
    for path in sorted(RECIPES.rglob("*.toml")):
        recipe = read_sweep(path, scale)
        out += [Entry(path.relative_to(ROOT).as_posix(), run) for run in recipe.runs]
    return out


def family(model: str) -> str:
    """A model's family (resnet18 and resnet18-cifar are one)."""
    return model.split("-")[0]


def signature(e: Entry, cfg=None) -> tuple:
    v = {**(cfg.to_dict() if cfg is not None else {}), **e.values}
    return v.get("dataset"), family(str(v.get("model"))), v.get("algo")


def coverage_order(items: list[Entry]) -> list[Entry]:
    """The entries with a (dataset, model family, method) not seen before first, then the rest; each part by dataset
    (file order within one), so that the sweep's memo of the last loaded dataset serves the next entry."""
    seen, first, rest = set(), [], []
    for e in items:
        (rest if signature(e) in seen else first).append(e)
        seen.add(signature(e))
    by_data = lambda e: str(e.values.get("dataset"))  # noqa: E731
    return sorted(first, key=by_data) + sorted(rest, key=by_data)


def cut(e: Entry, data_dirs: dict[str, Path], out: Path, quick: bool = False, **overrides):
    """The entry's validated TrainConfig with its budget cut (module docstring); ``quick``: the LIGHT cut with one
    local step, whatever the entry (``make test``'s sample); ``overrides``: keys set after the cut (``make gpu-paper``:
    the device, the precision, more rounds)."""
    from fedcli.recipes import run_config

    full = run_config(e.run, 0, out)  # as the recipe says; its ConfigError is the entry's failure
    extra = {
        "rounds": 1,
        "eval_every": 1,
        "data_dir": str(data_dirs.get(full.dataset, "")),
        "device": "cpu",
        "threads": 1,
        "workers": 1,
        "download": False,
    }
    light = quick or full.model in LIGHT_MODELS or full.algo in LIGHT_ALGOS
    steps = 1 if quick else LIGHT_STEPS
    cohort = 2 if light else COHORT
    active = max(1, int(round(full.active_ratio * full.clients)))
    if full_participation(e, out, extra, full.clients):  # APPLE, FedAMP: fewer clients, all of them (every class dealt)
        if full.partition == "pathological" and full.pathological_rule != "shards":
            cohort = max(cohort, -(-data_info(full.dataset, data_dirs)[0] // full.classes_per_client))
        extra.update(active_ratio=1.0, clients=cohort)
    elif active > cohort:
        extra["active_ratio"] = cohort / full.clients
    if full.local_epochs:  # about `steps` steps for a client of the mean size
        _, pool = data_info(full.dataset, data_dirs, full.data_pool)
        clients = extra.get("clients", full.clients)
        extra["local_epochs"] = min(
            full.local_epochs, (steps if light else EPOCH_STEPS) * full.batch_size * clients / pool
        )
    elif light:
        extra["tau"] = min(full.tau, steps)
    return run_config(e.run, 0, out, {**extra, **overrides})


def full_participation(e: Entry, out: Path, extra: dict, clients: int) -> bool:
    """Whether the entry's method refuses a cohort smaller than every client (the config's own rule says)."""
    from fedcli.errors import ConfigError
    from fedcli.recipes import run_config

    try:
        run_config(e.run, 0, out, {**extra, "active_ratio": 1.0 / max(2, clients)})
    except ConfigError as err:
        return err.key == "active_ratio" and "every client in every round" in str(err)
    return False


@functools.lru_cache(maxsize=None)
def _info(name: str, data_dir: str, pool: str) -> tuple[int, int]:
    from fedcli.data.datasets import load_dataset

    d = load_dataset(name, Path(data_dir))
    return d.num_classes, len(d.train_y) + (len(d.test_y) if pool == "train+test" else 0)


def data_info(name: str, data_dirs: dict[str, Path], pool: str = "train") -> tuple[int, int]:
    """(classes, samples the partition splits) of a generated dataset."""
    return _info(name, str(data_dirs[name]), pool)


def check_run(out: Path, diverged: bool = False) -> str:
    """'' when the run directory holds a completed manifest (``diverged``: one that failed with the divergence guard's
    error) and a metrics.csv whose last evaluation is finite (a diverged run's: whose evaluation row exists), else why
    not."""
    import json

    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return "no readable manifest.json"
    status = manifest.get("status")
    if diverged and not (status == "failed" and str(manifest.get("error", "")).startswith("DivergenceError")):
        return f"manifest status {status!r}, error {manifest.get('error')!r}"
    if not diverged and status != "completed":
        return f"manifest status {status!r}"
    try:
        with open(out / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return "no metrics.csv"
    if not rows:
        return "metrics.csv has no evaluation row"
    bad = [c for c in ("train_loss", "test_loss", "test_acc") if not math.isfinite(float(rows[-1].get(c) or "nan"))]
    if bad and not diverged:
        return f"metrics.csv: non-finite {', '.join(bad)}"
    if not (out / "layers.csv").is_file():
        return "no layers.csv"
    return ""


def run_entry(e: Entry, data_dirs: dict[str, Path], work: Path, quick: bool = False, **overrides) -> Entry:
    """Cut (``overrides``: see :func:`cut`), train in this process (the sweep's ``execute_inline``) and check one entry;
    fills outcome and seconds."""
    from fedcli.errors import FedcliError
    from fedcli.sweep.executors import execute_inline
    from fedcli.sweep.run import slugify

    t0 = time.perf_counter()
    out = work / slugify(e.id)
    work.mkdir(parents=True, exist_ok=True)
    try:
        cfg = cut(e, data_dirs, out, quick, **overrides)
    except FedcliError as err:
        e.outcome, e.seconds = f"config: {err}", time.perf_counter() - t0
        return e
    e.detail = {
        "dataset": cfg.dataset,
        "model": cfg.model,
        "algo": cfg.algo,
        "clients": cfg.clients,
        "cohort": max(1, int(round(cfg.active_ratio * cfg.clients))),
        "tau": cfg.tau,
        "local_epochs": cfg.local_epochs,
    }
    code, error, _ = execute_inline(cfg.to_dict(), work / f"{out.name}.log")
    e.detail["exit"] = code
    if code == 4 and e.id in DIVERGES:  # a divergence seen on real data too: the run folder must still be whole
        problem = check_run(out, diverged=True)
        e.outcome = f"FAIL {problem}" if problem else "diverged (as on real data; tests/paperkit.py DIVERGES)"
    else:
        problem = f"exit {code}: {error}" if code else check_run(out)
        e.outcome = f"FAIL {problem}" if problem else "ok"
    e.seconds = time.perf_counter() - t0
    return e


def table(done: list[Entry]) -> str:
    lines = ["| entry | dataset / model / method | outcome | seconds |", "|---|---|---|---:|"]
    for e in done:
        d = e.detail
        what = f"{d.get('dataset')} / {d.get('model')} / {d.get('algo')}" if d else ""
        outcome = e.outcome.replace("\n", " ")[:300]
        cells = [c.replace("|", "\\|") for c in (e.id, what, outcome)]  # run names hold | (GFM's escape)
        lines.append(f"| {' | '.join(cells)} | {e.seconds:.1f} |")
    return "\n".join(lines)


def machine() -> str:
    import os

    import torch

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return (
        f"{platform.node()}: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch "
        f"{torch.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Every recipe entry at --scale paper, budget cut to one round, on "
        "generated data in the real formats; prints and writes the table."
    )
    p.add_argument("--out", default=str(ROOT / "results" / "paper-check.md"), help="the table (Markdown)")
    p.add_argument("--work", default="", help="folder for the data and the runs (default: a temporary one)")
    p.add_argument("--only", default="", help="entries whose 'recipe | run' contains this text")
    p.add_argument("--datasets", default="", help="only the entries on these datasets (comma separated)")
    p.add_argument("--limit", type=int, default=0, help="at most this many entries (coverage order)")
    p.add_argument("--skip-ok", default="", help="leave out the entries that a previous table (this file) lists as ok")
    p.add_argument(
        "--shard", default="", help="K/N: every N-th entry from the K-th (0-based), for N processes side by side"
    )
    args = p.parse_args(argv)
    from fedcli.sweep.executors import memoize_datasets

    memoize_datasets()  # as a sweep's worker: one dataset loaded for the entries after it

    with tempfile.TemporaryDirectory(prefix="paper-check-") as tmp:
        work = Path(args.work or tmp)
        t0 = time.perf_counter()
        data_dirs = write_data(work / "data")
        names = set(filter(None, args.datasets.split(",")))
        todo = coverage_order(
            [e for e in entries() if args.only in e.id and (not names or e.values.get("dataset") in names)]
        )
        if args.skip_ok:
            done_before = ok_entries(Path(args.skip_ok))
            todo = [e for e in todo if e.id not in done_before]
        if args.shard:
            k, n = (int(x) for x in args.shard.split("/"))
            todo = todo[k::n]
        todo = todo[: args.limit] if args.limit else todo
        print(f"paper-check: {len(todo)} entries; data written in {time.perf_counter() - t0:.1f} s", flush=True)
        done = []
        for i, e in enumerate(todo, 1):
            run_entry(e, data_dirs, work / "runs")
            if e.detail.get("exit", 0) > 128:  # stopped by a signal (fedcli train's handlers caught it): stop here
                print(f"paper-check: interrupted during {e.id}", flush=True)
                break
            done.append(e)
            print(f"[{i}/{len(todo)}] {e.outcome[:160]:<6} {e.seconds:7.1f} s  {e.id}", flush=True)
            write_table(Path(args.out), done, len(todo), time.perf_counter() - t0)
    failed = [e for e in done if not passed(e.outcome)]
    diverged = sum(passed(e.outcome) and e.outcome != "ok" for e in done)
    print(
        f"paper-check: {len(done) - len(failed) - diverged} of {len(done)} entries ok"
        + (f", {diverged} diverged as on real data" if diverged else "")
        + f", {len(failed)} failed, "
        f"{time.perf_counter() - t0:.0f} s in all; table in {args.out}"
    )
    return 1 if failed else 0


def passed(outcome: str) -> bool:
    """Whether an entry's outcome passes the check: it completed, or it diverged as it does on real data (DIVERGES)."""
    return outcome == "ok" or outcome.startswith("diverged (as on real data")


def ok_entries(path: Path) -> set[str]:
    """The ids that a table written by :func:`write_table` lists with the outcome ok (cells split at unescaped |)."""
    import re

    ids = set()
    for line in path.read_text().splitlines():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]
        if len(cells) >= 5 and cells[1].startswith("recipes/") and passed(cells[3]):
            ids.add(cells[1])
    return ids


def write_table(path: Path, done: list[Entry], total: int, seconds: float) -> None:
    ok = sum(e.outcome == "ok" for e in done)
    diverged = sum(passed(e.outcome) and e.outcome != "ok" for e in done)
    head = (
        f"# Paper-scale check\n\n`make paper-check` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{machine()}): every recipe entry at `--scale paper`, budget cut to one round (tests/paperkit.py), on "
        f"generated data in each loader's real format.\n\n**{ok} of {len(done)} entries ok**"
        + (f", {diverged} diverged as on real data (`DIVERGES` in tests/paperkit.py)" if diverged else "")
        + f" ({len(done)} of {total} run), {seconds:.0f} s in all.\n\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + table(done) + "\n")


if __name__ == "__main__":
    sys.exit(main())
