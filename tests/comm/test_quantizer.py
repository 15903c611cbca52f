"""The QSGD quantizer of FedPAQ / FedCOM: unbiased, on its grid, keyed, and billed at the bits it sends."""

import math

import pytest
import torch

from fedcli.comm.ledger import Ledger
from fedcli.config import TrainConfig
from fedcli.fl.codecs import QSGDCodec, quant_bits, stochastic_quantize
from fedcli.fl.rng import torch_gen


def codec(levels):
    return QSGDCodec(TrainConfig(quant_levels=levels))


def test_unbiased_over_many_draws():
    torch.manual_seed(0)
    v = torch.randn(1, 50, dtype=torch.float64) * torch.linspace(0.01, 3.0, 50, dtype=torch.float64)
    n, s = 40_000, 4
    g = torch.Generator().manual_seed(1)
    q = stochastic_quantize(v.expand(n, 50), s, torch.rand(n, 50, generator=g, dtype=torch.float64))
    mean = q.mean(0)
    # per element Var <= (||v|| / s)^2 / 4 (a Bernoulli between two adjacent levels): 6 sigma of the mean
    sigma = v.norm() / s / 2 / math.sqrt(n)
    assert torch.all((mean - v[0]).abs() < 6 * sigma), (mean - v[0]).abs().max() / sigma
    # QSGD's variance bound: E||Q(v) - v||^2 <= min(n/s^2, sqrt(n)/s) ||v||^2
    var = (q - v).pow(2).sum(1).mean()
    assert var <= min(50 / s**2, math.sqrt(50) / s) * v.pow(2).sum()


def test_values_on_the_grid_with_signs_and_norm():
    v = torch.tensor([[3.0, -4.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    s = 16
    q = stochastic_quantize(v, s, torch.rand(2, 4, generator=torch.Generator().manual_seed(0)))
    levels = q[0] / v[0].norm() * s  # the integer levels xi_j
    assert torch.allclose(levels, levels.round(), atol=1e-5)
    assert levels.abs().max() <= s
    assert torch.all(torch.sign(q[0]) * torch.sign(v[0]) >= 0)
    assert q[0, 2] == 0 and torch.all(q[1] == 0)  # zeros stay zero, a zero row stays zero
    # an element already on a level is kept whatever the draw: r = [5, 0]
    w = torch.tensor([[-2.0, 0.0]])
    assert torch.equal(stochastic_quantize(w, 5, torch.rand(1, 2)), w)


def test_hand_computed_rounding():
    v = torch.tensor([[0.6, 0.8]])  # norm 1; s = 2: r = [1.2, 1.6]
    up = stochastic_quantize(v, 2, torch.tensor([[0.1, 0.5]]))  # 0.1 < 0.2 -> up; 0.5 < 0.6 -> up
    down = stochastic_quantize(v, 2, torch.tensor([[0.3, 0.7]]))  # 0.3 >= 0.2, 0.7 >= 0.6 -> down
    assert torch.allclose(up, torch.tensor([[1.0, 1.0]])) and torch.allclose(down, torch.tensor([[0.5, 0.5]]))


def test_bits_are_what_is_sent():
    # s = 16: 17 levels -> 5 bits, + 1 sign bit, + a 32-bit norm per tensor
    assert codec(16).bits(64) == 5 + 1 + 32 / 64
    assert quant_bits(1, 10) == 1 + 1 + 3.2 and quant_bits(3, 8) == 2 + 1 + 4 and quant_bits(4, 8) == 3 + 1 + 4
    assert codec(0).bits(64) == 32.0 and codec(0).lossless and not codec(16).lossless
    led = Ledger([64, 10])
    led.record_sync(0, clients=4, up_bits=codec(16).bits(64))
    # 4 clients x (64 elements x 6 bits + 32-bit norm) up, 4 x 64 x 32 bits down
    assert led.bytes == (4 * (64 * 6 + 32) + 4 * 64 * 32) / 8


def test_identity_without_quantization():
    d = torch.randn(3, 5, 2)
    assert codec(0).encode_decode(d, [torch_gen(0, k) for k in range(3)]) is d


def test_keyed_per_client_not_per_stack():
    """A client's quantization depends on its own generator only, not on which clients share its process."""
    d = torch.randn(3, 7, 5)
    c = codec(8)
    keys = [(0, "codec", 2, cl, 5, 1) for cl in (4, 9, 11)]
    together = c.encode_decode(d, [torch_gen(*k) for k in keys])
    alone = torch.cat([c.encode_decode(d[i : i + 1], [torch_gen(*keys[i])]) for i in range(3)])
    assert torch.equal(together, alone)
    again = c.encode_decode(d, [torch_gen(*k) for k in keys])
    assert torch.equal(together, again)
    other = c.encode_decode(d, [torch_gen(1, *k[1:]) for k in keys])
    assert not torch.equal(together, other)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_unbiased_on_cuda():
    v = torch.randn(1, 300, device="cuda")
    c = codec(16)
    q = torch.stack([c.encode_decode(v, [torch_gen(0, i)]) for i in range(3000)])
    assert q.device.type == "cuda"
    assert torch.allclose(q.mean(0), v, atol=6 * float(v.norm()) / 16 / 2 / math.sqrt(3000))
