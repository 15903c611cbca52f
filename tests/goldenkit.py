"""The golden runs (tests/test_golden.py): every preset and the other recorded runs, how each is run, and the
digest of a final model, and the comparison of a record with a new run. Other tests (tests/engine/test_trainers.py,
test_store.py) run the same runs and compare from here."""

import csv
import hashlib
import io
import math
import re
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.specs import METHODS

GOLDEN = Path(__file__).resolve().parent / "golden"
TIMING = {"wall_s"}  # columns that measure time, not the computation
RELEASE = GOLDEN / "TORCH"  # the torch release the files were recorded under
REL = 1e-5
CSVS = ("metrics.csv", "layers.csv", "intervals.csv")
DIGEST = "model.sha256"  # the final model's tensors (compared under the recording torch release only)

# every preset on a small MLP (the vmap trainer); 4 clients, 2 rounds of 3 local steps, batch 8
TINY = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--rounds",
    "2",
    "--tau",
    "3",
    "--batch-size",
    "8",
    "--eval-every",
    "1",
    "--threads",
    "1",
    "--workers",
    "1",
    "--seed",
    "3",
]
# a convolutional model for the per-client loop trainer: digits upsampled to 16x16 (the CNNs need 16x16 or more)
CONV = [
    "--dataset",
    "tensors",
    "--data-dir",
    "{d16}",
    "--model",
    "cnn4",
    "--clients",
    "3",
    "--rounds",
    "2",
    "--tau",
    "2",
    "--batch-size",
    "8",
    "--eval-every",
    "1",
    "--threads",
    "1",
    "--workers",
    "1",
    "--seed",
    "5",
    "--trainer",
    "loop",
]
# the lama schedule with enough rounds to see an interval change
LAMA = ["--rounds", "4", "--tau", "2", "--phi", "2"]

RUNS: dict[str, list[str]] = {
    **{f"preset-{name}": ["--algo", name, *TINY] for name in sorted({m.name for m in METHODS.values()})},
    "loop-fedavg": ["--algo", "fedavg", *CONV],
    "loop-fedprox-c": ["--algo", "fedprox-c", *CONV],
    "loop-scaffold": ["--algo", "scaffold", *CONV],
    "vmap-fedavg-plain-sgd": ["--algo", "fedavg", *TINY, "--trainer", "vmap", "--momentum", "0", "--weight-decay", "0"],
    "loop-fedavg-plain-sgd": ["--algo", "fedavg", *TINY, "--trainer", "loop", "--momentum", "0", "--weight-decay", "0"],
    "lama-fedlama": ["--algo", "fedlama", *TINY, *LAMA],
    "lama-fedprox": ["--algo", "fedprox", *TINY, *LAMA, "--schedule", "lama"],
    "lama-scaffold": ["--algo", "scaffold", *TINY, *LAMA, "--schedule", "lama"],
    "ala-fedavg-c": ["--algo", "fedavg-c", *TINY, "--init", "ala"],
    "ala-ditto": ["--algo", "ditto", *TINY, "--init", "ala"],
    # unequal local steps (one local epoch on clients of different sizes): clients stop at different steps
    **{
        f"epochs-{name}": ["--algo", name, *TINY, "--local-epochs", "0.5", "--partition", "dirichlet", "--alpha", "0.5"]
        for name in ("apple", "partialfed", "perfedavg", "pfedme", "scaffold", "fednova", "fedrep")
    },
    "workers2-fedavg": ["--algo", "fedavg", *TINY[:-4], "--workers", "2", "--seed", "3"],
    # runs that learn (final accuracy well above chance, test_the_long_golden_runs_learn), about 2-3 s each:
    # FedLAMA whose intervals relax (9 adjustments; hidden.0.weight synchronized less often than the others), with
    # momentum, weight decay, p_i by sample counts, a 4-iteration warm-up and two iteration-unit lr decays
    "learn-fedlama-relaxed": [
        "--algo",
        "fedlama",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--mlp-hidden",
        "16",
        "--clients",
        "6",
        "--active-ratio",
        "0.5",
        "--partition",
        "dirichlet",
        "--alpha",
        "0.5",
        "--weighting",
        "samples",
        "--tau",
        "2",
        "--phi",
        "2",
        "--rounds",
        "12",
        "--batch-size",
        "8",
        "--lr",
        "0.1",
        "--momentum",
        "0.9",
        "--weight-decay",
        "5e-4",
        "--warmup-iterations",
        "4",
        "--lr-decay-at",
        "32,40",
        "--lr-decay-factor",
        "0.5",
        "--eval-every",
        "3",
        "--threads",
        "1",
        "--workers",
        "1",
        "--seed",
        "4",
    ],
    # BatchNorm (ResNet-20: running statistics averaged with their layers), momentum, weight decay, a round-unit decay
    "learn-resnet20-bn": [
        "--algo",
        "fedavg",
        "--dataset",
        "tensors",
        "--data-dir",
        "{d16}",
        "--model",
        "resnet20",
        "--clients",
        "3",
        "--batch-size",
        "16",
        "--rounds",
        "10",
        "--tau",
        "3",
        "--lr",
        "0.05",
        "--momentum",
        "0.9",
        "--weight-decay",
        "1e-4",
        "--lr-decay-at",
        "8",
        "--lr-decay-unit",
        "round",
        "--eval-every",
        "5",
        "--threads",
        "1",
        "--workers",
        "1",
        "--seed",
        "5",
    ],
}
# the long runs' final test accuracy must stay above these (chance is 0.1)
LEARNS = {"learn-fedlama-relaxed": 0.5, "learn-resnet20-bn": 0.25}


def strip(text: str) -> str:
    """The CSV without its timing columns."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""
    keep = [i for i, c in enumerate(rows[0]) if c not in TIMING]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for r in rows:
        w.writerow([r[i] for i in keep if i < len(r)])
    return out.getvalue()


def digits16(path: Path) -> Path:
    """The first 400 digits, each pixel repeated 2x2 (16x16 images in [0, 1]), as a ``--dataset tensors`` file."""
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.kron(d.images[:400] / 16.0, np.ones((2, 2))).astype(np.float32)[:, None]
    np.savez(path, x=x, y=d.target[:400].astype(np.int64))
    return path


def run(name: str, tmp: Path, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Run golden run ``name`` into ``tmp/name`` (``extra``: flags added to its own); its files as the records hold
    them."""
    out = tmp / name
    d16 = tmp / "digits16.npz"
    if not d16.exists():
        digits16(d16)
    args = [a.replace("{d16}", str(d16)) for a in RUNS[name]] + list(extra)
    try:
        code = main(["train", *args, "--out", str(out), "--quiet"])
    except SystemExit as e:
        code = e.code
    assert code in (0, None), f"{name} exited {code}"
    got = {f: strip((out / f).read_text()) if (out / f).exists() else "" for f in CSVS}
    got[DIGEST] = model_digest(out / "model.pt") + "\n"
    return got


def run_all_watching_writes(tmp: Path) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, set[str]]]]:
    """Every golden run once (the ``golden_runs`` session fixture, tests/conftest.py): each run's files as the
    records hold them, and per run which source file (the part after ``fedcli/``) set which attributes of its
    Simulation. The spy only records and passes every write on, so the runs are the plain ones bit for bit; one pass
    serves both tests of test_golden.py that read it: the records, and only the engine writes the simulation (one file:
    under `make test`'s --dist loadfile, one worker runs them once)."""
    import sys

    from fedcli.fl.engine import Simulation

    writers: dict[str, dict[str, set[str]]] = {}
    setattr_ = Simulation.__setattr__
    current: dict[str, set[str]] = {}

    def spy(self, name, value):
        where = Path(sys._getframe(1).f_code.co_filename).as_posix().split("/fedcli/")[-1]
        current.setdefault(where, set()).add(name)
        setattr_(self, name, value)

    got = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Simulation, "__setattr__", spy)
        for name in RUNS:
            current = writers[name] = {}
            got[name] = run(name, tmp)
    return got, writers


def model_digest(path: Path) -> str:
    """sha256 over each tensor of a saved state dict, in its order: name, dtype, shape, then the raw bytes."""
    import torch

    h = hashlib.sha256()
    for name, t in torch.load(path, map_location="cpu", weights_only=True).items():
        t = t.contiguous().reshape(-1)
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


INT = re.compile(r"[+-]?\d+")


def kind(cell: str) -> str:
    """'int', 'float' (a finite number written with a point or an exponent), 'nonfinite' (nan, inf) or 'text'."""
    if INT.fullmatch(cell):
        return "int"
    try:
        v = float(cell)
    except ValueError:
        return "text"
    return "float" if math.isfinite(v) else "nonfinite"


def table(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def cell_equal(x: str, y: str, bitwise: bool) -> bool:
    """One cell: never equal when either is NaN or infinite; else the same text, or (another torch release) two
    finite floats within ``REL`` relative. An integer never equals a float."""
    kx, ky = kind(x), kind(y)
    if "nonfinite" in (kx, ky):
        return False
    if x == y:
        return True
    if bitwise or kx != "float" or ky != "float":
        return False
    fx, fy = float(x), float(y)
    return abs(fx - fy) <= REL * max(abs(fx), abs(fy))


def same(stored: str, got: str, bitwise: bool) -> bool:
    """Bitwise, or (another torch release) the same cells with floats within ``REL`` relative."""
    a, b = table(stored), table(got)
    if len(a) != len(b) or any(len(r) != len(q) for r, q in zip(a, b)):
        return False
    return all(cell_equal(x, y, bitwise) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def bitwise() -> bool:
    """Whether the installed torch is the release the records were written under (then they must match bitwise)."""
    import torch

    return RELEASE.exists() and RELEASE.read_text().strip() == torch.__version__


def differing(names: list[str], extra: tuple[str, ...], tmp: Path) -> list[str]:
    """The golden runs ``names`` again with ``extra`` flags (flags that must not change a number): ``run/file`` of
    every file that differs from its record."""
    exact = bitwise()
    return [
        f"{name}/{f}"
        for name in names
        for f, text in run(name, tmp, extra).items()
        if not same((GOLDEN / name / f).read_text(), text, exact)
    ]
