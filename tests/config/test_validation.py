"""Strict input: malformed flags, recipes and data files exit 2 (config) or 3 (data) with one line, no traceback."""

import errno
import gzip
import json
import os
import pickle
import struct

import numpy as np
import pytest

from fedcli.cli.main import main
from fedcli.data.partition import FORMAT_NAME, FORMAT_VERSION, partition_hash
from runkit import error_lines

# ------------------------------------------------------------------------------------------ flags (exit 2)
FLAGS = [
    (["--tau", "0"], "--tau"),
    (["--phi", "0"], "--phi"),
    (["--alpha", "0"], "--alpha"),
    (["--alpha", "-1"], "--alpha"),
    (["--lr", "0"], "--lr"),
    (["--lr", "-0.1"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--active-ratio", "0"], "--active-ratio"),
    (["--active-ratio", "1.01"], "--active-ratio"),
    (["--active-ratio", "0.01", "--clients", "10"], "--active-ratio"),
    (["--clients", "0"], "--clients"),
    (["--iterations", "0"], "--iterations"),
    (["--batch-size", "0"], "--batch-size"),
    (["--momentum", "1"], "--momentum"),
    (["--tau", "x"], "tau"),
    (["--tau", "2.5"], "tau"),
    (["--algo", "nope"], "--algo"),
    (["--schedule", "nope"], "--schedule"),
    (["--device", "tpu"], "--device"),
    (["--model", "nope"], "nope"),
    (["--dataset", "nope"], "nope"),
    (["--no-such-flag"], "no-such-flag"),
    (["--mlp-hidden", "a,b"], "--mlp-hidden"),
    (["--mlp-hidden", "0"], "--mlp-hidden"),
    (["--lr-decay-at", "x"], "--lr-decay-at"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints"),
    (["--checkpoint-every", "-1"], "--checkpoint-every"),
    (["--on-diverge", "maybe"], "--on-diverge"),
    (["--scale", "smoke"], "--scale"),
    (["--partition", "natural"], "natural"),
    (["--holdout-fraction", "1"], "--holdout-fraction"),
    (["--partition", "pathological", "--classes-per-client", "11"], "classes"),
    (["--clients", "5000"], "clients"),
    (["--model", "femnist_cnn"], "femnist_cnn"),
    (["--model", "wrn", "--wrn-depth", "11"], "wrn_depth"),
    (["--seed", "-1"], "--seed"),
    (["--eval-every", "-1"], "--eval-every"),
    (["--local-epochs", "-1"], "--local-epochs"),
]

# ------------------------------------------------------------------------------------------ recipes (exit 2, file and
# line)
# (TOML text, the key's line, a word the message must hold)
RECIPES = [
    ('dataset = "digits"\ntau = [1\n', None, "not valid TOML"),
    ('dataset = "digits"\nbogus_key = 1\n', 2, "bogus_key"),
    ('tau = "ten"\n', 1, "int"),
    ("tau = true\n", 1, "int"),
    ("# a comment\ntau = 2.5\n", 2, "int"),
    ('dataset = "digits"\n\ntau = 0\n', 3, "--tau"),
    ("phi = 0\n", 1, "--phi"),
    ("alpha = 0.0\n", 1, "--alpha"),
    ("alpha = -0.5\n", 1, "--alpha"),
    ("lr = -0.1\n", 1, "--lr"),
    ("lr = nan\n", 1, "--lr"),
    ("lr = inf\n", 1, "--lr"),
    ("active_ratio = 1.5\n", 1, "--active-ratio"),
    ("active_ratio = 0.0\n", 1, "--active-ratio"),
    ("clients = 10\nactive_ratio = 0.01\n", 2, "--active-ratio"),
    ("momentum = 1.0\n", 1, "--momentum"),
    ('dataset = "digits"\nalgo = "nope"\n', 2, "--algo"),
    ('schedule = "nope"\n', 1, "--schedule"),
    ('mlp_hidden = [32, "a"]\n', 1, "--mlp-hidden"),
    ('lr_decay_at = "x,y"\n', 1, "--lr-decay-at"),
    ("seed = 1979-05-27\n", 1, "int"),
    ('on_diverge = "ignore"\n', 1, "--on-diverge"),
    ("keep_checkpoints = 0\n", 1, "--keep-checkpoints"),
    ("tau = 2\n[foo]\nx = 1\n", 2, "unknown table [foo]"),
    ("base = 3\n", 1, "[base] must be a table"),
    ('dataset = "digits"\nalgo = "fedamp"\nactive_ratio = 0.5\n', 3, "--active-ratio 1"),  # a cross-silo method
    ('algo = "apple"\nactive_ratio = 0.75\n', 2, "every client in every round"),
]

LEAF_USER = {"x": [[0.5] * 784], "y": [3]}


def leaf_doc(**over):
    doc = {"users": ["w1"], "num_samples": [1], "user_data": {"w1": LEAF_USER}}
    doc.update(over)
    return doc


def idx(magic: int, shape: tuple, data: bytes | None = None) -> bytes:
    head = struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in shape)
    return head + (data if data is not None else bytes(int(np.prod(shape))))


def good_images(n=20, h=28):
    return idx(0x803, (n, h, h))


def good_labels(n=20, top=9):
    return idx(0x801, (n,), (np.arange(n) % (top + 1)).astype(np.uint8).tobytes())


class Cifar:
    """Not allowed in a CIFAR pickle (the restricted unpickler refuses any class)."""


def cifar_pickle(obj) -> bytes:
    return pickle.dumps(obj)


# ------------------------------------------------------------------------------------------ data files (exit 3)
# name -> (dataset, files {relative path: bytes}, extra flags, the file the message must name)
def data_cases():
    mnist = "--dataset mnist --holdout-fraction 0.2".split()
    femnist = "--dataset femnist --holdout-fraction 0.2 --model femnist_cnn --partition iid".split()
    cifar = "--dataset cifar10 --holdout-fraction 0.2 --model cnn4".split()
    lab, img = "t10k-labels-idx1-ubyte", "t10k-images-idx3-ubyte"
    gz = gzip.compress(good_images())
    leaf = "test/all.json"
    batch = "cifar-10-batches-py/test_batch"
    good_cifar = {"data": np.zeros((4, 3072), np.uint8), "labels": [0, 1, 2, 3]}
    return {
        "idx-bad-gzip": (mnist, {img + ".gz": b"\x1f\x8bnot really gzip", lab: good_labels()}, img + ".gz"),
        "idx-truncated-gzip": (mnist, {img + ".gz": gz[: len(gz) // 2], lab: good_labels()}, img + ".gz"),
        "idx-wrong-magic": (mnist, {img: idx(0x801, (20, 28, 28)), lab: good_labels()}, img),
        "idx-truncated": (mnist, {img: good_images()[:-100], lab: good_labels()}, img),
        "idx-trailing-bytes": (mnist, {img: good_images() + b"xx", lab: good_labels()}, img),
        "idx-short-header": (mnist, {img: b"\x00\x00\x08", lab: good_labels()}, img),
        "idx-empty-file": (mnist, {img: b"", lab: good_labels()}, img),
        "idx-labels-wrong-magic": (mnist, {img: good_images(), lab: idx(0x803, (20, 1, 1))}, lab),
        "idx-count-mismatch": (mnist, {img: good_images(), lab: good_labels(19)}, img),
        "idx-label-out-of-range": (mnist, {img: good_images(), lab: idx(0x801, (20,), bytes([12] * 20))}, lab),
        "idx-not-28x28": (mnist, {img: good_images(h=27), lab: good_labels()}, img),
        "idx-missing-partner": (mnist, {img: good_images()}, lab),
        "idx-missing-everything": (mnist, {"README": b"nothing here"}, "train-images-idx3-ubyte"),
        "leaf-malformed-json": (femnist, {leaf: b'{"users": ["w1"], "user_data": {'}, leaf),
        "leaf-top-level-list": (femnist, {leaf: b"[1, 2]"}, leaf),
        "leaf-missing-users": (femnist, {leaf: json.dumps({"user_data": {}}).encode()}, leaf),
        "leaf-users-not-strings": (femnist, {leaf: json.dumps(leaf_doc(users=[1])).encode()}, leaf),
        "leaf-short-row": (
            femnist,
            {leaf: json.dumps(leaf_doc(user_data={"w1": {"x": [[0.5] * 783], "y": [3]}})).encode()},
            leaf,
        ),
        "leaf-text-in-row": (
            femnist,
            {leaf: json.dumps(leaf_doc(user_data={"w1": {"x": [["a"] * 784], "y": [3]}})).encode()},
            leaf,
        ),
        "leaf-y-not-ints": (
            femnist,
            {leaf: json.dumps(leaf_doc(user_data={"w1": {"x": [[0.5] * 784], "y": ["3"]}})).encode()},
            leaf,
        ),
        "leaf-xy-mismatch": (
            femnist,
            {leaf: json.dumps(leaf_doc(user_data={"w1": {"x": [[0.5] * 784], "y": [3, 4]}})).encode()},
            leaf,
        ),
        "leaf-num-samples": (femnist, {leaf: json.dumps(leaf_doc(num_samples=[5])).encode()}, leaf),
        "leaf-user-without-data": (
            femnist,
            {leaf: json.dumps(leaf_doc(users=["w1", "w2"], num_samples=[1, 1])).encode()},
            leaf,
        ),
        "leaf-bad-gzip": (femnist, {leaf + ".gz": b"\x1f\x8b\x08garbage"}, leaf + ".gz"),
        "leaf-label-out-of-range": (
            femnist,
            {leaf: json.dumps(leaf_doc(user_data={"w1": {"x": [[0.5] * 784], "y": [99]}})).encode()},
            leaf,
        ),
        "leaf-missing-folder": (femnist, {"elsewhere/readme": b""}, "train"),
        "leaf-no-users": (
            femnist,
            {leaf: json.dumps({"users": [], "num_samples": [], "user_data": {}}).encode()},
            "data/test",
        ),
        "cifar-garbage": (cifar, {batch: b"garbage, not a pickle"}, batch),
        "cifar-truncated": (cifar, {batch: cifar_pickle(good_cifar)[:50]}, batch),
        "cifar-not-a-dict": (cifar, {batch: cifar_pickle([1, 2, 3])}, batch),
        "cifar-no-labels": (cifar, {batch: cifar_pickle({"data": np.zeros((4, 3072), np.uint8)})}, batch),
        "cifar-wrong-shape": (
            cifar,
            {batch: cifar_pickle({"data": np.zeros((4, 100), np.uint8), "labels": [0] * 4})},
            batch,
        ),
        "cifar-code-in-pickle": (cifar, {batch: cifar_pickle({"data": Cifar(), "labels": [0]})}, batch),
    }


DATA = data_cases()


def run_main(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.err


def assert_one_line(err: str, code: int, expected_code: int, *needles: str) -> str:
    lines = error_lines(err)
    assert code == expected_code, err
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("fedcli: error: ")
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_at_least_fifty_cases():
    assert len(FLAGS) + len(RECIPES) + len(DATA) + 8 >= 50  # + partition files + resume (below)
    assert len(PLACES) + len(LIMITS) + len(STORAGE) >= 15  # + places, limits and a full disk (issue 14)


@pytest.mark.parametrize("flags, needle", FLAGS, ids=[" ".join(f) for f, _ in FLAGS])
def test_bad_flags_exit_2(flags, needle, tmp_path, capsys):
    code, err = run_main(["train", *flags, "--out", str(tmp_path / "run")], capsys)
    assert_one_line(err, code, 2, needle)
    assert not (tmp_path / "run" / "metrics.csv").exists()


@pytest.mark.parametrize("text, line, needle", RECIPES, ids=[f"recipe{i}" for i in range(len(RECIPES))])
def test_bad_recipes_exit_2_with_file_and_line(text, line, needle, tmp_path, capsys):
    recipe = tmp_path / "r.toml"
    recipe.write_text(text)
    code, err = run_main(["train", "--recipe", str(recipe), "--out", str(tmp_path / "run")], capsys)
    where = f"{recipe}, line {line}" if line else str(recipe)
    assert_one_line(err, code, 2, where, needle)


def test_recipe_scale_errors(tmp_path, capsys):
    recipe = tmp_path / "r.toml"
    recipe.write_text("tau = 2\n[scale.smoke]\ntau = 0\n")
    code, err = run_main(["train", "--recipe", str(recipe), "--scale", "paper"], capsys)
    assert_one_line(err, code, 2, "[scale.paper]")
    code, err = run_main(["train", "--recipe", str(recipe), "--scale", "smoke"], capsys)
    assert_one_line(err, code, 2, "--tau")
    code, err = run_main(["train", "--recipe", str(tmp_path / "missing.toml")], capsys)
    assert_one_line(err, code, 2, "missing.toml")


@pytest.mark.parametrize("name", sorted(DATA))
def test_bad_data_files_exit_3(name, tmp_path, capsys):
    flags, files, named = DATA[name]
    for rel, data in files.items():
        (tmp_path / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / rel).write_bytes(data)
    code, err = run_main(
        ["train", *flags, "--data-dir", str(tmp_path / "data"), "--iterations", "4", "--out", str(tmp_path / "run")],
        capsys,
    )
    line = assert_one_line(err, code, 3, named)
    assert "expected" in line  # the format that was expected


def test_data_dir_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, err = run_main(["train", "--dataset", "mnist", "--data-dir", str(f), "--out", str(tmp_path / "run")], capsys)
    assert_one_line(err, code, 3, str(f))


def partition_file(
    path, *, dataset="digits", n_train=1437, classes=10, train=None, version=FORMAT_VERSION, tamper=False
):
    train = train if train is not None else [[0, 1, 2], [3, 4, 5]]
    config = {
        "scheme": "iid",
        "clients": len(train),
        "seed": 0,
        "dataset": dataset,
        "n_train": n_train,
        "num_classes": classes,
    }
    doc = {
        "format": FORMAT_NAME,
        "version": version,
        "hash": partition_hash(config, train, None),
        "config": config,
        "train": train,
        "test": None,
    }
    if tamper:
        doc["train"] = [[0, 1, 9], [3, 4, 5]]
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "kind, needle",
    [
        ("not-json", "not valid JSON"),
        ("no-format", "format"),
        ("version", "version"),
        ("hash", "hash"),
        ("dataset", "made for dataset synthetic"),
        ("range", "index outside"),
        ("twice", "assigned twice"),
        ("folder", "a folder, not a regular file"),
        ("empty-client", "client 1 has no training samples"),
    ],
)
def test_bad_partition_files_exit_3(kind, needle, tmp_path, capsys):
    p = tmp_path / "p.json"
    if kind == "not-json":
        p.write_text("{not json")
    elif kind == "no-format":
        p.write_text(json.dumps({"train": []}))
    elif kind == "version":
        partition_file(p, version=99)
    elif kind == "hash":
        partition_file(p, tamper=True)
    elif kind == "dataset":
        partition_file(p, dataset="synthetic", n_train=100)
    elif kind == "range":
        partition_file(p, train=[[0, 1, 5000], [3]])
    elif kind == "twice":
        partition_file(p, train=[[0, 1], [1, 2]])
    elif kind == "folder":
        p.mkdir()
    elif kind == "empty-client":  # a valid hash, but one client holds nothing (cohort sizes would divide by 0)
        partition_file(p, train=[[0, 1, 2], []])
    code, err = run_main(["train", "--partition-file", str(p), "--out", str(tmp_path / "run")], capsys)
    line = assert_one_line(err, code, 3, str(p), needle)
    assert "expected a fedcli partition file" in line


# ------------------------------------------------------------------------------------------ places, limits, a full disk
# (issue 14) outputs that cannot be written where asked, limits checked before anything is allocated, and a disk that
# fills up: one line, the right code, and what was written before stays intact.
TRAIN = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--iterations",
    "8",
    "--tau",
    "2",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]
SWEEP = (
    '[base]\ndataset = "digits"\nmodel = "mlp"\nmlp_hidden = "16"\nclients = 4\niterations = '
    '4\n\n[[runs]]\nname = "a"\n'
)


def _place(tmp_path, kind: str) -> tuple[list[str], str]:
    """(arguments, a phrase of the message) of one bad place; the folders and files they need are made here."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    recipe = tmp_path / "sweep.toml"
    recipe.write_text(SWEEP)
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.json").write_text(
        json.dumps({"fedcli_sweep": 1, "recipe": str(recipe), "seeds": [0], "runs": [], "tables": [], "figures": []})
    )
    return {
        "train-out-is-a-file": (TRAIN + ["--out", str(a_file)], f"--out {a_file} is a file; expected a folder"),
        "train-out-not-writable": (
            TRAIN + ["--out", "/sys/fedcli-test/run"],
            "cannot create the run directory /sys/fedcli-test/run",
        ),
        "train-out-under-a-file": (
            TRAIN + ["--out", str(a_file / "run")],
            f"cannot create the run directory {a_file / 'run'}",
        ),
        "sweep-out-is-a-file": (
            ["sweep", str(recipe), "--out", str(a_file)],
            f"--out {a_file} is a file; expected a folder",
        ),
        "sweep-out-not-writable": (
            ["sweep", str(recipe), "--out", "/sys/fedcli-test"],
            "cannot create the sweep folder /sys/fedcli-test",
        ),
        "report-output-is-a-folder": (
            ["report", str(tmp_path / "sw"), "--table", "t", "-o", str(tmp_path)],
            f"--output {tmp_path} is a folder; expected a file",
        ),
        "report-figures-is-a-file": (
            ["report", str(tmp_path / "sw"), "--figures", str(a_file)],
            f"--figures {a_file} is a file",
        ),
        "report-output-without-table": (
            ["report", str(tmp_path / "sw"), "-o", str(tmp_path / "t.md")],
            "give --table NAME",
        ),
    }[kind]


PLACES = [
    "train-out-is-a-file",
    "train-out-not-writable",
    "train-out-under-a-file",
    "sweep-out-is-a-file",
    "sweep-out-not-writable",
    "report-output-is-a-folder",
    "report-figures-is-a-file",
    "report-output-without-table",
]


@pytest.mark.parametrize("kind", PLACES)
def test_bad_output_places_exit_2(kind, tmp_path, capsys):
    args, needle = _place(tmp_path, kind)
    code, err = run_main(args, capsys)
    assert_one_line(err, code, 2, needle)
    assert (tmp_path / "a-file").read_text() == "x"  # nothing written over


LIMITS = {  # config that passes the key checks but cannot run: refused before anything is allocated or trained
    "non-utf8-recipe": (None, 2, "line 2: not UTF-8 text (byte 0xff)"),
    "clients-vs-partition-file": (
        ["--clients", "16"],
        2,
        "--clients 16 differs from the 2 clients of --partition-file",
    ),
}


@pytest.mark.parametrize("kind", sorted(LIMITS))
def test_limits_and_encodings_are_checked_up_front(kind, tmp_path, capsys):
    flags, expected, needle = LIMITS[kind]
    args = TRAIN + ["--out", str(tmp_path / "run")]
    if kind == "non-utf8-recipe":
        (tmp_path / "r.toml").write_bytes(b"tau = 2\nlr = 0.1 # \xff\xfe caf\xe9\n")
        flags = ["--recipe", str(tmp_path / "r.toml")]
    if kind == "clients-vs-partition-file":
        flags = flags + ["--partition-file", str(partition_file(tmp_path / "p.json"))]
    code, err = run_main(args + flags, capsys)
    assert_one_line(err, code, expected, needle)
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_a_batch_larger_than_every_client_is_clamped_and_said_once(tmp_path, capsys):
    """--batch-size 10^8 would pad every batch plan to 10^8 samples (gigabytes): it is clamped to the largest
    client's sample count, which is exactly what a batch of that size computes."""
    import resource

    from fedcli.cli.main import main as fedcli

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert fedcli(TRAIN + ["--batch-size", "100000000", "--out", str(tmp_path / "big")]) == 0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KiB: no 10 GB plan was built
    man = json.loads((tmp_path / "big" / "manifest.json").read_text())
    largest = man["batch_size_used"]
    assert man["config"]["batch_size"] == 100000000 and 0 < largest < 1437
    notes = [l for l in capsys.readouterr().err.splitlines() if "note:" in l]
    assert notes == [
        f"fedcli: note: --batch-size 100000000 is larger than every client's training data: using {largest}, "
        f"the largest client's sample count (each local step still sees all of a client's samples)"
    ]
    assert fedcli(TRAIN + ["--batch-size", str(largest), "--out", str(tmp_path / "same")]) == 0
    strip = lambda t: [",".join(l.split(",")[:7]) for l in t.splitlines()]  # noqa: E731 (all but wall_s, lr, ...)
    assert strip((tmp_path / "big" / "metrics.csv").read_text()) == strip(
        (tmp_path / "same" / "metrics.csv").read_text()
    )
    assert (tmp_path / "big" / "model.pt").read_bytes() == (tmp_path / "same" / "model.pt").read_bytes()


def test_non_utf8_sweep_recipe_exits_2_with_file_and_line(tmp_path, capsys):
    recipe = tmp_path / "s.toml"
    recipe.write_bytes(SWEEP.replace('name = "a"', 'name = "caf\xe9"').encode("latin-1"))
    code, err = run_main(["sweep", str(recipe), "--dry-run"], capsys)
    assert_one_line(err, code, 2, f"recipe {recipe}, line 9: not UTF-8 text (byte 0xe9)")


def test_offline_download_error_is_one_line(tmp_path, capsys, monkeypatch):
    import torchvision.datasets as tvd

    class Offline:
        def __init__(self, *a, **k):
            raise RuntimeError(
                "Error downloading train-images-idx3-ubyte.gz:\nTried https://a/, got:\n<urlopen error>\n"
                "Tried https://b/, got:\n<urlopen error>\n"
            )

    monkeypatch.setattr(tvd, "MNIST", Offline)
    code, err = run_main(
        [
            "train",
            "--dataset",
            "mnist",
            "--data-dir",
            str(tmp_path / "mnist"),
            "--download",
            "--out",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert_one_line(err, code, 3, "downloading mnist", "Tried https://a/, got: <urlopen error> Tried https://b/")


STORAGE = {  # the file whose write fails (its fsync), the error -> code and phrase
    "metrics-disk-full": ("metrics.csv", errno.ENOSPC, 3, "No space left on device"),
    "manifest-disk-full": ("manifest.json", errno.ENOSPC, 3, "No space left on device"),
    "layers-io-error": ("layers.csv", errno.EIO, 3, "Input/output error"),
    "model-quota": ("model.pt", errno.EDQUOT, 3, "Disk quota exceeded"),
    "checkpoint-disk-full": ("round-000001", errno.ENOSPC, 3, "No space left on device"),
    # a place that stops being writable once the run has started is an I/O failure (exit 3), not a usage error (issue
    # 29)
    "checkpoint-read-only": ("round-000001", errno.EROFS, 3, "Read-only file system"),
}


@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_storage_errors_end_with_one_line(kind, tmp_path, capsys, monkeypatch):
    name, err_no, expected, needle = STORAGE[kind]
    real = os.fsync

    def fsync(fd):
        if name in os.path.basename(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(err_no, os.strerror(err_no))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code, err = run_main(TRAIN + ["--checkpoint-every", "1", "--out", str(tmp_path / "run")], capsys)
    assert_one_line(err, code, expected, name, needle)
    metrics = tmp_path / "run" / "metrics.csv"
    assert not metrics.exists() or metrics.read_text()[-1:] in ("", "\n")  # whole rows only (or nothing)
