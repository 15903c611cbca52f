"""Several runs on one GPU (fedcli/sweep/placement.py, ``fedcli sweep --runs-per-gpu``): the placement as a pure
function of
the device count and their free memory, given by hand; a run's memory, estimated and measured; and real sweeps (worker
pool, ``--mpi``) whose processes get their slot's device as ``CUDA_VISIBLE_DEVICES`` (recorded in each run's manifest).
On this CPU-only machine the runs still train on the CPU (no CUDA device is visible to torch), so the free memory of
the devices is handed to ``run_sweep`` (``gpu_free``): nothing of torch is faked."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedcli.errors import ConfigError
from fedcli.sweep.placement import CONTEXT_BYTES, GiB, device_env, parse_runs_per_gpu, place, placement_for, run_memory
from sweepkit import RECIPE

# ------------------------------------------------------------------------------------------- the pure placement


def test_no_gpu_runs_jobs_at_a_time_on_no_device():
    p = place(5, 3, [], 2 * GiB, None)
    assert (p.gpus, p.runs_per_gpu, p.concurrent, p.slots, p.per_device) == (0, 0, 3, [None] * 3, {})
    assert "no CUDA device" in p.text()


def test_asked_k_round_robin_over_two_gpus():
    p = place(10, 8, [40 * GiB, 40 * GiB], None, 2)  # 8 jobs asked, 2 GPUs x 2 runs: 4 at a time
    assert (p.runs_per_gpu, p.concurrent, p.slots, p.per_device) == (2, 4, [0, 1, 0, 1], {0: 2, 1: 2})
    assert p.text() == (
        "2 CUDA devices, up to 2 runs per GPU (--runs-per-gpu 2); 4 at a time: cuda:0 2 runs, cuda:1 2 runs"
    )


def test_fewer_jobs_than_slots_fill_the_devices_evenly():
    p = place(10, 3, [80 * GiB, 80 * GiB], None, 4)  # slots 0, 1, 0
    assert p.per_device == {0: 2, 1: 1} and p.concurrent == 3
    assert p.text().endswith("3 at a time: cuda:0 2 runs, cuda:1 1 run")
    assert place(1, 8, [80 * GiB], None, 4).concurrent == 1  # never more at a time than runs to go


def test_auto_from_memory_hand_worked():
    # 3 GiB a run; the devices have 10 and 20 GiB free: floor(0.9 x 10 / 3) = 3 per GPU, 6 at a time of 8 jobs
    p = place(12, 8, [10 * GiB, 20 * GiB], 3 * GiB, None)
    assert (p.runs_per_gpu, p.concurrent, p.per_device) == (3, 6, {0: 3, 1: 3})
    assert p.text() == (
        "2 CUDA devices, up to 3 runs per GPU (auto: a run needs about 3.00 GiB (estimated); the device "
        "with the least free memory has 10.0 GiB, 3 runs fit in 90% of it); 6 at a time: cuda:0 3 runs, "
        "cuda:1 3 runs"
    )
    # 1 GiB on an 80 GiB device: 72 would fit, capped at 4
    p = place(12, 8, [80 * GiB], GiB, None, how="measured")
    assert p.runs_per_gpu == 4 and p.concurrent == 4 and "capped at 4" in p.why and "(measured)" in p.why
    # a run larger than the free memory still gets one GPU (it may run out there, as it would alone)
    assert place(4, 4, [40 * GiB], 50 * GiB, None).runs_per_gpu == 1
    # memory unknown: one per GPU
    p = place(4, 4, [40 * GiB, 40 * GiB], None, None)
    assert (p.runs_per_gpu, p.concurrent) == (1, 2) and "unknown" in p.why


def test_parse_runs_per_gpu():
    assert parse_runs_per_gpu("auto") is None and parse_runs_per_gpu("AUTO") is None and parse_runs_per_gpu("3") == 3
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ConfigError, match="--runs-per-gpu takes a count >= 1 or auto"):
            parse_runs_per_gpu(bad)


def test_device_env_names_the_visible_device(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device_env(1) == {"CUDA_VISIBLE_DEVICES": "1"} and device_env(None) == {}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")  # the sweep itself was given two GPUs: slot device 1 is GPU 6
    assert device_env(1) == {"CUDA_VISIBLE_DEVICES": "6"}


def test_packed_slurm_job_shares_its_gpus_round_robin(monkeypatch):
    from fedcli.sweep.slurm import job_devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")  # what Slurm gives a job of 2 GPUs
    assert job_devices(3, 2) == [
        {"CUDA_VISIBLE_DEVICES": "2"},
        {"CUDA_VISIBLE_DEVICES": "5"},
        {"CUDA_VISIBLE_DEVICES": "2"},
    ]
    assert job_devices(2, 0) == [{}, {}]


# ------------------------------------------------------------------------------------------------ a run's memory


def _run(name, config, d=None):
    return SimpleNamespace(name=name, label=name, config=config, dir=d)


TINY = {"dataset": "digits", "model": "mlp", "mlp_hidden": "32", "clients": 4, "active_ratio": 0.5, "batch_size": 32}


def test_estimated_memory_hand_worked():
    # digits: 1,437 + 360 samples of 1x8x8 floats on the device = 460,032 bytes; MLP 64-32-10: 2,410 parameters;
    # activations of one sample: Linear 32, its dropout (Identity) 32, the output 10 = 74 values;
    # 2 clients a round x 4 x (4 x 2,410 + 3 x 32 x 74) = 133,952; plus the CUDA context (768 MiB)
    need, how = run_memory([_run("a", TINY)], [])
    assert (need, how) == (CONTEXT_BYTES + 460_032 + 133_952, "estimated")
    need2, _ = run_memory([_run("a", TINY), _run("b", {**TINY, "clients": 8})], [])  # the largest run counts
    assert need2 == need + 133_952


def test_measured_memory_of_an_earlier_seed_wins(tmp_path):
    d = tmp_path / "a-seed0"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "cuda_peak_bytes": 3 * GiB}))
    need, how = run_memory([_run("a", TINY)], [_run("a", TINY, d)])
    assert (need, how) == (3 * GiB + CONTEXT_BYTES, "measured")


def test_placement_for_leaves_explicit_devices_alone():
    p = placement_for(
        [_run("a", {**TINY, "device": "cuda:1"}), _run("b", {**TINY, "device": "cpu"})], [], 4, None, free=[80 * GiB]
    )
    assert p.gpus == 0 and p.concurrent == 2 and "cpu, cuda:1" in p.why
    p = placement_for([_run("a", {**TINY, "device": "auto"})] * 3, [], 8, None, free=[80 * GiB, 80 * GiB])
    assert (p.runs_per_gpu, p.concurrent) == (4, 3)  # 0.9 x 80 GiB / 0.75 GiB: far more than 4 fit; 3 runs to go
    p = placement_for([_run("a", {**TINY, "device": "cuda"})] * 3, [], 2, None, free=[80 * GiB, 80 * GiB], mpi=2)
    assert p.gpus == 0 and "2 MPI ranks spread over the visible GPUs" in p.why  # the ranks of a run take the GPUs


# ------------------------------------------------------------------------------------- real sweeps, real processes


def _visible(root: Path) -> list[str]:
    out = []
    for m in sorted(root.glob("*/seed*/manifest.json")):
        data = json.loads(m.read_text())
        assert data["status"] == "completed"
        out.append(data["devices"][0].get("cuda_visible_devices"))
    return out


@pytest.mark.parametrize("mpi", [0, 1], ids=["pool", "mpi"])
def test_sweep_gives_each_process_its_slot_gpu(tmp_path, mpi):
    from fedcli.sweep.run import run_sweep

    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    # 2 runs x 1 seed, 2 jobs on 2 devices, one run each: one process sees GPU 0, the other GPU 1
    res = run_sweep(
        recipe, "smoke", seeds=1, out=tmp_path / "two", jobs=2, mpi=mpi, runs_per_gpu="1", gpu_free=[8 * GiB, 8 * GiB]
    )
    assert res.placement.per_device == {0: 1, 1: 1}
    if mpi:
        assert sorted(_visible(tmp_path / "two")) == ["0", "1"]
        return
    # a pool worker takes its slot's GPU as it starts and keeps it: two workers see GPUs 0 and 1; on a loaded machine
    # one worker may run both tiny runs while the other still starts (it happened): then both see that worker's GPU
    by_worker: dict[int, set[str]] = {}
    for m in sorted((tmp_path / "two").glob("*/seed*/manifest.json")):
        data = json.loads(m.read_text())
        by_worker.setdefault(data["pids"][-1], set()).add(data["devices"][0].get("cuda_visible_devices"))
    devices = set().union(*by_worker.values())
    assert all(len(seen) == 1 for seen in by_worker.values()) and len(devices) == len(by_worker), by_worker
    assert devices <= {"0", "1"}, by_worker


@pytest.mark.long(
    reason="a second real pool sweep (2 workers to start): make test holds the packed placement in "
    "test_fewer_jobs_than_slots_fill_the_devices_evenly and each worker's slot device in "
    "test_sweep_gives_each_process_its_slot_gpu[pool]"
)
def test_sweep_packs_two_runs_on_one_gpu(tmp_path):
    """One device, two runs packed on it: both see GPU 0."""
    from fedcli.sweep.run import run_sweep

    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    res = run_sweep(recipe, "smoke", seeds=1, out=tmp_path / "one", jobs=2, runs_per_gpu="2", gpu_free=[8 * GiB])
    assert res.placement.per_device == {0: 2}
    assert _visible(tmp_path / "one") == ["0", "0"]
