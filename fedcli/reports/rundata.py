"""Read one run directory (docs/run-directory.md) for reports: manifest, metrics, layers, intervals."""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path

#: statuses of a run directory as the sweep and the report see them (one definition: fedcli/results/runstate.py)
from fedcli.results.runstate import COMPLETED, CORRUPT, FAILED, INTERRUPTED, MISSING, RUNNING, read_manifest  # noqa: F401

#: the kinds of part a run may put in place of its preset's own, in the order a label names them ("FedAvg + ALA +
#: FedLAMA"); each part's spec says what it adds (its ``label``)
ADDED_KINDS = ("init", "schedule", "codec")


def part_spec(kind: str, name: str | None):
    """The registered ``kind`` part ``name``'s spec (None: a part the registry lacks); the report asks it what the part
    does (its label, whether its intervals differ by layer, what it learns: ``fedcli.specs.PartSpec``) instead of
    knowing parts by name, and without their torch classes."""
    from fedcli.specs import PARTS

    return PARTS[kind].get(name) if name else None


def part_label(kind: str, name: str | None) -> str | None:
    """What the registered ``kind`` part ``name`` adds to a run's label (None: nothing, or a part the registry
    lacks)."""
    spec = part_spec(kind, name)
    return spec.declaration("label") if spec is not None else None


def _num(v: str):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return v
    return int(x) if x.is_integer() and "." not in v and "e" not in v.lower() and "n" not in v.lower() else x


def read_csv(path: Path) -> list[dict]:
    """The whole rows of one of a run's CSVs (``fedcli.results.rundir.read_rows``: a last row cut by a run killed
    while writing it is not read), numbers as numbers."""
    from fedcli.results.rundir import read_rows

    return [{k: _num(v) for k, v in row.items()} for row in read_rows(path)]


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
    def method(self) -> dict:
        """The manifest's ``method`` entry: name, label, the five parts the run used, personalized, defaults."""
        return self.manifest.get("method") or {}

    @property
    def simulated(self) -> bool:
        """Trained with the system model (``--system``): its metrics carry ``sim_time_s`` (docs/system-model.md)."""
        return bool(self.metrics) and "sim_time_s" in self.metrics[0]

    @property
    def algo(self) -> str:
        return self.method.get("name") or self.config.get("algo", "?")

    def preset(self):
        """The registry's ``Method`` the run named (``--algo``, else the manifest's name); None for one it lacks."""
        from fedcli.specs import METHODS

        given = self.config.get("algo")
        return METHODS.get(given) if isinstance(given, str) and given in METHODS else METHODS.get(self.algo)

    def part_name(self, kind: str) -> str:
        """The run's ``kind`` part (schedule, init, ...): the config's override, else the part the manifest records,
        else (a manifest that records none) the preset's own."""
        given = self.config.get(kind) or self.method.get(kind)
        if given:
            return given
        from fedcli.specs import Method

        return (self.preset() or Method(self.algo, "")).parts()[kind]

    @property
    def schedule(self) -> str:
        return self.part_name("schedule")

    def params(self, kind: str):
        """The options the run's ``kind`` part read, typed, as its spec declares them (``fedcli.params.recorded``:
        ``run.params("schedule").phi``); None for a part the registry lacks."""
        from fedcli.params import recorded
        from fedcli.specs import PARTS

        spec = PARTS[kind].get(self.part_name(kind))
        return recorded(spec, self.config) if spec is not None else None

    @property
    def layerwise(self) -> bool:
        """The run's schedule gives each layer its own interval (``Schedule.layerwise``: FedLAMA's), so a legend
        gives its tau' and phi."""
        if "layerwise" in self.method:  # recorded by the run (a run recorded before it was: the registry)
            return bool(self.method["layerwise"])
        spec = part_spec("schedule", self.schedule)
        return bool(spec is not None and spec.declaration("layerwise"))

    def method_label(self) -> str:
        """FedAvg, FedLAMA, FedProx + FedLAMA, Fed-SGD, ... (the papers' names): the label the manifest records, else
        (a run recorded before labels were) the registry's label of the method as the run's ``--algo`` named it
        ("fedsgd" is the registry's fedavg, labelled "Fed-SGD"); then a " + " suffix for each part the run's config
        put in place of its preset's own, named by the part's ``label`` ("+ FedLAMA" for a layer-wise schedule, "+
        ALA")."""
        base = self.method.get("label")
        if not base:  # the registry (the specs, no torch) only for what the manifest does not say
            preset = self.preset()
            base = preset.label_for(self.config.get("algo")) if preset else self.algo
        for kind in ADDED_KINDS:
            added = part_label(kind, self.part_name(kind)) if self.config.get(kind) else None
            if added and added != part_label(kind, self.own_part(kind)):
                base = f"{base} + {added}"
        return base

    def own_part(self, kind: str) -> str | None:
        """The ``kind`` part of the run's preset as registered (None for a method the registry lacks)."""
        preset = self.preset()
        return preset.parts()[kind] if preset else None

    def legend(self) -> str:
        """The label of the run in every figure and table (fedcli/reports/style.py), with the papers' names and
        symbols: FedAvg (τ=20), FedLAMA (τ′=20, φ=2); a run of local epochs (where tau plays no part): FedALA (E=1)."""
        tau = self.config.get("tau")
        if self.config.get("local_epochs"):
            return f"{self.method_label()} (E={self.config['local_epochs']:g})"
        if self.layerwise:
            return f"{self.method_label()} (τ′={tau}, φ={self.params('schedule').phi})"
        return f"{self.method_label()} (τ={tau})"

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

    @cached_property
    def clients(self) -> list[dict]:
        """clients.csv (personalized methods): one row per client per evaluation; [] without it."""
        return read_csv(self.path / "clients.csv")

    @cached_property
    def system(self) -> list[dict]:
        """system.csv (runs trained with ``--system``): one row per round; [] without it."""
        return read_csv(self.path / "system.csv")

    @property
    def personalized(self) -> bool:
        """True when the run evaluated per-client models (``personal_acc`` has values)."""
        return any(isinstance(r.get("personal_acc"), (int, float)) for r in self.metrics)

    def acc_metric(self, metric: str = "test_acc") -> str:
        """The metrics.csv column of ``metric``; ``auto`` (pFedMe's and FedALA's convention): ``personal_acc`` for a
        personalized run, ``test_acc`` (the global model) otherwise."""
        if metric == "auto":
            return "personal_acc" if self.personalized else "test_acc"
        return metric

    def evaluations(self, metric: str = "test_acc") -> list[dict]:
        """The metrics rows with a finite value of ``metric`` (``auto`` resolved), by iteration."""
        col = self.acc_metric(metric)
        return [r for r in self.metrics if isinstance(r.get(col), (int, float)) and math.isfinite(r[col])]

    def accuracy(self, which: str = "best", metric: str = "test_acc") -> float:
        col = self.acc_metric(metric)
        accs = [r[col] for r in self.evaluations(col)]
        if not accs:
            return float("nan")
        return max(accs) if which == "best" else accs[-1]

    def summary_value(self, key: str, column: str) -> float:
        """``key`` of the manifest summary, else ``column`` of the last metrics row (a run still going)."""
        s = self.manifest.get("summary") or {}
        if key in s:
            return float(s[key])
        return float(self.metrics[-1][column]) if self.metrics else float("nan")

    @property
    def comm_params(self) -> float:
        return self.summary_value("comm_params", "comm_params")

    @property
    def comm_bytes(self) -> float:
        return self.summary_value("comm_bytes", "comm_bytes")

    # ---------------------------------------------------------------- cost (FedALA AAAI 2023, Tables 1, 3, 6)
    @property
    def wall_s(self) -> float:
        """Wall time of the whole training (manifest summary, else the last evaluation's ``wall_s``)."""
        return self.summary_value("wall_s", "wall_s")

    @property
    def rounds(self) -> float:
        return self.summary_value("rounds", "round")

    @property
    def active_clients(self) -> float:
        """Clients per round (the manifest's ``active_clients``, else clients x active ratio)."""
        if "active_clients" in self.manifest:
            return float(self.manifest["active_clients"])
        cfg = self.config
        return float(max(1, round(cfg.get("clients", float("nan")) * cfg.get("active_ratio", 1.0))))

    @property
    def model_params(self) -> float:
        """Sigma: the model's parameter count (manifest ``model.parameters``, else the sum of layers.csv ``numel``)."""
        n = (self.manifest.get("model") or {}).get("parameters")
        if n is not None:
            return float(n)
        return float(sum(r["numel"] for r in self.layers)) if self.layers else float("nan")

    def round_times(self) -> list[float]:
        """Seconds per round between consecutive evaluations (the first: from the start), from metrics.csv
        ``wall_s``."""
        out, prev_r, prev_w = [], 0, 0.0
        for r in self.metrics:
            rnd, w = r.get("round"), r.get("wall_s")
            if not isinstance(rnd, (int, float)) or not isinstance(w, (int, float)) or rnd <= prev_r:
                continue
            out.append((w - prev_w) / (rnd - prev_r))
            prev_r, prev_w = rnd, w
        return out

    @property
    def learned_init(self) -> bool:
        """The run's init part learns weights of its own for each client (``Init.learned_weights``: ALA's), so its
        first rounds take longer (the report's ``time_init``)."""
        if "learned_weights" in self.method:  # recorded by the run (a run recorded before it was: the registry)
            return self.method["learned_weights"] is not None
        spec = part_spec("init", self.part_name("init"))
        return spec is not None and spec.weights_learned(self.config, []) is not None

    @property
    def ala_params(self) -> float:
        """The weights the run's init learns for each client (``Init.learned_weights``; FedALA Tables 1 and 6: ALA's,
        the numel of the last ``ala_layers`` parameter tensors, from layers.csv); nan for an init that learns none."""
        if "learned_weights" in self.method:
            n = self.method["learned_weights"]
        else:
            spec = part_spec("init", self.part_name("init"))
            n = (
                spec.weights_learned(self.config, [r["numel"] for r in self.layers])
                if spec is not None and self.layers
                else None
            )
        return float("nan") if n is None else float(n)


def check_simulated_time(runs) -> None:
    """``--x time`` needs every run's ``sim_time_s`` (trained with ``--system``): ConfigError (exit 2) naming one
    without it (``runs``: RunData; one killed before its first evaluation has nothing to draw either way)."""
    from fedcli.errors import ConfigError

    for r in runs:
        if r.metrics and not r.simulated:
            raise ConfigError(
                f"--x time: {r.path} has no simulated time (sim_time_s in metrics.csv); train with "
                f"--system (docs/system-model.md), or pick another --x"
            )
