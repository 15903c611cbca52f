"""Synthetic(alpha, beta) of Li et al., "Federated Optimization in Heterogeneous Networks" (FedProx, MLSys 2020),
generated user by user from a random stream keyed by (data_seed, user), so that a run holds in memory only the
users it is touching, whatever the number of users.

The model (the paper's Section 5, "Synthetic data"; the authors' generator for the details it leaves open), for each
user k:

    u_k ~ N(0, alpha),  B_k ~ N(0, beta)                                    (heterogeneity of models, of data)
    W_k ~ N(u_k, 1) in R^{C x d},  b_k ~ N(u_k, 1) in R^C,  v_k ~ N(B_k, 1) in R^d    (elementwise)
    x ~ N(v_k, Sigma),  Sigma diagonal, Sigma_jj = j^-1.2  (j = 1..d)
    y = argmax(softmax(W_k x + b_k))  (= argmax of the logits: softmax is monotone)

with d = ``synthetic_dim`` (60), C = ``synthetic_classes`` (10) and n_k = min(int(lognormal(4, 2)) + 50, 5000)
samples (a power law, as in the authors' generator). As there, the second argument of N(., .) is a standard
deviation. The IID variant: one W, b ~ N(0, 1) and one v ~ N(0, 1) shared by all users (drawn from their own stream).
User k has int(0.8 n_k) training samples and n_k - int(0.8 n_k) test samples.

User k draws, in this order, from ``numpy.random.default_rng(SeedSequence(data_seed, spawn_key=(0, k)))``: n_k,
u_k, B_k, W_k, b_k, v_k, then the standard normals of its test inputs, then those of its training inputs (the test
inputs first, so that evaluating does not generate the training inputs); the IID variant's shared W, b, v come
from ``SeedSequence(data_seed, spawn_key=(1,))``. So a user's samples are the same whichever users are generated, in
whatever order, by whichever process, and the number of users changes nothing about the users both counts have.

The inputs of the training and test splits are :class:`GeneratedRows`: tables indexed like tensors (``x[idx]`` with
an index tensor of any shape, a slice or an int) whose rows are generated when indexed, through an LRU cache of
recently used users (``CACHE_MB`` a node, shared evenly by its processes); the labels, the user of every sample and
the sizes are computed when the data is loaded (16 bytes a sample, the same time as generating the data once). Memory is
that of the cache, not of the data (about 84 bytes a sample: 0.84 GB
at 10,000 users).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

CACHE_MB = 32  # generated users kept (float32 inputs of both splits); the cohort's users stay in it
TRAIN_SHARE = 0.8  # int(0.8 n_k) of a user's samples train, the rest test
SIZE_MIN, SIZE_CAP = 50, 5000


@dataclass(frozen=True)
class SyntheticSetting:
    """Synthetic(alpha, beta): the options that decide the data (it is a function of these only)."""

    alpha: float = 1.0
    beta: float = 1.0
    users: int = 30
    dim: int = 60
    classes: int = 10
    iid: bool = False
    seed: int = 0


def user_stream(seed: int, user: int) -> np.random.Generator:
    """User ``user``'s random stream: keyed by (data_seed, user), independent of every other user's."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0, user)))


def shared_stream(seed: int) -> np.random.Generator:
    """The IID variant's stream for its shared W, b, v."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))


def covariance_diagonal(dim: int) -> np.ndarray:
    """Sigma_jj = j^-1.2, j = 1..dim."""
    return np.arange(1, dim + 1, dtype=np.float64) ** -1.2


def shared_model(setting: SyntheticSetting) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The IID variant's (W [C, d], b [C], v [d]), each ~ N(0, 1)."""
    rng = shared_stream(setting.seed)
    return (
        rng.normal(0.0, 1.0, (setting.classes, setting.dim)),
        rng.normal(0.0, 1.0, setting.classes),
        rng.normal(0.0, 1.0, setting.dim),
    )


@dataclass
class User:
    """One user's model and its stream, positioned at its test inputs: n_k, n_train, W_k [C, d], b_k [C], v_k [d]."""

    n: int
    n_train: int
    w: np.ndarray
    b: np.ndarray
    v: np.ndarray
    rng: np.random.Generator

    def inputs(self, count: int) -> np.ndarray:
        """The next ``count`` inputs x ~ N(v_k, Sigma), float64 [count, d] (the test inputs, then the training ones)."""
        sd = np.sqrt(covariance_diagonal(len(self.v)))
        return self.v + self.rng.standard_normal((count, len(self.v))) * sd

    def labels(self, x: np.ndarray) -> np.ndarray:
        """y = argmax(softmax(W_k x + b_k)) = argmax of the logits, int64."""
        return np.argmax(x @ self.w.T + self.b, axis=1).astype(np.int64)


def open_user(setting: SyntheticSetting, user: int, shared=None) -> User:
    """User ``user``'s draws up to its inputs: n_k = min(int(lognormal(4, 2)) + 50, 5000), u_k ~ N(0, alpha),
    B_k ~ N(0, beta), then (not in the IID variant, which uses ``shared``) W_k ~ N(u_k, 1), b_k ~ N(u_k, 1),
    v_k ~ N(B_k, 1)."""
    rng = user_stream(setting.seed, user)
    n = int(min(int(rng.lognormal(4.0, 2.0)) + SIZE_MIN, SIZE_CAP))
    u = rng.normal(0.0, setting.alpha)  # model heterogeneity: mean of W_k and b_k
    big_b = rng.normal(0.0, setting.beta)  # data heterogeneity: mean of v_k
    if setting.iid:
        w, b, v = shared if shared is not None else shared_model(setting)
    else:
        w = rng.normal(u, 1.0, (setting.classes, setting.dim))
        b = rng.normal(u, 1.0, setting.classes)
        v = rng.normal(big_b, 1.0, setting.dim)
    return User(n, int(TRAIN_SHARE * n), w, b, v, rng)


def generate_user(setting: SyntheticSetting, user: int, shared=None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """User ``user``'s samples by split: {"train": (x float64 [int(0.8 n_k), d], y int64), "test": (x, y)}."""
    k = open_user(setting, user, shared)
    x_test = k.inputs(k.n - k.n_train)
    x_train = k.inputs(k.n_train)
    return {"train": (x_train, k.labels(x_train)), "test": (x_test, k.labels(x_test))}


class SyntheticUsers:
    """The users of one Synthetic(alpha, beta) dataset: every user's size and labels, computed once (one pass over
    the users, one at a time), and its inputs generated on demand through an LRU cache of ``cache_mb``."""

    def __init__(self, setting: SyntheticSetting, cache_mb: float = CACHE_MB):
        self.setting = setting
        self.cache_mb = cache_mb
        self.cache_bytes = int(cache_mb * 2**20)
        self._shared = shared_model(setting) if setting.iid else None
        self._cache: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()
        self._held = 0
        sizes, labels = [], {"train": [], "test": []}
        for k in range(setting.users):
            data = generate_user(setting, k, self._shared)
            sizes.append(len(data["train"][1]) + len(data["test"][1]))
            for split in labels:
                labels[split].append(data[split][1])
        self.sizes = np.array(sizes, dtype=np.int64)
        self.n_train = (TRAIN_SHARE * self.sizes).astype(np.int64)  # int(0.8 n_k)
        self.train_y, self.test_y = (np.concatenate(labels[s]) for s in ("train", "test"))

    def __getstate__(self) -> dict:  # a worker process gets the recipe and the labels, not the cache
        return {**self.__dict__, "_cache": OrderedDict(), "_held": 0}

    def share_cache(self, processes: int) -> None:
        """Keep ``cache_mb / processes`` (the node's processes share the budget; at least one user stays cached)."""
        self.cache_bytes = int(self.cache_mb * 2**20 / max(1, processes))

    def inputs(self, user: int, split: str) -> np.ndarray:
        """``user``'s inputs of ``split``, float32 [n, d], from the cache or generated."""
        x = self._cache.get((user, split))
        if x is not None:
            self._cache.move_to_end((user, split))
            return x
        k = open_user(self.setting, user, self._shared)
        x = k.inputs(k.n - k.n_train)
        if split == "train":
            x = k.inputs(k.n_train)
        x = x.astype(np.float32)
        self._cache[(user, split)] = x
        self._held += x.nbytes
        while self._held > self.cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._held -= old.nbytes
        return x

    def rows(self, split: str) -> GeneratedRows:
        """The inputs of ``split`` ("train" or "test"): users in order, each user's samples in order."""
        counts = self.n_train if split == "train" else self.sizes - self.n_train
        return GeneratedRows(self, split, np.concatenate(([0], np.cumsum(counts))).astype(np.int64))


class GeneratedRows:
    """A float32 table [N, d] whose rows are generated when they are indexed: row i belongs to the user u with
    ``starts[u] <= i < starts[u + 1]`` and is row ``i - starts[u]`` of that user's ``split`` inputs.

    Indexed like a tensor: ``rows[idx]`` with an int64 tensor or array of any shape (a [*idx.shape, d] tensor),
    a slice (step 1) or an int; ``rows.to(device)`` gives the table whose rows come out on ``device``;
    ``rows[:]`` is the whole table as a tensor."""

    dtype = torch.float32

    def __init__(self, users: SyntheticUsers, split: str, starts: np.ndarray, device: str | torch.device = "cpu"):
        self.users, self.split, self.starts = users, split, starts
        self.device = torch.device(device)
        self.shape = torch.Size((int(starts[-1]), users.setting.dim))

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def ndim(self) -> int:
        return 2

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def to(self, device=None, *args, **kwargs) -> GeneratedRows:
        if device is None or torch.device(device) == self.device:
            return self
        return GeneratedRows(self.users, self.split, self.starts, device)

    def share_cache(self, processes: int) -> None:
        self.users.share_cache(processes)

    def __repr__(self) -> str:
        return f"GeneratedRows({self.shape[0]} x {self.shape[1]}, {self.users.setting.users} users, on demand)"

    def __getitem__(self, idx) -> torch.Tensor:
        n = self.shape[0]
        if isinstance(idx, slice):
            start, stop, step = idx.indices(n)
            if step != 1:
                raise IndexError("GeneratedRows: only slices of step 1")
            flat, shape = np.arange(start, max(start, stop), dtype=np.int64), (max(0, stop - start),)
        elif isinstance(idx, (int, np.integer)):
            i = int(idx) + (n if idx < 0 else 0)
            return self[np.array([i], dtype=np.int64)][0]
        else:
            arr = idx.detach().cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
            if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
                raise IndexError("GeneratedRows: index with integers")
            shape, flat = arr.shape, arr.reshape(-1).astype(np.int64, copy=False)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n):
            raise IndexError(f"GeneratedRows: index out of range for {n} rows")
        out = np.empty((flat.size, self.shape[1]), dtype=np.float32)
        if flat.size:
            owner = np.searchsorted(self.starts, flat, side="right") - 1
            order = np.argsort(owner, kind="stable")
            sorted_owner = owner[order]
            cuts = np.flatnonzero(np.diff(sorted_owner)) + 1
            for chunk in np.split(order, cuts):
                u = int(owner[chunk[0]])
                out[chunk] = self.users.inputs(u, self.split)[flat[chunk] - self.starts[u]]
        t = torch.from_numpy(out).view(*shape, self.shape[1])
        return t if self.device.type == "cpu" else t.to(self.device)


def materialize(x):
    """A tensor of ``x``'s rows: ``x`` itself when it is a tensor, the whole table when it is :class:`GeneratedRows`."""
    return x[:] if isinstance(x, GeneratedRows) else x
