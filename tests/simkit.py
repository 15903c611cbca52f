"""Shared scaffolding for tests: whole simulator runs to compare (digits + a small MLP, seconds) and run-directory
fixtures."""

import csv
from pathlib import Path

import torch

from fedcli.config import TrainConfig
from fedcli.fl.engine import Simulation
from sharedkit import FEMNIST_SAMPLE, MNIST_T10K, ROOT, SHARED  # the tests import them from here too

COLS = ("round", "iteration", "train_loss", "test_loss", "test_acc", "comm_params", "comm_bytes")

# personalized runs: 2 classes per client with local test splits, every client every round
PERSONAL_BASE = dict(
    algo="fedavg",
    dataset="digits",
    model="mlp",
    mlp_hidden="32",
    clients=4,
    active_ratio=1.0,
    partition="pathological",
    classes_per_client=2,
    client_test_fraction=0.25,
    rounds=2,
    local_epochs=1.0,
    batch_size=16,
    lr=0.3,
    eval_every=1,
    device="cpu",
    weighting="samples",
    threads=1,
)


def configurer(base: dict):
    """``config(**overrides)``: a validated TrainConfig on top of ``base``."""

    def config(**kw) -> TrainConfig:
        return TrainConfig(**{**base, **kw}).validate()

    return config


def cached_runner(config):
    """``run(data, **kw)``: one (Simulation, Summary) per distinct config *and data* (runs are only read afterwards).

    The key holds what identifies the data (the dataset's source record and the partition's hash, as the manifest
    records them; the objects' identities where those are missing), so another dataset or partition with the same
    arguments is another run, never a cached one."""
    runs: dict = {}

    def fingerprint(d):
        return repr(getattr(d, "source", None) or getattr(d, "hash", None) or id(d))

    def run(data, **kw):
        key = (tuple(fingerprint(d) for d in data), tuple(sorted(kw.items())))
        if key not in runs:
            sim = Simulation(config(**kw)).setup(*data)
            runs[key] = (sim, sim.run(), data)
        return runs[key][:2]

    return run


def assert_same_run(a, b, cols=COLS):
    """Two runs with identical metrics rows (``cols``) and bitwise-identical global models."""
    (sa, ra), (sb, rb) = a, b
    assert len(ra.history) == len(rb.history) > 0
    for x, y in zip(ra.history, rb.history):
        for c in cols:
            assert x[c] == y[c], (c, x[c], y[c])
    for n in sa.global_params:
        assert torch.equal(sa.global_params[n], sb.global_params[n]), n


personal_config = configurer(PERSONAL_BASE)
personal_run = cached_runner(personal_config)


def same_personal(a, b, cols=COLS + ("personal_acc",)):
    assert_same_run(a, b, cols)


def assert_learned(summary, gain=0.1, floor=0.8):
    """A personalized run learned: personal_acc rose by ``gain`` and peaked above ``floor``, above the global model."""
    accs = [r["personal_acc"] for r in summary.history]
    assert accs[-1] > accs[0] + gain and summary.best_personal_acc > floor, accs
    assert summary.best_personal_acc > max(r["test_acc"] for r in summary.history)  # non-IID: personal models win


def write_csv(path, columns, rows, fill=""):
    """A run-directory CSV with header ``columns``; a key missing from a row is written as ``fill``."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, fill) for c in columns})


def cli(args, capsys):
    """(exit code, stdout, stderr) of ``fedcli ARGS`` run in this process (0 when it returns normally)."""
    from fedcli.cli.main import main

    try:
        code = main(args) or 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_rows_close(a: list[dict], b: list[dict], rel: float, where: str = "") -> None:
    """Two CSVs read as text rows: the same columns and rows; every cell written as an integer or text (counts,
    intervals, names, empty cells) identical; every float within ``rel`` relative (NaN and inf never pass)."""
    import math
    import re

    assert len(a) == len(b), (where, len(a), len(b))
    for n, (ra, rb) in enumerate(zip(a, b)):
        assert list(ra) == list(rb), (where, n)
        for col, x in ra.items():
            y = rb[col]
            if re.fullmatch(r"[+-]?\d+", x or "") or re.fullmatch(r"[+-]?\d+", y or ""):
                assert x == y, (where, n, col, x, y)
                continue
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                assert x == y, (where, n, col, x, y)
                continue
            assert math.isfinite(fx) and math.isfinite(fy) and abs(fx - fy) <= rel * max(abs(fx), abs(fy), 1e-300), (
                where,
                n,
                col,
                x,
                y,
            )


def accuracy_by_hand(sim, model_of) -> tuple[float, float]:
    """(pooled accuracy over all local test samples, mean of per-client accuracies)."""
    correct = total = 0
    per_client = []
    from torch.func import functional_call

    sim.model.eval()
    with torch.no_grad():
        for c, idx in enumerate(sim.partition.test):
            idx = torch.as_tensor(idx)
            params, buffers = model_of(c)
            out = functional_call(sim.model, (params, buffers), (sim.train_x[idx],))
            k = int((out.argmax(1) == sim.train_y[idx]).sum())
            correct += k
            total += idx.numel()
            per_client.append(k / idx.numel())
    return correct / total, sum(per_client) / len(per_client)


def md_table(text: str) -> list[dict]:
    """The rows of the first Markdown table in ``text`` as dicts keyed by its header (``fedcli report``'s tables)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]
