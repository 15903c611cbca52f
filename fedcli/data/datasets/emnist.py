"""EMNIST (Cohen et al. 2017): ``emnist-<split>-*`` IDX files in torchvision's ``EMNIST/raw`` layout; 28x28 grey
images (stored transposed), ``--emnist-split`` balanced (47 classes, 112,800 / 18,800 samples) by default."""

from __future__ import annotations

from pathlib import Path

from fedcli.data.datasets.base import DOWNLOAD_HOW, Dataset, FedDataset, idx_check
from fedcli.errors import ConfigError

EMNIST_MEAN, EMNIST_STD = 0.1751, 0.3332
EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}


def load_emnist(
    data_dir: Path | None, *, download: bool = False, holdout_fraction: float = 0.0, options: dict | None = None
) -> FedDataset:
    """EMNIST (Cohen et al. 2017), ``emnist-<split>-*`` IDX files in torchvision's ``EMNIST/raw`` layout.

    ``options["emnist_split"]``: balanced (default), byclass, bymerge, digits, letters, mnist.
    Images are stored transposed and are transposed back; ``letters`` labels 1..26 become 0..25.
    """
    from fedcli.data.datasets.shared import IdxLayout, load_idx_dataset

    split = (options or {}).get("emnist_split", "balanced")
    if split not in EMNIST_CLASSES:
        raise ConfigError(f"emnist_split must be one of {', '.join(EMNIST_CLASSES)}, got {split!r}")
    return load_idx_dataset(
        "emnist",
        data_dir,
        IdxLayout(
            raw_folder="EMNIST",
            tv_class="EMNIST",
            prefix=f"emnist-{split}-",
            mean=EMNIST_MEAN,
            std=EMNIST_STD,
            num_classes=EMNIST_CLASSES[split],
            transpose=True,
            label_offset=1 if split == "letters" else 0,
            tv_kwargs={"split": split},
            extra_source={"options": {"emnist_split": split}},
        ),
        download=download,
        holdout_fraction=holdout_fraction,
    )


def emnist_facts(cfg: dict) -> tuple:
    """The nominal facts under the run's ``--emnist-split`` (its classes; the balanced split's sizes)."""
    return (1, 28, 28), EMNIST_CLASSES.get(cfg.get("emnist_split", "balanced"), 47), 112800, 18800, None


DATASET = Dataset(
    "emnist",
    load_emnist,
    shape=(1, 28, 28),
    classes=47,
    train=112800,
    test=18800,
    facts=emnist_facts,
    check=idx_check("EMNIST", lambda cfg: f"emnist-{cfg.emnist_split}-"),
    how=DOWNLOAD_HOW.format("the IDX files"),
    downloadable=True,
)
