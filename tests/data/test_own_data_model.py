"""Your own data and model: --dataset imagefolder / tensors, --model module:Factory / file.py:Factory.

Fixtures are written here in the exact on-disk formats (PNG through PIL, numpy.savez, torch.save); expected values
are worked out by hand from the pixels and arrays written."""

import csv
import json
import math
import os
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from fedcli.data.datasets import load_dataset
from fedcli.data.partition import PartitionOptions, make_partition
from fedcli.errors import DataError
from runkit import error_lines
from simkit import cli


def png(path, pixels, mode="L"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, dtype=np.uint8), mode=mode).save(path)


def small_npz(path, n=60, classes=3, writers=True, **extra):
    rng = np.random.default_rng(0)
    arrays = {"x": rng.normal(size=(n, 6)).astype(np.float32), "y": np.arange(n) % classes}
    if writers:
        arrays["writers"] = np.array([f"w{i % 12}" for i in range(n)])
    arrays.update(extra)
    np.savez(path, **arrays)
    return arrays


# ------------------------------------------------------------------------------------------ tensors


def test_tensors_npz_and_pt_give_the_same_dataset(tmp_path):
    a = small_npz(tmp_path / "d.npz")
    torch.save(
        {"x": torch.from_numpy(a["x"]), "y": torch.from_numpy(a["y"]), "writers": [str(w) for w in a["writers"]]},
        tmp_path / "d.pt",
    )
    d1 = load_dataset("tensors", tmp_path / "d.npz")
    d2 = load_dataset("tensors", tmp_path / "d.pt")
    # no test split: 20% stratified holdout, ceil(0.2 * 60) = 12 test samples, 4 per class
    assert (len(d1.train_y), len(d1.test_y)) == (48, 12)
    assert torch.bincount(d1.test_y).tolist() == [4, 4, 4]
    assert d1.num_classes == 3 and d1.input_shape == (6,)
    assert d1.group_names == [f"w{k}" for k in sorted(range(12), key=lambda k: f"w{k}")]
    for name in ("train_x", "train_y", "test_x", "test_y", "train_groups"):
        assert torch.equal(getattr(d1, name), getattr(d2, name)), name
    # every training sample keeps its own x, y and writer
    rows = {tuple(r): (int(c), int(g)) for r, c, g in zip(a["x"].tolist(), a["y"], [int(w[1:]) for w in a["writers"]])}
    for x, y, g in zip(d1.train_x.tolist(), d1.train_y.tolist(), d1.train_groups.tolist()):
        assert rows[tuple(x)] == (y, int(d1.group_names[g][1:]))


def test_tensors_input_kinds_and_test_split(tmp_path):
    np.savez(
        tmp_path / "u8.npz",
        x=np.array([[[0, 51]], [[255, 102]], [[1, 2]], [[3, 4]]], dtype=np.uint8),
        y=np.array([0, 1, 0, 1]),
        x_test=np.array([[[204, 0]]], dtype=np.uint8),
        y_test=np.array([1]),
    )
    d = load_dataset("tensors", tmp_path / "u8.npz")
    assert d.train_x.dtype == torch.float32  # uint8 / 255
    assert d.train_x[:2].flatten().tolist() == pytest.approx([0.0, 0.2, 1.0, 0.4], abs=1e-7)
    assert (
        d.test_x.flatten().tolist() == pytest.approx([0.8, 0.0], abs=1e-7)
        and d.test_y.tolist() == [1]
        and len(d.train_y) == 4
    )
    np.savez(
        tmp_path / "tok.npz",
        x=np.array([[5, 0, 0], [2, 7, 0], [1, 1, 1], [3, 0, 0]]),
        y=np.array([0, 1, 0, 1]),
        num_classes=np.array(4),
    )
    d = load_dataset("tensors", tmp_path / "tok.npz", holdout_fraction=0.5)
    assert d.train_x.dtype == torch.int64 and d.num_classes == 4 and d.source["vocab_size"] == 8  # largest id 7 + 1
    assert (len(d.train_y), len(d.test_y)) == (2, 2)


@pytest.mark.parametrize(
    "scheme, kw",
    [
        ("iid", {}),
        ("dirichlet", {"alpha": 0.5, "min_size": 1}),
        ("pathological", {"classes_per_client": 1}),
        ("natural", {"writers_per_client": 2}),
    ],
)
def test_own_data_takes_every_partition(tmp_path, scheme, kw):
    small_npz(tmp_path / "d.npz", n=90)
    d = load_dataset("tensors", tmp_path / "d.npz")
    p = make_partition(d, PartitionOptions(scheme, 4, 0, **kw))
    idx = np.concatenate(p.train)
    assert len(idx) == len(set(idx.tolist())) and idx.max() < len(d.train_y)
    if scheme == "natural":  # whole writers per client
        for part in p.train:
            assert len(set(d.train_groups[torch.as_tensor(part)].tolist())) == 2
    if scheme == "pathological":
        assert len(idx) == len(d.train_y)


@pytest.mark.parametrize(
    "make, needle",
    [
        (
            lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), labels=np.zeros(4, int)),
            "no 'y' array (it holds: labels, x)",
        ),
        (lambda p: np.savez(p, x=np.full((4, 2), np.nan, np.float32), y=np.zeros(4, int)), "NaN"),
        (lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), y=np.zeros(4, np.float32)), "'y' is float32"),
        (lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), y=np.zeros(3, int)), "expected 4 integer labels"),
        (lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), y=np.array([0, 1, 0, -1])), "negative label"),
        (
            lambda p: np.savez(
                p, x=np.zeros((4, 2), np.float32), y=np.array([0, 1, 0, 1]), x_test=np.zeros((2, 2), np.float32)
            ),
            "without its partner",
        ),
        (
            lambda p: np.savez(
                p,
                x=np.zeros((4, 2), np.float32),
                y=np.array([0, 1, 0, 1]),
                x_test=np.zeros((2, 3), np.float32),
                y_test=np.array([0, 1]),
            ),
            "one sample shape",
        ),
        (
            lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), y=np.array([0, 1, 0, 1]), writers=np.zeros(3, int)),
            "writer ids",
        ),
        (
            lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), y=np.array([0, 1, 0, 1]), num_classes=np.array(1)),
            "num_classes",
        ),
        (lambda p: np.savez(p, x=np.zeros((4, 2), np.float32), y=np.zeros(4, int)), "one class"),
        (lambda p: p.write_bytes(b"not a zip"), "not a zip archive"),
    ],
)
def test_bad_tensor_files_exit_3_naming_the_file(tmp_path, capsys, make, needle):
    f = tmp_path / "bad.npz"
    make(f)
    with pytest.raises(DataError) as e:
        load_dataset("tensors", f)
    assert str(f) in str(e.value) and needle in str(e.value), str(e.value)
    code, _, err = cli(["train", "--dataset", "tensors", "--data-dir", str(f), "--out", str(tmp_path / "run")], capsys)
    assert code == 3 and error_lines(err)[0].startswith(f"fedcli: error: {f}") and len(error_lines(err)) == 1, err


def test_bad_pt_files(tmp_path):
    torch.save([1, 2], tmp_path / "list.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    for f, needle in (
        (tmp_path / "list.pt", "holds a list, not a dict"),
        (tmp_path / "junk.pt", "not a readable .pt"),
        (tmp_path / "x.csv", "not found"),
        (tmp_path, "is a folder"),
    ):
        with pytest.raises(DataError) as e:
            load_dataset("tensors", f)
        assert str(f) in str(e.value) and needle in str(e.value), str(e.value)


# -------------------------------------------------------------------------------------- imagefolder


def test_imagefolder_layout_labels_and_standardization(tmp_path):
    root = tmp_path / "imgs"
    # classes by sorted folder name: "bird" = 0, "cat" = 1; writers from the subfolders
    png(root / "train" / "cat" / "w1" / "a.png", [[0, 0], [0, 0]])
    png(root / "train" / "cat" / "w2" / "b.PNG", [[51, 51], [51, 51]])
    png(root / "train" / "bird" / "w1" / "c.png", [[102, 102], [102, 102]])
    png(root / "train" / "bird" / "w3" / "d.png", [[153, 153], [153, 153]])
    (root / "train" / "bird" / "w3" / "notes.txt").write_text("not an image")
    png(root / "test" / "cat" / "w9" / "e.png", [[255, 255], [255, 255]])
    d = load_dataset("imagefolder", root)
    assert d.source["classes"] == ["bird", "cat"] and d.num_classes == 2 and d.input_shape == (1, 2, 2)
    assert d.train_y.tolist() == [0, 0, 1, 1] and d.test_y.tolist() == [1]
    # training pixels 0.4, 0.6, 0, 0.2 (/255): mean 0.3, population std sqrt(0.05)
    mean, std = 0.3, math.sqrt(((0.1) ** 2 + 0.3**2 + 0.3**2 + 0.1**2) / 4)
    assert d.source["normalization"]["mean"] == pytest.approx([mean])
    assert d.source["normalization"]["std"] == pytest.approx([std])
    assert d.train_x[:, 0, 0, 0].tolist() == pytest.approx([(v - mean) / std for v in (0.4, 0.6, 0.0, 0.2)], abs=1e-6)
    assert d.test_x[0, 0, 0, 0].item() == pytest.approx((1.0 - mean) / std, abs=1e-6)
    assert d.group_names == ["w1", "w2", "w3", "w9"]
    assert [d.group_names[g] for g in d.train_groups.tolist()] == ["w1", "w3", "w1", "w2"]


def test_imagefolder_without_train_folder_rgb_and_holdout(tmp_path):
    root = tmp_path / "flat"
    for c, k in (("a", 0), ("b", 1)):
        for i in range(5):
            png(root / c / f"{i}.png", np.full((3, 4, 3), 10 * i + k, dtype=np.uint8), mode="RGB")
    png(root / "a" / "gray.png", np.zeros((3, 4)))  # a grayscale image among RGB ones: converted to RGB
    d = load_dataset("imagefolder", root)
    assert d.input_shape == (3, 3, 4) and d.group_names is None  # images directly in the class folders: no writers
    assert (len(d.train_y), len(d.test_y)) == (8, 3)  # default holdout 0.2 of 11: ceil(2.2) = 3
    d = load_dataset("imagefolder", root, holdout_fraction=0.5)
    assert len(d.test_y) == 6


@pytest.mark.parametrize(
    "build, needle",
    [
        (
            lambda r: (
                png(r / "train" / "a" / "1.png", np.zeros((2, 2))) or png(r / "train" / "b" / "1.png", np.zeros((3, 2)))
            ),
            "image is 2x3; expected 2x2",
        ),
        (lambda r: png(r / "train" / "a" / "1.png", np.zeros((2, 2))) or (r / "train" / "b").mkdir(), "no image files"),
        (
            lambda r: (
                png(r / "train" / "a" / "1.png", np.zeros((2, 2)))
                or (r / "train" / "b").mkdir()
                or (r / "train" / "b" / "x.png").write_bytes(b"junk")
            ),
            "cannot read the image",
        ),
        (
            lambda r: (
                png(r / "train" / "a" / "1.png", np.zeros((2, 2)))
                or png(r / "train" / "b" / "1.png", np.zeros((2, 2)))
                or png(r / "test" / "zebra" / "1.png", np.zeros((2, 2)))
            ),
            "a test class with no training folder",
        ),
        (lambda r: png(r / "train" / "a" / "1.png", np.zeros((2, 2))), "one class folder"),
        (lambda r: None, "not found"),
    ],
)
def test_bad_imagefolders_exit_3(tmp_path, capsys, build, needle):
    root = tmp_path / "imgs"
    build(root)
    with pytest.raises(DataError) as e:
        load_dataset("imagefolder", root)
    assert needle in str(e.value) and str(root) in str(e.value), str(e.value)
    code, _, err = cli(
        ["train", "--dataset", "imagefolder", "--data-dir", str(root), "--out", str(tmp_path / "run")], capsys
    )
    assert code == 3 and needle in err and len(error_lines(err)) == 1, err


def test_train_and_partition_on_own_data_cli(tmp_path, capsys):
    root = tmp_path / "imgs"
    rng = np.random.default_rng(0)
    for i in range(48):
        png(root / "train" / f"c{i % 3}" / f"w{i % 8}" / f"{i}.png", rng.integers(0, 256, (6, 6)))
    code, _, err = cli(
        [
            "partition",
            "--dataset",
            "imagefolder",
            "--data-dir",
            str(root),
            "--partition",
            "natural",
            "--writers-per-client",
            "2",
            "--clients",
            "4",
            "--out",
            str(tmp_path / "p.json"),
        ],
        capsys,
    )
    assert code == 0, err
    code, out, err = cli(
        [
            "train",
            "--dataset",
            "imagefolder",
            "--data-dir",
            str(root),
            "--partition-file",
            str(tmp_path / "p.json"),
            "--iterations",
            "10",
            "--tau",
            "5",
            "--threads",
            "1",
            "--json",
            "--out",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert code == 0, err
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert (
        m["status"] == "completed"
        and m["dataset"]["classes"] == ["c0", "c1", "c2"]
        and m["partition"]["scheme"] == "natural"
    )


# -------------------------------------------------------------------------------------------- model

FACTORIES = '''
import math
import torch
from torch import nn


class Net(nn.Module):
    """Linear(D, 16) - ReLU - Linear(16, C), plus one scalar parameter (a 'layer' of its own)."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(input_shape), 16)
        self.fc2 = nn.Linear(16, num_classes)
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1)))) * self.temperature


class Zoo(nn.Module):
    """The same construction and forward as fedcli's built-in mlp with one hidden layer."""

    def __init__(self, input_shape, num_classes, mlp_hidden=(200, 200)):
        super().__init__()
        widths = [math.prod(input_shape), *mlp_hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = nn.Identity()
        self.out = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.hidden:
            x = self.dropout(torch.relu(layer(x)))
        return self.out(x)


def takes_all(input_shape, num_classes, **options):
    assert options["mlp_hidden"] == (7,), options
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def returns_int(input_shape, num_classes):
    return 3


def raises(input_shape, num_classes):
    raise ValueError("no such architecture")


def wrong_logits(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes + 1))


def frozen(input_shape, num_classes):
    m = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))
    m.requires_grad_(False)
    return m


class Itemy(Net):
    def forward(self, x):
        if x.sum().item() > 1e9:  # data-dependent Python branch: not vmap-able
            return x
        return super().forward(x)


NOT_CALLABLE = 5
'''

BASE = ["--iterations", "20", "--tau", "5", "--clients", "4", "--threads", "1", "--quiet"]


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(FACTORIES)
    (tmp_path / "broken.py").write_text("import torch\ndef (:\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("mymodels", "broken"):
        sys.modules.pop(name, None)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_own_model_from_a_file_and_a_module_with_fedlama_layer_accounting(factories, capsys):
    for ref, out in (("mymodels.py:Net", "r1"), ("mymodels:Net", "r2")):
        code, _, err = cli(["train", "--model", ref, "--algo", "fedavg", "--out", out] + BASE, capsys)
        assert code == 0, err
    layers = read_csv(factories / "r1" / "layers.csv")
    # digits: 8x8 = 64 inputs; the module's own scalar first (named_parameters order), Linear(64, 16), Linear(16, 10)
    assert [(r["name"], int(r["numel"])) for r in layers] == [
        ("temperature", 1),
        ("fc1.weight", 1024),
        ("fc1.bias", 16),
        ("fc2.weight", 160),
        ("fc2.bias", 10),
    ]
    # FedAvg, tau 5, 20 iterations: every layer synchronized 4 times; Eq. 8 sum of numel x syncs
    assert all(int(r["syncs"]) == 4 for r in layers)
    m = json.loads((factories / "r1" / "manifest.json").read_text())
    assert m["summary"]["comm_params"] == 4 * (1024 + 16 + 160 + 10 + 1)
    assert m["model"]["factory"]["spec"] == "mymodels.py:Net" and len(m["model"]["factory"]["sha256"]) == 64
    a = [{k: v for k, v in r.items() if k != "wall_s"} for r in read_csv(factories / "r1" / "metrics.csv")]
    b = [{k: v for k, v in r.items() if k != "wall_s"} for r in read_csv(factories / "r2" / "metrics.csv")]
    assert a == b and len(a) > 0


def test_own_model_equal_to_the_builtin_mlp_gives_the_same_fedlama_run(factories, capsys):
    """FedLAMA's per-layer schedule and accounting see only named_parameters(): a factory building the zoo's MLP
    gives the same intervals, layer counts and metrics as --model mlp."""
    args = ["--algo", "fedlama", "--phi", "2", "--mlp-hidden", "32", "--lama-first-adjust", "0"] + BASE
    assert cli(["train", "--model", "mlp", "--out", "zoo"] + args, capsys)[0] == 0
    assert cli(["train", "--model", "mymodels.py:Zoo", "--out", "own"] + args, capsys)[0] == 0
    for f in ("layers.csv", "intervals.csv"):
        assert read_csv(factories / "zoo" / f) == read_csv(factories / "own" / f), f
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
    assert strip(read_csv(factories / "zoo" / "metrics.csv")) == strip(read_csv(factories / "own" / "metrics.csv"))
    assert len(read_csv(factories / "own" / "intervals.csv")) > 0


@pytest.mark.parametrize(
    "ref, needle",
    [
        ("mymodels.py:", "expected package.module:Factory or path/to/file.py:Factory"),
        ("mymodels.py:Nope", "has no 'Nope' (it defines: Itemy, Net, Zoo"),
        ("missing.py:Net", "file missing.py not found"),
        ("no_such_module:Net", "importing module no_such_module failed (ModuleNotFoundError"),
        ("broken.py:Net", "importing broken.py failed (SyntaxError"),
        ("mymodels.py:NOT_CALLABLE", "is a int, not a callable factory"),
        ("mymodels.py:returns_int", "returned an object of type int; expected a torch.nn.Module"),
        ("mymodels.py:raises", "raised ValueError: no such architecture"),
        ("mymodels.py:wrong_logits", "to [2, 11]; expected logits [2, 10]"),
        ("mymodels.py:frozen", "no trainable parameters"),
        ("mymodels.py:Itemy", "does not run under torch.func.vmap"),
        ("resnet99", "unknown model 'resnet99'"),
    ],
)
def test_bad_own_models_exit_2(factories, capsys, ref, needle):
    code, _, err = cli(["train", "--model", ref, "--out", "bad"] + BASE, capsys)
    assert code == 2 and needle in err and len(error_lines(err)) == 1 and "Traceback" not in err, err


def test_factory_options_and_the_loop_trainer(factories, capsys):
    # a factory with **options gets --mlp-hidden; a non-vmap-able forward trains on the loop path
    assert cli(["train", "--model", "mymodels.py:takes_all", "--mlp-hidden", "7", "--out", "a"] + BASE, capsys)[0] == 0
    assert cli(["train", "--model", "mymodels.py:Itemy", "--trainer", "loop", "--out", "b"] + BASE, capsys)[0] == 0


def test_recipes_take_own_data_and_model(factories, capsys):
    small_npz(factories / "d.npz", n=80, classes=4)
    (factories / "r.toml").write_text(
        'dataset = "tensors"\ndata_dir = "d.npz"\nmodel = "mymodels.py:Net"\npartition = "natural"\n'
        "writers_per_client = 3\nclients = 4\niterations = 10\ntau = 5\nthreads = 1\n"
    )
    code, _, err = cli(["train", "--recipe", "r.toml", "--out", "rr", "--quiet"], capsys)
    assert code == 0, err
    m = json.loads((factories / "rr" / "manifest.json").read_text())
    assert m["dataset"]["dataset"] == "tensors" and m["dataset"]["writers"] == 12 and m["model"]["layers"] == 5
    assert os.path.exists(factories / "rr" / "model.pt")


def test_builtin_lists_in_the_help_are_complete():
    from fedcli.config import FIELDS
    from fedcli.data.datasets import DATASETS
    from fedcli.models import MODELS

    for name in MODELS:
        assert name in FIELDS["model"].metadata["help"], name
    for name in DATASETS:
        assert name in FIELDS["dataset"].metadata["help"], name
