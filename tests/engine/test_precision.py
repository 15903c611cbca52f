"""``--precision bf16``: bfloat16 forward and backward with fp32 master weights, optimizer state and BatchNorm
statistics
(fedcli.fl.trainers.lowered), on both trainers."""

import pytest
import torch

from fedcli.data.setup import load_data_and_partition
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.trainers import LoopTrainer, VmapTrainer
from fedcli.models import build_model
from simkit import configurer


@pytest.mark.parametrize("trainer", [VmapTrainer, LoopTrainer])
def test_bf16_gradients_of_a_batchnorm_model_are_fp32_and_near_the_fp32_ones(trainer):
    """ResNet20 (BatchNorm, train mode) at its initialization, 2 clients of 8 samples: the bf16 step returns fp32
    gradients pointing the fp32 step's way (cosine of the whole gradient at least 0.9; measured 0.964, both trainers:
    the error grows through the 19 layers below the head), the head's within 2% (measured 0.7%), losses within 1%;
    it updates the fp32 running statistics in place like the fp32 step (within 2%) and leaves the parameters fp32."""
    torch.manual_seed(0)
    model = build_model("resnet20", (3, 32, 32), 10)
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    x, y, w = torch.randn(2, 8, 3, 32, 32), torch.randint(0, 10, (2, 8)), torch.ones(2, 8)
    out = {}
    for dtype in (None, torch.bfloat16):
        cohort = Cohort.from_global([0, 1], torch.full((2,), 0.5, dtype=torch.float64), params, buffers)
        grads, losses = trainer(model, dtype=dtype).grads(cohort, x, y, w)
        out[dtype] = grads, losses, cohort
    (g32, l32, c32), (g16, l16, c16) = out[None], out[torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in c16.params.values())
    assert all(g.dtype == torch.float32 for g in g16.values())
    flat32, flat16 = (torch.cat([t.flatten() for t in g.values()]) for g in (g32, g16))
    assert torch.nn.functional.cosine_similarity(flat16, flat32, 0) >= 0.9
    assert (g16["fc.weight"] - g32["fc.weight"]).norm() <= 0.02 * g32["fc.weight"].norm()
    assert torch.allclose(l16, l32, rtol=0.01)
    for n, b in c32.buffers.items():
        assert c16.buffers[n].dtype == b.dtype
        if b.is_floating_point():
            assert not torch.equal(b, buffers[n].expand_as(b))  # the step updated the statistics ...
            assert (c16.buffers[n] - b).norm() <= 0.02 * b.norm() + 1e-3, n  # ... and the bf16 step likewise


def test_bf16_learns_on_the_femnist_sample_near_fp32(femnist_sample, trainer="vmap"):
    """The FEMNIST LEAF sample, an mlp, 4 clients, 60 iterations: in bf16 the training loss falls from ln 62 = 4.13 as
    in
    fp32 and ends within 3% of fp32's. (The test accuracy this early moves by several points between any two runs,
    bf16 or not: 11.9% bf16 against 6.1% fp32 measured with the vmap trainer; not compared.)"""
    config = configurer(
        dict(
            dataset="femnist",
            data_dir=str(femnist_sample),
            model="mlp",
            mlp_hidden="128",
            partition="natural",
            clients=4,
            active_ratio=1.0,
            iterations=60,
            tau=5,
            batch_size=32,
            lr=0.05,
            momentum=0.9,
            trainer=trainer,
            workers=1,
            threads=1,
            eval_every=60,
            device="cpu",
        )
    )
    data = load_data_and_partition(config(precision="fp32"))  # one load for both (the sample's JSON: about 1 s)
    runs = {p: Simulation(config(precision=p)).setup(*data).run() for p in ("fp32", "bf16")}
    loss = {p: s.history[-1]["train_loss"] for p, s in runs.items()}
    assert loss["fp32"] < 3.9 and loss["bf16"] < 3.9
    assert abs(loss["bf16"] - loss["fp32"]) <= 0.03 * loss["fp32"], loss
