"""The two-client run of the system model's hand-worked tests (tests/engine/test_system.py) and its trace, shared
with the tests of its inputs (test_system_inputs.py): two clients of the digits MLP whose speeds, links and latencies
the trace fixes, so every round's time can be worked out by hand (docs/system-model.md)."""

import csv

TRACE = "client,speed,uplink,downlink,latency\n0,56832,610,1220,0.5\n1,28416,1220,2440,0.25\n"
BASE = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "2",
    "--active-ratio",
    "1",
    "--batch-size",
    "16",
    "--eval-every",
    "1",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


def system(trace, *extra):
    """The system-model flags of the hand-worked runs: ``trace`` (a path) and a server time of 0.125 s."""
    return ["--system", "--system-trace", str(trace), "--server-time", "0.125", *extra]


def table(path):
    """A CSV's rows as dicts of text."""
    with open(path) as f:
        return list(csv.DictReader(f))
