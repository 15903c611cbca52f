"""The fast (stacked, vmap) local-training path equals the simple per-client path."""

import pytest
import torch

from fedcli.bench import WORKLOADS, Workload, _run_path
from fedcli.config import TrainConfig
from fedcli.fl.cohort import Cohort
from fedcli.fl.parts import SGDStep
from fedcli.fl.trainers import LoopTrainer, VmapTrainer
from fedcli.models import build_model


@pytest.mark.parametrize("name, shape, classes", [("resnet20", (3, 32, 32), 10), ("cnn4", (1, 28, 28), 10), ("mlp", (60,), 5)])
def test_vmap_equals_loop_for_a_few_steps(name, shape, classes):
    torch.manual_seed(0)
    model = build_model(name, shape, classes).double()
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    k, b = 3, 4
    states = [Cohort.from_global([0, 1, 2], torch.full((k,), 1 / k), params, buffers) for _ in range(2)]
    opt = SGDStep(TrainConfig(momentum=0.9, weight_decay=1e-4))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(k, b, *shape, generator=g, dtype=torch.float64), torch.randint(0, classes, (k, b), generator=g))
               for _ in range(3)]
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
