"""Batched CIFAR training augmentation: random 32x32 crop of the 4-pixel zero-padded image + horizontal flip.

This is the standard CIFAR recipe (``RandomCrop(32, padding=4)`` + ``RandomHorizontalFlip()`` in torchvision,
He et al. 2016), done for a whole batch at once with two ``gather`` calls instead of a per-sample loop, so it
runs on the device that holds the batch. The random parameters are drawn separately
(:func:`draw_cifar_params`) so that they are a function of the run's seed stream only.

Note: the engine applies this to normalized tensors, so the default zero padding is the per-channel dataset
mean colour; pass ``fill=-mean/std`` to pad with black as torchvision does before normalizing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

PAD = 4


def draw_cifar_params(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``n`` crop offsets (int64 [n, 2], (row, column), uniform in 0..8) and flips (bool [n], p = 1/2).

    Shifts are drawn first, then flips, on ``generator``'s device. Offset (4, 4) is the uncropped image.
    """
    device = generator.device
    shifts = torch.randint(0, 2 * PAD + 1, (n, 2), generator=generator, device=device, dtype=torch.int64)
    flips = torch.randint(0, 2, (n,), generator=generator, device=device, dtype=torch.int64).bool()
    return shifts, flips


def cifar_augment(
    x: torch.Tensor, shifts: torch.Tensor, flips: torch.Tensor, *, fill: float | Sequence[float] | torch.Tensor = 0.0
) -> torch.Tensor:
    """Crop and flip a batch: ``out[i] = flip_i(pad(x[i], 4)[:, r_i : r_i + H, c_i : c_i + W])``.

    ``x`` is ``[..., C, H, W]`` with any leading dims (flattened internally); ``shifts`` ``[..., 2]`` and
    ``flips`` ``[...]`` match the leading dims. ``fill`` is the padding value: a scalar, or one value per channel
    (a sequence or a tensor of C values; the engine passes ``-mean / std`` of the dataset's normalization).
    Returns a new tensor of the shape, dtype and device of ``x``.
    """
    if x.dim() < 3:
        raise ValueError(f"cifar_augment needs [..., C, H, W], got shape {list(x.shape)}")
    *lead, c, h, w = x.shape
    xb = x.reshape(-1, c, h, w)
    n = xb.shape[0]
    shifts = shifts.reshape(-1, 2)
    flips = flips.reshape(-1)
    if shifts.shape[0] != n or flips.shape[0] != n:
        raise ValueError(f"cifar_augment: {n} images but {shifts.shape[0]} shifts and {flips.shape[0]} flips")
    if shifts.device.type == "cpu" and n and (shifts.min() < 0 or shifts.max() > 2 * PAD):
        raise ValueError(f"cifar_augment: shifts must lie in 0..{2 * PAD}")
    shifts = shifts.to(device=x.device, dtype=torch.int64)
    flips = flips.to(device=x.device, dtype=torch.bool)

    fill = torch.as_tensor(fill, dtype=x.dtype, device=x.device)
    if fill.numel() not in (1, c):
        raise ValueError(f"cifar_augment: fill has {fill.numel()} values for {c} channels; give one or one per channel")
    padded = xb.new_empty((n, c, h + 2 * PAD, w + 2 * PAD))
    padded.copy_(fill.reshape(1, -1, 1, 1).expand_as(padded))
    padded[:, :, PAD : PAD + h, PAD : PAD + w] = xb

    rows = shifts[:, :1] + torch.arange(h, device=x.device)  # [n, h]
    col = torch.arange(w, device=x.device)
    cols = shifts[:, 1:] + torch.where(flips[:, None], w - 1 - col, col)  # [n, w]
    out = padded.gather(2, rows[:, None, :, None].expand(n, c, h, w + 2 * PAD))
    out = out.gather(3, cols[:, None, None, :].expand(n, c, h, w))
    return out.reshape(*lead, c, h, w)
