"""The CUDA-only branches of fedcli, each taken on the CPU where its arithmetic needs no GPU (issue 51; the list with
its tests: docs/gpu-speed.md, "CUDA-only branches tested on the CPU"). Each branch is reached through a small seam of
the code itself (a parameter or a stated figure), not a mock of CUDA; what only a GPU can show stays in
``make gpu-check``."""

import types

import numpy as np
import pytest
import torch

from fedcli.comm import communicator
from fedcli.comm.communicator import ordered_sum
from fedcli.fl.cohort import Cohort
from fedcli.fl.trainers import LoopTrainer, auto_chunk, choose_trainer, chunk_from_memory
from fedcli.models import build_model
from fedcli.results import checkpoint

GiB = 1 << 30


def adversarial(k: int, width: int, seed: int = 0) -> torch.Tensor:
    """[k, width] float64 rows on which the order of the additions shows in the bits: magnitudes from 1e-12 to 1e12,
    rows that cancel an earlier one exactly (x_j = -x_i) or nearly (-x_i plus a small row), and ties of 1 and 2**-53."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(k, width, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-12, 13, (k, 1), generator=g)
    x[3] = -x[1]
    x[5] = -x[2] + torch.randn(width, generator=g, dtype=torch.float64) * 1e-9
    x[7], x[8] = 1.0, 2.0**-53
    return x


def in_order(x: torch.Tensor, w: torch.Tensor, order: list[int], start: torch.Tensor) -> torch.Tensor:
    """The definition: acc = start; acc = acc + fl(w_i * x_i) for i in ``order``, one client at a time."""
    acc = start.clone()
    for i in order:
        acc = acc + x[i] * w[i]
    return acc


def test_cumsum_ordered_sum_is_the_in_order_loop_on_adversarial_values(monkeypatch):
    """The ``cumsum`` branch of ``add_rows_in_order`` (CUDA's), forced on CPU tensors in float64, where the CPU's
    ``cumsum`` accumulates in the tensor's dtype as CUDA's does in float32: over several column blocks, clients in a
    shuffled cohort order, one skipped, continuing a running sum, its bits are those of the client-by-client loop, and
    of the CPU's ``index_add_`` branch; the values are such that the reversed order gives other bits."""
    monkeypatch.setattr(communicator, "COLUMNS", 7)  # 33 columns: 5 column blocks, the last one short
    k, width = 12, 33
    x = adversarial(k, width)
    g = torch.Generator().manual_seed(1)
    w = torch.rand(k, generator=g, dtype=torch.float64)
    positions = torch.randperm(k, generator=g).tolist()
    skip = torch.zeros(k, dtype=torch.bool)
    skip[4] = True
    start = torch.randn(width, generator=g, dtype=torch.float64)
    order = [i for i in sorted(range(k), key=lambda i: positions[i]) if not skip[i]]
    want = in_order(x, w, order, start)
    got = ordered_sum([x], w, positions, skip, out=start.clone(), scan=True)
    assert torch.equal(got, want)
    assert torch.equal(got, ordered_sum([x], w, positions, skip, out=start.clone(), scan=False))
    assert not torch.equal(want, in_order(x, w, order[::-1], start))  # the values do tell the orders apart
    # two tensors of a model (another width each), unweighted: the same
    a, b = x[:, :20].reshape(k, 4, 5), x[:, 20:]
    assert torch.equal(
        ordered_sum([a, b], None, positions, scan=True),
        in_order(
            x,
            torch.ones(k, dtype=torch.float64),
            sorted(range(k), key=lambda i: positions[i]),
            torch.zeros(width, dtype=torch.float64),
        ),
    )


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_cumsum_ordered_sum_is_bitwise_the_same_for_1_2_and_4_ranks_worth_of_chunks(monkeypatch, ranks):
    """The cohort in ``ranks`` parts, cohort order kept, by the two ways fedcli splits it: clients chunk by chunk
    continuing one running sum (``--cohort-chunk``, fedcli.fl.chunked) and columns (a worker pool's ranks each add a
    slice of the columns over every client); the ``cumsum`` branch gives the bits of the whole cohort at once."""
    monkeypatch.setattr(communicator, "COLUMNS", 5)
    k, width = 16, 24
    x = adversarial(k, width, seed=ranks)
    w = torch.rand(k, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    positions = list(range(k))
    whole = ordered_sum([x], w, positions, scan=True)
    assert torch.equal(whole, in_order(x, w, positions, torch.zeros(width, dtype=torch.float64)))
    acc = None
    for part in np.array_split(np.arange(k), ranks):
        acc = ordered_sum([x[part]], w[part], part.tolist(), out=acc, scan=True)
    assert torch.equal(acc, whole)
    cols = torch.cat([ordered_sum([x[:, c]], w, positions, scan=True) for c in np.array_split(np.arange(width), ranks)])
    assert torch.equal(cols, whole)


def test_cohort_chunk_from_a_stated_free_memory():
    """``--cohort-chunk 0`` on CUDA (``auto_chunk``): the clients that fit in 80% of the free memory, from the peak of
    one client's call. Stated figures: 10 GiB free, 1 GiB a client: 8 clients a call for a cohort of 32, the whole
    cohort (0) for 8; 20 GiB a client: still one; a cohort of one is never chunked. On the CPU no chunking at all, and
    the vmap trainer asks for the automatic chunk only on CUDA."""
    assert chunk_from_memory(10 * GiB, 1 * GiB, 32) == 8
    assert chunk_from_memory(10 * GiB, 1 * GiB, 9) == 8
    assert chunk_from_memory(10 * GiB, 1 * GiB, 8) == 0
    assert chunk_from_memory(10 * GiB, 20 * GiB, 32) == 1
    assert chunk_from_memory(10 * GiB, 3 * GiB, 32, share=0.9) == 3  # 9 GiB // 3 GiB
    assert chunk_from_memory(10 * GiB, 0, 32) == 0  # a probe that allocated nothing: every client fits
    assert auto_chunk(lambda sl: None, 32, torch.device("cpu")) == 0
    model = build_model("mlp", (1, 8, 8), 10, mlp_hidden=(8,))
    assert choose_trainer("vmap", model, torch.device("cuda")).chunk is None  # measured on its first step
    assert choose_trainer("vmap", model, torch.device("cpu")).chunk == 0
    assert choose_trainer("vmap", model, torch.device("cuda"), chunk=4).chunk == 4


@pytest.mark.parametrize("name,shape", [("resnet20", (3, 32, 32)), ("femnist_cnn", (1, 28, 28))])
def test_channels_last_bf16_step_equals_the_default_layout(name, shape):
    """The loop trainer's CUDA bf16 path (inputs and 4-d weights channels-last), taken on CPU tensors with
    ``nhwc_on="cpu"``, against the default layout's bf16 step, both measured against the fp32 step: the same bf16
    arithmetic in another memory order, so as near to fp32 as the default layout's. ResNet20 (BatchNorm, 19 layers
    below the head) at its initialization: the whole gradient's cosine with fp32's within 0.01 of the default's
    (measured 0.9643 against 0.9648), each tensor's error at most 1.5x the default's (measured 1.28x), losses and the
    updated BatchNorm statistics within 1%. The FEMNIST CNN (1 channel) gives the default's bits here."""
    torch.manual_seed(0)
    model = build_model(name, shape, 10 if name == "resnet20" else 62)
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    x, y, w = torch.randn(2, 6, *shape), torch.randint(0, 10, (2, 6)), torch.ones(2, 6)
    out = {}
    for key, dtype, on in (
        ("fp32", None, "cuda"),
        ("default", torch.bfloat16, "cuda"),
        ("nhwc", torch.bfloat16, "cpu"),
    ):
        trainer = LoopTrainer(model, dtype=dtype, nhwc_on=on)
        cohort = Cohort.from_global([0, 1], torch.full((2,), 0.5, dtype=torch.float64), params, buffers)
        out[key] = (*trainer.grads(cohort, x, y, w), cohort, trainer.layout(x.device))
    (g32, l32, c32, _), (g0, l0, c0, lay0), (g1, l1, c1, lay1) = out["fp32"], out["default"], out["nhwc"]  # noqa: F841
    assert lay1 == (True, True) and lay0 == (name == "femnist_cnn", False)
    flat = {k: torch.cat([t.flatten() for t in out[k][0].values()]) for k in out}
    cos = lambda a, b: float(torch.nn.functional.cosine_similarity(flat[a], flat[b], 0))  # noqa: E731
    assert abs(cos("nhwc", "fp32") - cos("default", "fp32")) <= 0.01 and cos("nhwc", "default") >= 0.98
    assert torch.allclose(l1, l0, rtol=0.01)
    for n, g in g32.items():
        assert g1[n].dtype == torch.float32 and g1[n].shape == g.shape
        assert (g1[n] - g).norm() <= 1.5 * (g0[n] - g).norm() + 1e-6, n
    for n, b in c0.buffers.items():
        if b.is_floating_point():
            assert (c1.buffers[n] - b).norm() <= 0.01 * b.norm() + 1e-6, n
    if name == "femnist_cnn":
        assert torch.equal(flat["nhwc"], flat["default"])


class StatedGenerators(checkpoint.CudaGenerators):
    """A GPU-less process's stand-in for its CUDA generators: ``count`` devices whose states are the given tensors
    (each a 16-byte Philox state, seed and offset, as torch.cuda.get_rng_state gives); ``set`` records what a restore
    put back."""

    def __init__(self, count: int, states=None):
        self.n, self.held, self.put = count, states, {}

    def states(self):
        return self.held

    def count(self):
        return self.n

    def current(self):
        return 0

    def set(self, index, state):
        self.put[index] = state.clone()


def fake_state(seed: int) -> torch.Tensor:
    return torch.tensor([seed, 0, 0, 0, 0, 0, 0, 0, 4 * seed, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8)


def test_cuda_rng_states_are_dealt_back_by_the_device_count():
    """Saved by two GPUs: restored on two, each device its own; on one (or four), the current device the first;
    without CUDA, nothing."""
    a, b = fake_state(1), fake_state(2)
    assert checkpoint.cuda_restore([a, b], 2, 0) == {0: a, 1: b}
    assert checkpoint.cuda_restore([a, b], 1, 0) == {0: a}
    assert checkpoint.cuda_restore([a, b], 4, 3) == {3: a}
    assert checkpoint.cuda_restore([a, b], 0, 0) == {} and checkpoint.cuda_restore([], 2, 0) == {}
    assert "cuda" not in checkpoint.rng_state(StatedGenerators(0, None))
    gens = StatedGenerators(2)
    checkpoint.set_rng_state({"torch": torch.get_rng_state(), "cuda": [a, b]}, gens)
    assert list(gens.put) == [0, 1] and torch.equal(gens.put[0], a) and torch.equal(gens.put[1], b)


def test_a_resumed_run_gives_the_checkpoints_cuda_rng_states_back(tmp_path, monkeypatch, capsys):
    """A run interrupted at round 4 while its (stated, two-device) CUDA generators hold fake states: the checkpoint
    file keeps both states; ``--resume`` in a process whose generators hold others sets each device's back to the
    saved one; and the run ends with the bits of an uninterrupted one."""
    import runkit
    from fedcli.cli.main import main

    args = [
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "16",
        "--clients",
        "4",
        "--iterations",
        "24",
        "--tau",
        "2",
        "--batch-size",
        "16",
        "--eval-every",
        "4",
        "--checkpoint-every",
        "2",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--quiet",
    ]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(args + ["--out", str(ref)]) == 0
    saved = [fake_state(7), fake_state(9)]
    monkeypatch.setattr(checkpoint, "CUDA", StatedGenerators(2, saved))
    code, err = runkit.interrupted(monkeypatch, capsys, run, 4, 2, args)  # SIGINT inside round 4
    assert code == 130, err
    ((_, newest),) = checkpoint.list_checkpoints(run)[-1:]
    kept = checkpoint.load(newest)["ranks"][0]["rng"]["cuda"]
    assert len(kept) == 2 and all(torch.equal(k, s) for k, s in zip(kept, saved))
    fresh = StatedGenerators(2, [fake_state(1), fake_state(3)])
    monkeypatch.setattr(checkpoint, "CUDA", fresh)
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert sorted(fresh.put) == [0, 1] and all(torch.equal(fresh.put[i], saved[i]) for i in (0, 1))
    assert runkit.rows(ref / "metrics.csv") == runkit.rows(run / "metrics.csv")


def test_runs_per_gpu_workers_from_a_stated_gpu_count():
    """``--workers 0`` with ``--device cuda`` (or auto where GPUs are visible): one worker per GPU, at most the clients
    of a round, from the stated device count; auto without a GPU is the CPU rule. (The sweep's ``--runs-per-gpu``
    placement from stated device counts and free memory: tests/sweep/test_gpu_placement.py.)"""
    from fedcli.config import TrainConfig
    from fedcli.data.datasets import load_dataset
    from fedcli.runner import auto_workers

    ds = load_dataset("digits", None)
    part = types.SimpleNamespace(train=[np.arange(i * 50, i * 50 + 50) for i in range(16)])
    cfg = lambda device, ratio=1.0: TrainConfig(dataset="digits", clients=16, active_ratio=ratio, device=device)  # noqa: E731
    assert auto_workers(cfg("cuda"), ds, part, cores=2, gpus=4) == (
        4,
        "auto: 4 (one per CUDA device: 4 visible, 16 client(s) per round)",
    )
    assert auto_workers(cfg("auto"), ds, part, cores=2, gpus=2)[0] == 2
    assert auto_workers(cfg("cuda", 0.125), ds, part, cores=2, gpus=4)[0] == 2  # 2 clients a round
    assert auto_workers(cfg("auto"), ds, part, cores=2, gpus=0)[1].startswith("auto: 1 (")
    assert auto_workers(cfg("cuda:1"), ds, part, cores=2, gpus=4) == (1, "auto: 1 (--device cuda:1: one GPU)")
