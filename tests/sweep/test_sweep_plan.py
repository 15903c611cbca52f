"""``fedcli sweep`` says what it will run before it starts: --scale, the budget, client steps and a time estimate."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedcli.config import TrainConfig
from fedcli.sweep import estimate as est
from simkit import cli

RECIPE = """\
title = "tiny"
paper = "A paper, Table 9"
seeds = 2

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "16"
clients = 4
active_ratio = 0.5
iterations = 400
threads = 1

[scale.paper]

[scale.smoke]
iterations = 10

[[runs]]
name = "FedAvg"
algo = "fedavg"
tau = 2

[[runs]]
name = "FedLAMA"
algo = "fedlama"
tau = 2
phi = 2
"""


def test_scale_is_required_when_a_recipe_has_several(tmp_path, capsys):
    r = tmp_path / "r.toml"
    r.write_text(RECIPE)
    code, _, err = cli(["sweep", str(r), "--dry-run", "--out", str(tmp_path / "s")], capsys)
    assert code == 2 and "has scales paper, smoke: choose one with --scale paper" in err and "--scale smoke" in err
    r.write_text(RECIPE.replace("[scale.paper]\n", ""))  # one scale: it is the default
    code, _, err = cli(["sweep", str(r), "--dry-run", "--out", str(tmp_path / "s")], capsys)
    assert code == 0 and "scale smoke" in err, err


def test_plan_says_runs_budget_and_client_steps(tmp_path, capsys):
    r = tmp_path / "r.toml"
    r.write_text(RECIPE)
    code, out, err = cli(["sweep", str(r), "--scale", "smoke", "--dry-run", "--out", str(tmp_path / "s")], capsys)
    assert code == 0, err
    text = " ".join(err.split())
    assert "2 runs x 2 seeds = 4 trainings; 0 already completed, 4 to run, 1 at a time" in text
    # the paper's name as the recipe gives it, then the sentence goes on (not "...leave open's setting": issue 57)
    assert (
        "scale smoke: a reduced version of scale paper, the setting of A paper, Table 9; it checks the pipeline" in text
    )
    assert "'s setting" not in text
    # 4 trainings x 10 iterations x 2 clients per round (0.5 of 4)
    assert "budget: 10 local iterations per run; 80 client steps; estimated ~" in text
    assert "an estimate; basis: model compute" in text and "measured model step (mlp/b32" in text
    assert "start-up" in text and "per worker process, once" in text and "data loading digits" in text
    assert "measured on this machine" in text or "measured now on this machine" in text
    code, _, err = cli(
        ["sweep", str(r), "--scale", "paper", "--dry-run", "--quiet", "--out", str(tmp_path / "p")], capsys
    )
    assert code == 0 and "client steps" not in err  # --quiet: no plan


def test_the_plan_says_where_runs_go_without_a_gpu(tmp_path, capsys, monkeypatch):
    """Issue 47: `--dry-run --runs-per-gpu auto` on a machine without CUDA said nothing about devices, while --help
    says "the plan says how many run on each device". No nvidia-smi on the PATH is such a machine to fedcli."""
    import sys

    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{Path(sys.executable).parent}")
    r = tmp_path / "r.toml"
    r.write_text(RECIPE)
    code, _, err = cli(
        [
            "sweep",
            str(r),
            "--scale",
            "smoke",
            "--dry-run",
            "--runs-per-gpu",
            "auto",
            "--jobs",
            "2",
            "--out",
            str(tmp_path / "s"),
        ],
        capsys,
    )
    assert code == 0, err
    assert "  devices: no CUDA device: runs on the CPU" in err.splitlines(), err


def test_runs_per_job_is_refused_with_the_local_executor(tmp_path, capsys):
    """Issue 47: `--runs-per-job 2` with the local executor was accepted silently; it packs runs into a Slurm job."""
    r = tmp_path / "r.toml"
    r.write_text(RECIPE)
    code, _, err = cli(
        ["sweep", str(r), "--scale", "smoke", "--runs-per-job", "2", "--out", str(tmp_path / "s")], capsys
    )
    assert code == 2 and err.strip().splitlines() == [
        "fedcli: error: --runs-per-job 2 packs runs into one Slurm job: it applies to --executor slurm only (local "
        "runs: --jobs runs at a time, --runs-per-gpu on a GPU)"
    ], err
    assert not (tmp_path / "s").exists()


def planned(name="r", wall_s=None, **kw):
    base = dict(dataset="digits", model="mlp", mlp_hidden="16", clients=4, active_ratio=0.5, threads=1)
    return SimpleNamespace(name=name, config=TrainConfig(**{**base, **kw}).validate().to_dict(), wall_s=wall_s)


def test_client_steps_by_hand():
    facts = est.DataFacts((1, 8, 8), 10, 1437, 360)
    cfg = planned(iterations=30).config
    assert est.client_steps(cfg, facts) == 30 * 2
    cfg = planned(algo="fedavg", rounds=3, tau=4).config
    assert est.client_steps(cfg, facts) == 3 * 2 * 4  # periodic: tau steps a round
    cfg = planned(algo="fedlama", rounds=3, tau=4, phi=2).config
    assert est.client_steps(cfg, facts) == 3 * 2 * 8  # FedLAMA: a round is phi * tau'
    cfg = planned(algo="fedavg", rounds=3, local_epochs=1.0, batch_size=32).config
    # n_i = 1437 / 4 = 359.25 samples per client: ceil(359.25 / 32) = 12 steps a round
    assert est.client_steps(cfg, facts) == 3 * 2 * 12
    assert est.client_steps(cfg, est.DataFacts((1, 8, 8), 10, None, None)) is None


def test_estimate_sums_calibrates_and_divides_over_jobs(monkeypatch):
    monkeypatch.setattr(est, "measure_step", lambda cfg, facts, threads: (0.01, 0.0))
    todo = [planned("a", iterations=100), planned("b", iterations=50)]
    data, part = est._keys(todo[0].config)
    # start-up 2 s per worker, digits loads in 1 s, partitions in 0.1 s, 0.5 s setup a run, 1 ms bookkeeping a step
    ov = est.Overheads(2.0, {data: 1.0}, {part: 0.1}, {data: "digits"}, setup_s=0.5, book_s=0.001)
    monkeypatch.setattr(est, "overheads", lambda configs, warm=False: ov)
    e = est.estimate(todo, [], jobs=1)
    # a: 200 client steps x 10 ms = 2.0 s, + 0.5 + 200 x 1 ms + 0.1 + 1.0 (the worker's first digits run loads) = 3.8
    # b: 100 x 10 ms = 1.0 s, + 0.5 + 0.1 + 0.1 (its worker has digits already) = 1.7; one worker starts first: 2.0
    assert e.client_steps == 300 and e.compute_s == pytest.approx(3.0)
    assert sorted(e.per_run.values()) == pytest.approx([1.7, 3.8]) and e.seconds == pytest.approx(2.0 + 5.5)
    assert not e.calibrated and "start-up 2 s per worker process" in e.text() and "data loading digits 1 s" in e.text()
    e = est.estimate(todo, [], jobs=2)  # two workers: each loads digits (b 2.7), the longest run bounds it
    assert e.seconds == pytest.approx(2.0 + max((3.8 + 2.7) / 2, 3.8))
    e = est.estimate(todo, [], jobs=1, mpi=2)  # a fresh process per run: start-up and load every run, no shared start
    assert e.executor == "process" and e.startup_s == 0.0
    assert e.seconds == pytest.approx((2.0 / 2 + 0.8 + 1.0 + 2.0) + (1.0 / 2 + 0.7 + 1.0 + 2.0))  # compute over 2 ranks
    # two completed runs of 100 iterations took 10 s and 14 s, estimated 3.8 (loads) and 2.8: factor 24 / 6.6
    done = [planned("c", iterations=100, wall_s=10.0), planned("d", iterations=100, wall_s=14.0)]
    e = est.estimate(todo, done, jobs=1)
    assert e.calibrated == 2 and e.factor == pytest.approx(24 / 6.6)
    assert e.seconds == pytest.approx(2.0 + (3.8 + 1.7) * 24 / 6.6)
    assert "calibrated on the 2 completed run(s)" in e.text()


def test_estimate_accounts_for_the_load_it_detects(monkeypatch):
    """A sweep estimated at 13 s took 58 s on a 2-core machine at load ~7 (issue 57): the busy machine was detected
    and named, but the time said was an idle machine's. Now the plan says the time at the current load: with load
    7 on 2 cores and one run of one thread at a time, every thread gets 2 / (7 + 1) of a core, x4."""
    monkeypatch.setattr(est, "measure_step", lambda cfg, facts, threads: (0.01, 0.0))
    ov = est.Overheads(2.0, {}, {}, {}, setup_s=0.5, book_s=0.0)
    monkeypatch.setattr(est, "overheads", lambda configs, warm=False: ov)
    monkeypatch.setattr(est.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(est.os, "getloadavg", lambda: (7.0, 7.0, 7.0))
    e = est.estimate([planned("a", iterations=100)], [], jobs=1)
    idle = 2.0 + 0.5 + 2.0  # start-up, setup, 200 client steps x 10 ms
    assert (
        e.seconds == pytest.approx(idle)
        and e.load.factor == pytest.approx(4.0)
        and e.loaded_s == pytest.approx(4 * idle)
    )
    assert (
        "estimated ~18 s on this machine at its current load (load 7.0 on 2 cores, runs about x4 slower than idle; "
        "~4.5 s idle)" in e.text()
    )
    e = est.estimate([planned("a", iterations=100)], [], jobs=2)  # two runs of one thread: 2 / (7 + 2) of a core each
    assert e.load.factor == pytest.approx(4.5)
    # calibrated on completed runs: their wall times carry the load they ran under, so it is not counted twice
    e = est.estimate([planned("a", iterations=100)], [planned("c", iterations=100, wall_s=9.0)], jobs=1)
    assert (
        e.calibrated == 1
        and e.load is None
        and e.seconds == pytest.approx(9.0 + 2.0)
        and "current load" not in e.text()
    )
    monkeypatch.setattr(est.os, "getloadavg", lambda: (0.5, 0.5, 0.5))  # an idle machine: the idle time, as before
    e = est.estimate([planned("a", iterations=100)], [], jobs=1)
    assert e.load.factor == 1.0 and "estimated ~4.5 s on this machine at 1 torch thread(s)" in e.text()


def damaged_mnist(folder: Path) -> Path:
    """MNIST's four IDX files with their headers only: there for the data check (fedcli/data/preflight.py, which reads
    the magic numbers), unreadable for the loader."""
    import struct

    folder.mkdir(parents=True)
    for split, n in (("train", 60000), ("t10k", 10000)):
        (folder / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, 28, 28))
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n))
    return folder


def test_one_command_measures_a_step_and_probes_a_dataset_that_fails_to_load_once(monkeypatch, tmp_path):
    """Inside shared_measurements() (one `fedcli sweep --dry-run`, which estimates the plan and then each Slurm job)
    the second estimate reuses the first's step time and its failed probe of a dataset that cannot be loaded; outside,
    each measures."""
    monkeypatch.setenv("FEDCLI_CACHE_DIR", str(tmp_path / "cache"))
    calls = {"step": 0, "probe": 0}

    def step(cfg, facts, threads):
        calls["step"] += 1
        return 0.01, 0.0

    def probe(jobs, reference, warm=False):
        calls["probe"] += 1
        return {
            "data": {},
            "part": {},
            "failed": {j["key"]: "not found" for j in jobs},
            "startup": 1.0,
            "reference": (0.5, 0.001),
        }, False

    monkeypatch.setattr(est, "measure_step", step)
    monkeypatch.setattr(est, "_probe", probe)
    data = damaged_mnist(tmp_path / "mnist")
    todo = [planned("a", iterations=100, dataset="mnist", model="mlp", data_dir=str(data))]
    with est.shared_measurements():
        first, second = est.estimate(todo, [], jobs=1), est.estimate(todo, [], jobs=1, executor="process")
    assert calls == {"step": 1, "probe": 1}
    assert "not measured (not found)" in first.text() and "not measured (not found)" in second.text()
    assert second.compute_s == first.compute_s
    est.estimate(todo, [], jobs=1)
    assert calls == {"step": 2, "probe": 2}  # no command scope: measured again


def test_a_dataset_not_on_disk_is_not_probed(monkeypatch, tmp_path):
    """A dataset whose files are not where its runs read them (the sweep's data check says so without loading it) is
    not measured by a process that could only fail to load it: with the start-up cached, no probe at all, and the
    plan says why, in the check's words; the same dataset once there is probed."""
    monkeypatch.setenv("FEDCLI_CACHE_DIR", str(tmp_path / "cache"))
    probes = []

    def probe(jobs, reference, warm=False):
        probes.append([j["key"] for j in jobs])
        return {
            "data": {j["key"]: 0.5 for j in jobs},
            "part": {},
            "failed": {},
            "startup": 1.0,
            "reference": (0.5, 0.001),
        }, False

    monkeypatch.setattr(est, "measure_step", lambda cfg, facts, threads: (0.01, 0.0))
    monkeypatch.setattr(est, "_probe", probe)
    est.estimate([planned("warm", iterations=10, dataset="digits", model="mlp")], [], jobs=1)  # caches the start-up
    assert len(probes) == 1
    missing = tmp_path / "no-mnist"
    todo = [planned("a", iterations=100, dataset="mnist", model="mlp", data_dir=str(missing))]
    text = est.estimate(todo, [], jobs=1).text()
    assert len(probes) == 1, probes  # nothing measured: no process started
    assert "mnist not measured (no MNIST files there (neither the training nor the test split)" in text, text
    damaged_mnist(missing / "MNIST" / "raw")  # now there (for the check): probed
    est.estimate(todo, [], jobs=1)
    assert len(probes) == 2 and len(probes[1]) == 1, probes


def test_a_data_probe_for_worker_processes_is_forked_warm_and_keeps_the_cached_start_up(monkeypatch, tmp_path):
    """A sweep of the default worker processes measures a dataset it has not timed in a process forked from the warm
    server (its workers' server): the load and the partition are measured and cached, the cached start-up of a new
    interpreter stays as it was (a fork's start-up is not one); a probe stopped at the limit leaves a lower bound."""
    import json
    import time

    from fedcli.runtime import warm

    monkeypatch.setenv("FEDCLI_CACHE_DIR", str(tmp_path / "cache"))
    start = {"s": 9.0, "setup": 0.5, "book": 0.001, "at": time.time()}
    est._write_timings({"startup": {est._startup_key(): start}})
    forked = []

    class Spy(warm.Command):
        def __init__(self, module, *args, **kw):
            forked.append(module)
            super().__init__(module, *args, **kw)

    monkeypatch.setattr(warm, "Command", Spy)
    cfg = TrainConfig(dataset="digits", model="mlp", clients=7).to_dict()
    ov = est.overheads([cfg], warm=True)
    assert forked == ["fedcli.sweep.probe"] and ov.startup_s == 9.0 and (ov.setup_s, ov.book_s) == (0.5, 0.001)
    (load,) = ov.load_s.values()
    (part,) = ov.part_s.values()
    assert 0 < load < 5 and 0 < part < 5 and not ov.lower
    cached = json.loads((tmp_path / "cache" / est.TIMINGS_FILE).read_text())
    assert cached["startup"] == {est._startup_key(): start} and len(cached["part"]) == 1
    monkeypatch.setattr(est, "PROBE_LIMIT_S", 0.0)
    other = TrainConfig(dataset="synthetic", model="mlp", clients=7).to_dict()
    ov = est.overheads([other], warm=True)
    assert len(forked) == 2 and list(ov.lower) == [est._keys(other)[0]]
    # no warm server to be had: the probe is a new interpreter, as without warm

    def no_server(*args, **kw):
        raise OSError("no fork server")

    monkeypatch.setattr(warm, "Command", no_server)
    monkeypatch.setattr(est, "_probe_fresh", lambda argv, jobs: ('{"startup": 2.0}\n', False))
    est.overheads([TrainConfig(dataset="digits", model="mlp", clients=5).to_dict()], warm=True)
    assert json.loads((tmp_path / "cache" / est.TIMINGS_FILE).read_text())["startup"][est._startup_key()]["s"] == 2.0


def test_reference_training_by_hand():
    # the reference runs 40 iterations x 4 clients = 160 client steps, then 200 iterations = 800: 1.0 s and 2.6 s;
    # 1.6 s / 640 steps = 2.5 ms a step, of which the model's step is 0.5 ms: 2 ms bookkeeping; setup 1.0 - 0.4 = 0.6
    assert est.reference_costs([1.0, 2.6], 0.0005) == pytest.approx((0.6, 0.002))
    assert est.reference_costs([1.0, 0.9], 0.0005) == (1.0, 0.0)  # noise: never negative


def test_first_loads_one_per_worker_and_dataset():
    d, f = planned().config, planned(dataset="synthetic").config
    assert est.first_loads([d, d, d, f, d, f], jobs=2) == [True, True, False, True, False, True]
    assert est.first_loads([d, d, f], jobs=1) == [True, False, True]


def test_local_epoch_runs_read_the_data_size():
    cache = {}
    facts = est.data_facts(planned(algo="fedavg", rounds=2, local_epochs=1.0).config, need_size=True, cache=cache)
    assert facts.how == "loaded" and (facts.n_train, facts.n_test) == (1437, 360)
    facts = est.data_facts(planned(dataset="cifar10", model="mlp").config, need_size=False, cache=cache)
    assert facts.shape == (3, 32, 32) and facts.classes == 10 and facts.how == "nominal"


def test_durations():
    assert [est.fmt_duration(s) for s in (5, 90, 7200, 86400 * 3, math.inf)] == [
        "5 s",
        "1.5 min",
        "2.0 h",
        "3.0 days",
        "?",
    ]
