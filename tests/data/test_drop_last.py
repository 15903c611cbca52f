"""``--drop-last``: FedALA's (PFLlib's) training loader, DataLoader(shuffle=True, drop_last=True): every epoch a fresh
permutation cut into floor(n / B) full batches, the last n mod B samples unused."""

import math

import torch
from torch.utils.data import BatchSampler, RandomSampler

from fedcli.data.setup import load_data_and_partition
from fedcli.fl.budget import epoch_steps
from fedcli.fl.cohort import client_batches
from simkit import personal_config, personal_run


def test_epoch_steps_by_hand():
    # 25 samples, batch 10: ceil(25 / 10) = 3 steps per epoch, or 2 full batches (5 samples unused)
    assert (epoch_steps(25, 1.0, 10), epoch_steps(25, 1.0, 10, drop_last=True)) == (3, 2)
    assert (epoch_steps(25, 2.0, 10), epoch_steps(25, 2.0, 10, drop_last=True)) == (5, 4)
    assert (epoch_steps(30, 1.0, 10), epoch_steps(30, 1.0, 10, drop_last=True)) == (3, 3)
    assert epoch_steps(25, 0.5, 10, drop_last=True) == 1  # half of 2 batches
    assert epoch_steps(7, 1.0, 10, drop_last=True) == 1  # fewer samples than a batch: one padded batch


def test_batches_are_pytorch_dataloader_drop_last():
    """Two epochs of 25 samples in batches of 10: each epoch's batches are exactly those of the index sampler of
    PyTorch's DataLoader(shuffle=True, drop_last=True), BatchSampler(RandomSampler, drop_last=True), on the generator
    as that epoch finds it (one permutation per epoch; PyTorch's sampler draws and discards a second one per epoch
    and its DataLoader a seed, so only the stream position differs), the epoch's last 5 samples unused."""
    ix = torch.arange(100, 125)
    got, mask = client_batches(ix, 4, 10, torch.Generator().manual_seed(3), drop_last=True)
    assert bool(mask.all())
    for e in range(2):
        gen = torch.Generator().manual_seed(3)
        for _ in range(e):
            torch.randperm(25, generator=gen)  # the permutations of the earlier epochs
        sampler = BatchSampler(RandomSampler(range(25), generator=gen), batch_size=10, drop_last=True)
        assert torch.equal(got[2 * e : 2 * e + 2], ix[torch.tensor(list(sampler))]), e
        assert got[2 * e : 2 * e + 2].unique().numel() == 20  # no sample twice within an epoch
    assert set(got[:2].flatten().tolist()) != set(got[2:].flatten().tolist())  # reshuffled: other samples left out
    # without drop_last the third step of an epoch takes its last 5 samples and 5 of the next epoch
    run_on, _ = client_batches(ix, 3, 10, torch.Generator().manual_seed(3))
    assert set(run_on[:2].flatten().tolist()) | set(run_on[2, :5].tolist()) == set(ix.tolist())


def test_engine_runs_floor_n_over_b_steps_per_epoch():
    """One local epoch per round: the round lasts max_i floor(n_i / B) steps with --drop-last, max_i ceil(n_i / B)
    without (the round's iterations are its longest client's steps)."""
    cfg = personal_config(rounds=1)
    data = load_data_and_partition(cfg)
    sizes = [len(ix) for ix in data[1].train]
    assert max(n // cfg.batch_size for n in sizes) != max(
        math.ceil(n / cfg.batch_size) for n in sizes
    )  # the rules differ
    for drop, rule in ((True, lambda n, b: n // b), (False, lambda n, b: math.ceil(n / b))):
        _, s = personal_run(data, algo="fedavg-c", drop_last=drop, rounds=1)
        assert s.iteration == max(rule(n, cfg.batch_size) for n in sizes), (drop, sizes)
