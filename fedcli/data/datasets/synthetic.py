"""Synthetic(alpha, beta) of Li et al. (FedProx, MLSys 2020), generated user by user (``fedcli.data.synthetic``):
nothing on disk; its size and classes are its options', so the sweep estimate generates it for its facts."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset


def _synthetic_setting(opts: dict):
    """The SyntheticSetting of the loader options (each checked by ``option``; the defaults of Li et al. 2020)."""
    from fedcli.data.datasets.shared import option
    from fedcli.data.synthetic import SyntheticSetting

    return SyntheticSetting(
        alpha=option(opts, "synthetic_alpha", 1.0, float, lo=0.0),
        beta=option(opts, "synthetic_beta", 1.0, float, lo=0.0),
        users=option(opts, "synthetic_users", 30, int, lo=1),
        dim=option(opts, "synthetic_dim", 60, int, lo=1),
        classes=option(opts, "synthetic_classes", 10, int, lo=2),
        iid=option(opts, "synthetic_iid", False, bool),
        seed=option(opts, "data_seed", 0, int, lo=0),
    )


def _synthetic_source(setting, samples_per_user: list[int]) -> dict:
    """The source record: the options the data is a function of, and every user's sample count."""
    used = {
        "synthetic_alpha": setting.alpha,
        "synthetic_beta": setting.beta,
        "synthetic_users": setting.users,
        "synthetic_dim": setting.dim,
        "synthetic_classes": setting.classes,
        "synthetic_iid": setting.iid,
        "data_seed": setting.seed,
    }
    return {
        "dataset": "synthetic",
        "folder": None,
        "format": "generated (Li et al. 2020, Synthetic(alpha, beta)), keyed by (data_seed, user), on demand",
        "files": [],
        "options": used,
        "samples_per_user": samples_per_user,
    }


def load_synthetic(
    data_dir: Path | None = None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """Synthetic(alpha, beta) of Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020),
    generated user by user from a stream keyed by (data_seed, user): the model and its equations are in
    ``fedcli.data.synthetic``.

    Per user k: u_k ~ N(0, alpha), B_k ~ N(0, beta), W_k ~ N(u_k, 1) [classes, dim], b_k ~ N(u_k, 1),
    v_k ~ N(B_k, 1) [dim], x ~ N(v_k, diag(j^-1.2)), y = argmax(softmax(W_k x + b_k)); n_k =
    min(int(lognormal(4, 2)) + 50, 5000) samples, n_k - int(0.8 n_k) of them its test samples.
    Options: synthetic_alpha, synthetic_beta, synthetic_users, synthetic_dim, synthetic_classes,
    synthetic_iid, data_seed (the data is a function of these options only).

    The inputs (``train_x``, ``test_x``) are ``GeneratedRows``: generated when indexed, so memory does not grow
    with the number of users; the labels and the user of every sample are computed here. With a holdout fraction
    the inputs are materialized (the stratified split takes rows out of the whole pool).
    """
    import numpy as np

    from fedcli.data.sources import _assemble, _Holdout, _Split
    from fedcli.data.synthetic import SyntheticUsers

    setting = _synthetic_setting(options or {})
    users = SyntheticUsers(setting)
    ids = np.arange(setting.users, dtype=np.int32)
    train = _Split(users.rows("train"), users.train_y, np.repeat(ids, users.n_train))
    test = _Split(users.rows("test"), users.test_y, np.repeat(ids, users.sizes - users.n_train))
    source = _synthetic_source(setting, users.sizes.tolist())
    if holdout_fraction > 0:  # one pool, split by labels: the rows are taken out of the whole table
        train = _Split(train.x[:].numpy(), train.y, train.groups)
        return _assemble(
            "synthetic",
            _Holdout("train", holdout_fraction),
            train,
            None,
            setting.classes,
            source,
            group_names=[f"user_{k}" for k in range(setting.users)],
        )
    return _assemble(
        "synthetic",
        _Holdout("both"),
        train,
        test,
        setting.classes,
        source,
        group_names=[f"user_{k}" for k in range(setting.users)],
    )


DATASET = Dataset("synthetic", load_synthetic, on_disk=False)
