"""Randomness keyed by (seed, purpose, round, client).

Every random draw of a run comes from a generator whose seed is a hash of the run seed and the
coordinates of the draw, never from a shared stream. So results do not depend on how many
processes simulate the clients, on which process a client lands, or on resumption.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def key(*parts) -> int:
    """A 63-bit integer derived from ``parts`` (stable across runs, processes and platforms)."""
    digest = hashlib.blake2b(repr(tuple(parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def torch_gen(*parts) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(key(*parts))
    return g


def np_gen(*parts) -> np.random.Generator:
    return np.random.default_rng(key(*parts))
