"""The cohort step costs a number of torch ops that does not grow with the clients (GitHub issue 38; ``fedcli bench
--ops``): counted with torch.profiler on the CPU, top-level ops of a 3-iteration run minus a 1-iteration run."""

import pytest

from fedcli.bench import ops as bench_ops


@pytest.mark.parametrize("algo, extra", [("fedavg", {}), ("fedlama", {"phi": 2, "tau": 1})])
def test_ops_per_iteration_do_not_grow_with_the_clients(algo, extra):
    """FedAvg and FedLAMA (layer-wise syncs), momentum, synchronizing every iteration or two: 4 and 12 clients take the
    same top-level ops per iteration apart from each client's own randperm draws of its batch plan (a per-client
    ordered sum, batch gathering or update would add ops with every client)."""
    settings = {**bench_ops.WORKLOADS["digits-mlp"], "algo": algo, "tau": 2, "batch_size": 8, **extra}
    rest = {}
    for k in (4, 12):
        total, diff = bench_ops.ops_per_iteration(settings, k, short=2, long=4)
        rest[k] = total - diff["aten::randperm"]
    assert rest[4] == rest[12], rest
