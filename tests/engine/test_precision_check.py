"""``make precision-check`` (scripts/precision_check.py): bf16 against fp32 on the FEMNIST CNN and ResNet20, the same
seed, the curves side by side with a tolerance and a verdict. The verdict's rule here; the whole check's short CPU
version in ``make test-long``."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import precision_check  # noqa: E402

from runkit import make  # noqa: E402


def curve(*points):
    return [{"round": r, "train_loss": loss, "test_acc": acc} for r, loss, acc in points]


def test_the_verdict_holds_each_evaluation_to_the_tolerance():
    """Within 5% of fp32's training loss and 0.02 of its accuracy at every evaluation agrees; one evaluation beyond
    either, or curves evaluated at other rounds, differ, and the line says which."""
    fp32 = curve((1, 4.0, 0.10), (2, 3.0, 0.30))
    assert precision_check.compare(fp32, curve((1, 4.19, 0.11), (2, 2.86, 0.285)), 0.05, 0.02)[1] == []
    _, bad = precision_check.compare(fp32, curve((1, 4.0, 0.10), (2, 3.2, 0.30)), 0.05, 0.02)
    assert bad == ["round 2: training loss 6.67% from fp32's (tolerance 5%)"]
    _, bad = precision_check.compare(fp32, curve((1, 4.0, 0.13), (2, 3.0, 0.30)), 0.05, 0.02)
    assert bad == ["round 1: test accuracy +0.0300 from fp32's (tolerance 0.02)"]
    _, bad = precision_check.compare(fp32, curve((1, 4.0, 0.10), (3, 3.0, 0.30)), 0.05, 0.02)
    assert bad[0].startswith("evaluated at other rounds")
    _, bad = precision_check.compare(fp32, curve((1, float("nan"), 0.10), (2, 3.0, 0.30)), 0.05, 0.02)
    assert bad and bad[0].startswith("round 1: training loss nan%")


def test_bad_workload_names_are_refused_in_one_line(capsys):
    assert precision_check.main(["--only", "mnist", "--device", "cpu"]) == 2
    assert "expected some of femnist, resnet20" in capsys.readouterr().err


@pytest.mark.long(
    reason="make precision-check's short CPU version, both workloads in both precisions (about 30 s of "
    "CPU): a tool beside the product, whose verdict's rule make test holds"
)
@pytest.mark.timeout(900)
def test_make_precision_check_on_the_cpu_agrees(femnist_sample, tmp_path):
    """The FEMNIST CNN on the LEAF sample (3 rounds) and ResNet20 on CIFAR-10-format data (2 rounds), fp32 and bf16,
    seed 0: every evaluation within the tolerance (measured: the training loss at most 0.67% apart, the accuracy at
    most 0.0089)."""
    out = tmp_path / "precision-check.md"
    done = make(
        "precision-check", "DEVICE=cpu", f"PRECISION_CHECK_ARGS=--femnist-dir {femnist_sample} --out {out}", timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    assert "Verdict: agree." in text and "## femnist: agree" in text and "## resnet20: agree" in text
    rounds = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rounds == ["1", "2", "3", "1", "2"]
