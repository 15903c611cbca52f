"""Read one run directory (DESIGN.md 3.2) for reports: manifest, metrics, layers, intervals."""

from __future__ import annotations

import csv
import json
import math
from functools import cached_property
from pathlib import Path

#: statuses of a run directory as the sweep and the report see them
COMPLETED, RUNNING, FAILED, INTERRUPTED = "completed", "running", "failed", "interrupted"
MISSING, CORRUPT = "missing", "corrupt"

#: the papers' names of the methods, by ``--algo`` (aliases too: a run labelled by the name its recipe used)
METHOD_LABELS = {"fedavg": "FedAvg", "fedsgd": "Fed-SGD", "fedlama": "FedLAMA", "fedprox": "FedProx", "fedpaq": "FedPAQ",
                 "fedcom": "FedCOM", "fednova": "FedNova", "scaffold": "SCAFFOLD", "fedala": "FedALA",
                 "fedams": "Fed-AMS", "fedlamb": "Fed-LAMB", "mime": "Mime", "mimelamb": "Mime-LAMB",
                 "fedadam": "Adp-Fed", "adp-fed": "Adp-Fed"}
LAYERWISE = ("lama", "lama-accelerate")


def read_manifest(path: Path) -> tuple[str, dict | None]:
    """(status, manifest) of a run directory; status is ``missing`` or ``corrupt`` when unreadable."""
    f = Path(path) / "manifest.json"
    if not f.exists():
        return MISSING, None
    try:
        m = json.loads(f.read_text())
    except (OSError, ValueError):
        return CORRUPT, None
    status = m.get("status")
    return (status if status in (COMPLETED, RUNNING, FAILED, INTERRUPTED) else CORRUPT), m


def _num(v: str):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return v
    return int(x) if x.is_integer() and "." not in v and "e" not in v.lower() and "n" not in v.lower() else x


def read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(f)]


class RunData:
    """One completed run: its config, its evaluations and its per-layer counts."""

    def __init__(self, path: str | Path, manifest: dict | None = None):
        self.path = Path(path)
        if manifest is None:
            _, manifest = read_manifest(self.path)
        self.manifest = manifest or {}

    @property
    def config(self) -> dict:
        return self.manifest.get("config", {})

    @property
    def seed(self) -> int:
        return int(self.manifest.get("seed", self.config.get("seed", 0)))

    @property
    def schedule(self) -> str:
        method = self.manifest.get("method", {})
        return self.config.get("schedule") or method.get("schedule") or ("lama" if self.config.get("algo") == "fedlama" else "periodic")

    @property
    def algo(self) -> str:
        return self.manifest.get("method", {}).get("name") or self.config.get("algo", "?")

    @property
    def layerwise(self) -> bool:
        return self.schedule in LAYERWISE

    def method_label(self) -> str:
        """FedAvg, FedLAMA, FedProx + FedLAMA, Fed-SGD, ... (the papers' names).

        The ``--algo`` string of the run's config comes first: ``fedsgd`` is the registry's ``fedavg``, but a
        recipe that names it ``fedsgd`` (Fed-LAMB's baseline) gets "Fed-SGD"."""
        given = self.config.get("algo")
        base = METHOD_LABELS.get(given) if isinstance(given, str) else None
        base = base or METHOD_LABELS.get(self.algo, self.algo)
        if self.algo == "fedlama" or not self.layerwise:
            return base
        return f"{base} + FedLAMA"

    def legend(self) -> str:
        """The papers' legend style: FedAvg (20), FedLAMA (20, 2)."""
        tau, phi = self.config.get("tau"), self.config.get("phi")
        if self.layerwise:
            return f"{self.method_label()} ({tau}, {phi})"
        return f"{self.method_label()} ({tau})"

    @cached_property
    def metrics(self) -> list[dict]:
        rows = read_csv(self.path / "metrics.csv")
        return sorted(rows, key=lambda r: r["iteration"])

    @cached_property
    def layers(self) -> list[dict]:
        return sorted(read_csv(self.path / "layers.csv"), key=lambda r: r["layer"])

    @cached_property
    def intervals(self) -> list[dict]:
        return read_csv(self.path / "intervals.csv")

    def accuracy(self, which: str = "best") -> float:
        accs = [r["test_acc"] for r in self.metrics if isinstance(r.get("test_acc"), (int, float)) and math.isfinite(r["test_acc"])]
        if not accs:
            return float("nan")
        return max(accs) if which == "best" else accs[-1]

    @property
    def comm_params(self) -> float:
        s = self.manifest.get("summary") or {}
        if "comm_params" in s:
            return float(s["comm_params"])
        return float(self.metrics[-1]["comm_params"]) if self.metrics else float("nan")

    @property
    def comm_bytes(self) -> float:
        s = self.manifest.get("summary") or {}
        if "comm_bytes" in s:
            return float(s["comm_bytes"])
        return float(self.metrics[-1]["comm_bytes"]) if self.metrics else float("nan")
