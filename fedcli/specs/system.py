"""The options of the system model (simulated time; ``fedcli/fl/system.py``, docs/system-model.md), read by the
engine for every method: each client's compute speed, uplink and downlink bandwidth and latency (drawn from a named
distribution or read from a CSV trace), its availability, and a round deadline. Off unless ``--system`` is given.

A distribution is written ``NAME:ARGS`` (:func:`parse_distribution`): ``constant:V`` (or the bare number ``V``),
``lognormal:MEDIAN,SPREAD`` (V = MEDIAN * exp(SPREAD * z), z standard normal), ``uniform:LO,HI``,
``tiers:V1@P1,V2@P2,...`` (value Vk with probability Pk, the Pk summing to 1). Every value lies in its quantity's
range (:data:`BOUNDS`), so that a run's simulated time stays finite. Torch-free: the config checks these, and reads
the traces (:func:`read_rows`), before anything loads or is written.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math

from fedcli.errors import ConfigError
from fedcli.params import Open, opt, register_params
from fedcli.userfiles import TRACE_LIMIT, read_input

#: name -> the argument count it takes (None: a list of VALUE@PROBABILITY)
DISTRIBUTIONS = {"constant": 1, "lognormal": 2, "uniform": 2, "tiers": None}

#: the per-client quantities, their option, unit and whether zero is allowed (latency may be 0)
QUANTITIES = {
    "speed": ("FLOP/s", False),
    "uplink": ("bytes/s", False),
    "downlink": ("bytes/s", False),
    "latency": ("s", True),
}

#: the most seconds any time of the model may be: a latency, the deadline, the server's time, an availability
#: interval's start (about 32 years)
MAX_SECONDS = 1e9

#: each quantity's range [least, greatest] (docs/system-model.md, "Bounds"). A step costs c = 3 F b / v <= 3 F b
#: seconds (v >= 1 FLOP/s), a synchronization x <= 2 MAX_SECONDS + 2 x (its bytes) seconds (bandwidths >= 1 byte/s),
#: a round at most its steps' and synchronizations' sum plus the deadline and the server's time (each <= MAX_SECONDS):
#: a run's simulated time is finite for any model and budget. The greatest speed keeps D / c, the steps that fit a
#: deadline, finite; the greatest bandwidths are beyond any link (8 Pbit/s).
BOUNDS = {"speed": (1.0, 1e24), "uplink": (1.0, 1e18), "downlink": (1.0, 1e18), "latency": (0.0, MAX_SECONDS)}

#: the greatest log-normal spread: exp(10 z) spans 17 orders of magnitude within two standard deviations already
MAX_SPREAD = 10.0

TRACE_COLUMNS = ("client", *QUANTITIES)
AVAILABILITY_COLUMNS = ("client", "start", "end")


def range_text(q: str) -> str:
    """``[1, 1e+24] FLOP/s``: quantity ``q``'s range, for messages."""
    lo, hi = BOUNDS[q]
    return f"[{lo:g}, {hi:g}] {QUANTITIES[q][0]}"


def in_range(q: str, v: float) -> bool:
    lo, hi = BOUNDS[q]
    return lo <= v <= hi


def _number(text: str, option: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"--{option} {text!r}: expected a number", key=option) from None
    if not math.isfinite(v):
        raise ConfigError(f"--{option}: {text!r} is not a finite number", key=option)
    return v


def _distribution_name(text: str, option: str) -> tuple[str, str]:
    """The distribution's name (lowercase; a bare number is ``constant``) and its argument text; ConfigError for an
    unknown name."""
    name, colon, args = str(text).partition(":")
    name = name.strip().lower()
    if not colon:  # a bare number is a constant: --speed 1e9
        try:
            float(name)
            name, args = "constant", str(text)
        except ValueError:
            pass
    if name not in DISTRIBUTIONS:
        raise ConfigError(
            f"--{option} {text!r}: unknown distribution {name!r}; expected one of "
            f"{', '.join(f'{n}:...' for n in DISTRIBUTIONS)} (docs/system-model.md)",
            key=option,
        )
    return name, args


def _parse_tiers(text: str, option: str, parts: list[str], zero_ok: bool) -> tuple:
    """``tiers:V1@P1,...`` as ((value, probability), ...): probabilities at least 0 summing to 1, every value with
    a positive probability positive (or at least 0) and in the option's range."""
    bound = "at least 0" if zero_ok else "positive"
    ok = (lambda v: v >= 0) if zero_ok else (lambda v: v > 0)
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
    if any(not in_range(option, v) for v, p in tiers if p > 0):
        raise ConfigError(
            f"--{option} {text!r}: every tier's value must lie in {range_text(option)}, the "
            f"range that keeps a run's simulated time finite (docs/system-model.md)",
            key=option,
        )
    return tuple(tiers)


def _parse_params(name: str, text: str, option: str, parts: list[str], zero_ok: bool) -> tuple:
    """The numbers of ``constant:V``, ``lognormal:MEDIAN,SPREAD`` or ``uniform:LO,HI``, each form's rules checked and
    its values (a log-normal's median; its draws are checked when drawn) positive (or at least 0) and in range."""
    want = DISTRIBUTIONS[name]
    if len(parts) != want:
        form = {"constant": "constant:V", "lognormal": "lognormal:MEDIAN,SPREAD", "uniform": "uniform:LO,HI"}[name]
        raise ConfigError(f"--{option} {text!r}: expected {form}", key=option)
    vals = tuple(_number(p, option) for p in parts)
    if name == "lognormal" and (not vals[0] > 0 or vals[1] < 0):
        raise ConfigError(
            f"--{option} {text!r}: a log-normal needs a positive median and a spread of at least 0", key=option
        )
    if name == "uniform" and vals[1] < vals[0]:
        raise ConfigError(f"--{option} {text!r}: uniform:LO,HI needs LO <= HI", key=option)
    if name == "lognormal" and vals[1] > MAX_SPREAD:
        raise ConfigError(f"--{option} {text!r}: a log-normal's spread must be at most {MAX_SPREAD:g}", key=option)
    if not (vals[0] >= 0 if zero_ok else vals[0] > 0):
        raise ConfigError(
            f"--{option} {text!r}: its values must be {'at least 0' if zero_ok else 'positive'}", key=option
        )
    ends = vals if name == "uniform" else vals[:1]  # a log-normal's draws are checked when drawn (fedcli.fl.system)
    if not all(in_range(option, v) for v in ends):
        raise ConfigError(
            f"--{option} {text!r}: its values must lie in {range_text(option)}, the range that keeps a "
            f"run's simulated time finite (docs/system-model.md)",
            key=option,
        )
    return vals


def parse_distribution(text: str, option: str, zero_ok: bool = False) -> tuple[str, tuple]:
    """``NAME:ARGS`` into (name, args): ``("constant", (v,))``, ``("lognormal", (median, spread))``,
    ``("uniform", (lo, hi))``, ``("tiers", ((v1, p1), ...))``; a bare number ``V`` is ``constant:V``. Every value it
    can give must be positive (or, with ``zero_ok``, at least 0) and in the option's range (:data:`BOUNDS`; a
    log-normal's median, its draws are checked when drawn); ConfigError naming ``option`` otherwise."""
    name, args = _distribution_name(text, option)
    parts = [a.strip() for a in args.split(",") if a.strip()]
    if name == "tiers":
        return name, _parse_tiers(text, option, parts, zero_ok)
    return name, _parse_params(name, text, option, parts, zero_ok)


def read_rows(path: str, key: str, columns: tuple[str, ...]):
    """The rows of the CSV option ``key`` (``system_trace``, ``availability_trace``) as (line, client, {column:
    float}), and the file's sha256. The file must be a regular file of at most :data:`TRACE_LIMIT` bytes
    (``fedcli.userfiles``). ConfigError (exit 2, naming the option and the file) for a file that is not, a missing
    column, a value that is not a number, or a client that is not an index (an integer from 0)."""
    option = "--" + key.replace("_", "-")
    data = read_input(path, option, TRACE_LIMIT, key=key)
    rows = csv.DictReader(data.decode("utf-8", errors="replace").splitlines())
    header = rows.fieldnames or []
    missing = [c for c in columns if c not in header]
    if missing:
        raise ConfigError(
            f"{option} {path}: no column {', '.join(missing)}; expected a CSV with the columns "
            f"{', '.join(columns)} (docs/system-model.md)",
            key=key,
        )
    out = []
    for row in rows:
        line = rows.line_num  # the file's line (blank lines are skipped, and counted)
        try:
            client = int(row["client"])
            values = {c: float(row[c]) for c in columns[1:]}
        except (TypeError, ValueError):
            raise ConfigError(
                f"{option} {path}, line {line}: expected numbers in {', '.join(columns)}", key=key
            ) from None
        if client < 0:
            raise ConfigError(f"{option} {path}, line {line}: client {client} is not a client index (from 0)", key=key)
        out.append((line, client, values))
    return out, hashlib.sha256(data).hexdigest()


def read_trace_rows(path: str):
    """``--system-trace``'s rows (:func:`read_rows`), each value finite and in its quantity's range
    (:data:`BOUNDS`), one row per client; ConfigError (exit 2) naming the line otherwise."""
    rows, digest = read_rows(path, "system_trace", TRACE_COLUMNS)
    first: dict[int, int] = {}
    for line, client, values in rows:
        if client in first:
            raise ConfigError(
                f"--system-trace {path}, line {line}: a second row for client {client} (the first is "
                f"line {first[client]}); expected one row per client",
                key="system_trace",
            )
        first[client] = line
        for q, v in values.items():
            zero_ok = QUANTITIES[q][1]
            if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
                raise ConfigError(
                    f"--system-trace {path}, line {line}: {q} {v:g} is not a "
                    f"{'finite number >= 0' if zero_ok else 'positive finite number'} "
                    f"({QUANTITIES[q][0]})",
                    key="system_trace",
                )
            if not in_range(q, v):
                raise ConfigError(
                    f"--system-trace {path}, line {line}: {q} {v:g} is outside {range_text(q)}, the "
                    f"range that keeps a run's simulated time finite (docs/system-model.md)",
                    key="system_trace",
                )
    return rows, digest


def read_availability_rows(path: str):
    """``--availability-trace``'s rows (:func:`read_rows`), each an interval 0 <= start <= end with start at most
    :data:`MAX_SECONDS` (end may be inf); ConfigError (exit 2) naming the line otherwise."""
    rows, digest = read_rows(path, "availability_trace", AVAILABILITY_COLUMNS)
    for line, _client, v in rows:
        start, end = v["start"], v["end"]
        if not (math.isfinite(start) and 0 <= start <= end) or math.isnan(end):
            raise ConfigError(
                f"--availability-trace {path}, line {line}: the interval [{start:g}, {end:g}) is not "
                f"0 <= start <= end (seconds of simulated time; end may be inf)",
                key="availability_trace",
            )
        if start > MAX_SECONDS:
            raise ConfigError(
                f"--availability-trace {path}, line {line}: the interval starts at {start:g} s, after "
                f"{MAX_SECONDS:g} s, the most the model's times may be (docs/system-model.md)",
                key="availability_trace",
            )
    return rows, digest


#: the manifest's entry of each trace option (``SystemModel.describe``)
TRACE_ENTRIES = {"system_trace": "trace", "availability_trace": "availability_trace"}


def trace_digests(config: dict) -> dict[str, tuple[str, str]]:
    """Each trace the run of ``config`` (a config as a dict) reads, by its option: (its path, its file's sha256 now).
    A resumed run compares them with the ones its manifest recorded (``fedcli.results.resume``)."""
    if not config.get("system"):
        return {}
    return {
        key: (
            config[key],
            hashlib.sha256(read_input(config[key], "--" + key.replace("_", "-"), TRACE_LIMIT, key=key)).hexdigest(),
        )
        for key in TRACE_ENTRIES
        if config.get(key)
    }


@register_params(section="system", every_run=True)
class SystemParams:
    """The system model: simulated time from each client's device and network (docs/system-model.md)."""

    system: bool = opt(
        False,
        "Simulate time: each client's compute speed, bandwidth, latency, availability and a round deadline "
        "give every round a simulated duration (sim_time_s in metrics.csv, system.csv); off by default. "
        "docs/system-model.md.",
        group="system",
    )
    speed: str = opt(
        "constant:1e10",
        "System model: each client's compute speed in FLOP/s, drawn once per client: constant:V (or just "
        "V), lognormal:MEDIAN,SPREAD, uniform:LO,HI or tiers:V1@P1,V2@P2,...",
        group="system",
    )
    uplink: str = opt(
        "constant:1.25e6",
        "System model: each client's uplink bandwidth in bytes/s (default 10 Mbit/s), a distribution as --speed.",
        group="system",
    )
    downlink: str = opt(
        "constant:6.25e6",
        "System model: each client's downlink bandwidth in bytes/s (default 50 Mbit/s), a distribution as --speed.",
        group="system",
    )
    latency: str = opt(
        "constant:0.05",
        "System model: each client's one-way latency in seconds, paid once per direction of every "
        "synchronization; a distribution as --speed.",
        group="system",
    )
    system_trace: str = opt(
        "",
        "System model: a CSV with one row per client (columns client, speed, uplink, downlink, latency; "
        "units as the options); the row of client i replaces its draws. docs/system-model.md says how to "
        "convert FedScale's traces.",
        group="system",
    )
    availability: float = opt(
        1.0,
        "System model: probability that a sampled client is available in a round (drawn per seed, round "
        "and client); an unavailable client sits the round out.",
        lo=Open(0.0),
        hi=1.0,
        group="system",
    )
    availability_trace: str = opt(
        "",
        "System model: a CSV of on-intervals (columns client, start, end; simulated seconds, end may be "
        "inf): a client is available in a round whose simulated start lies in one of its intervals (a "
        "client without a row never is), and then with probability --availability. docs/system-model.md "
        "converts FedScale's client behaviour trace.",
        group="system",
    )
    sampling: str = opt(
        "cohort",
        "System model: whom a round asks. cohort: the round's cohort (--active-ratio) is sampled from "
        "every client, and those of it available take part; a round whose cohort is all offline "
        "(--availability-trace) waits for the first of it to come online. available: FedScale's practice, "
        "the cohort is sampled among the clients available at the round's start (waiting for the first to "
        "come online), ceil(--overcommit x K) of them, and the first K to finish are kept. "
        "docs/system-model.md.",
        choices=["cohort", "available"],
        group="system",
    )
    overcommit: float = opt(
        1.0,
        "System model, --sampling available: sample ceil(overcommit x K) of the available clients and keep "
        "the first K to finish (FedScale's over-commitment, e.g. 1.3); 1: none.",
        lo=1.0,
        group="system",
    )
    deadline: float = opt(
        0.0,
        "System model: round deadline in simulated seconds (0: none; at most 1e9). A client whose own "
        "steps and transfers take longer misses it (--on-deadline).",
        lo=0.0,
        hi=MAX_SECONDS,
        group="system",
    )
    on_deadline: str = opt(
        "drop",
        "System model: a client that misses the deadline is dropped, not aggregated (drop: FedAvg's "
        "practice), or runs the local steps that fit and its partial work is kept (keep-partial: "
        "FedProx's; FedNova normalizes the unequal steps).",
        choices=["drop", "keep-partial"],
        group="system",
    )
    server_time: float = opt(
        0.0,
        "System model: the server's time per round in seconds (aggregation, a constant; at most 1e9).",
        lo=0.0,
        hi=MAX_SECONDS,
        group="system",
    )

    def check(self) -> None:
        """Each distribution parses and gives only valid values, no option of the model is set while it is off
        (it would do nothing), ``--on-deadline keep-partial`` has a deadline, and each trace is a readable file whose
        rows are valid (read here, before anything is written); ConfigError naming the option."""
        for name, (_unit, zero_ok) in QUANTITIES.items():
            parse_distribution(getattr(self, name), name, zero_ok)
        if not self.system:
            changed = [
                f.name
                for f in dataclasses.fields(SystemParams)
                if f.name != "system" and getattr(self, f.name) != f.default
            ]
            if changed:
                flag = changed[0].replace("_", "-")
                raise ConfigError(
                    f"--{flag} is an option of the system model, which is off: add --system (system = true in "
                    f"a recipe), or leave --{flag} out (docs/system-model.md)",
                    key=changed[0],
                )
            return
        if self.overcommit != 1.0 and self.sampling != "available":
            raise ConfigError(
                f"--overcommit {self.overcommit:g} needs --sampling available (it over-commits the clients "
                f"sampled among those online; docs/system-model.md)",
                key="overcommit",
            )
        if self.on_deadline != "drop" and not self.deadline:
            raise ConfigError(
                f"--on-deadline {self.on_deadline} needs a --deadline: without one no client misses a "
                f"round and the option would do nothing",
                key="on_deadline",
            )
        if self.system_trace:  # read here, before anything is written: a bad row is refused naming its line
            read_trace_rows(self.system_trace)
        if self.availability_trace:
            read_availability_rows(self.availability_trace)
