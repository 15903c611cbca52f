"""Synthetic(alpha, beta) of Li et al. 2020 generated user by user (fedcli.data.synthetic): the model's structure,
the keyed streams (a user's samples do not depend on the other users) and the on-demand table."""

import pickle

import numpy as np
import pytest
import torch

from fedcli.data.datasets import load_dataset
from fedcli.data.synthetic import (
    GeneratedRows,
    SyntheticSetting,
    SyntheticUsers,
    covariance_diagonal,
    generate_user,
    materialize,
    open_user,
    user_stream,
)


def test_size_is_the_first_draw_of_the_users_keyed_stream():
    # worked by hand from the stream: n_k = min(int(lognormal(4, 2)) + 50, 5000), u_k ~ N(0, alpha), B_k ~ N(0, beta)
    setting = SyntheticSetting(alpha=0.5, beta=2.0, users=3, dim=4, classes=3, seed=7)
    rng = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(0, 2)))
    n = min(int(rng.lognormal(4.0, 2.0)) + 50, 5000)
    u, big_b = rng.normal(0.0, 0.5), rng.normal(0.0, 2.0)  # noqa: F841
    w = rng.normal(u, 1.0, (3, 4))
    k = open_user(setting, 2)
    assert k.n == n and k.n_train == int(0.8 * n) and np.array_equal(k.w, w)
    assert np.array_equal(
        user_stream(7, 2).lognormal(4.0, 2.0, 1),
        np.random.default_rng(np.random.SeedSequence(7, spawn_key=(0, 2))).lognormal(4.0, 2.0, 1),
    )


def test_covariance_diagonal_by_hand():
    assert np.allclose(covariance_diagonal(3), [1.0, 2.0**-1.2, 3.0**-1.2])
    assert covariance_diagonal(3)[1] == pytest.approx(0.435275, abs=1e-6)


def test_inputs_have_mean_v_and_diagonal_covariance_and_labels_are_the_argmax():
    setting = SyntheticSetting(alpha=1.0, beta=1.0, users=2, dim=6, classes=4, seed=1)
    k = open_user(setting, 1)
    x = k.inputs(40_000)
    sd = np.sqrt(covariance_diagonal(6))
    assert np.all(np.abs(x.mean(0) - k.v) < 5 * sd / np.sqrt(len(x)))  # mean v_k
    cov = np.cov(x, rowvar=False)
    assert np.allclose(np.diag(cov), covariance_diagonal(6), rtol=0.03)  # Sigma_jj = j^-1.2
    off = cov - np.diag(np.diag(cov))
    assert np.abs(off).max() < 0.02  # Sigma diagonal
    logits = x @ k.w.T + k.b
    soft = np.exp(logits - logits.max(1, keepdims=True))
    soft /= soft.sum(1, keepdims=True)
    assert np.array_equal(k.labels(x), np.argmax(soft, axis=1))  # y = argmax(softmax(W x + b))


@pytest.mark.parametrize("alpha, beta", [(0.0, 0.0), (2.0, 5.0)])
def test_heterogeneity_alpha_moves_the_models_and_beta_the_input_means(alpha, beta):
    setting = SyntheticSetting(alpha=alpha, beta=beta, users=600, dim=60, classes=10, seed=3)
    users = [open_user(setting, k) for k in range(setting.users)]
    # the mean of a user's W entries is u_k + N(0, 1/600): over users its spread is sqrt(alpha^2 + 1/600)
    w_means = np.array([k.w.mean() for k in users])
    v_means = np.array([k.v.mean() for k in users])  # B_k + N(0, 1/60)
    assert w_means.std() == pytest.approx(np.sqrt(alpha**2 + 1 / 600), rel=0.12)
    assert v_means.std() == pytest.approx(np.sqrt(beta**2 + 1 / 60), rel=0.12)
    # within a user, W_k ~ N(u_k, 1) and v_k ~ N(B_k, 1) elementwise
    within_w = np.mean([k.w.std() for k in users])
    within_v = np.mean([k.v.std() for k in users])
    assert within_w == pytest.approx(1.0, rel=0.05) and within_v == pytest.approx(1.0, rel=0.05)


def test_iid_variant_shares_one_model():
    setting = SyntheticSetting(users=3, dim=5, classes=3, iid=True, seed=2)
    a, b = open_user(setting, 0), open_user(setting, 2)
    assert np.array_equal(a.w, b.w) and np.array_equal(a.b, b.b) and np.array_equal(a.v, b.v)


def test_a_user_is_the_same_whatever_the_user_count_and_order():
    small = load_dataset("synthetic", options={"synthetic_users": 3, "synthetic_dim": 8, "data_seed": 5})
    big = load_dataset("synthetic", options={"synthetic_users": 40, "synthetic_dim": 8, "data_seed": 5})
    for split in ("train", "test"):
        xs, xb = getattr(small, f"{split}_x"), getattr(big, f"{split}_x")
        ys, yb = getattr(small, f"{split}_y"), getattr(big, f"{split}_y")
        n = len(ys)
        assert torch.equal(xs[:], xb[:n]) and torch.equal(ys, yb[:n])
    assert big.source["samples_per_user"][:3] == small.source["samples_per_user"]


def test_rows_on_demand_equal_the_generated_samples():
    setting = SyntheticSetting(users=6, dim=7, classes=5, seed=4)
    users = SyntheticUsers(setting, cache_mb=0.01)  # a cache of about one user: most reads generate again
    train, test = users.rows("train"), users.rows("test")
    assert (
        isinstance(train, GeneratedRows)
        and train.shape == (int(users.n_train.sum()), 7)
        and len(test) == int((users.sizes - users.n_train).sum())
    )
    whole_train, whole_test = train[:], test[:]
    ys = {"train": [], "test": []}
    for k in range(6):
        d = generate_user(setting, k)
        a, b = int(train.starts[k]), int(train.starts[k + 1])
        assert torch.equal(whole_train[a:b], torch.from_numpy(d["train"][0].astype(np.float32)))
        a, b = int(test.starts[k]), int(test.starts[k + 1])
        assert torch.equal(whole_test[a:b], torch.from_numpy(d["test"][0].astype(np.float32)))
        for s in ys:
            ys[s].append(d[s][1])
    assert np.array_equal(users.train_y, np.concatenate(ys["train"])) and np.array_equal(
        users.test_y, np.concatenate(ys["test"])
    )
    # indexing like a tensor: any shape, any order, repeated rows, ints, negative ints, slices
    idx = torch.tensor([[len(train) - 1, 0, 5], [5, 17, 3]])
    assert torch.equal(train[idx], whole_train[idx]) and train[idx].shape == (2, 3, 7)
    assert torch.equal(train[4], whole_train[4]) and torch.equal(train[-1], whole_train[-1])
    assert torch.equal(train[3:9], whole_train[3:9]) and train[5:2].shape == (0, 7)
    assert torch.equal(train[np.array([2, 1])], whole_train[[2, 1]])
    assert users._held <= users.cache_bytes or len(users._cache) == 1
    with pytest.raises(IndexError):
        train[torch.tensor([len(train)])]
    assert (
        train.to("cpu") is train and materialize(train).shape == train.shape and materialize(whole_train) is whole_train
    )


def test_the_cache_is_bounded_and_not_pickled():
    setting = SyntheticSetting(users=50, dim=60, seed=0)
    users = SyntheticUsers(setting, cache_mb=0.5)
    rows = users.rows("train")
    rows[torch.arange(len(rows))]
    assert 0 < users._held <= users.cache_bytes or len(users._cache) == 1
    copy = pickle.loads(pickle.dumps(rows))
    assert copy.users._held == 0 and not copy.users._cache
    assert torch.equal(copy[torch.arange(0, len(rows), 97)], rows[torch.arange(0, len(rows), 97)])


def test_memory_does_not_hold_the_data():
    # 400 users: about 140,000 samples, 34 MB of float32 inputs; what is held is the labels (8 bytes a sample, plus
    # the users' groups) and a cache of at most CACHE_MB
    d = load_dataset("synthetic", options={"synthetic_users": 400})
    assert isinstance(d.train_x, GeneratedRows) and isinstance(d.test_x, GeneratedRows)
    held = d.train_x.users._held
    assert held == 0  # nothing generated until indexed
    d.train_x[torch.arange(len(d.train_x))]
    assert d.train_x.users._held <= d.train_x.users.cache_bytes


RUN = """
import sys
from dataclasses import replace
from fedcli.comm.mpi import get_communicator
from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.runner import run_train
for mode, out in zip(sys.argv[1::2], sys.argv[2::2]):  # MODE OUT pairs, run in turn by the same processes
    cfg = TrainConfig(algo="ditto", model="mlp", mlp_hidden="32", dataset="synthetic", synthetic_users=24, clients=24,
                      partition="natural", writers_per_client=1, active_ratio=0.25, rounds=2, tau=3,
                      client_state="disk", cohort_chunk=2, client_test_fraction=0.25, out=out)
    dataset, partition = load_data_and_partition(cfg)
    if mode == "whole":  # the inputs materialized up-front, as the generator made them before
        dataset = replace(dataset, train_x=dataset.train_x[:], test_x=dataset.test_x[:])
    run_train(cfg, comm=get_communicator(), quiet=True, data=(dataset, partition))
"""


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_generated_on_demand_under_mpiexec_equals_the_materialized_data(tmp_path):
    """One generated user a client (the issue's setting, small) under ``mpiexec -n 2``: each rank generates the users
    it touches, and the metrics and per-client results are those of the same run on the materialized inputs, bit
    for bit."""
    import csv
    import os
    import subprocess
    import sys

    from runkit import MPIEXEC, ROOT

    if MPIEXEC is None:
        pytest.skip("mpiexec not installed (make install brings mpich)")
    script = tmp_path / "run.py"
    script.write_text(RUN)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    modes = [x for mode in ("whole", "on-demand") for x in (mode, str(tmp_path / mode))]
    p = subprocess.run(  # both runs in one mpiexec: its ranks import torch once
        [MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", str(script), *modes],
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert p.returncode == 0, p.stderr[-2000:]

    def strip(path):
        with open(path) as f:
            return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]

    for name in ("metrics.csv", "clients.csv"):
        whole, lazy = strip(tmp_path / "whole" / name), strip(tmp_path / "on-demand" / name)
        assert whole and whole == lazy, name


def test_the_nodes_processes_share_the_generated_rows_cache():
    """``FedDataset.share_caches(n)``: each of a node's n processes keeps 1/n of the 32 MB cache of generated rows."""
    from fedcli.data.datasets import load_dataset

    ds = load_dataset("synthetic", None, options={"synthetic_users": 3})
    users = ds.train_x.users
    assert users.cache_bytes == 32 * 2**20
    ds.share_caches(4)
    assert users.cache_bytes == 8 * 2**20 and ds.test_x.users is users
    ds.share_caches(1)  # from the whole budget again, not from the last share
    assert users.cache_bytes == 32 * 2**20
