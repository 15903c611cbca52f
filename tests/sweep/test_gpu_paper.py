"""``make gpu-paper`` (scripts/gpu_paper.py): recipe entries at ``--scale paper`` on CUDA in fp32 and bf16. Its harness
runs here on the CPU with a tiny budget (``DEVICE=cpu``: the quick cut), so that it cannot rot while no GPU is at hand;
the entries it names exist and cover the dataset x model families and the method families of the papers."""

import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_paper  # noqa: E402

from runkit import make  # noqa: E402


def test_make_gpu_paper_on_the_cpu_runs_fp32_and_bf16_and_writes_the_table(tmp_path):
    """fastText on AG News (in its real CSV format), the quick cut, 2 rounds: both precisions complete, and the table
    gives seconds a round over rounds 2-2, no GPU memory (n/a on the CPU) and the first evaluation."""
    out = tmp_path / "gpu-paper.md"
    done = make("gpu-paper", "DEVICE=cpu", f"GPU_PAPER_ARGS=--only=fastText --rounds 2 --work {tmp_path} --out {out}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith("| fastText AG News |")]
    assert [r.split(" | ")[1] for r in rows] == ["fp32", "bf16"], rows
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert cells[2] == "ok" and float(cells[3]) > 0 and cells[4] == "rounds 2-2" and cells[5] == "n/a", cells
        assert re.fullmatch(r"acc 0\.\d{4}, loss \d\.\d{4}", cells[6]), cells
    assert "gpu-paper: 2 of 2 runs ok" in done.stdout


def test_the_entries_cover_every_family_the_issue_names():
    """ResNet20, WRN-28-10 and ResNet18 on CIFAR; ResNet18 and the CNN on Tiny-ImageNet; the FEMNIST CNN; fastText on
    AG News; FedLAMA, Fed-LAMB, FedALA and a personalized method: each entry resolves to its recipe's run (ResNet18
    and its CIFAR variant are one family)."""
    got = set()
    for _, recipe, name in gpu_paper.ENTRIES:
        v = gpu_paper.entry(recipe, name).values
        got |= {(v.get("dataset"), gpu_paper.paperkit.family(str(v.get("model")))), v.get("algo")}
    assert {
        ("cifar10", "resnet20"),
        ("cifar100", "wrn"),
        ("cifar10", "resnet18"),
        ("tinyimagenet", "resnet18"),
        ("tinyimagenet", "cnn4"),
        ("femnist", "femnist_cnn"),
        ("agnews", "fasttext"),
    } <= got
    assert {"fedlama", "fedlamb", "fedala", "ditto"} <= got


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no GPU is")
def test_without_a_gpu_it_says_so_in_one_line():
    assert gpu_paper.main(["--only", "fastText"]) == 2
    assert gpu_paper.main(["--device", "cpu", "--only", "nothing-like-this"]) == 2
