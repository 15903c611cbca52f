"""A dataset is one file, ``fedcli/data/datasets/<name>.py``, with its declaration (issue 60, item 4): name, input
shape, classes, split sizes, preflight check, loader. The command line, the sweep's preflight and its time estimate
read the declarations without numpy or torch; the registry finds a dataset by its name."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from fedcli.data import preflight
from fedcli.data.datasets import DATASETS, DECLARED
from fedcli.sweep.estimate import data_facts
facts = data_facts({"dataset": "cifar100"}, False, {})
print(json.dumps({"names": sorted(DATASETS), "facts": [list(facts.shape), facts.classes, facts.n_train, facts.n_test],
                  "how": preflight.DataCheck("mnist", None).how, "loaded": sorted(m for m in ("numpy", "torch")
                                                                                   if m in sys.modules)}))
"""


def test_the_declarations_are_read_without_numpy_or_torch():
    p = subprocess.run(
        [sys.executable, "-c", PROBE],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["names"] == [
        "agnews",
        "cifar10",
        "cifar100",
        "digits",
        "emnist",
        "femnist",
        "fmnist",
        "imagefolder",
        "mnist",
        "synthetic",
        "tensors",
        "tinyimagenet",
    ]
    assert got["facts"] == [[3, 32, 32], 100, 50000, 10000]  # CIFAR-100's standard splits (Krizhevsky 2009)
    assert got["how"] == ("pass --download (torchvision fetches it once, before the runs) or put the IDX files there")
    assert got["loaded"] == []


def test_each_dataset_file_declares_the_dataset_of_its_name():
    from fedcli.data.datasets import BUILTIN, DATASETS, DECLARED

    files = {p.stem for p in (ROOT / "fedcli" / "data" / "datasets").glob("*.py")} - {"__init__", "base", "shared"}
    assert {m.__name__.rsplit(".", 1)[1] for m in BUILTIN} == files
    assert all(m.DATASET.name == m.__name__.rsplit(".", 1)[1] for m in BUILTIN)
    assert all(DATASETS[name] is d.load for name, d in DECLARED.items())


def test_nominal_facts_under_a_runs_options():
    """Worked out by hand: EMNIST letters has 26 classes; AG News at --agnews-max-len 100 over every training word
    (98,635) has 98,635 + <pad> + <unk> ids; digits held out at 0.5: ceil(1797 / 2) = 899 test, 898 training."""
    from fedcli.data.datasets import DECLARED

    assert DECLARED["emnist"].nominal({"emnist_split": "letters"}) == ((1, 28, 28), 26, 112800, 18800, None)
    assert DECLARED["agnews"].nominal({"agnews_max_len": 100, "agnews_vocab_size": 0}) == (
        (100,),
        4,
        120000,
        7600,
        98637,
    )
    assert DECLARED["digits"].nominal({"holdout_fraction": 0.5}) == ((1, 8, 8), 10, 898, 899, None)
    assert DECLARED["mnist"].nominal({}) == ((1, 28, 28), 10, 60000, 10000, None)
    # generated or your own: no nominal facts (the estimate loads them), nothing (digits, synthetic) on disk
    assert [n for n, d in DECLARED.items() if d.classes is None] == ["synthetic", "imagefolder", "tensors"]
    assert [n for n, d in DECLARED.items() if not d.on_disk] == ["digits", "synthetic"]
    assert sorted(n for n, d in DECLARED.items() if d.downloadable) == [
        "cifar10",
        "cifar100",
        "emnist",
        "fmnist",
        "mnist",
    ]


def test_a_declared_check_is_the_preflights(tmp_path):
    """The preflight asks the declaration: IDX files with the wrong magic number are damaged, AG News needs both
    CSVs unless one split is held out."""
    from fedcli.data.datasets import DECLARED

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x01")  # a labels magic (2049), not images (2051)
    assert "is not an IDX image file" in DECLARED["mnist"].check(tmp_path, False, None)
    (tmp_path / "test.csv").write_text("1,a,b\n")
    assert DECLARED["agnews"].check(tmp_path, False, None) == (
        "only the AG News test split is there (set holdout_fraction above 0 to split it)"
    )
    assert DECLARED["agnews"].check(tmp_path, True, None) is None
