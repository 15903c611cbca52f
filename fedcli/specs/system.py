"""The options of the system model (simulated time; ``fedcli/fl/system.py``, docs/system-model.md), read by the
engine for every method: each client's compute speed, uplink and downlink bandwidth and latency (drawn from a named
distribution or read from a CSV trace), its availability, and a round deadline. Off unless ``--system`` is given.

A distribution is written ``NAME:ARGS`` (:func:`parse_distribution`): ``constant:V``, ``lognormal:MEDIAN,SPREAD``
(V = MEDIAN * exp(SPREAD * z), z standard normal), ``uniform:LO,HI``, ``tiers:V1@P1,V2@P2,...`` (value Vk with
probability Pk, the Pk summing to 1). Torch-free: the config checks these before anything loads.
"""

from __future__ import annotations

import dataclasses
import math

from fedcli.errors import ConfigError
from fedcli.params import opt, register_params

#: name -> the argument count it takes (None: a list of VALUE@PROBABILITY)
DISTRIBUTIONS = {"constant": 1, "lognormal": 2, "uniform": 2, "tiers": None}

#: the per-client quantities, their option, unit and whether zero is allowed (latency may be 0)
QUANTITIES = {"speed": ("FLOP/s", False), "uplink": ("bytes/s", False), "downlink": ("bytes/s", False),
              "latency": ("s", True)}


def _number(text: str, option: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"--{option} {text!r}: expected a number", key=option) from None
    if not math.isfinite(v):
        raise ConfigError(f"--{option}: {text!r} is not a finite number", key=option)
    return v


def parse_distribution(text: str, option: str, zero_ok: bool = False) -> tuple[str, tuple]:
    """``NAME:ARGS`` into (name, args): ``("constant", (v,))``, ``("lognormal", (median, spread))``,
    ``("uniform", (lo, hi))``, ``("tiers", ((v1, p1), ...))``. Every value it can give must be positive (or, with
    ``zero_ok``, at least 0); ConfigError naming ``option`` otherwise."""
    name, _, args = str(text).partition(":")
    name = name.strip().lower()
    if name not in DISTRIBUTIONS:
        raise ConfigError(f"--{option} {text!r}: unknown distribution {name!r}; expected one of "
                          f"{', '.join(f'{n}:...' for n in DISTRIBUTIONS)} (docs/system-model.md)", key=option)
    parts = [a.strip() for a in args.split(",") if a.strip()]
    bound = "at least 0" if zero_ok else "positive"
    ok = (lambda v: v >= 0) if zero_ok else (lambda v: v > 0)  # noqa: E731
    if name == "tiers":
        tiers = []
        for p in parts:
            v, at, prob = p.partition("@")
            if not at:
                raise ConfigError(f"--{option} {text!r}: a tier is VALUE@PROBABILITY (tiers:1e9@0.5,1e8@0.5)", key=option)
            tiers.append((_number(v, option), _number(prob, option)))
        if not tiers or any(p < 0 for _, p in tiers) or abs(sum(p for _, p in tiers) - 1.0) > 1e-9:
            raise ConfigError(f"--{option} {text!r}: the tiers' probabilities must be at least 0 and sum to 1", key=option)
        if any(not ok(v) for v, p in tiers if p > 0):
            raise ConfigError(f"--{option} {text!r}: every tier's value must be {bound}", key=option)
        return name, tuple(tiers)
    want = DISTRIBUTIONS[name]
    if len(parts) != want:
        form = {"constant": "constant:V", "lognormal": "lognormal:MEDIAN,SPREAD", "uniform": "uniform:LO,HI"}[name]
        raise ConfigError(f"--{option} {text!r}: expected {form}", key=option)
    vals = tuple(_number(p, option) for p in parts)
    if name == "lognormal" and (not vals[0] > 0 or vals[1] < 0):
        raise ConfigError(f"--{option} {text!r}: a log-normal needs a positive median and a spread of at least 0", key=option)
    if name == "uniform" and vals[1] < vals[0]:
        raise ConfigError(f"--{option} {text!r}: uniform:LO,HI needs LO <= HI", key=option)
    if not ok(vals[0]):
        raise ConfigError(f"--{option} {text!r}: its values must be {bound}", key=option)
    return name, vals


@register_params(section="system", every_run=True)
class SystemParams:
    """The system model: simulated time from each client's device and network (docs/system-model.md)."""

    system: bool = opt(False, "Simulate time: each client's compute speed, bandwidth, latency, availability and a round deadline give every round a simulated duration (sim_time_s in metrics.csv, system.csv); off by default. docs/system-model.md.", group="system")
    speed: str = opt("constant:1e10", "System model: each client's compute speed in FLOP/s, drawn once per client: constant:V, lognormal:MEDIAN,SPREAD, uniform:LO,HI or tiers:V1@P1,V2@P2,...", group="system")
    uplink: str = opt("constant:1.25e6", "System model: each client's uplink bandwidth in bytes/s (default 10 Mbit/s), a distribution as --speed.", group="system")
    downlink: str = opt("constant:6.25e6", "System model: each client's downlink bandwidth in bytes/s (default 50 Mbit/s), a distribution as --speed.", group="system")
    latency: str = opt("constant:0.05", "System model: each client's one-way latency in seconds, paid once per direction of every synchronization; a distribution as --speed.", group="system")
    system_trace: str = opt("", "System model: a CSV with one row per client (columns client, speed, uplink, downlink, latency; units as the options); the row of client i replaces its draws. docs/system-model.md says how to convert FedScale's traces.", group="system")
    availability: float = opt(1.0, "System model: probability that a sampled client is available in a round (drawn per seed, round and client); an unavailable client sits the round out.", lo=0.0, hi=1.0, lo_open=True, group="system")
    availability_trace: str = opt("", "System model: a CSV of on-intervals (columns client, start, end; simulated seconds, end may be inf): a client is available in a round whose simulated start lies in one of its intervals (a client without a row never is), and then with probability --availability. docs/system-model.md converts FedScale's client behaviour trace.", group="system")
    sampling: str = opt("cohort", "System model: whom a round asks. cohort: the round's cohort (--active-ratio) is sampled from every client, and those of it available take part; a round whose cohort is all offline (--availability-trace) waits for the first of it to come online. available: FedScale's practice, the cohort is sampled among the clients available at the round's start (waiting for the first to come online), ceil(--overcommit x K) of them, and the first K to finish are kept. docs/system-model.md.", choices=["cohort", "available"], group="system")
    overcommit: float = opt(1.0, "System model, --sampling available: sample ceil(overcommit x K) of the available clients and keep the first K to finish (FedScale's over-commitment, e.g. 1.3); 1: none.", lo=1.0, group="system")
    deadline: float = opt(0.0, "System model: round deadline in simulated seconds (0: none). A client whose own steps and transfers take longer misses it (--on-deadline).", lo=0.0, group="system")
    on_deadline: str = opt("drop", "System model: a client that misses the deadline is dropped, not aggregated (drop: FedAvg's practice), or runs the local steps that fit and its partial work is kept (keep-partial: FedProx's; FedNova normalizes the unequal steps).", choices=["drop", "keep-partial"], group="system")
    server_time: float = opt(0.0, "System model: the server's time per round in seconds (aggregation, a constant).", lo=0.0, group="system")

    def check(self) -> None:
        """Each distribution parses and gives only valid values, and no option of the model is set while it is off
        (it would do nothing); ConfigError naming the option."""
        for name, (_unit, zero_ok) in QUANTITIES.items():
            parse_distribution(getattr(self, name), name, zero_ok)
        if not self.system:
            changed = [f.name for f in dataclasses.fields(SystemParams) if f.name != "system" and getattr(self, f.name) != f.default]
            if changed:
                flag = changed[0].replace("_", "-")
                raise ConfigError(f"--{flag} is an option of the system model, which is off: add --system (system = true in "
                                  f"a recipe), or leave --{flag} out (docs/system-model.md)", key=changed[0])
        if self.overcommit != 1.0 and self.sampling != "available":
            raise ConfigError(f"--overcommit {self.overcommit:g} needs --sampling available (it over-commits the clients "
                              f"sampled among those online; docs/system-model.md)", key="overcommit")
