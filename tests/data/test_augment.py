import pytest
import torch
import torch.nn.functional as F

from fedcli.data.augment import cifar_augment, draw_cifar_params


def reference(x, shifts, flips):
    """Per-sample CIFAR augmentation: zero-pad 4, crop at the offset, flip horizontally."""
    out = []
    for img, (r, c), f in zip(x, shifts.tolist(), flips.tolist()):
        crop = F.pad(img, (4, 4, 4, 4))[:, r : r + img.shape[1], c : c + img.shape[2]]
        out.append(crop.flip(-1) if f else crop)
    return torch.stack(out)


def test_matches_per_sample_reference():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 3, 32, 32, generator=g)
    shifts, flips = draw_cifar_params(64, g)
    assert torch.equal(cifar_augment(x, shifts, flips), reference(x, shifts, flips))


def test_leading_dims_and_non_square():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 2, 12, 10, generator=g)  # [K, B, C, H, W]
    shifts, flips = draw_cifar_params(15, g)
    out = cifar_augment(x, shifts.view(3, 5, 2), flips.view(3, 5))
    assert out.shape == x.shape
    ref = reference(x.reshape(15, 2, 12, 10), shifts, flips).reshape(x.shape)
    assert torch.equal(out, ref)


def test_identity_flip_and_corner():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).reshape(2, 3, 6, 6)
    center = torch.full((2, 2), 4, dtype=torch.int64)
    no_flip = torch.zeros(2, dtype=torch.bool)
    out = cifar_augment(x, center, no_flip)
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()
    assert torch.equal(cifar_augment(x, center, torch.ones(2, dtype=torch.bool)), x.flip(-1))
    corner = cifar_augment(x, torch.zeros(2, 2, dtype=torch.int64), no_flip)
    assert (corner[:, :, :4, :] == 0).all() and (corner[:, :, :, :4] == 0).all()
    assert torch.equal(corner[:, :, 4:, 4:], x[:, :, :2, :2])


def test_fill_per_channel():
    x = torch.zeros(1, 3, 4, 4)
    fill = torch.tensor([1.0, 2.0, 3.0])
    out = cifar_augment(x, torch.tensor([[4, 6]]), torch.tensor([False]), fill=fill)
    assert (out[0, :, :, :2] == 0).all()  # image columns 2, 3
    assert torch.equal(out[0, :, :, 2:], fill.view(3, 1, 1).expand(3, 4, 2))  # padding


def test_draw_params():
    a = draw_cifar_params(1000, torch.Generator().manual_seed(7))
    b = draw_cifar_params(1000, torch.Generator().manual_seed(7))
    shifts, flips = a
    assert shifts.shape == (1000, 2) and shifts.dtype == torch.int64
    assert flips.shape == (1000,) and flips.dtype == torch.bool
    assert shifts.min() == 0 and shifts.max() == 8
    assert 400 < int(flips.sum()) < 600
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_bad_arguments():
    x = torch.zeros(2, 3, 8, 8)
    with pytest.raises(ValueError):
        cifar_augment(x, torch.zeros(3, 2, dtype=torch.int64), torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError):
        cifar_augment(x, torch.full((2, 2), 9), torch.zeros(2, dtype=torch.bool))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(32, 3, 32, 32, generator=g)
    shifts, flips = draw_cifar_params(32, g)
    out = cifar_augment(x.cuda(), shifts.cuda(), flips.cuda())
    assert out.is_cuda
    assert torch.equal(out.cpu(), reference(x, shifts, flips))
    gpu_shifts, gpu_flips = draw_cifar_params(8, torch.Generator(device="cuda").manual_seed(0))
    assert gpu_shifts.is_cuda and gpu_flips.is_cuda
