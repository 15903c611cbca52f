import gzip
import json
import pickle
import struct

import numpy as np
import pytest
import torch

from fedcli.data import datasets as ds
from fedcli.data.datasets import (
    DATASETS,
    FedDataset,
    load_dataset,
    register_dataset,
    shared,  # the loaders' helpers (torchvision's downloader)
)
from fedcli.errors import ConfigError, DataError

# ------------------------------------------------------------------------------- fixtures


def write_idx(path, arr, magic=None, gz=None):
    """Write ``arr`` (uint8) as an IDX file; gzip when the name ends in .gz."""
    arr = np.asarray(arr, dtype=np.uint8)
    magic = magic if magic is not None else 0x00000800 | arr.ndim
    data = struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in arr.shape) + arr.tobytes()
    if gz if gz is not None else str(path).endswith(".gz"):
        data = gzip.compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def images(n, seed=0):
    """Hand-made 28x28 images: pixel (0, 0) = 10 * i, pixel (0, 1) = 255, pixel (5, 2) = 7, rest 0."""
    x = np.zeros((n, 28, 28), dtype=np.uint8)
    x[:, 0, 0] = 10 * np.arange(n)
    x[:, 0, 1] = 255
    x[:, 5, 2] = 7
    return x


def mnist_dir(  # noqa: PLR0913
    root,
    n_train=6,
    n_test=4,
    prefix="",
    raw="MNIST/raw",
    labels_train=None,
    labels_test=None,
    train_gz=True,
    test_gz=False,
):
    raw_dir = root / raw if raw else root
    ytr = labels_train if labels_train is not None else np.arange(n_train) % 10
    yte = labels_test if labels_test is not None else (np.arange(n_test) + 3) % 10
    ext_tr, ext_te = (".gz" if train_gz else ""), (".gz" if test_gz else "")
    write_idx(raw_dir / f"{prefix}train-images-idx3-ubyte{ext_tr}", images(len(ytr)))
    write_idx(raw_dir / f"{prefix}train-labels-idx1-ubyte{ext_tr}", ytr)
    write_idx(raw_dir / f"{prefix}t10k-images-idx3-ubyte{ext_te}", images(len(yte)))
    write_idx(raw_dir / f"{prefix}t10k-labels-idx1-ubyte{ext_te}", yte)
    return root


def norm(v, mean, std):
    return (np.float32(v) / np.float32(255) - np.float32(mean)) / np.float32(std)


# ----------------------------------------------------------------------------------- IDX


def test_mnist_torchvision_layout_gz_and_plain(tmp_path):
    mnist_dir(tmp_path)
    d = load_dataset("mnist", tmp_path)
    assert isinstance(d, FedDataset)
    assert d.train_x.shape == (6, 1, 28, 28) and d.test_x.shape == (4, 1, 28, 28)
    assert d.train_x.dtype == torch.float32 and d.train_y.dtype == torch.int64
    assert d.input_shape == (1, 28, 28) and d.num_classes == 10 and d.augment is None
    assert d.train_y.tolist() == [0, 1, 2, 3, 4, 5] and d.test_y.tolist() == [3, 4, 5, 6]
    assert d.train_groups is None and d.group_names is None
    x = d.train_x.numpy()
    np.testing.assert_allclose(x[:, 0, 0, 0], [norm(10 * i, 0.1307, 0.3081) for i in range(6)], rtol=1e-6)
    np.testing.assert_allclose(x[:, 0, 0, 1], norm(255, 0.1307, 0.3081), rtol=1e-6)
    np.testing.assert_allclose(x[:, 0, 5, 2], norm(7, 0.1307, 0.3081), rtol=1e-6)
    np.testing.assert_allclose(x[:, 0, 20, 20], norm(0, 0.1307, 0.3081), rtol=1e-6)
    assert d.source["dataset"] == "mnist" and len(d.source["files"]) == 4
    assert any(f.endswith("train-images-idx3-ubyte.gz") for f in d.source["files"])
    assert any(f.endswith("t10k-images-idx3-ubyte") for f in d.source["files"])
    assert d.source["counts"] == {"train": 6, "test": 4}


def test_fmnist_files_directly_in_folder(tmp_path):
    mnist_dir(tmp_path, raw=None, train_gz=False, test_gz=True)
    d = load_dataset("fmnist", tmp_path)
    assert d.num_classes == 10 and len(d.train_y) == 6
    np.testing.assert_allclose(d.test_x[:, 0, 0, 1].numpy(), norm(255, 0.2860, 0.3530), rtol=1e-6)


def test_emnist_transposed_and_letters_shifted(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    img = np.zeros((3, 28, 28), dtype=np.uint8)
    img[:, 0, 5] = 200  # stored transposed: shows up at row 5, column 0
    write_idx(raw / "emnist-letters-train-images-idx3-ubyte.gz", img)
    write_idx(raw / "emnist-letters-train-labels-idx1-ubyte.gz", [1, 2, 26])
    write_idx(raw / "emnist-letters-t10k-images-idx3-ubyte.gz", img[:2])
    write_idx(raw / "emnist-letters-t10k-labels-idx1-ubyte.gz", [3, 4])
    d = load_dataset("emnist", tmp_path, options={"emnist_split": "letters"})
    assert d.num_classes == 26
    assert d.train_y.tolist() == [0, 1, 25] and d.test_y.tolist() == [2, 3]
    assert d.train_x.is_contiguous()
    np.testing.assert_allclose(d.train_x[:, 0, 5, 0].numpy(), norm(200, 0.1751, 0.3332), rtol=1e-6)
    np.testing.assert_allclose(d.train_x[:, 0, 0, 5].numpy(), norm(0, 0.1751, 0.3332), rtol=1e-6)
    assert d.source["options"] == {"emnist_split": "letters"}
    with pytest.raises(ConfigError, match="emnist_split"):
        load_dataset("emnist", tmp_path, options={"emnist_split": "nope"})


def test_emnist_default_split_is_balanced(tmp_path):
    mnist_dir(tmp_path, prefix="emnist-balanced-", raw="EMNIST/raw", labels_train=[0, 46, 5], labels_test=[1])
    d = load_dataset("emnist", tmp_path)
    assert d.num_classes == 47 and d.train_y.tolist() == [0, 46, 5]


def test_idx_truncated(tmp_path):
    mnist_dir(tmp_path)
    p = tmp_path / "MNIST/raw/t10k-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte: truncated.*expected an IDX image file"):
        load_dataset("mnist", tmp_path)


def test_idx_wrong_magic(tmp_path):
    mnist_dir(tmp_path)
    write_idx(tmp_path / "MNIST/raw/train-labels-idx1-ubyte.gz", np.arange(6), magic=0x00000803)
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: wrong magic number 0x00000803.*0x00000801"):
        load_dataset("mnist", tmp_path)


def test_idx_bad_gzip(tmp_path):
    mnist_dir(tmp_path)
    p = tmp_path / "MNIST/raw/train-images-idx3-ubyte.gz"
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # corrupt the deflate stream / CRC
    p.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: corrupt gzip"):
        load_dataset("mnist", tmp_path)
    p.write_bytes(bytes(raw[:40]))  # truncated gzip
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: corrupt gzip"):
        load_dataset("mnist", tmp_path)


def test_idx_count_mismatch_and_labels_out_of_range(tmp_path):
    mnist_dir(tmp_path)
    write_idx(tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte", [1, 2, 3])
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte: holds 4 images but t10k-labels-idx1-ubyte holds 3"):
        load_dataset("mnist", tmp_path)
    write_idx(tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte", [1, 2, 3, 12])
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: labels span 1..12"):
        load_dataset("mnist", tmp_path)


def test_missing_files(tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("network used without download=True")

    monkeypatch.setattr(shared, "torchvision_download", no_network)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\[\.gz\]: not found.*--download.*--data-dir"):
        load_dataset("mnist", tmp_path / "nowhere")
    # only the test split on disk: error without holdout, the pool with holdout
    raw = tmp_path / "MNIST" / "raw"
    write_idx(raw / "t10k-images-idx3-ubyte.gz", images(10))
    write_idx(raw / "t10k-labels-idx1-ubyte.gz", np.arange(10) % 2)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\[\.gz\]: not found \(only the test split"):
        load_dataset("mnist", tmp_path)
    d = load_dataset("mnist", tmp_path, holdout_fraction=0.2)
    assert (len(d.train_y), len(d.test_y)) == (8, 2)
    assert sorted(d.test_y.tolist()) == [0, 1]
    assert d.source["holdout"]["pool"] == "test"
    # half a split is an error even with a holdout
    write_idx(raw / "train-images-idx3-ubyte", images(3))
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte\[\.gz\]: not found"):
        load_dataset("mnist", tmp_path, holdout_fraction=0.2)


def test_train_only_needs_holdout(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_idx(raw / "train-images-idx3-ubyte", images(5))
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(5))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte\[\.gz\]: not found"):
        load_dataset("mnist", tmp_path)


def test_holdout_is_stratified_and_fixed(tmp_path):
    y = np.array([0] * 10 + [1] * 6 + [2] * 4)
    mnist_dir(tmp_path, labels_train=y)
    a = load_dataset("mnist", tmp_path, holdout_fraction=0.5)
    b = load_dataset("mnist", tmp_path, holdout_fraction=0.5)
    assert torch.equal(a.test_x, b.test_x) and torch.equal(a.train_y, b.train_y)
    assert np.bincount(a.test_y.numpy()).tolist() == [5, 3, 2]
    assert np.bincount(a.train_y.numpy()).tolist() == [5, 3, 2]
    # every training sample lands in exactly one side (pixel (0, 0) = 10 * index identifies it)
    ids = sorted(torch.cat([a.train_x[:, 0, 0, 0], a.test_x[:, 0, 0, 0]]).tolist())
    assert np.allclose(ids, sorted(norm(10 * i, 0.1307, 0.3081) for i in range(20)))
    assert a.source["holdout"] == {"fraction": 0.5, "pool": "train", "seed": 0, "stratified": True}


def test_download_goes_through_torchvision_then_own_reader(tmp_path, monkeypatch):
    import torchvision.datasets as tvd

    calls = []

    class FakeMNIST:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            mnist_dir(tmp_path)

    monkeypatch.setattr(tvd, "MNIST", FakeMNIST)
    d = load_dataset("mnist", tmp_path, download=True)
    assert calls == [(str(tmp_path), True, True), (str(tmp_path), False, True)]
    assert len(d.train_y) == 6 and d.source["download"] is True


# --------------------------------------------------------------------------------- CIFAR


def cifar_pickle(path, data, labels, key=b"labels", str_keys=False):
    obj = {b"batch_label": b"x", b"data": data, key: list(labels), b"filenames": [b"f"] * len(labels)}
    if str_keys:
        obj = {k.decode(): v for k, v in obj.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def cifar_data(n, start):
    data = np.zeros((n, 3072), dtype=np.uint8)
    data[:, 0] = start + np.arange(n)  # red channel, pixel (0, 0)
    data[:, 1024] = 100  # green channel, pixel (0, 0)
    data[:, 2048 + 33] = 255  # blue channel, pixel (1, 1)
    return data


def cifar10_dir(folder, str_keys=False):
    for i in range(1, 6):
        cifar_pickle(folder / f"data_batch_{i}", cifar_data(2, 10 * i), [i, (i + 1) % 10], str_keys=str_keys)
    cifar_pickle(folder / "test_batch", cifar_data(3, 200), [7, 8, 9], str_keys=str_keys)


def test_cifar10(tmp_path):
    cifar10_dir(tmp_path / "cifar-10-batches-py")
    d = load_dataset("cifar10", tmp_path)
    assert d.train_x.shape == (10, 3, 32, 32) and d.test_x.shape == (3, 3, 32, 32)
    assert d.augment == "cifar" and d.num_classes == 10
    assert d.train_y.tolist() == [1, 2, 2, 3, 3, 4, 4, 5, 5, 6] and d.test_y.tolist() == [7, 8, 9]
    mean, std = ds.CIFAR10_MEAN, ds.CIFAR10_STD
    np.testing.assert_allclose(
        d.train_x[:3, 0, 0, 0].numpy(), [norm(v, mean[0], std[0]) for v in (10, 11, 20)], rtol=1e-6
    )
    np.testing.assert_allclose(d.train_x[:, 1, 0, 0].numpy(), norm(100, mean[1], std[1]), rtol=1e-6)
    np.testing.assert_allclose(d.test_x[:, 2, 1, 1].numpy(), norm(255, mean[2], std[2]), rtol=1e-6)
    np.testing.assert_allclose(d.test_x[:, 2, 0, 0].numpy(), norm(0, mean[2], std[2]), rtol=1e-6)
    assert len(d.source["files"]) == 6


def test_cifar10_folder_itself_and_str_keys(tmp_path):
    cifar10_dir(tmp_path, str_keys=True)
    d = load_dataset("cifar10", tmp_path)
    assert len(d.train_y) == 10 and len(d.test_y) == 3


def test_cifar100_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    cifar_pickle(folder / "train", cifar_data(4, 0), [0, 99, 50, 1], key=b"fine_labels")
    cifar_pickle(folder / "test", cifar_data(2, 0), [98, 2], key=b"fine_labels")
    d = load_dataset("cifar100", tmp_path)
    assert d.num_classes == 100 and d.train_y.tolist() == [0, 99, 50, 1] and d.augment == "cifar"
    mean, std = ds.CIFAR100_MEAN, ds.CIFAR100_STD
    np.testing.assert_allclose(d.test_x[:, 1, 0, 0].numpy(), norm(100, mean[1], std[1]), rtol=1e-6)


def test_cifar_corrupt(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    cifar10_dir(folder)
    (folder / "data_batch_3").write_bytes(b"this is not a pickle")
    with pytest.raises(DataError, match=r"data_batch_3: not a readable pickle"):
        load_dataset("cifar10", tmp_path)
    cifar_pickle(folder / "data_batch_3", np.zeros((2, 100), dtype=np.uint8), [0, 1])
    with pytest.raises(DataError, match=r"data_batch_3: 'data' is uint8 \[2, 100\]"):
        load_dataset("cifar10", tmp_path)
    cifar_pickle(folder / "data_batch_3", cifar_data(2, 0), [0])
    with pytest.raises(DataError, match=r"data_batch_3: 'labels' is not a list of 2 integers"):
        load_dataset("cifar10", tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match=r"data_batch_3: not found next to the other training batches"):
        load_dataset("cifar10", tmp_path)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar_pickle_cannot_run_code(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    cifar10_dir(folder)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": _Evil()}, f)
    with pytest.raises(DataError, match=r"test_batch: not a readable pickle.*not allowed"):
        load_dataset("cifar10", tmp_path)


# ---------------------------------------------------------------------------------- LEAF


def leaf_doc(users, start=0):
    """LEAF JSON object: user u has 2 + i samples; pixel j of sample s = (start + s + j) % 7 / 7."""
    doc = {"users": [], "num_samples": [], "user_data": {}}
    s = start
    for i, u in enumerate(users):
        xs, ys = [], []
        for _ in range(2 + i):
            xs.append([((s + j) % 7) / 7 for j in range(784)])
            ys.append(s % 62)
            s += 1
        doc["users"].append(u)
        doc["num_samples"].append(len(ys))
        doc["user_data"][u] = {"x": xs, "y": ys}
    return doc


def write_json(path, doc, gz=None, **kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, **kw).encode()
    if gz if gz is not None else path.name.endswith(".gz"):
        text = gzip.compress(text)
    path.write_bytes(text)
    return path


def expected_leaf(docs):
    xs = [np.asarray(doc["user_data"][u]["x"], dtype=np.float32) for doc in docs for u in doc["users"]]
    ys = [y for doc in docs for u in doc["users"] for y in doc["user_data"][u]["y"]]
    return np.concatenate(xs).reshape(-1, 1, 28, 28), ys


@pytest.mark.parametrize("nesting", ["", "data", "femnist/data"])
def test_femnist_leaf_json_and_gz(tmp_path, nesting):
    base = tmp_path / nesting if nesting else tmp_path
    tr_b, tr_a = leaf_doc(["f0002_10", "f0001_03"], start=0), leaf_doc(["f0100_99"], start=50)
    te_a, te_b = leaf_doc(["f0002_10"], start=9), leaf_doc(["f0001_03", "f0100_99"], start=20)
    # file name order decides: "a_..." before "b_..."; mixed .json and .json.gz
    write_json(base / "train" / "b_train.json.gz", tr_b)
    write_json(base / "train" / "a_train.json", tr_a, indent=1)
    write_json(base / "test" / "a_test.json.gz", te_a)
    write_json(base / "test" / "b_test.json", te_b)
    (base / "train" / "README.txt").write_text("ignored")
    d = load_dataset("femnist", tmp_path)
    x_tr, y_tr = expected_leaf([tr_a, tr_b])
    x_te, y_te = expected_leaf([te_a, te_b])
    assert d.train_x.shape == (5 + 2, 1, 28, 28) and d.train_x.dtype == torch.float32
    assert np.array_equal(d.train_x.numpy(), x_tr) and np.array_equal(d.test_x.numpy(), x_te)
    assert d.train_y.tolist() == y_tr and d.test_y.tolist() == y_te
    assert d.num_classes == 62 and d.augment is None
    assert d.group_names == ["f0001_03", "f0002_10", "f0100_99"]
    # train: a_train (f0100_99: 2 samples), then b_train (f0002_10: 2, f0001_03: 3)
    assert d.train_groups.tolist() == [2, 2, 1, 1, 0, 0, 0]
    assert d.test_groups.tolist() == [1, 1, 0, 0, 2, 2, 2]
    assert d.source["writers"] == 3 and len(d.source["files"]) == 4


def test_a_parsed_file_is_kept_while_unchanged_and_old_enough(tmp_path, monkeypatch):
    """fedcli/data/_formats.py ``kept``: a LEAF or IDX file parsed again by the same process comes from memory (the
    same read-only arrays) while its size and time are unchanged; a rewrite, a file written in the last RACY_S seconds
    (racy: another write in the same clock tick could leave size and time alone) and one over KEEP_BYTES are parsed
    again; a changed file gives its new content."""
    import os
    import time

    from fedcli.data import _formats as fmt

    monkeypatch.setattr(fmt, "_KEPT", type(fmt._KEPT)())
    old = time.time() - 10
    leaf = write_json(tmp_path / "a.json", leaf_doc(["u1", "u2"]))
    idx = write_idx(tmp_path / "l.idx", np.arange(5))
    for f in (leaf, idx):
        os.utime(f, (old, old))
    first, again = fmt.read_leaf_json(leaf), fmt.read_leaf_json(leaf)
    assert again is not first and again[0][1] is first[0][1] and not first[0][1].flags.writeable
    assert fmt.read_idx(idx, fmt.IDX_LABELS_MAGIC) is fmt.read_idx(idx, fmt.IDX_LABELS_MAGIC)
    table = tmp_path / "t.csv"
    table.write_text("1,2.5\n3,4\n")
    os.utime(table, (old, old))
    assert fmt.read_number_table(table).tolist() == [[1.0, 2.5], [3.0, 4.0]]
    assert fmt.read_number_table(table) is fmt.read_number_table(table)
    write_json(leaf, leaf_doc(["u1", "u2"], start=3))  # new content, written just now: racy, not kept
    fresh = fmt.read_leaf_json(leaf)
    assert fresh[0][1] is not first[0][1] and not np.array_equal(fresh[0][1], first[0][1])
    assert fmt.read_leaf_json(leaf)[0][1] is not fresh[0][1]
    os.utime(leaf, (old + 1, old + 1))  # old enough now: kept from its next read on
    kept = fmt.read_leaf_json(leaf)
    assert np.array_equal(kept[0][1], fresh[0][1]) and fmt.read_leaf_json(leaf)[0][1] is kept[0][1]
    monkeypatch.setattr(fmt, "KEEP_BYTES", 100)  # over the budget: parsed every time
    fmt._KEPT.clear()
    assert fmt.read_leaf_json(leaf)[0][1] is not fmt.read_leaf_json(leaf)[0][1]


def test_leaf_number_forms(tmp_path):
    rng = np.random.default_rng(0)
    vals = np.concatenate(
        [
            rng.random(300),
            -rng.random(100) * 1e3,
            rng.random(100) * 1e-9,
            rng.normal(size=100) * 1e30,
            np.array([0.0, -0.0, 1.0, 255.0, 1 / 3, 2.5e-8, 0.1 + 0.2, 1e-45, 3.4028235e38, 123456789.123456789]),
        ]
    )
    vals = np.resize(vals, 2 * 784).reshape(2, 784)
    rows = vals.tolist()
    rows[0][5] = 3  # JSON integers are fine too
    doc = {"users": ["u"], "num_samples": [2], "user_data": {"u": {"x": rows, "y": [1, 2]}}}
    write_json(tmp_path / "train" / "t.json", doc, indent=2)
    write_json(tmp_path / "test" / "t.json", doc)
    d = load_dataset("femnist", tmp_path)
    want = np.asarray(rows, dtype=np.float32).reshape(2, 1, 28, 28)
    assert np.array_equal(d.train_x.numpy(), want) and np.array_equal(d.test_x.numpy(), want)


def corrupt_cases():
    ok = leaf_doc(["w1"])
    short = json.loads(json.dumps(ok))
    short["user_data"]["w1"]["x"][1] = short["user_data"]["w1"]["x"][1][:783]
    nested = json.loads(json.dumps(ok))
    nested["user_data"]["w1"]["x"][0][3] = [1.0]
    bad_label = json.loads(json.dumps(ok))
    bad_label["user_data"]["w1"]["y"][0] = 62
    count = json.loads(json.dumps(ok))
    count["num_samples"] = [5]
    no_users = {k: v for k, v in ok.items() if k != "users"}
    no_y = json.loads(json.dumps(ok))
    del no_y["user_data"]["w1"]["y"]
    text = json.dumps(ok)
    return {
        "truncated JSON": (text[: len(text) // 2], "malformed JSON|unterminated"),
        "not JSON": ("hello", "malformed JSON"),
        "missing users": (json.dumps(no_users), "missing key 'users'"),
        "missing y": (json.dumps(no_y), "no 'x'/'y' entry"),
        "short row": (json.dumps(short), "rows of 784 numbers"),
        "nested row": (json.dumps(nested), "rows of 784 numbers"),
        "junk number": (text.replace("0.14285714285714285", "0.14x", 1), "rows of 784 numbers|malformed JSON"),
        "two numbers": (text.replace("0.14285714285714285", "0.1 4", 1), "rows of 784 numbers"),
        "label range": (json.dumps(bad_label), "labels span 1..62, outside 0..61"),
        "num_samples": (json.dumps(count), "num_samples 5"),
    }


@pytest.mark.parametrize("case", sorted(corrupt_cases()))
def test_leaf_corrupt(tmp_path, case):
    text, match = corrupt_cases()[case]
    write_json(tmp_path / "train" / "ok.json", leaf_doc(["w0"]))
    bad = tmp_path / "train" / "zz_bad.json.gz"
    bad.write_bytes(gzip.compress(text.encode()))
    write_json(tmp_path / "test" / "ok.json", leaf_doc(["w0"]))
    with pytest.raises(DataError, match=f"zz_bad.json.gz: .*({match})") as e:
        load_dataset("femnist", tmp_path)
    assert "expected" in str(e.value)


def test_femnist_missing(tmp_path):
    with pytest.raises(DataError, match=r"train/\*\.json\[\.gz\]: not found.*LEAF"):
        load_dataset("femnist", tmp_path)
    write_json(tmp_path / "test" / "t.json", leaf_doc(["a", "b", "c"]))
    d = load_dataset("femnist", tmp_path, holdout_fraction=0.25)
    assert len(d.train_y) + len(d.test_y) == 2 + 3 + 4 and d.group_names == ["a", "b", "c"]
    assert len(d.train_groups) == len(d.train_y)


# ----------------------------------------------------------------------------- generated


def test_digits_default_holdout():
    d = load_dataset("digits")
    assert (len(d.train_y), len(d.test_y)) == (1437, 360)
    assert d.train_x.shape == (1437, 1, 8, 8) and d.train_x.dtype == torch.float32
    assert 0.0 <= float(d.train_x.min()) and float(d.train_x.max()) == 1.0
    assert d.num_classes == 10 and set(d.test_y.tolist()) == set(range(10))
    assert torch.equal(load_dataset("digits").test_x, d.test_x)
    assert len(load_dataset("digits", holdout_fraction=0.5).test_y) == 899


def test_synthetic_deterministic_and_valid():
    opts = {"synthetic_users": 12, "synthetic_dim": 20, "synthetic_classes": 5, "data_seed": 3, "emnist_split": "x"}
    a, b = load_dataset("synthetic", options=opts), load_dataset("synthetic", options=opts)
    assert torch.equal(a.train_x[:], b.train_x[:]) and torch.equal(a.test_y, b.test_y)
    c = load_dataset("synthetic", options={**opts, "data_seed": 4})
    assert not torch.equal(a.train_x[:10], c.train_x[:10])
    assert a.train_x.shape[1:] == (20,) and a.train_x[:].dtype == torch.float32 and a.input_shape == (20,)
    assert a.num_classes == 5 and a.group_names == [f"user_{k}" for k in range(12)]
    for y in (a.train_y, a.test_y):
        assert y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) < 5
    per_user = torch.bincount(a.train_groups, minlength=12) + torch.bincount(a.test_groups, minlength=12)
    assert int(per_user.min()) >= 50 and int(per_user.max()) <= 5000
    assert per_user.tolist() == a.source["samples_per_user"]
    n_train = torch.bincount(a.train_groups, minlength=12)
    assert n_train.tolist() == [int(0.8 * n) for n in per_user.tolist()]
    assert a.source["options"]["data_seed"] == 3 and "emnist_split" not in a.source["options"]
    iid = load_dataset("synthetic", options={**opts, "synthetic_iid": True})
    assert len(iid.group_names) == 12


def test_synthetic_bad_option():
    with pytest.raises(ConfigError, match="synthetic_users"):
        load_dataset("synthetic", options={"synthetic_users": 0})
    with pytest.raises(ConfigError, match="synthetic_alpha"):
        load_dataset("synthetic", options={"synthetic_alpha": "high"})


# -------------------------------------------------------------------------------- registry


def test_unknown_name_and_bad_holdout():
    with pytest.raises(ConfigError, match=r"unknown dataset 'x'; choose one of: agnews, cifar10, cifar100, digits"):
        load_dataset("x")
    with pytest.raises(ConfigError, match="holdout_fraction"):
        load_dataset("digits", holdout_fraction=1.0)
    assert {"mnist", "fmnist", "emnist", "cifar10", "cifar100", "femnist", "digits", "synthetic"} <= set(DATASETS)


def test_register_dataset(monkeypatch):
    monkeypatch.setitem(DATASETS, "tiny", None)

    @register_dataset("tiny")
    def tiny(data_dir, *, download, holdout_fraction, options):
        z = torch.zeros(2, 3)
        return FedDataset(
            "tiny",
            z,
            torch.zeros(2, dtype=torch.int64),
            z,
            torch.zeros(2, dtype=torch.int64),
            2,
            source={"options": options},
        )

    d = load_dataset("tiny", options={"a": 1})
    assert d.input_shape == (3,) and d.source == {"options": {"a": 1}}


# ---------------------------------------------------------------------------- real slices


def test_real_mnist_t10k_holdout(mnist_t10k):
    d = load_dataset("mnist", mnist_t10k, holdout_fraction=0.2)
    assert (len(d.train_y), len(d.test_y)) == (8000, 2000)
    assert d.num_classes == 10 and d.train_x.shape == (8000, 1, 28, 28)
    full = np.bincount(np.concatenate([d.train_y.numpy(), d.test_y.numpy()]), minlength=10)
    assert full.sum() == 10000
    assert np.all(np.abs(np.bincount(d.test_y.numpy(), minlength=10) - 0.2 * full) <= 1)
    assert abs(float(d.train_x.mean())) < 0.05 and abs(float(d.train_x.std()) - 1.0) < 0.05
    assert d.source["holdout"]["pool"] == "test"
    with pytest.raises(DataError, match="only the test split"):
        load_dataset("mnist", mnist_t10k)


def test_real_femnist_sample(femnist_sample):
    d = load_dataset("femnist", femnist_sample)
    assert (len(d.train_y), len(d.test_y)) == (14708, 1685)
    assert len(d.group_names) == 105 and d.num_classes == 62
    assert d.train_x.shape == (14708, 1, 28, 28) and d.train_x.dtype == torch.float32
    assert float(d.train_x.max()) == 1.0 and float(d.train_x.min()) >= 0.0
    assert set(d.train_groups.unique().tolist()) == set(d.test_groups.unique().tolist()) == set(range(105))
    assert all(name.startswith("f") for name in d.group_names)
    assert int(d.train_y.max()) < 62
    # exact values against the json module on one file
    first = sorted((femnist_sample / "train").iterdir())[0]
    doc = json.loads(gzip.decompress(first.read_bytes()))
    u = doc["users"][0]
    n0 = len(doc["user_data"][u]["y"])
    want = np.asarray(doc["user_data"][u]["x"], dtype=np.float32).reshape(-1, 1, 28, 28)
    assert np.array_equal(d.train_x[:n0].numpy(), want)
    assert d.train_y[:n0].tolist() == doc["user_data"][u]["y"]
    assert d.group_names[int(d.train_groups[0])] == u
