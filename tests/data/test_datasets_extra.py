"""Tiny-ImageNet-200 and AG News loaders, and the fastText model (fixtures in the exact on-disk formats)."""

import csv

import numpy as np
import pytest
import torch

from fedcli.data import datasets as ds
from fedcli.data.datasets import (
    load_dataset,
    shared,  # the loaders' helpers (torchvision's downloader)
)
from fedcli.errors import ConfigError, DataError
from fedcli.models import build_model
from runkit import FEDCLI, run_forked

# ----------------------------------------------------------------------------------- Tiny-ImageNet

WNIDS = [f"n{1000 + 7 * i:08d}" for i in range(200)]  # sorted already: label i <-> WNIDS[i]


def colour(i: int) -> tuple[int, int, int]:
    return (i % 256, (3 * i + 40) % 256, 255 - i % 256)


def write_jpeg(path, rgb, size=64, mode="RGB"):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (size, size), rgb)
    (im.convert("L") if mode == "L" else im).save(path, "JPEG", quality=95)


def tiny_dir(root, per_class=2, val_classes=(0, 1, 5, 199, 5, 7), grayscale_val=False):
    """A Tiny-ImageNet-200 tree: ``per_class`` train images of class i coloured ``colour(i)``, a few val images."""
    base = root
    base.mkdir(parents=True, exist_ok=True)
    (base / "wnids.txt").write_text("\n".join(reversed(WNIDS)) + "\n")  # file order is not the label order
    (base / "words.txt").write_text("".join(f"{w}\tthing {w}\n" for w in WNIDS))
    for i, w in enumerate(WNIDS):
        for k in range(per_class):
            write_jpeg(base / "train" / w / "images" / f"{w}_{k}.JPEG", colour(i))
        (base / "train" / w / f"{w}_boxes.txt").write_text(
            "".join(f"{w}_{k}.JPEG\t0\t0\t63\t63\n" for k in range(per_class))
        )
    lines = []
    for j, c in enumerate(val_classes):
        name = f"val_{j}.JPEG"
        write_jpeg(base / "val" / "images" / name, colour(c), mode="L" if grayscale_val and j == 0 else "RGB")
        lines.append(f"{name}\t{WNIDS[c]}\t1\t2\t60\t61")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    (base / "test" / "images").mkdir(parents=True)
    write_jpeg(base / "test" / "images" / "test_0.JPEG", (1, 2, 3))
    return base


def expected_pixel(rgb):
    mean, std = np.array(ds.TINYIMAGENET_MEAN), np.array(ds.TINYIMAGENET_STD)
    return (np.array(rgb) / 255.0 - mean) / std


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    tiny_dir(root / "tiny-imagenet-200", grayscale_val=True)
    return root


def test_tinyimagenet_layout_labels_normalization_cache(tiny):
    d = load_dataset("tinyimagenet", tiny)
    assert d.train_x.shape == (400, 3, 64, 64) and d.train_x.dtype == torch.float32
    assert d.test_x.shape == (6, 3, 64, 64) and d.num_classes == 200 and d.input_shape == (3, 64, 64)
    assert d.train_y.dtype == torch.int64 and np.bincount(d.train_y.numpy()).tolist() == [2] * 200
    assert d.test_y.tolist() == [0, 1, 5, 199, 5, 7]  # val_annotations order, labels = sorted wnid index
    # every image is a solid colour: JPEG keeps it within a few levels
    for x, y in ((d.train_x, d.train_y), (d.test_x[1:], d.test_y[1:])):
        got = x.mean((2, 3)).numpy()
        want = np.stack([expected_pixel(colour(int(c))) for c in y])
        assert np.abs(got - want).max() < 0.1
    # a grayscale JPEG comes back as 3 equal channels (convert("RGB"))
    g = d.test_x[0] * torch.tensor(ds.TINYIMAGENET_STD).view(3, 1, 1) + torch.tensor(ds.TINYIMAGENET_MEAN).view(3, 1, 1)
    assert torch.allclose(g[0], g[1], atol=1e-5) and torch.allclose(g[1], g[2], atol=1e-5)
    assert d.source["normalization"] == {"mean": list(ds.TINYIMAGENET_MEAN), "std": list(ds.TINYIMAGENET_STD)}
    assert d.source["folder"] == str(tiny / "tiny-imagenet-200") and d.augment is None
    assert d.source["counts"] == {"train": 400, "test": 6}
    # the decoded pixels are cached next to the data; a second load reads the cache and gives the same tensors
    assert (tiny / "tiny-imagenet-200" / "fedcli-cache-train.npz").is_file()
    assert d.source["cache_hit"] == {"train": False, "val": False} or d.source["cache_hit"] == {
        "train": True,
        "val": True,
    }
    again = load_dataset("tinyimagenet", tiny)
    assert again.source["cache_hit"] == {"train": True, "val": True}
    assert torch.equal(again.train_x, d.train_x) and torch.equal(again.test_y, d.test_y)


def test_tinyimagenet_stale_cache_is_rebuilt(tmp_path):
    base = tiny_dir(tmp_path, per_class=1, val_classes=(3,))
    a = load_dataset("tinyimagenet", tmp_path)
    write_jpeg(base / "val" / "images" / "val_0.JPEG", colour(9))  # same name, new content
    with open(base / "val" / "images" / "val_0.JPEG", "ab") as fh:
        fh.write(b"\0" * 7)  # (and a different size, which is what the cache key sees)
    (base / "val" / "val_annotations.txt").write_text(f"val_0.JPEG\t{WNIDS[9]}\t0\t0\t1\t1\n")
    b = load_dataset("tinyimagenet", tmp_path)
    assert b.source["cache_hit"]["val"] is False and b.test_y.tolist() == [9]
    assert not torch.equal(a.test_x, b.test_x)
    # an unreadable cache file is rebuilt, not an error
    (base / "fedcli-cache-train.npz").write_bytes(b"garbage")
    c = load_dataset("tinyimagenet", tmp_path)
    assert c.source["cache_hit"]["train"] is False and torch.equal(c.train_x, a.train_x)


def test_tinyimagenet_holdout(tmp_path):
    base = tiny_dir(tmp_path, per_class=2, val_classes=(0,))
    (base / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DataError, match=r"val_annotations\.txt: not found; expected the tinyimagenet test split"):
        load_dataset("tinyimagenet", tmp_path)
    d = load_dataset("tinyimagenet", tmp_path, holdout_fraction=0.5)
    assert (len(d.train_y), len(d.test_y)) == (200, 200)
    assert np.bincount(d.test_y.numpy()).tolist() == [1] * 200
    assert d.source["holdout"] == {"fraction": 0.5, "pool": "train", "seed": 0, "stratified": True}


def test_tinyimagenet_missing_and_corrupt(tmp_path, monkeypatch):
    monkeypatch.setattr(shared, "torchvision_download", lambda *a, **k: pytest.fail("network used"))
    for download in (False, True):
        with pytest.raises(DataError, match=r"wnids\.txt: .*cs231n\.stanford\.edu/tiny-imagenet-200\.zip") as e:
            load_dataset("tinyimagenet", tmp_path / "nowhere", download=download)
        assert e.value.exit_code == 3 and "\n" not in str(e.value)
    base = tiny_dir(tmp_path / "t", per_class=1, val_classes=(0, 1))
    (base / "wnids.txt").write_text("\n".join(WNIDS[:10]))
    with pytest.raises(DataError, match=r"wnids\.txt: lists 10 class ids; expected 200"):
        load_dataset("tinyimagenet", base)
    (base / "wnids.txt").write_text("\n".join(WNIDS))
    (base / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99999999\t0\t0\t1\t1\n")
    with pytest.raises(DataError, match=r"val_annotations\.txt:1: cannot read"):
        load_dataset("tinyimagenet", base)
    (base / "val" / "val_annotations.txt").write_text(f"val_0.JPEG\t{WNIDS[0]}\t0\t0\t1\t1\nval_9.JPEG\t{WNIDS[1]}\n")
    with pytest.raises(DataError, match=r"val_9\.JPEG: not found; expected the image listed on line 2"):
        load_dataset("tinyimagenet", base)
    (base / "val" / "val_annotations.txt").write_text(f"val_0.JPEG\t{WNIDS[0]}\t0\t0\t1\t1\n")
    write_jpeg(base / "train" / WNIDS[3] / "images" / f"{WNIDS[3]}_0.JPEG", (0, 0, 0), size=32)
    with pytest.raises(DataError, match=r"image is 32x32; expected 64x64"):
        load_dataset("tinyimagenet", base)
    (base / "train" / WNIDS[3] / "images" / f"{WNIDS[3]}_0.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=r"cannot decode image"):
        load_dataset("tinyimagenet", base)
    (base / "train" / WNIDS[3] / "images" / f"{WNIDS[3]}_0.JPEG").unlink()
    with pytest.raises(DataError, match=rf"{WNIDS[3]}/images: no images found"):
        load_dataset("tinyimagenet", base)


def test_cnn4_and_resnet18_take_tinyimagenet():
    x = torch.randn(2, 3, 64, 64)
    cnn = build_model("cnn4", (3, 64, 64), 200)
    assert cnn.fc1.in_features == 10816  # PFLlib's FedAvgCNN(dim=10816) for Tiny-ImageNet
    assert cnn(x).shape == (2, 200)
    assert build_model("resnet18", (3, 64, 64), 200)(x).shape == (2, 200)


# ---------------------------------------------------------------------------------------- AG News

TRAIN_ROWS = [
    (
        "3",
        "Wall St. Bears Claw Back",
        "Reuters - Short-sellers, Wall Street's dwindling\\band of ultra-cynics, are seeing green.",
    ),
    ("3", "Oil and Economy", 'Oil prices soar, "economy" worries; oil oil'),
    ("1", "Talks resume", "Diplomats meet in Geneva, talks continue"),
    ("2", "Team wins title", "The team won the league title on Sunday"),
    ("4", "New chip", "Intel's new chip is faster"),
    ("4", "Space probe", "NASA launches a probe to Mars"),
    ("1", "Election day", "Voters head to the polls"),
    ("2", "Star signs", "Star striker signs with the team"),
]
TEST_ROWS = [
    ("2", "Zebra unseen", "quokka xylophone team"),
    ("4", "Chip", "oil"),
]


def write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)


def agnews_dir(root, train=TRAIN_ROWS, test=TEST_ROWS):
    if train is not None:
        write_csv(root / "train.csv", train)
    if test is not None:
        write_csv(root / "test.csv", test)
    return root


def test_tokenizer():
    assert ds.agnews_tokenize("Wall St. Bears' CLAW-back\\band don't $3.5") == [
        "wall",
        "st",
        "bears",
        "claw",
        "back",
        "band",
        "don't",
        "3",
        "5",
    ]


def test_agnews_vocab_from_train_only(tmp_path):
    d = load_dataset("agnews", agnews_dir(tmp_path / "ag_news_csv"))
    assert d.source["folder"] == str(tmp_path / "ag_news_csv")
    assert d.train_x.dtype == torch.int64 and d.train_x.shape == (8, 200) and d.test_x.shape == (2, 200)
    assert d.input_shape == (200,) and d.num_classes == 4
    assert d.train_y.tolist() == [2, 2, 0, 1, 3, 3, 0, 1] and d.test_y.tolist() == [1, 3]
    tokens = [t for r in TRAIN_ROWS for t in ds.agnews_tokenize(r[1] + " " + r[2])]
    vocab = sorted(set(tokens), key=lambda w: (-tokens.count(w), w))
    assert d.source["vocab_size"] == len(vocab) + 2 and d.source["vocab_from"] == "train"
    ids = {w: i + 2 for i, w in enumerate(vocab)}
    assert vocab[0] == "oil"  # the most frequent word gets id 2
    first = ds.agnews_tokenize(TRAIN_ROWS[0][1] + " " + TRAIN_ROWS[0][2])
    assert d.train_x[0, : len(first)].tolist() == [ids[t] for t in first]
    assert (d.train_x[0, len(first) :] == 0).all()  # <pad> = 0 at the end
    # test words not in the training texts are <unk> = 1, known ones keep their training id
    assert d.test_x[0, :5].tolist() == [1, 1, 1, 1, ids["team"]] and d.test_x[0, 5:].eq(0).all()
    assert d.test_x[1, :3].tolist() == [ids["chip"], ids["oil"], 0]
    assert d.source["max_len"] == 200 and d.source["specials"] == {"<pad>": 0, "<unk>": 1}


def test_agnews_cap_truncation_and_holdout(tmp_path):
    agnews_dir(tmp_path)
    d = load_dataset("agnews", tmp_path, options={"agnews_vocab_size": 1, "agnews_max_len": 4})
    assert d.source["vocab_size"] == 3 and d.train_x.shape == (8, 4)
    assert set(d.train_x.unique().tolist()) <= {0, 1, 2}
    assert d.train_x[1].tolist() == [2, 1, 1, 2]  # "oil and economy oil": only "oil" is in the vocabulary
    with pytest.raises(ConfigError, match="agnews_max_len"):
        load_dataset("agnews", tmp_path, options={"agnews_max_len": 0})
    # only test.csv: with a holdout the vocabulary comes from the train side of the split only
    (tmp_path / "train.csv").unlink()
    with pytest.raises(DataError, match=r"train\.csv: not found \(only the test split"):
        load_dataset("agnews", tmp_path)
    rows = [("1", "alpha", "common"), ("1", "beta", "common"), ("2", "gamma", "common"), ("2", "delta", "common")]
    write_csv(tmp_path / "test.csv", rows)
    h = load_dataset("agnews", tmp_path, holdout_fraction=0.5)
    assert h.source["holdout"]["pool"] == "test" and len(h.train_y) == len(h.test_y) == 2
    assert h.source["vocab_size"] == 2 + 3  # "common" + the two training titles
    assert (h.test_x[:, 0] == 1).all() and (h.test_x[:, 1] == 2).all()  # held-out titles are <unk>


def test_agnews_missing_and_corrupt(tmp_path):
    with pytest.raises(DataError, match=r"train\.csv: not found; expected the agnews training split") as e:
        load_dataset("agnews", tmp_path / "nowhere")
    assert e.value.exit_code == 3
    with pytest.raises(DataError, match=r"--download is not supported for agnews"):
        load_dataset("agnews", tmp_path / "nowhere", download=True)
    agnews_dir(tmp_path, test=None)
    with pytest.raises(DataError, match=r"test\.csv: not found; expected the agnews test split"):
        load_dataset("agnews", tmp_path)
    write_csv(tmp_path / "test.csv", [("5", "a", "b")])
    with pytest.raises(DataError, match=r"test\.csv:1: cannot read a row"):
        load_dataset("agnews", tmp_path)
    write_csv(tmp_path / "test.csv", [("Class Index", "Title", "Description")])  # a header is not the format
    with pytest.raises(DataError, match=r"test\.csv:1: cannot read a row"):
        load_dataset("agnews", tmp_path)
    (tmp_path / "test.csv").write_bytes(b'"1","caf\xe9","x"\n')
    with pytest.raises(DataError, match=r"test\.csv: cannot parse"):
        load_dataset("agnews", tmp_path)


def test_agnews_missing_is_exit_3_on_the_command_line(tmp_path):
    """`fedcli train` in a process of its own (forked: torch already imported, runkit.run_forked)."""
    r = run_forked(
        FEDCLI,
        [
            "train",
            "--dataset",
            "agnews",
            "--data-dir",
            str(tmp_path / "nowhere"),
            "--model",
            "fasttext",
            "--out",
            str(tmp_path / "run"),
        ],
        timeout=120,
    )
    assert r.returncode == 3, r.stderr
    assert "train.csv: not found" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------------- fastText


def test_fasttext_matches_reference_and_masks_padding():
    torch.manual_seed(0)
    m = build_model("fasttext", (6,), 4, vocab_size=20)
    assert [n for n, _ in m.named_parameters()] == [
        "embedding.weight",
        "fc1.weight",
        "fc1.bias",
        "fc.weight",
        "fc.bias",
    ]
    assert m.embedding.weight.shape == (20, 32) and m.embedding.padding_idx == 0
    x = torch.tensor([[3, 4, 5, 0, 0, 0], [7, 1, 0, 0, 0, 0]])
    ref = m.fc(m.fc1(m.embedding(x).mean(1)))  # PFLlib fastText (row 0 is zero at init), without log_softmax
    assert torch.allclose(m(x), ref, atol=1e-6)
    with torch.no_grad():
        m.embedding.weight[0] = 5.0  # a non-zero <pad> row changes nothing: pads are masked
    assert torch.allclose(m(x), ref, atol=1e-6)
    assert sum(p.numel() for p in build_model("fasttext", (200,), 4).parameters()) == 50_002 * 32 + 32 * 33 + 33 * 4
    with pytest.raises(ConfigError, match="token-id inputs"):
        build_model("fasttext", (1, 8, 8), 4)


def test_fasttext_under_vmap_grad():
    from torch.func import functional_call, grad, vmap

    m = build_model("fasttext", (5,), 3, vocab_size=10)
    params = {n: p.detach().unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in m.named_parameters()}
    x = torch.randint(0, 10, (2, 4, 5))
    y = torch.randint(0, 3, (2, 4))

    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(m, p, (xb,)), yb)

    g = vmap(grad(loss))(params, x, y)
    for k in range(2):
        gk = grad(loss)({n: v[k] for n, v in params.items()}, x[k], y[k])
        for n in gk:
            assert torch.allclose(g[n][k], gk[n], atol=1e-6), n
    assert g["embedding.weight"][:, 0].abs().max() == 0  # <pad> gets no gradient


# ------------------------------------------------------------------------------ 1-round simulations


def one_round(**kw):
    from fedcli.config import TrainConfig
    from fedcli.fl.engine import Simulation

    base = dict(
        algo="fedavg",
        clients=4,
        rounds=1,
        active_ratio=1.0,
        partition="iid",
        local_epochs=1.0,
        batch_size=8,
        lr=0.1,
        eval_every=1,
        device="cpu",
        threads=1,
        seed=0,
    )
    sim = Simulation(TrainConfig(**{**base, **kw}).validate()).setup()
    return sim, sim.run()


@pytest.mark.parametrize("trainer", ["vmap", "loop"])
def test_simulation_agnews_fasttext(tmp_path, trainer):
    agnews_dir(tmp_path)
    sim, summary = one_round(dataset="agnews", data_dir=str(tmp_path), model="fasttext", trainer=trainer)
    assert sim.train_x.dtype == torch.int64 and sim.trainer.name.startswith(trainer)
    assert len(summary.history) == 1 and np.isfinite(summary.history[-1]["test_loss"])
    # fedcli train's default keeps every training word (FedALA), and the model is built for that vocabulary
    assert sim.dataset.source["vocab_cap"] == 0
    assert sim.model.embedding.num_embeddings == sim.dataset.source["vocab_size"] > int(sim.train_x.max())


def test_agnews_vocab_size_option_reaches_the_model(tmp_path):
    agnews_dir(tmp_path)
    sim, _ = one_round(
        dataset="agnews", data_dir=str(tmp_path), model="fasttext", agnews_vocab_size=3, agnews_max_len=5
    )
    assert sim.dataset.source["vocab_size"] == 5 and sim.model.embedding.num_embeddings == 5  # 3 words + <pad>, <unk>
    assert tuple(sim.train_x.shape[1:]) == (5,) and int(sim.train_x.max()) <= 4


def test_simulation_tinyimagenet_cnn4(tiny):
    sim, summary = one_round(
        dataset="tinyimagenet",
        data_dir=str(tiny),
        model="cnn4",
        batch_size=50,
        rounds=1,
        local_epochs=0.0,
        iterations=2,
    )
    assert sim.train_x.shape[1:] == (3, 64, 64) and len(summary.history) >= 1
    assert np.isfinite(summary.history[-1]["test_loss"])
    assert sim.pad_fill == pytest.approx([-m / s for m, s in zip(ds.TINYIMAGENET_MEAN, ds.TINYIMAGENET_STD)])
