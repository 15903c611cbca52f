"""``make precision-check``: does ``--precision bf16`` learn as fp32 does? Two workloads, each trained for a fixed
budget in fp32 and in bf16 with the same seed (the same clients, batches and initial model), their curves side by
side with a stated tolerance and a verdict.

- the FEMNIST CNN on the LEAF sample (``--femnist-dir``, default ../shared/datasets/femnist-leaf-sample): natural
  partition by writer, FedAvg with momentum 0.9;
- ResNet20 on CIFAR-10-format data (``--cifar-dir``: a folder holding ``cifar-10-batches-py``; by default CIFAR-10's
  python pickles written by tests/paperdata.py, random pixels and labels, on which only the training loss means
  something: the net memorizes).

The tolerance: at every evaluation the bf16 run's training loss within ``--loss-tol`` (relative, default 5%) of the
fp32 run's, and its test accuracy within ``--acc-tol`` (absolute, default 0.02) of it. bf16 keeps fp32's exponent and
8 bits of mantissa (relative rounding 2^-9 = 0.2% per operation); the master weights, the optimizer and the evaluations
stay fp32 (docs/gpu-speed.md), so the curves should part by about what two fp32 runs with other batch orders do.
The verdict: ``agree`` or ``differ`` (exit 1). ``--short`` is the CPU version (``make test-long``:
tests/engine/test_precision_check.py): a budget of seconds.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

FEMNIST_SAMPLE = ROOT.parent / "shared" / "datasets" / "femnist-leaf-sample"
#: the fixed budgets (``fedcli train`` flags): the full one for a GPU, the short one for the CPU
BUDGETS = {
    "femnist": {
        "full": [
            "--clients",
            "105",
            "--active-ratio",
            "0.2",
            "--rounds",
            "30",
            "--tau",
            "10",
            "--batch-size",
            "32",
            "--eval-every",
            "3",
        ],
        "short": [
            "--clients",
            "8",
            "--active-ratio",
            "0.5",
            "--rounds",
            "3",
            "--tau",
            "2",
            "--batch-size",
            "16",
            "--eval-every",
            "1",
        ],
    },
    "resnet20": {
        "full": [
            "--clients",
            "16",
            "--active-ratio",
            "0.5",
            "--rounds",
            "20",
            "--tau",
            "10",
            "--batch-size",
            "32",
            "--eval-every",
            "2",
        ],
        "short": [
            "--clients",
            "4",
            "--active-ratio",
            "0.5",
            "--rounds",
            "2",
            "--tau",
            "2",
            "--batch-size",
            "8",
            "--eval-every",
            "1",
        ],
    },
}


def workload_args(name: str, data_dir: Path) -> list[str]:
    if name == "femnist":
        return [
            "--dataset",
            "femnist",
            "--data-dir",
            str(data_dir),
            "--model",
            "femnist_cnn",
            "--partition",
            "natural",
            "--algo",
            "fedavg",
            "--lr",
            "0.05",
            "--momentum",
            "0.9",
        ]
    return [
        "--dataset",
        "cifar10",
        "--data-dir",
        str(data_dir),
        "--model",
        "resnet20",
        "--partition",
        "iid",
        "--algo",
        "fedavg",
        "--lr",
        "0.1",
        "--momentum",
        "0.9",
    ]


def curve(run: Path) -> list[dict]:
    with open(run / "metrics.csv", newline="") as f:
        return [
            {"round": int(r["round"]), "train_loss": float(r["train_loss"]), "test_acc": float(r["test_acc"])}
            for r in csv.DictReader(f)
        ]


def compare(a: list[dict], b: list[dict], loss_tol: float, acc_tol: float) -> tuple[list[str], list[str]]:
    """(table lines, the evaluations out of tolerance) of the fp32 curve ``a`` and the bf16 curve ``b``."""
    lines = [
        "| round | train loss fp32 | train loss bf16 | rel. diff | test acc fp32 | test acc bf16 | diff |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    bad = []
    if [r["round"] for r in a] != [r["round"] for r in b]:
        bad.append(f"evaluated at other rounds: {[r['round'] for r in a]} against {[r['round'] for r in b]}")
    for x, y in zip(a, b):
        rel = abs(y["train_loss"] - x["train_loss"]) / abs(x["train_loss"])
        dacc = y["test_acc"] - x["test_acc"]
        lines.append(
            f"| {x['round']} | {x['train_loss']:.4f} | {y['train_loss']:.4f} | {rel:.2%} | "
            f"{x['test_acc']:.4f} | {y['test_acc']:.4f} | {dacc:+.4f} |"
        )
        if not rel <= loss_tol:
            bad.append(f"round {x['round']}: training loss {rel:.2%} from fp32's (tolerance {loss_tol:.0%})")
        if not abs(dacc) <= acc_tol:
            bad.append(f"round {x['round']}: test accuracy {dacc:+.4f} from fp32's (tolerance {acc_tol})")
    return lines, bad


def run_workload(name: str, data_dir: Path, work: Path, args) -> tuple[str, bool]:
    from fedcli.cli.main import main as fedcli

    budget = BUDGETS[name]["short" if args.short else "full"]
    curves = {}
    for precision in ("fp32", "bf16"):
        out = work / f"{name}-{precision}"
        argv = [
            "train",
            *workload_args(name, data_dir),
            *budget,
            "--precision",
            precision,
            "--seed",
            str(args.seed),
            "--device",
            args.device,
            "--workers",
            "1",
            "--out",
            str(out),
            "--overwrite",
            "--quiet",
        ]
        t0 = time.perf_counter()
        code = fedcli(argv)
        if code:
            return f"## {name}\n\n`fedcli {' '.join(argv)}` exited {code}\n", False
        curves[precision] = curve(out)
        print(f"precision-check: {name} {precision} in {time.perf_counter() - t0:.1f} s", flush=True)
    lines, bad = compare(curves["fp32"], curves["bf16"], args.loss_tol, args.acc_tol)
    verdict = "agree" if not bad else "differ: " + "; ".join(bad)
    text = (
        f"## {name}: {verdict}\n\n`fedcli train {' '.join(workload_args(name, data_dir) + budget)} --seed "
        f"{args.seed} --device {args.device}`, fp32 and bf16\n\n" + "\n".join(lines) + "\n"
    )
    return text, not bad


def _parser() -> argparse.ArgumentParser:
    """The script's flags: device, budget, data folders, workloads, seed, tolerances and the report's path."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:K or cpu")
    p.add_argument("--short", action="store_true", help="the CPU version's budget (seconds)")
    p.add_argument("--femnist-dir", default=str(FEMNIST_SAMPLE), help="a LEAF FEMNIST folder (train/, test/)")
    p.add_argument("--cifar-dir", default="", help="a folder with cifar-10-batches-py (default: written, random)")
    p.add_argument("--only", default="femnist,resnet20", help="the workloads (comma separated)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loss-tol", type=float, default=0.05, help="relative, on the training loss of each evaluation")
    p.add_argument("--acc-tol", type=float, default=0.02, help="absolute, on the test accuracy of each evaluation")
    p.add_argument("--out", default=str(ROOT / "results" / "precision-check.md"), help="the report (Markdown)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Train each workload in bf16 and fp32, compare, write the report; 0 if they agree, 1 if not, 2 for bad flags."""
    args = _parser().parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in BUDGETS]
    if unknown or not names:
        print(f"precision-check: --only {args.only!r}: expected some of {', '.join(BUDGETS)}", file=sys.stderr)
        return 2
    if "femnist" in names and not (Path(args.femnist_dir) / "train").is_dir():
        print(
            f"precision-check: {args.femnist_dir}: no LEAF FEMNIST folder (train/, test/) there; give --femnist-dir",
            file=sys.stderr,
        )
        return 2
    parts, ok = [], True
    with tempfile.TemporaryDirectory(prefix="precision-check-") as tmp:
        work = Path(tmp)
        for name in names:
            if name == "femnist":
                data = Path(args.femnist_dir)
            elif args.cifar_dir:
                data = Path(args.cifar_dir)
            else:
                from paperdata import write_cifar10

                data = work / "cifar10"
                write_cifar10(data, n_train=200 if args.short else 5000, n_test=50 if args.short else 1000)
            text, agreed = run_workload(name, data, work, args)
            parts.append(text)
            ok = ok and agreed
    import torch

    head = (
        f"# make precision-check: bf16 against fp32\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"device {args.device}, torch {torch.__version__}{', the short budget' if args.short else ''}; tolerance: "
        f"training loss within {args.loss_tol:.0%} and test accuracy within {args.acc_tol} of fp32's at every "
        f"evaluation (scripts/precision_check.py). Verdict: {'agree' if ok else 'differ'}.\n\n"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + "\n".join(parts))
    print(head + "\n".join(parts))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
