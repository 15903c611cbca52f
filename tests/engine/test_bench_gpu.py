"""``fedcli bench --device`` (fedcli/bench/gpu.py) runs its code paths on the CPU with tiny sizes: fedcli's vmap and
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


@pytest.mark.long(reason="the GPU benchmark's harness on the CPU, every path timed (15 s): a tool beside the product")
def test_bench_device_cpu_femnist_measures_every_path(tmp_path, capsys):
    femnist = write_femnist(tmp_path / "femnist", writers=8, per_writer=8)
    out = tmp_path / "bench.json"
    assert (
        cli(
            "bench",
            "--device",
            "cpu",
            "--data-dir",
            femnist,
            "--clients",
            4,
            "--batch",
            4,
            "--iterations",
            "1,3",
            "--concurrent",
            "1",
            "--concurrent-iterations",
            2,
            "--steps",
            1,
            "--json",
            out,
        )
        == 0
    )
    text = capsys.readouterr().out
    info = json.loads(out.read_text())
    r = info["workloads"]["femnist-cnn"]
    for key in ("bare_vmap_fp32_ms", "bare_vmap_bf16_ms", "plain_loop_fp32_ms"):
        assert r[key] > 0, key
    # fedcli's own times are differences of two runs; at these tiny sizes on a loaded 2-core machine the difference may
    # drown in noise, and is then None (never negative), with its ratios
    for key in ("fedcli_vmap_fp32_ms", "fedcli_loop_fp32_ms", "fedcli_vmap_bf16_ms", "fedcli_loop_bf16_ms"):
        assert r[key] is None or r[key] > 0, key
    for ratio, (a, b) in {
        "vmap_over_bare_fp32": ("fedcli_vmap_fp32_ms", "bare_vmap_fp32_ms"),
        "loop_over_plain_fp32": ("fedcli_loop_fp32_ms", "plain_loop_fp32_ms"),
        "bf16_speedup_vmap": ("fedcli_vmap_fp32_ms", "fedcli_vmap_bf16_ms"),
    }.items():
        assert r[ratio] == (None if r[a] is None else pytest.approx(r[a] / r[b])), ratio
    assert r["ops_per_iteration"] > 0 and r["kernels_per_iteration"] is None
    assert r["throughput_vs_one"] == {"1": 1.0} and r["concurrent_wall_s"]["1"] > 0
    assert info["device"] == "cpu" and info["clients"] == 4 and info["batch"] == 4
    assert "femnist-cnn:" in text and "GPU kernels n/a (no CUDA)" in text and "vmap_over_bare_fp32" in text


def test_per_iteration_takes_the_least_of_repeats_and_never_reports_a_negative_time():
    """Worked by hand: wall times 10, 7 (short) and 12, 9 (long) over 2 iterations give (9 - 7) / 2 = 1; a long run
    measured faster than the short one is noise, reported as None; op counts (tuples) are differenced as they are."""
    from fedcli.bench import gpu as bench_gpu

    walls = {1: iter([10.0, 7.0]), 3: iter([12.0, 9.0])}
    assert bench_gpu.per_iteration(lambda it: next(walls[it]), 1, 3, repeats=2) == 1.0
    assert bench_gpu.per_iteration(lambda it: {1: 5.0, 3: 4.0}[it], 1, 3) is None
    assert bench_gpu.per_iteration(lambda it: {1: (10, None), 3: (30, None)}[it], 1, 3) == (10.0, None)
    r = {"fedcli_vmap_fp32_ms": None, "bare_vmap_fp32_ms": 2.0, "fedcli_loop_fp32_ms": 6.0, "plain_loop_fp32_ms": 3.0}
    bench_gpu.ratios(r, ("fp32",))
    assert r["vmap_over_bare_fp32"] is None and r["loop_over_plain_fp32"] == 2.0
    info = {
        "device": "cpu",
        "gpu": None,
        "torch": "x",
        "clients": 2,
        "batch": 2,
        "workloads": {"w": {**r, "kernels_per_iteration": None, "ops_per_iteration": 3.0, "throughput_vs_one": {}}},
    }
    text = "\n".join(bench_gpu.lines(info))
    assert "fedcli_vmap_fp32         not measured" in text and "vmap_over_bare_fp32      n/a" in text


def test_bare_references_run_resnet20_with_batchnorm(tmp_path):
    """The ResNet20 workload's bare steps: vmap over 3 stacked ResNet20s (train-mode BatchNorm, buffers stacked) in
    fp32 and bf16, and the plain loop; the vmapped step moves every client's parameters."""
    from fedcli.bench import gpu as bench_gpu

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


def test_bench_json_out_is_never_written_through_a_link(tmp_path):
    """``fedcli bench --json-out FILE`` where FILE is a link: refused, the file it points to unchanged (before: written
    through with ``Path.write_text``, which follows it). The folder may be a link (the user's choice of place)."""
    from fedcli.bench.gpu import write_json
    from fedcli.safefs import LinkRefused

    outside = tmp_path / "precious.json"
    outside.write_text("do not touch\n")
    link = tmp_path / "out" / "bench.json"
    link.parent.mkdir()
    link.symlink_to(outside)
    with pytest.raises(LinkRefused, match="symbolic link"):
        write_json({"workloads": []}, str(link))
    assert outside.read_text() == "do not touch\n" and link.is_symlink()
    write_json({"workloads": []}, str(tmp_path / "new" / "bench.json"))  # a missing folder is made
    assert json.loads((tmp_path / "new" / "bench.json").read_text()) == {"workloads": []}
