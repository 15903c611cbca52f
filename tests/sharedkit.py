"""Where the real data slices beside the repository are (tests that need them skip without them): no import of torch
or fedcli, so tests/conftest.py (loaded by every pytest process, nested ones too) stays light."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FEDCLI_SHARED", ROOT.parent / "shared"))
MNIST_T10K = SHARED / "datasets" / "mnist-t10k"
FEMNIST_SAMPLE = SHARED / "datasets" / "femnist-leaf-sample"
