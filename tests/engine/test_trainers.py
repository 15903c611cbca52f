"""The fast (stacked, vmap) local-training path equals the simple per-client path."""

import json
import sys

import pytest
import torch

from fedcli.bench.compare import WORKLOADS, Workload, _run_path
from fedcli.config import TrainConfig
from fedcli.fl.cohort import Cohort
from fedcli.fl.parts import SGDStep
from fedcli.fl.trainers import LoopTrainer, VmapTrainer
from fedcli.models import build_model


@pytest.mark.parametrize(
    "name, shape, classes", [("resnet20", (3, 32, 32), 10), ("cnn4", (1, 28, 28), 10), ("mlp", (60,), 5)]
)
def test_vmap_equals_loop_for_a_few_steps(name, shape, classes):
    torch.manual_seed(0)
    model = build_model(name, shape, classes).double()
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    k, b = 3, 4
    states = [Cohort.from_global([0, 1, 2], torch.full((k,), 1 / k), params, buffers) for _ in range(2)]
    opt = SGDStep(TrainConfig(momentum=0.9, weight_decay=1e-4))
    g = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(k, b, *shape, generator=g, dtype=torch.float64), torch.randint(0, classes, (k, b), generator=g))
        for _ in range(3)
    ]
    mask = torch.ones(k, b, dtype=torch.float64)
    mask[2, 3] = 0.0  # a padded sample
    for trainer, cohort in zip((VmapTrainer(model), LoopTrainer(model)), states):
        opt.begin_round(None, cohort)
        for x, y in batches:
            grads, losses = trainer.grads(cohort, x, y, mask)
            opt.step(cohort, grads, 0.05)
    for n in states[0].params:
        torch.testing.assert_close(states[0].params[n], states[1].params[n], rtol=1e-9, atol=1e-10)
    for n in states[0].buffers:
        torch.testing.assert_close(states[0].buffers[n], states[1].buffers[n], rtol=1e-9, atol=1e-10)


def test_bench_paths_run_on_a_tiny_workload():
    w = Workload("tiny", "mlp", (1, 8, 8), 10, clients=4, batch=8)
    for path in ("fedcli", "sequential", "single"):
        r = _run_path(path, w, steps=2, warmup=1, device_name="cpu", trainer="auto", threads=1)
        assert r["samples_per_s"] > 0 and r["peak_bytes"] > 0
    assert set(WORKLOADS) == {"a", "b", "c"}


def test_loop_trainer_reuses_gradient_buffers_only_when_released():
    """The loop path hands out the same stacked buffers step after step, but never ones a caller still holds
    (Mime asks for the anchor's gradient while holding the step's)."""
    import torch

    from fedcli.fl.cohort import Cohort
    from fedcli.fl.trainers import LoopTrainer

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    params = {n: p.detach() for n, p in model.named_parameters()}
    cohort = Cohort.from_global([0, 1], torch.full((2,), 0.5), params, {})
    tr = LoopTrainer(model)
    x, y, w = torch.randn(2, 5, 4), torch.randint(0, 3, (2, 5)), torch.ones(2, 5)
    g1, _ = tr.grads(cohort, x, y, w)
    first = {n: t.clone() for n, t in g1.items()}
    ptr = g1["weight"].data_ptr()
    original = cohort.params["weight"].clone()
    cohort.params["weight"].add_(1.0)
    g2, _ = tr.grads(cohort, x, y, w)  # g1 still held: a second set
    assert g2["weight"].data_ptr() != ptr and torch.equal(g1["weight"], first["weight"])
    assert not torch.equal(g2["weight"], g1["weight"])
    del g1, g2
    g3, _ = tr.grads(cohort, x, y, w)  # released: reused, and the numbers are this call's
    assert g3["weight"].data_ptr() in {ptr, tr._pool[1]["weight"].data_ptr()} and len(tr._pool) == 2
    cohort.params["weight"].copy_(original)
    del g3
    g4, _ = tr.grads(cohort, x, y, w)
    assert torch.equal(g4["weight"], first["weight"]) and torch.equal(g4["bias"], first["bias"])


@pytest.mark.parametrize("name, shape, classes", [("cnn4", (1, 28, 28), 10), ("resnet20", (3, 32, 32), 10)])
@pytest.mark.parametrize("threads", [1, 2])
def test_loop_path_in_float32_equals_a_plain_module_per_client(name, shape, classes, threads):
    """The loop path (channels-last convolutions on the CPU) against each client's own nn.Module in NCHW,
    its gradients from .backward(): the same numbers up to float32 rounding, BatchNorm statistics included."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _compare_loop_with_modules(name, shape, classes)
    finally:
        torch.set_num_threads(before)


def _compare_loop_with_modules(name, shape, classes):
    import copy

    from fedcli.fl.trainers import masked_loss

    torch.manual_seed(0)
    model = build_model(name, shape, classes)
    k, b = 3, 5
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(k, b, *shape, generator=g), torch.randint(0, classes, (k, b), generator=g)
    mask = torch.ones(k, b)
    mask[1, 4] = 0.0
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: t.detach() for n, t in model.named_buffers()}
    cohort = Cohort.from_global([0, 1, 2], torch.full((k,), 1 / k), params, buffers)
    trainer = LoopTrainer(model)
    assert trainer.nhwc == (name == "cnn4")  # channels-last only without BatchNorm (less accurate there at 1 thread)
    grads, losses = trainer.grads(cohort, x, y, mask)
    for i in range(k):
        m = copy.deepcopy(model).train()
        loss = masked_loss(m(x[i]), y[i], mask[i])
        loss.backward()
        assert abs(loss.item() - float(losses[i])) < 1e-5
        for n, p in m.named_parameters():
            torch.testing.assert_close(grads[n][i], p.grad, rtol=1e-4, atol=1e-5)
        for n, t in m.named_buffers():
            torch.testing.assert_close(cohort.buffers[n][i], t, rtol=1e-5, atol=1e-6)


def test_channels_last_copy_changes_strides_even_for_one_channel():
    from fedcli.fl.trainers import channels_last

    x = torch.randn(2, 1, 4, 4)
    assert x.is_contiguous(memory_format=torch.channels_last)  # ambiguous: contiguous() would keep NCHW strides
    y = channels_last(x)
    assert y.stride() == (16, 1, 4, 1) and torch.equal(x, y)
    z = channels_last(torch.randn(2, 3, 4, 4))
    assert z.stride() == (48, 1, 12, 3)


def test_bench_loop_computes_what_fedcli_computes():
    """The bench's per-client loop (PFLlib-style nn.Modules) and fedcli's engine on the same plan: the same
    accuracy round after round (digits, mlp: no channels-last, so the numbers agree to float rounding)."""
    from dataclasses import asdict

    from fedcli.bench.compare import RoundSetting, run_fedcli_rounds, run_loop_rounds

    setting = asdict(RoundSetting(rounds=2, clients=6, data_dir=""))
    before = torch.get_num_threads()
    try:
        fed, loop = run_fedcli_rounds(setting), run_loop_rounds(setting)
    finally:
        torch.set_num_threads(before)
    assert len(fed["acc"]) == len(loop["acc"]) == 2 and fed["workers"] == 1
    assert fed["acc"] == pytest.approx(loop["acc"], abs=1e-9)
    assert fed["acc"][-1] > 0.3  # it learned something (10 classes)


def test_bench_tables_are_wide_and_report_the_targets(tmp_path):
    from rich.console import Console

    from fedcli.bench.compare import run_flower_rounds, tables, targets, to_json

    skipped = run_flower_rounds({"rounds": 2}, python=sys.executable if _no_flower() else "/nonexistent/python")
    assert "skipped" in skipped and "install-bench" in skipped["skipped"]
    sys_ = {
        "fedcli": {"impl": "fedcli train, 2 worker(s) x 1 thread", "round_s": 2.0, "acc": [0.5, 0.8], "total_s": 9.0},
        "loop": {"impl": "per-client loop", "round_s": 5.0, "acc": [0.5, 0.8], "total_s": 11.0, "fedcli_speedup": 2.5},
        "flower": {"impl": "Flower", "round_s": 3.0, "acc": [0.5, 0.8], "total_s": 30.0, "fedcli_speedup": 1.5},
        "bound": {"impl": "2 cores x one model", "train_s": 1.5},
        "floor": {"impl": "2 cores x one client", "train_s": 1.75},
    }
    res = {
        "machine": {},
        "workloads": [
            {
                "workload": "fedala",
                "label": "FedALA's MNIST setting",
                "systems": sys_,
                "load_before": "0.1",
                "load_after": "0.2",
            },
            {
                "workload": "a",
                "label": "a: femnist_cnn",
                "batch": 32,
                "fedcli": {"impl": "engine", "samples_per_s": 900.0},
                "sequential_1": {"impl": "seq 1", "samples_per_s": 500.0},
                "sequential_n": {"impl": "seq 2", "samples_per_s": 550.0},
                "bound_sps": 1000.0,
                "bound_impl": "2 x one",
                "speedup_vs_sequential": 900 / 550,
                "time_vs_bound": 1000 / 900,
                "load_before": "0",
                "load_after": "0",
            },
        ],
    }
    console = Console(width=160, record=True)
    for t in tables(res):
        console.print(t)
    text = console.export_text()
    assert (
        max(len(line) for line in text.splitlines()) > 80 and "2.50x" in text and "fedcli round / floor: 1.14x" in text
    )
    lines = targets(res)
    assert "2.50x faster than the per-client loop (target >= 2x): met" in " ".join(lines)
    assert any(
        "1.50x faster than Flower's simulation (target >= 2x): MISSED (2x needs a round of 1.50 s; "
        "training every client at batch B on all cores takes at least 1.75 s" in l
        for l in lines
    )
    sys_["flower"] = skipped
    console = Console(width=160, record=True)
    for t in tables(res):
        console.print(t)
    assert "install-bench" in console.export_text()
    assert any("not measured" in l for l in targets(res))
    assert any("1.64x the sequential loop (target >= 1.5x): met" in l for l in lines)
    assert any("1.11x the bound's time (target <= 1.25x): met" in l for l in lines)
    assert json.loads(to_json(res))["workloads"][1]["bound_sps"] == 1000.0


def _no_flower() -> bool:
    import importlib.util

    return importlib.util.find_spec("flwr") is None


def test_fused_sgd_in_the_loop_trainer_equals_gradients_then_step():
    """LoopTrainer.grads(lr=...) applies x_k <- x_k - lr g_k client by client: the same bits as the stacked
    gradients followed by SGDStep.step; the plain SGD step offers it only when it is plain SGD."""
    torch.manual_seed(0)
    model = build_model("cnn4", (1, 28, 28), 10)
    params = {n: p.detach() for n, p in model.named_parameters()}
    k, b = 3, 4
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(k, b, 1, 28, 28, generator=g), torch.randint(0, 10, (k, b), generator=g)
    mask = torch.ones(k, b)
    a, c = (Cohort.from_global([0, 1, 2], torch.full((k,), 1 / k), params, {}) for _ in range(2))
    tr, opt = LoopTrainer(model), SGDStep(TrainConfig(lr=0.1))
    opt.begin_round(None, a)
    for _ in range(3):
        grads, la = tr.grads(a, x, y, mask)
        opt.step(a, grads, 0.1)
        none, lc = tr.grads(c, x, y, mask, lr=opt.fused_lr(0.1, None))
        assert none is None and torch.equal(la, lc)
    assert all(torch.equal(a.params[n], c.params[n]) for n in params)
    assert opt.fused_lr(0.1, None) == 0.1 and opt.fused_lr(0.1, torch.tensor([True, False, True])) is None
    assert SGDStep(TrainConfig(momentum=0.9)).fused_lr(0.1, None) is None
    assert SGDStep(TrainConfig(weight_decay=1e-4)).fused_lr(0.1, None) is None


@pytest.mark.parametrize(
    "name, shape, classes",
    [
        ("mlp", (1, 8, 8), 10),
        ("cnn4", (1, 28, 28), 10),
        ("femnist_cnn", (1, 28, 28), 62),
        ("resnet20", (3, 32, 32), 10),
        ("lamb_cnn", (3, 32, 32), 10),
    ],
)
def test_evaluation_in_pieces_gives_the_logits_of_one_pass(name, shape, classes):
    """``fedcli.fl.evaluation.evaluate`` runs each chunk of test samples in pieces of 128: the logits (so the loss and
    accuracy sums) must have the bits of one forward pass over the chunk, in eval mode at one thread."""
    from torch.func import functional_call

    torch.manual_seed(0)
    model = build_model(name, shape, classes).eval()
    state = ({n: p.detach() for n, p in model.named_parameters()}, {n: b for n, b in model.named_buffers()})
    x = torch.randn(300, *shape, generator=torch.Generator().manual_seed(2))
    layout = LoopTrainer(model).eval_input  # channels-last for the convolutional models without BatchNorm
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for feed in (lambda t: t, layout):
                whole = functional_call(model, state, (feed(x),))
                pieces = torch.cat([functional_call(model, state, (feed(x[a : a + 128]),)) for a in range(0, 300, 128)])
                assert torch.equal(whole, pieces)
    finally:
        torch.set_num_threads(threads)


def test_evaluations_feed_images_in_the_layout_the_loop_trains_in():
    """The loop path evaluates convolutional models without BatchNorm channels-last, as it trains them; the logits
    agree with NCHW's to float rounding. Other models, and the stacked path, keep the batch as it is."""
    from torch.func import functional_call

    x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    cnn = build_model("cnn4", (1, 28, 28), 10).eval()
    fed = LoopTrainer(cnn).eval_input(x)
    assert fed.stride(1) == 1 and x.stride(1) == 28 * 28  # NHWC strides (with C = 1 both layouts count as contiguous)
    assert torch.equal(fed, x)
    state = ({n: p.detach() for n, p in cnn.named_parameters()}, {})
    with torch.inference_mode():
        torch.testing.assert_close(
            functional_call(cnn, state, (fed,)), functional_call(cnn, state, (x,)), rtol=1e-5, atol=1e-5
        )
    assert (
        LoopTrainer(build_model("resnet20", (3, 32, 32), 10)).eval_input(torch.randn(2, 3, 32, 32)).stride(1) == 32 * 32
    )
    assert VmapTrainer(cnn).eval_input(x) is x and LoopTrainer(build_model("mlp", (1, 28, 28), 10)).eval_input(x) is x


# every stacked-path golden run that differs in its loss or step, trained in chunks of one client: the records, bitwise
CHUNKED = [
    "preset-fedavg",
    "preset-fedprox",
    "preset-fedphp",
    "preset-ditto",
    "preset-scaffold",
    "preset-fedlamb",
    "preset-pfedme",
    "lama-fedlama",
    "epochs-apple",
    "ala-fedavg-c",
]


@pytest.mark.timeout(600)
def test_cohort_chunks_give_the_unchunked_records_bitwise(tmp_path):
    from goldenkit import differing

    assert not differing(CHUNKED, ("--cohort-chunk", "1"), tmp_path)
    import json

    assert json.loads((tmp_path / "preset-fedavg" / "manifest.json").read_text())["cohort_chunk"] == 1


@pytest.mark.parametrize("bn", [False, True])
def test_chunks_split_the_cohort_and_keep_batchnorm_statistics_per_client(bn):
    """5 clients in chunks of 2 (2 + 2 + 1): gradients, losses and the running statistics updated in place equal the
    whole cohort's: bitwise without BatchNorm; with it, the batched normalization reduces over another shape
    (float reassociation): within 1e-6."""
    from fedcli.fl.trainers import VmapTrainer

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 6), *([torch.nn.BatchNorm1d(6)] if bn else []), torch.nn.ReLU(), torch.nn.Linear(6, 3)
    )
    k = 5
    params = {
        n: p.detach().unsqueeze(0).repeat(k, *[1] * p.dim()) + 0.01 * torch.randn(k, *p.shape)
        for n, p in model.named_parameters()
    }
    buffers = {n: b.detach().unsqueeze(0).repeat(k, *[1] * b.dim()) for n, b in model.named_buffers()}
    x, y, w = torch.randn(k, 8, 4), torch.randint(0, 3, (k, 8)), torch.ones(k, 8)

    class C:
        def __init__(self):
            self.params = {n: t.clone() for n, t in params.items()}
            self.buffers = {n: t.clone() for n, t in buffers.items()}

    whole, chunked = C(), C()
    g1, l1 = VmapTrainer(model).grads(whole, x, y, w)
    g2, l2 = VmapTrainer(model, chunk=2).grads(chunked, x, y, w)
    close = (lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-6)) if bn else torch.equal
    assert close(l1, l2) and all(close(g1[n], g2[n]) for n in g1)
    assert all(close(whole.buffers[n].float(), chunked.buffers[n].float()) for n in buffers)
    if bn:
        assert not torch.equal(whole.buffers["1.running_mean"], buffers["1.running_mean"])  # they did move


@pytest.mark.parametrize("chosen", [3, 0])
def test_the_manifest_records_the_chunk_the_automatic_choice_made(tmp_path, monkeypatch, chosen):
    """``--cohort-chunk 0`` where the chunk is chosen at the first local step (CUDA): the manifest says ``auto`` at the
    start and, once the run ends, ``cohort_chunk_chosen`` (0: the whole cohort fit). The device's free memory is
    faked here (no GPU): ``auto_chunk`` answers ``chosen`` and the trainer is built as on CUDA."""
    import json

    from fedcli.cli.main import main
    from fedcli.fl import engine, trainers

    asked = []
    monkeypatch.setattr(trainers, "auto_chunk", lambda run, k, device, share=0.8: asked.append(k) or chosen)
    monkeypatch.setattr(
        engine,
        "choose_trainer",
        lambda name, model, device, chunk=0, precision="fp32": trainers.VmapTrainer(model, None),
    )
    out = tmp_path / "run"
    assert main(["train", "--rounds", "2", "--trainer", "vmap", "--quiet", "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert asked and m["cohort_chunk"] == "auto" and m["cohort_chunk_chosen"] == chosen
