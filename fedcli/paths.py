"""Where fedcli keeps its per-user cache: the sweep estimate's
measured start-up timings (``fedcli.sweep.estimate``). ``$FEDCLI_CACHE_DIR``, else ``$XDG_CACHE_HOME/fedcli``, else
``~/.cache/fedcli``. A leaf: imports nothing of fedcli."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    if os.environ.get("FEDCLI_CACHE_DIR"):
        return Path(os.environ["FEDCLI_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fedcli"
