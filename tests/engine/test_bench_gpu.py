"""``fedcli bench --device`` (fedcli/bench_gpu.py) runs its code paths on the CPU with tiny sizes: fedcli's vmap and
loop trainers in fp32 and bf16, the bare torch.func vmap step (ResNet20's BatchNorm under vmap included), the plain
loop, the op count and a run started as its own process; the ratios it prints are the quotients of the numbers it
measured. No GPU here: the GPU kernels are not counted (None) and the timings say nothing of a GPU."""

import json

import pytest
import torch

from fedcli.cli.main import main

from paperdata import write_cifar10, write_femnist


def cli(*args) -> int:
    try:
        return main([str(a) for a in args])
    except SystemExit as e:
        return e.code


def test_bench_device_cpu_femnist_measures_every_path(tmp_path, capsys):
    femnist = write_femnist(tmp_path / "femnist", writers=8, per_writer=8)
    out = tmp_path / "bench.json"
    assert cli("bench", "--device", "cpu", "--data-dir", femnist, "--clients", 4, "--batch", 4, "--iterations", "1,3",
               "--concurrent", "1", "--concurrent-iterations", 2, "--steps", 1, "--json", out) == 0
    text = capsys.readouterr().out
    info = json.loads(out.read_text())
    r = info["workloads"]["femnist-cnn"]
    for key in ("fedcli_vmap_fp32_ms", "fedcli_loop_fp32_ms", "fedcli_vmap_bf16_ms", "fedcli_loop_bf16_ms",
                "bare_vmap_fp32_ms", "bare_vmap_bf16_ms", "plain_loop_fp32_ms"):
        assert r[key] > 0, key
    assert r["vmap_over_bare_fp32"] == pytest.approx(r["fedcli_vmap_fp32_ms"] / r["bare_vmap_fp32_ms"])
    assert r["loop_over_plain_fp32"] == pytest.approx(r["fedcli_loop_fp32_ms"] / r["plain_loop_fp32_ms"])
    assert r["bf16_speedup_vmap"] == pytest.approx(r["fedcli_vmap_fp32_ms"] / r["fedcli_vmap_bf16_ms"])
    assert r["ops_per_iteration"] > 0 and r["kernels_per_iteration"] is None
    assert r["throughput_vs_one"] == {"1": 1.0} and r["concurrent_wall_s"]["1"] > 0
    assert info["device"] == "cpu" and info["clients"] == 4 and info["batch"] == 4
    assert "femnist-cnn:" in text and "GPU kernels n/a (no CUDA)" in text and "vmap_over_bare_fp32" in text


def test_bare_references_run_resnet20_with_batchnorm(tmp_path):
    """The ResNet20 workload's bare steps: vmap over 3 stacked ResNet20s (train-mode BatchNorm, buffers stacked) in
    fp32 and bf16, and the plain loop; the vmapped step moves every client's parameters."""
    from fedcli import bench_gpu

    settings = bench_gpu.workloads(None, str(write_cifar10(tmp_path, n_train=50, n_test=10)))["resnet20"]
    model, x, y = bench_gpu._model_and_data(settings, 3, 2, torch.device("cpu"))
    assert x.shape == (3, 2, 3, 32, 32) and y.shape == (3, 2)
    for prec in ("fp32", "bf16"):
        assert bench_gpu.bare_vmap_s(model, x, y, 1, prec) > 0
    assert bench_gpu.plain_loop_s(model, x, y, 1) > 0


def test_bench_device_refusals(tmp_path, capsys):
    assert cli("bench", "--device", "cpu") == 2
    assert "give --data-dir" in capsys.readouterr().err
    assert cli("bench", "--device", "cpu", "--data-dir", tmp_path, "--iterations", "5,5") == 2
    assert "LONG must be above SHORT" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli("bench", "--device", "cuda", "--data-dir", tmp_path) == 2
        assert "needs a CUDA device" in capsys.readouterr().err
