"""Uplink codecs beyond the identity: stochastic uniform quantization (FedPAQ, FedCOM).

The quantizer is QSGD's (Alistarh et al., NeurIPS 2017), the one FedPAQ (Reisizadeh et al., AISTATS
2020) and FedCOM (Haddadpour et al., AISTATS 2021) apply to a client's model update. For one client's
update v of one layer (one parameter tensor) and s levels:

    Q_s(v)_j = ||v||_2 * sign(v_j) * xi_j / s,   xi_j = floor(r_j) + Bernoulli(r_j - floor(r_j)),  r_j = s |v_j| /
    ||v||_2

so E[Q_s(v)] = v (unbiased) and E||Q_s(v) - v||^2 <= min(n / s^2, sqrt(n) / s) ||v||^2 for n elements.
What travels per tensor per client: the norm as a 32-bit float, and per element a sign bit and the
level xi_j in {0..s} with a fixed-length code of ceil(log2(s + 1)) bits. :meth:`QSGDCodec.bits`
returns exactly that per element (the norm spread over the elements), so the ledger's ``comm_bytes``
is what is sent. ``--quant-levels 0`` turns quantization off (32-bit identity, bit-for-bit FedAvg).

Randomness: the engine hands one generator per client keyed by (seed, round, client, step, layer),
so a client's quantization never depends on which clients share its process.
"""

from __future__ import annotations

import math

import torch

from fedcli.fl.parts import Codec


def quant_bits(levels: int, numel: int) -> float:
    """Average bits per element that one quantized tensor of ``numel`` elements costs (see module doc)."""
    if levels <= 0:
        return 32.0
    return math.ceil(math.log2(levels + 1)) + 1 + 32.0 / numel


def stochastic_quantize(v: torch.Tensor, levels: int, uniform: torch.Tensor) -> torch.Tensor:
    """QSGD quantization of each row ``v[k]`` (one client's tensor) with its own norm.

    ``uniform`` has the shape of ``v`` and holds U[0, 1) draws; an element rounds up to the next level
    when its draw is below the fractional part. A zero row stays zero.
    """
    flat = v.reshape(v.shape[0], -1)
    norm = flat.norm(dim=1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    r = flat.abs() / safe * levels
    low = r.floor()
    xi = low + (uniform.reshape_as(flat) < (r - low)).to(flat.dtype)
    xi = xi.clamp_(max=levels)  # |v_j| / ||v|| may round to just above 1: the code has levels 0..s only
    return (torch.sign(flat) * xi * (norm / levels)).reshape_as(v)


def uniform_like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """U[0, 1) draws of ``t``'s shape on ``t``'s device from a keyed CPU generator (on an accelerator, a
    device generator seeded from it, so the draws stay keyed without a host-to-device copy)."""
    if t.device.type == "cpu":
        return torch.rand(t.shape, generator=gen, dtype=t.dtype)
    dev_gen = torch.Generator(device=t.device)
    dev_gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
    return torch.rand(t.shape, generator=dev_gen, dtype=t.dtype, device=t.device)


class QSGDCodec(Codec):
    """Stochastic uniform quantization of each client's layer update with s = ``--quant-levels``."""

    def __init__(self, opts):
        super().__init__(opts)
        self.levels = int(self.opts.quant_levels)
        self.lossless = self.levels == 0

    def bits(self, numel: int) -> float:
        return quant_bits(self.levels, numel)

    def encode_decode(self, delta: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        if self.lossless or delta.shape[0] == 0:
            return delta
        uniform = torch.stack([uniform_like(delta[k], g) for k, g in enumerate(generators)])
        return stochastic_quantize(delta, self.levels, uniform)
