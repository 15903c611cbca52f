"""The ordered cohort sum (``fedcli.comm.communicator.ordered_sum``) in batched form: the same bits as adding the
clients one after another, in a number of torch ops that does not grow with the clients (GitHub issue 38)."""

import pytest
import torch

from fedcli.comm.communicator import ordered_sum


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (make gpu-check)"),
        ),
    ],
)
def test_ordered_sum_of_many_clients_is_the_sequential_sum_in_a_few_ops(device):
    """40 clients over more than one column block (``COLUMNS``), magnitudes from 1e-8 to 1e8 so that any other order of
    the additions changes the bits: the batched sum equals the float32 loop acc = acc + fl(w_i * x_i), the clients
    by cohort position, continuing a running sum; and its top-level torch ops do not grow with the clients."""
    from torch.profiler import profile

    from fedcli.bench.ops import top_level_ops
    from fedcli.comm import communicator

    g = torch.Generator().manual_seed(1)
    k, width = 40, communicator.COLUMNS + 3
    scale = 10.0 ** torch.randint(-8, 9, (k, 1), generator=g)
    x = (torch.randn(k, width, generator=g) * scale).to(device)
    w = torch.rand(k, generator=g, dtype=torch.float64)
    positions = torch.randperm(k, generator=g).tolist()
    start = torch.randn(width, generator=g).to(device)
    got = ordered_sum([x], w, positions, out=start.clone())
    want = start.clone()
    for i in sorted(range(k), key=lambda i: positions[i]):
        want = want + x[i] * w[i].float().item()
    assert torch.equal(got, want)

    def ops(clients: int) -> int:
        with profile() as prof:
            ordered_sum([x[:clients]], w[:clients], list(range(clients)))
        return sum(top_level_ops(prof).values())

    assert ops(40) == ops(10) <= 30  # 12 a column block
