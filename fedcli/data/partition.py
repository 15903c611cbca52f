"""Split a dataset's training samples over federated clients.

Four schemes (``SCHEMES``), each following the setting of a paper or its reference code:

* ``iid``: a seeded shuffle cut into near-equal parts.
* ``dirichlet``: label skew with Dir(alpha) proportions and the minimum-size retry loop of
  FedML's ``partition_data(..., "hetero", ...)`` (Yurochkin et al. 2019; Wang et al. 2020);
  this is the non-IID CIFAR setting of the FedLAMA paper.
* ``pathological``: disjoint label-sorted shards, ``classes_per_client`` of them per client
  (McMahan et al. 2017; the pathological setting of FedALA), or (``pathological_rule="classes"``) PFLlib's
  rule, which FedALA's numbers come from: every client exactly ``classes_per_client`` classes.
* ``natural``: whole LEAF writers per client (FedLAMA's FEMNIST setting: 2 writers per client).

Optionally every client's samples are then split into a local train and a local test part
(``client_test_fraction``; FedALA evaluates on 25% of each client's data), by fedcli's rule or by PFLlib's
(``client_test_split="pfllib"``: scikit-learn's ``train_test_split`` as PFLlib's ``split_data`` calls it).

A :class:`Partition` holds sorted int64 index arrays into ``dataset.train_x`` and a sha256
hash of its canonical content; :func:`save_partition` / :func:`load_partition` store it as
JSON and verify the hash on load, so a partition file can be cited and reused across runs.

All randomness comes from ``np.random.default_rng(seed)`` (the split) and from
``np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))`` (the local test
split), so the same call gives the same partition on every machine and process count, and a
client's pool of samples does not depend on ``client_test_fraction``. PFLlib's rules (``pathological_rule``
``classes``/``classes-balanced``, ``client_test_split="pfllib"``) draw from one legacy
``np.random.RandomState(seed)`` in the reference's order (class amounts, then each client's shuffle), as its
dataset scripts draw from ``np.random.seed(1)``'s global stream: on the same pool and seed they give PFLlib's split.
Options left at their defaults are not written into ``config``, so the partitions (and hashes) made before these
options existed are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from fedcli.errors import ConfigError, DataError
from fedcli.safefs import atomic_write, make_dir
from fedcli.userfiles import PARTITION_LIMIT, read_input

SCHEMES = ("iid", "dirichlet", "pathological", "natural")
PATHOLOGICAL_RULES = ("shards", "classes", "classes-balanced")
TEST_SPLITS = ("fedcli", "pfllib")

FORMAT_NAME = "fedcli-partition"
FORMAT_VERSION = 1

# Where the second (local test split) random stream comes from; see the module docstring.
_TEST_SPLIT_STREAM = 1


# --------------------------------------------------------------------------------------------
# The partition object
# --------------------------------------------------------------------------------------------


@dataclass
class Partition:
    """Which training samples each client holds.

    Attributes:
        config: how the partition was made: ``scheme, clients, seed, alpha, classes_per_client,
            writers_per_client, client_test_fraction, min_size, dataset, n_train, num_classes``
            (options that do not apply to the scheme are ``None``), plus scheme-specific facts
            (``tries`` for dirichlet, ``writers_used`` / ``writers_total`` for natural).
        train: per client, sorted int64 indices into ``dataset.train_x``.
        test: per client, sorted int64 local test indices into ``dataset.train_x``, disjoint
            from ``train``; ``None`` when ``client_test_fraction`` is 0.
        hash: sha256 hex digest of the canonical content (see :func:`partition_hash`).
    """

    config: dict
    train: list[np.ndarray]
    test: list[np.ndarray] | None
    hash: str
    # --client-val-fraction: per client, its own validation indices, held out of ``train`` at run time
    # (``fedcli.data.validation.split_client_validation``; never in a partition file); None without
    val: list[np.ndarray] | None = None

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def sizes(self) -> np.ndarray:
        """Training samples per client, int64 ``[clients]``."""
        return np.array([len(t) for t in self.train], dtype=np.int64)

    def test_sizes(self) -> np.ndarray:
        """Local test samples per client, int64 ``[clients]`` (zeros without a local test split)."""
        if self.test is None:
            return np.zeros(len(self.train), dtype=np.int64)
        return np.array([len(t) for t in self.test], dtype=np.int64)

    def class_counts(self, labels, num_classes: int | None = None) -> np.ndarray:
        """Training samples per client and class, int64 ``[clients, num_classes]``.

        ``labels`` are the dataset's training labels (numpy array or torch tensor);
        ``num_classes`` defaults to the one recorded in ``config``.
        """
        y = _as_numpy(labels).astype(np.int64, copy=False)
        if num_classes is None:
            num_classes = int(self.config.get("num_classes") or (int(y.max()) + 1 if y.size else 0))
        out = np.zeros((len(self.train), num_classes), dtype=np.int64)
        for i, idx in enumerate(self.train):
            if len(idx):
                out[i] = np.bincount(y[idx], minlength=num_classes)[:num_classes]
        return out


def partition_hash(config: dict, train: list, test: list | None) -> str:
    """sha256 hex digest of the canonical content of a partition.

    The canonical content is ``json.dumps({"config": config, "test": test, "train": train},
    sort_keys=True, separators=(",", ":"))`` with every index list written as a JSON list of
    integers, encoded as UTF-8. Changing any index, any client's list, or any config value
    changes the hash.
    """
    h = hashlib.sha256()
    # the canonical text fed piece by piece (one client's list at a time): the same bytes as json.dumps of the whole
    # content, without holding every index as a Python int at once (about 190 MB at 2.8 million indices)
    h.update(b'{"config":')
    h.update(
        json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("utf-8")
    )
    for name, lists in ((',"test":', test), (',"train":', train)):
        h.update(name.encode("utf-8"))
        if lists is None:
            h.update(b"null")
            continue
        h.update(b"[")
        for i, t in enumerate(lists):
            h.update(b"[" if i == 0 else b",[")
            h.update(",".join(map(str, _int_list(t))).encode("ascii"))
            h.update(b"]")
        h.update(b"]")
    h.update(b"}")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Making a partition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionOptions:
    """What a partition is asked for: the scheme, the client count, the seed and the partition options (``--alpha``,
    ``--classes-per-client``, ``--writers-per-client``, ``--client-test-fraction``, ``--min-size``,
    ``--pathological-rule``, ``--client-test-split``, ``--data-pool``; ``max_tries``, the Dirichlet retry cap, has no
    flag), with the defaults of the flags. Options that do not apply to ``scheme`` are ignored and recorded as
    ``None`` in the partition's ``config``."""

    scheme: str
    clients: int
    seed: int
    alpha: float | None = None
    classes_per_client: int | None = None
    writers_per_client: int | None = None
    client_test_fraction: float = 0.0
    min_size: int = 10
    max_tries: int = 1000
    pathological_rule: str = "shards"
    client_test_split: str = "fedcli"
    data_pool: str = "train"

    @classmethod
    def from_config(cls, cfg) -> PartitionOptions:
        """A run config's inline partition (``--partition``, ``--clients``, ``--seed`` and the options above)."""
        given = [f.name for f in fields(cls) if f.name not in ("scheme", "max_tries")]
        return cls(scheme=cfg.partition, **{name: getattr(cfg, name) for name in given})


def make_partition(dataset, options: PartitionOptions) -> Partition:
    """Split ``dataset``'s training samples over ``options.clients`` clients with ``options.scheme``.

    ``dataset`` needs ``name``, ``train_y`` (int labels, ``[N]``), ``num_classes`` and, for
    ``natural``, ``train_groups`` (writer index per training sample), as in
    :class:`fedcli.data.datasets.FedDataset`. Options that do not apply to the scheme are
    ignored and recorded as ``None``. Impossible requests raise :class:`ConfigError` (exit 2)
    with one sentence naming the option. ``data_pool`` is only recorded (``"train+test"``: ``dataset`` is
    already the merged pool, ``fedcli.data.setup.merge_pool``).

    The jobs in order: check the request, read the training pool, the config, the scheme's split (``_SPLITS``), the
    local test split.
    """
    o = options
    clients, seed, f = _checked_counts(o.scheme, o.clients, o.seed, o.client_test_fraction)
    req = _Request(
        *_training_pool(dataset, clients),
        dataset=dataset,
        clients=clients,
        seed=seed,
        alpha=o.alpha,
        classes_per_client=o.classes_per_client,
        writers_per_client=o.writers_per_client,
        min_size=o.min_size,
        max_tries=o.max_tries,
        pathological_rule=o.pathological_rule,
    )
    config = _base_config(req, o.scheme, f, o.client_test_split, o.data_pool)
    rng = np.random.default_rng(seed)
    parts, legacy = _SPLITS[o.scheme](req, rng, config)
    train, test = _local_test(parts, f, o.client_test_split, legacy, seed)
    return Partition(config=config, train=train, test=test, hash=partition_hash(config, train, test))


@dataclass(frozen=True)
class _Request:
    """One :func:`make_partition` call: the training pool (dataset name, labels, classes, samples) and the options."""

    name: str
    labels: np.ndarray
    num_classes: int
    n: int
    dataset: Any
    clients: int
    seed: int
    alpha: float | None
    classes_per_client: int | None
    writers_per_client: int | None
    min_size: int
    max_tries: int
    pathological_rule: str


def _checked_counts(scheme: str, clients, seed, client_test_fraction) -> tuple[int, int, float]:
    """The scheme's name, ``clients`` >= 1, ``seed`` >= 0 and the local test fraction in [0, 1) checked (ConfigError
    naming the option); returns (clients, seed, fraction) as numbers."""
    if scheme not in SCHEMES:
        raise ConfigError(f"--partition must be one of {', '.join(SCHEMES)}, not {scheme!r}")
    clients = _as_int(clients, "--clients")
    seed = _as_int(seed, "--seed")
    if clients < 1:
        raise ConfigError(f"--clients must be >= 1, got {clients}")
    if seed < 0:
        raise ConfigError(f"--seed must be a non-negative integer, got {seed}")
    f = _as_float(client_test_fraction, "--client-test-fraction")
    if not (0.0 <= f < 1.0):
        raise ConfigError(f"--client-test-fraction must be in [0, 1), got {client_test_fraction}")
    return clients, seed, f


def _training_pool(dataset, clients: int) -> tuple[str, np.ndarray, int, int]:
    """The dataset's name, training labels (int64, checked to lie in [0, classes)), class count and sample count; no
    more clients than samples."""
    name = str(getattr(dataset, "name", "unknown"))
    labels = _as_numpy(dataset.train_y).astype(np.int64, copy=False).reshape(-1)
    num_classes = int(dataset.num_classes)
    n = int(labels.shape[0])
    if n and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(
            f"dataset {name}: training labels outside [0, {num_classes}); "
            f"expected integer class labels 0..{num_classes - 1}"
        )
    if clients > n:
        raise ConfigError(f"--clients {clients} is more than the {n} training samples of dataset {name}")
    return name, labels, num_classes, n


def _base_config(req: _Request, scheme: str, f: float, client_test_split: str, data_pool: str) -> dict[str, Any]:
    """The partition's config before the scheme's own entries: every option ``None`` until its scheme sets it; the
    PFLlib rules and the data pool written only when not at their defaults (older hashes stay as they were)."""
    config: dict[str, Any] = {
        "scheme": scheme,
        "clients": req.clients,
        "seed": req.seed,
        "alpha": None,
        "classes_per_client": None,
        "writers_per_client": None,
        "client_test_fraction": f,
        "min_size": None,
        "dataset": req.name,
        "n_train": req.n,
        "num_classes": req.num_classes,
    }
    if req.pathological_rule not in PATHOLOGICAL_RULES:
        raise ConfigError(
            f"--pathological-rule must be one of {', '.join(PATHOLOGICAL_RULES)}, not {req.pathological_rule!r}"
        )
    if client_test_split not in TEST_SPLITS:
        raise ConfigError(f"--client-test-split must be one of {', '.join(TEST_SPLITS)}, not {client_test_split!r}")
    for k, v, default in (
        ("pathological_rule", req.pathological_rule, "shards"),
        ("client_test_split", client_test_split, "fedcli"),
        ("data_pool", data_pool, "train"),
    ):
        if v != default and (k != "pathological_rule" or scheme == "pathological"):
            config[k] = v
    return config


def _iid_parts(req: _Request, rng: np.random.Generator, config: dict) -> tuple[list[np.ndarray], None]:
    """``iid``: :func:`_split_iid`. Returns (parts, no legacy stream)."""
    return _split_iid(req.n, req.clients, rng), None


def _dirichlet_parts(req: _Request, rng: np.random.Generator, config: dict) -> tuple[list[np.ndarray], None]:
    """``dirichlet``: ``alpha`` > 0, ``min_size`` and ``max_tries`` checked and recorded with the tries it took
    (:func:`_split_dirichlet`). Returns (parts, no legacy stream)."""
    if req.alpha is None:
        raise ConfigError("--alpha is required for --partition dirichlet")
    a = _as_float(req.alpha, "--alpha")
    if not (a > 0) or not math.isfinite(a):
        raise ConfigError(f"--alpha must be > 0, got {req.alpha}")
    min_size = _as_int(req.min_size, "min_size")
    max_tries = _as_int(req.max_tries, "max_tries")
    if min_size < 0:
        raise ConfigError(f"min_size must be >= 0, got {min_size}")
    if max_tries < 1:
        raise ConfigError(f"max_tries must be >= 1, got {max_tries}")
    config["alpha"] = a
    config["min_size"] = min_size
    parts, tries = _split_dirichlet(req.labels, req.num_classes, req.clients, a, min_size, max_tries, rng)
    config["tries"] = tries
    return parts, None


def _pathological_parts(req: _Request, rng: np.random.Generator, config: dict):
    """``pathological``: ``classes_per_client`` checked against the classes and samples, then label-sorted shards
    (:func:`_split_pathological`) or PFLlib's rule on its legacy stream (:func:`_split_classes`). Returns (parts, the
    legacy ``RandomState`` or None)."""
    name, num_classes, n, clients = req.name, req.num_classes, req.n, req.clients
    if req.classes_per_client is None:
        raise ConfigError("--classes-per-client is required for --partition pathological")
    k = _as_int(req.classes_per_client, "--classes-per-client")
    if k < 1 or k > num_classes:
        raise ConfigError(
            f"--classes-per-client must be between 1 and {num_classes} (the classes of dataset {name}), got {k}"
        )
    if clients * k > n:
        raise ConfigError(
            f"--classes-per-client {k} x --clients {clients} = {clients * k} shards is more than "
            f"the {n} training samples of dataset {name}"
        )
    config["classes_per_client"] = k
    if req.pathological_rule == "shards":
        return _split_pathological(req.labels, clients, k, rng), None
    legacy = np.random.RandomState(req.seed)
    balanced = req.pathological_rule == "classes-balanced"
    return _split_classes(req.labels, num_classes, clients, k, balanced, legacy, name), legacy


def _natural_parts(req: _Request, rng: np.random.Generator, config: dict) -> tuple[list[np.ndarray], None]:
    """``natural``: the dataset's writer per sample checked, then ``writers_per_client`` whole writers per client
    (:func:`_split_natural`), recorded with the writers used and available. Returns (parts, no legacy stream)."""
    name, n, clients = req.name, req.n, req.clients
    if req.writers_per_client is None:
        raise ConfigError("--writers-per-client is required for --partition natural")
    w = _as_int(req.writers_per_client, "--writers-per-client")
    if w < 1:
        raise ConfigError(f"--writers-per-client must be >= 1, got {w}")
    groups = getattr(req.dataset, "train_groups", None)
    if groups is None:
        raise ConfigError(
            f"--partition natural needs writer groups, and dataset {name} has none; "
            "use a dataset with writer ids (femnist, synthetic, imagefolder with writer subfolders, tensors with a "
            "writers array) or another --partition"
        )
    groups = _as_numpy(groups).astype(np.int64, copy=False).reshape(-1)
    if groups.shape[0] != n:
        raise DataError(
            f"dataset {name}: {groups.shape[0]} writer labels for {n} training samples; "
            "expected one writer index per training sample"
        )
    writers = np.unique(groups)
    if w * clients > len(writers):
        raise ConfigError(
            f"--writers-per-client {w} x --clients {clients} = {w * clients} writers is more than "
            f"the {len(writers)} writers of dataset {name}"
        )
    config["writers_per_client"] = w
    parts = _split_natural(groups, writers, clients, w, rng)
    config["writers_used"] = w * clients
    config["writers_total"] = int(len(writers))
    return parts, None


#: each scheme's split: (request, the seed's generator, the config it adds its entries to) -> (parts, legacy stream)
_SPLITS = {
    "iid": _iid_parts,
    "dirichlet": _dirichlet_parts,
    "pathological": _pathological_parts,
    "natural": _natural_parts,
}


def _local_test(parts: list, f: float, client_test_split: str, legacy, seed: int):
    """Every client's samples sorted, and with ``f`` > 0 split into a local train and test part: PFLlib's rule on the
    legacy stream (the scheme's, else a new one of ``seed``) or fedcli's. Returns (train, test or None)."""
    test = None
    if f > 0 and client_test_split == "pfllib":
        train, test = _split_local_test_pfllib(parts, f, legacy if legacy is not None else np.random.RandomState(seed))
    else:
        train = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
        if f > 0:
            train, test = _split_local_test(train, f, seed)
    return train, test


def _split_iid(n: int, clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """IID: shuffle all indices with the seed, cut into near-equal parts (``np.array_split``)."""
    return list(np.array_split(rng.permutation(n), clients))


def _split_dirichlet(
    labels: np.ndarray,
    num_classes: int,
    clients: int,
    alpha: float,
    min_size: int,
    max_tries: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], int]:
    """Label-skewed split with Dirichlet proportions, as FedML's ``partition_data`` "hetero".

    Source: FedML ``fedml_api/data_preprocessing/cifar10/data_loader.py::partition_data``
    (partition ``"hetero"``), used by the FedLAMA paper; the scheme is from Yurochkin et al.
    2019 (PFNM) and Wang et al. 2020 (FedMA). Repeat until the smallest client holds at least
    ``min_size`` samples: for each class k, shuffle its indices, draw p ~ Dir(alpha * 1), set
    p_j = 0 for every client j that already holds >= N / clients samples, renormalize and cut
    the class at ``(cumsum(p) * n_k).astype(int)[:-1]``.

    Deviation: when every remaining proportion is exactly 0 (an underflow that tiny alpha can
    produce, on which FedML divides by zero), the class goes to the first eligible client with
    the largest drawn proportion. Returns the parts and the number of tries used.
    """
    n = labels.shape[0]
    if clients * min_size > n:
        raise ConfigError(
            f"dirichlet partition: could not give every client at least {min_size} samples "
            f"({clients} clients x {min_size} > {n} training samples); lower --clients or raise --alpha"
        )
    by_class = [np.flatnonzero(labels == k) for k in range(num_classes)]
    cap = n / clients
    concentration = np.repeat(alpha, clients)
    client_ids = np.arange(clients)
    for attempt in range(1, max_tries + 1):
        owner = np.empty(n, dtype=np.int64)
        sizes = np.zeros(clients, dtype=np.int64)
        for idx in by_class:
            idx_k = rng.permutation(idx)
            raw = rng.dirichlet(concentration)
            eligible = sizes < cap
            if not eligible.any():  # cannot happen in exact arithmetic; keep everyone eligible
                eligible[:] = True
            p = raw * eligible
            total = p.sum()
            if not (total > 0) or not np.isfinite(total):
                p = np.zeros(clients)
                p[int(np.argmax(np.where(eligible, np.nan_to_num(raw), -1.0)))] = 1.0
            else:
                p = p / total
            cuts = (np.cumsum(p) * len(idx_k)).astype(int)[:-1]
            counts = np.diff(np.concatenate(([0], cuts, [len(idx_k)])))
            owner[idx_k] = np.repeat(client_ids, counts)
            sizes += counts
        if sizes.min() >= min_size:
            order = np.argsort(owner, kind="stable")
            bounds = np.cumsum(sizes)[:-1]
            return list(np.split(order, bounds)), attempt
    raise ConfigError(
        f"dirichlet partition: could not give every client at least {min_size} samples after "
        f"{max_tries} tries; lower --clients or raise --alpha"
    )


def _split_pathological(labels: np.ndarray, clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Pathological non-IID: ``k`` disjoint label-sorted shards per client.

    Source: McMahan et al. 2017 (FedAvg, "pathological non-IID" MNIST: sort by label, 200
    shards of 300, 2 shards per client) and FedALA's pathological setting. Indices are sorted
    by label (stable), cut into ``clients * k`` near-equal shards (``np.array_split``), and
    client i gets shards ``perm[i*k:(i+1)*k]`` of a seeded permutation of the shards.
    """
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, clients * k)
    perm = rng.permutation(clients * k)
    return [np.concatenate([shards[s] for s in perm[i * k : (i + 1) * k]]) for i in range(clients)]


def _split_classes(
    labels: np.ndarray, num_classes: int, clients: int, k: int, balanced: bool, rs: np.random.RandomState, name: str
) -> list[np.ndarray]:
    """PFLlib's pathological split (``dataset/utils/dataset_utils.py::separate_data``, ``partition='pat'``): every
    client gets exactly ``k`` classes (when ``clients * k`` is a multiple of the classes).

    Classes are dealt in order: class c goes to the first ceil(clients / num_classes * k) clients (in client order)
    that still have a class slot left; its samples, in pool order, are cut among them: ``balanced``: int(n_c / s)
    each and the rest to the last one; otherwise (FedALA's generation, ``noniid - pat``) s - 1 amounts drawn
    uniformly from [max(n_c / s / 10, 1 / num_classes), n_c / s) (integer parts, numpy's legacy ``randint``) and
    the rest to the last one. A client's samples are in class-assignment order (its local test split is drawn
    from that order). A class that finds no client with a slot left is refused (PFLlib divides by zero).
    """
    slots = [k] * clients
    per_class = math.ceil(clients / num_classes * k - 1e-9)
    owned: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        chosen = [i for i in range(clients) if slots[i] > 0][:per_class]
        if not chosen:
            raise ConfigError(
                f"--pathological-rule classes: class {c} of dataset {name} finds no client with a class slot "
                f"left ({clients} clients x {k} classes for {num_classes} classes); raise --clients or "
                "--classes-per-client"
            )
        s = len(chosen)
        per = len(idx) / s
        if balanced or s == 1:
            amounts = [int(per)] * (s - 1)
        else:
            lo, hi = int(max(per / 10, 1 / num_classes)), int(per)
            if lo >= hi:
                raise ConfigError(
                    f"--pathological-rule classes: class {c} of dataset {name} has {len(idx)} samples for "
                    f"{s} clients, too few to draw unbalanced amounts; use classes-balanced or fewer clients"
                )
            amounts = rs.randint(lo, hi, s - 1).tolist()
        amounts.append(len(idx) - sum(amounts))
        start = 0
        for i, a in zip(chosen, amounts):
            owned[i].append(idx[start : start + a])
            start += a
            slots[i] -= 1
    return [np.concatenate(o) if o else np.empty(0, np.int64) for o in owned]


def _split_local_test_pfllib(
    parts: list[np.ndarray], f: float, rs: np.random.RandomState
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """PFLlib's local test split (``split_data``: scikit-learn's ``train_test_split(train_size=1 - f,
    shuffle=True)`` per client, in client order, on the global numpy stream): n_train = floor((1 - f) n_i), the
    other n_i - n_train samples are the test split; with p a permutation of the client's positions (in the order
    the split rule gave them), the test split is p[:n_test], the training split p[n_test:]. Both sorted."""
    train, test = [], []
    for idx in parts:
        idx = np.asarray(idx, dtype=np.int64)
        n_i = len(idx)
        n_train = math.floor((1.0 - f) * n_i)
        perm = rs.permutation(n_i)
        test.append(np.sort(idx[perm[: n_i - n_train]]))
        train.append(np.sort(idx[perm[n_i - n_train :]]))
    return train, test


def _split_natural(
    groups: np.ndarray, writers: np.ndarray, clients: int, w: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Natural (LEAF) split: ``w`` whole writers per client, writers chosen by a seeded shuffle.

    Source: the FedLAMA paper's FEMNIST setting (each client holds the samples of 2 writers)
    on the LEAF benchmark (Caldas et al. 2018). The sorted distinct writers are permuted with
    the seed; client i gets writers ``perm[i*w:(i+1)*w]``; the remaining writers are left out.
    """
    position = np.searchsorted(writers, groups)  # writer of each sample, as a position in `writers`
    chosen = rng.permutation(len(writers))[: clients * w]  # same as permuting the sorted writers
    client_of_position = np.full(len(writers), -1, dtype=np.int64)
    client_of_position[chosen] = np.repeat(np.arange(clients), w)
    owner = client_of_position[position]
    del position
    counts = np.bincount(owner + 1, minlength=clients + 1)  # [left out, client 0, client 1, ...]
    # the samples of the writers left out (owner -1) sort first; the rest by client, in sample order (stable)
    order = np.argsort(owner, kind="stable")[counts[0] :]
    return list(np.split(order, np.cumsum(counts[1:])[:-1]))


def _split_local_test(train: list[np.ndarray], f: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Carve a local test split of ``floor(f * n_i)`` samples (at least 1 when ``n_i >= 2``).

    Source: FedALA (Zhang et al. 2023) evaluates each client on 25% of its own data (75/25).
    Each client's indices are shuffled with a stream derived from the seed, the first
    ``n_test`` become its test split, the rest stay for training (both sorted).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_TEST_SPLIT_STREAM,)))
    new_train, test = [], []
    for idx in train:
        n_i = len(idx)
        n_test = math.floor(f * n_i)
        if n_i >= 2:
            n_test = max(1, n_test)
        shuffled = rng.permutation(idx)
        test.append(np.sort(shuffled[:n_test]))
        new_train.append(np.sort(shuffled[n_test:]))
    return new_train, test


# --------------------------------------------------------------------------------------------
# Saving and loading
# --------------------------------------------------------------------------------------------


def save_partition(p: Partition, path) -> None:
    """Write ``p`` as JSON, atomically (``fedcli.safefs.atomic_write``: temp file in the same folder, flush, fsync,
    replace, fsync of the folder; a symbolic link at ``path`` is refused, exit 2).

    Layout: ``{"format": "fedcli-partition", "version": 1, "hash": ..., "config": {...},
    "train": [[...], ...], "test": [[...], ...] | null}``, one client's index list per line.
    """
    path = Path(path)
    header = json.dumps(
        {"format": FORMAT_NAME, "version": FORMAT_VERSION, "hash": p.hash, "config": p.config},
        separators=(",", ":"),
        allow_nan=False,
    )
    lines = [header[:-1] + ',\n"train":[\n', _lists_text(p.train), "\n],\n"]
    if p.test is None:
        lines.append('"test":null}\n')
    else:
        lines += ['"test":[\n', _lists_text(p.test), "\n]}\n"]
    text = "".join(lines)
    make_dir(path.parent)  # a link as the file or its folder is refused (exit 2), never written through
    atomic_write(path, text)


def _partition_fields(text: str, fail) -> tuple:
    """The config, train and test index lists and stored hash of a partition file's JSON, its format, version,
    required config keys, index lists and hash checked (``fail(why)``: the DataError to raise)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
        raise fail(f'no "format": "{FORMAT_NAME}" field')
    if obj.get("version") != FORMAT_VERSION:
        raise fail(f"unsupported version {obj.get('version')!r} (this fedcli reads version {FORMAT_VERSION})")
    config, train_raw, test_raw, stored = obj.get("config"), obj.get("train"), obj.get("test"), obj.get("hash")
    if not isinstance(config, dict) or not isinstance(stored, str):
        raise fail('missing "config" or "hash"')
    required = ("scheme", "clients", "seed", "dataset", "n_train", "num_classes")
    missing = [k for k in required if k not in config]
    if missing:
        raise fail(f"config lacks {', '.join(missing)}")
    if not _is_list_of_int_lists(train_raw) or not (test_raw is None or _is_list_of_int_lists(test_raw)):
        raise fail('"train" and "test" must be lists of integer index lists')
    if partition_hash(config, train_raw, test_raw) != stored:
        raise fail("content does not match its hash (the file was modified or is corrupt)")
    return config, train_raw, test_raw, stored


def _partition_indices(config: dict, train_raw: list, test_raw: list | None, fail) -> tuple:
    """The clients' train and test index arrays (int64), one list per client, every index in [0, n_train) and no
    sample given twice."""
    n_train, clients = config["n_train"], config["clients"]
    if not isinstance(n_train, int) or not isinstance(clients, int):
        raise fail("config n_train and clients must be integers")
    if len(train_raw) != clients or (test_raw is not None and len(test_raw) != clients):
        raise fail(f"{len(train_raw)} client index lists for {clients} clients")
    train = [np.asarray(t, dtype=np.int64) for t in train_raw]
    test = None if test_raw is None else [np.asarray(t, dtype=np.int64) for t in test_raw]
    all_idx = np.concatenate(train + (test or []) + [np.empty(0, np.int64)])
    if all_idx.size and (all_idx.min() < 0 or all_idx.max() >= n_train):
        raise fail(f"index outside [0, {n_train})")
    if all_idx.size and np.bincount(all_idx).max() > 1:
        raise fail("a sample is assigned twice")
    return train, test


def load_partition(path, dataset=None) -> Partition:
    """Read a partition file written by :func:`save_partition` and verify it.

    Checks the format, that every index is in range and no sample is given twice, and that the
    stored hash matches the content; with ``dataset``, also that its name, number of training
    samples and number of classes match the partition's. Any failure raises :class:`DataError`
    (exit 3) naming the file and the expected format.
    """
    path = Path(path)
    expected = "expected a fedcli partition file" + (
        f" for dataset {getattr(dataset, 'name', '?')}" if dataset is not None else ""
    )

    def fail(why: str) -> DataError:
        return DataError(f"{path}: {why}; {expected}")

    try:  # a regular file of bounded size: a FIFO or a device is refused before a byte is read (fedcli.userfiles)
        text = read_input(path, "--partition-file", PARTITION_LIMIT, fail=fail).decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(f"cannot read ({e})") from None
    config, train_raw, test_raw, stored = _partition_fields(text, fail)
    train, test = _partition_indices(config, train_raw, test_raw, fail)
    if dataset is not None:
        n_train = config["n_train"]
        name = str(getattr(dataset, "name", "unknown"))
        n = int(_as_numpy(dataset.train_y).shape[0])
        k = int(dataset.num_classes)
        if (config["dataset"], n_train, config["num_classes"]) != (name, n, k):
            raise fail(
                f"made for dataset {config['dataset']} ({n_train} training samples, "
                f"{config['num_classes']} classes), not {name} ({n} training samples, {k} classes)"
            )
    return Partition(config=config, train=train, test=test, hash=stored)


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def summary_table(p: Partition, labels, num_classes: int, *, max_rows: int = 50, max_classes: int = 8):
    """A rich table with one row per client and a caption with totals.

    Columns: client, train samples, local test samples (only with a local test split), number
    of classes present in the client's training samples, and a compact class histogram of the
    nonzero classes, largest first (``"3:40 0:12 7:5"``), truncated after ``max_classes``
    entries. At most ``max_rows`` clients are listed (first ones, then an ellipsis row).
    """
    from rich.table import Table

    counts = p.class_counts(labels, num_classes)
    sizes = p.sizes()
    tsizes = p.test_sizes()
    has_test = p.test is not None
    cfg = p.config
    title = f"partition {cfg.get('scheme')} of {cfg.get('dataset')}: {p.num_clients} clients, seed {cfg.get('seed')}"
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("client", justify="right")
    table.add_column("train", justify="right")
    if has_test:
        table.add_column("test", justify="right")
    table.add_column("classes", justify="right")
    table.add_column("class histogram (class:count)", overflow="fold")

    shown = p.num_clients if p.num_clients <= max_rows else max(max_rows - 1, 0)
    for i in range(shown):
        row = [str(i), str(int(sizes[i]))]
        if has_test:
            row.append(str(int(tsizes[i])))
        row += [str(int((counts[i] > 0).sum())), _histogram(counts[i], max_classes)]
        table.add_row(*row)
    if shown < p.num_clients:
        table.add_row("...", *[""] * (len(table.columns) - 1))

    if len(sizes):
        stats = f"size min/median/max {sizes.min()}/{np.median(sizes):g}/{sizes.max()}"
    else:
        stats = "no clients"
    total = f"total train {int(sizes.sum())}"
    if has_test:
        total += f", local test {int(tsizes.sum())}"
    table.caption = f"{total} of {cfg.get('n_train')}; {stats}; hash {p.hash[:12]}"
    return table


def _histogram(row: np.ndarray, max_classes: int) -> str:
    nz = np.flatnonzero(row)
    order = nz[np.lexsort((nz, -row[nz]))]  # largest count first, ties by class
    parts = [f"{c}:{row[c]}" for c in order[:max_classes]]
    if len(order) > max_classes:
        parts.append(f"+{len(order) - max_classes} more")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, without importing torch here
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _as_int(value, option: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{option} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{option} must be an integer, got {value!r}") from None


def _as_float(value, option: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{option} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{option} must be a number, got {value!r}") from None


def _int_list(t) -> list[int]:
    if isinstance(t, np.ndarray):
        return t.astype(np.int64, copy=False).tolist()
    return [int(v) for v in t]


def _is_list_of_int_lists(x) -> bool:
    return isinstance(x, list) and all(
        isinstance(t, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in t) for t in x
    )


def _lists_text(lists: list[np.ndarray]) -> str:
    return ",\n".join(json.dumps(_int_list(t), separators=(",", ":")) for t in lists)
