"""AG News (Zhang et al. 2015): ``train.csv`` / ``test.csv`` (class index 1..4, title, description); texts as int64
token ids over a vocabulary of the training split, 4 classes, 120,000 / 7,600 samples. fedcli cannot download it."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import Dataset, FedDataset, choose_pool, default_dir, first, need
from fedcli.errors import DataError

AGNEWS_CLASSES = 4
AGNEWS_VOCAB = 50_000  # most frequent training words kept, plus <pad> = 0 and <unk> = 1
AGNEWS_MAX_LEN = 200  # tokens per text (PFLlib / FedALA)
AGNEWS_URL = "https://github.com/mhjabreel/CharCnn_Keras/tree/master/data/ag_news_csv"
PAD_ID, UNK_ID = 0, 1
_TOKEN = None


def agnews_tokenize(text: str) -> list[str]:
    """Lowercase, then words: runs of letters/digits, with inner apostrophes kept (``don't``)."""
    import re

    global _TOKEN
    if _TOKEN is None:
        _TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
    return _TOKEN.findall(text.replace("\\", " ").lower())


def _read_agnews_csv(path: Path) -> tuple:
    """The token lists and labels (0..3) of one AG News CSV file."""
    import csv

    import numpy as np

    docs: list[list[str]] = []
    ys: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for n, row in enumerate(csv.reader(fh), 1):
                if not row:
                    continue
                try:
                    label = int(row[0].strip())
                except ValueError:
                    label = 0
                if len(row) < 2 or not 1 <= label <= AGNEWS_CLASSES:
                    raise DataError(
                        f"{path}:{n}: cannot read a row from {','.join(row)[:60]!r}; expected quoted CSV "
                        f"rows class index (1..{AGNEWS_CLASSES}), title, description without a header"
                    )
                docs.append(agnews_tokenize(" ".join(row[1:])))
                ys.append(label - 1)
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{path}: cannot parse ({type(e).__name__}: {e}); expected the AG News UTF-8 CSV") from None
    if not ys:
        raise DataError(f"{path}: no rows; expected the AG News CSV (class index, title, description)")
    return docs, np.asarray(ys, dtype=np.int64)


def _agnews_pool(root: Path, download: bool, holdout_fraction: float) -> tuple[Path, str]:
    """The folder that holds the CSV files (``root``, ``root/ag_news_csv`` or ``root/AG_NEWS``) and which splits are
    there (``choose_pool``); DataError for --download (fedcli cannot download AG News)."""
    dirs = [root, root / "ag_news_csv", root / "AG_NEWS"]
    base = next((d for d in dirs if (d / "train.csv").is_file() or (d / "test.csv").is_file()), root)
    hint = (
        f"train.csv and test.csv in {root}, {root / 'ag_news_csv'} or {root / 'AG_NEWS'}; fedcli cannot download "
        f"AG News: get ag_news_csv (e.g. {AGNEWS_URL}) and point --data-dir at it"
    )
    if download and not (base / "train.csv").is_file():
        raise DataError(
            f"{base / 'train.csv'}: --download is not supported for agnews; expected the files in place ({hint})"
        )
    train_missing = None if (base / "train.csv").is_file() else base / "train.csv"
    test_missing = None if (base / "test.csv").is_file() else base / "test.csv"
    return base, choose_pool("agnews", holdout_fraction, train_missing, test_missing, hint)


def _agnews_vocab(docs: list[list[str]], cap: int | None) -> dict[str, int]:
    """Word ids from 2 (0 <pad>, 1 <unk>) for the ``cap`` most frequent words of ``docs`` (None: all), ties by word."""
    from collections import Counter

    counts = Counter(t for d in docs for t in d)
    words = sorted(counts, key=lambda w: (-counts[w], w))[:cap]
    return {w: i + 2 for i, w in enumerate(words)}


def _agnews_encode(docs: list[list[str]], ids: dict[str, int], max_len: int):
    """Token ids int64 [N, max_len]: each text's first ``max_len`` words (unknown: <unk>), padded at the end."""
    import numpy as np

    x = np.full((len(docs), max_len), PAD_ID, dtype=np.int64)
    for i, d in enumerate(docs):
        row = [ids.get(t, UNK_ID) for t in d[:max_len]]
        x[i, : len(row)] = row
    return x


def load_agnews(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """AG News (Zhang et al. 2015): ``train.csv`` / ``test.csv`` in ``<dir>``, ``<dir>/ag_news_csv`` or
    ``<dir>/AG_NEWS`` (no header; class index 1..4, title, description; quoted).

    Text = title + " " + description, lowercased and split into words (:func:`agnews_tokenize`). The vocabulary
    is the ``agnews_vocab_size`` (loader default 50,000; ``fedcli train`` default 0 = all, FedALA's 98,635 words)
    most frequent words of the training split (the train side of a holdout
    split), ties by word; ids: <pad> = 0, <unk> = 1, words from 2. Each text is truncated or padded (at the end)
    to ``agnews_max_len`` (200) ids: x is int64 [N, L], 4 classes (labels 0..3).
    """
    import numpy as np

    from fedcli.data.datasets.shared import option
    from fedcli.data.sources import _assemble, _Holdout, _holdout_indices, _Inputs, _Split

    opts = options or {}
    cap = option(opts, "agnews_vocab_size", AGNEWS_VOCAB, int, lo=0) or None  # 0: every training word
    max_len = option(opts, "agnews_max_len", AGNEWS_MAX_LEN, int, lo=1)
    base, pool = _agnews_pool(default_dir("agnews", data_dir), download, holdout_fraction)
    parts = {s: _read_agnews_csv(base / f"{s}.csv") for s in ("train", "test") if pool in ("both", s)}
    if pool == "both":
        vocab_docs = parts["train"][0]
    else:  # the same split _assemble makes: the vocabulary sees the train side only
        docs, y = parts[pool]
        vocab_docs = [docs[i] for i in _holdout_indices(y, holdout_fraction)[0]]
    ids = _agnews_vocab(vocab_docs, cap)
    splits = {s: _Split(_agnews_encode(parts[s][0], ids, max_len), parts[s][1]) for s in parts}
    source = {
        "dataset": "agnews",
        "folder": str(base),
        "format": "AG News CSV (class index, title, description)",
        "files": [str(base / f"{s}.csv") for s in parts],
        "tokenizer": "lowercase, regex [a-z0-9]+('[a-z0-9]+)*",
        "vocab_size": len(ids) + 2,
        "vocab_cap": cap or 0,
        "vocab_from": "train",
        "max_len": max_len,
        "specials": {"<pad>": PAD_ID, "<unk>": UNK_ID},
    }
    return _assemble(
        "agnews",
        _Holdout(pool, holdout_fraction),
        splits.get("train"),
        splits.get("test"),
        AGNEWS_CLASSES,
        source,
        inputs=_Inputs(dtype=np.int64),
    )


def agnews_facts(cfg: dict) -> tuple:
    """The nominal facts: ``--agnews-max-len`` token ids a text over the run's vocabulary (``--agnews-vocab-size``;
    0: every training word, 98,635), plus <pad> and <unk>."""
    return (cfg.get("agnews_max_len", 200),), AGNEWS_CLASSES, 120000, 7600, (cfg.get("agnews_vocab_size") or 98_635) + 2


def check_agnews(root: Path, either: bool, cfg) -> str | None:
    """``train.csv`` and ``test.csv`` in ``root``, ``root/ag_news_csv`` or ``root/AG_NEWS``."""
    dirs = [root, root / "ag_news_csv", root / "AG_NEWS"]
    return need("AG News", either, first(dirs, ["train.csv"]), first(dirs, ["test.csv"]))


DATASET = Dataset(
    "agnews",
    load_agnews,
    classes=AGNEWS_CLASSES,
    train=120000,
    test=7600,
    facts=agnews_facts,
    check=check_agnews,
    how=f"fedcli cannot download it: get ag_news_csv (train.csv, test.csv; e.g. {AGNEWS_URL}) and put it there",
)
