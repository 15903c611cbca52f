"""``make gpu-paper``: recipe entries at ``--scale paper`` on a GPU, fp32 and bf16, on data in the real on-disk formats.

One entry per dataset x model family of the papers (ResNet20, WRN-28-10 and ResNet18 on CIFAR; ResNet18 and the CNN
on Tiny-ImageNet; the FEMNIST CNN; fastText on AG News) and per method family (FedLAMA, Fed-LAMB, FedALA, and Ditto
for the personalized methods), each trained in this process by ``make paper-check``'s harness (tests/paperkit.py: the
recipe's keys, the budget cut to a few clients and local steps) for ``--rounds`` rounds with an evaluation every
round, in ``--precision fp32`` and ``bf16``, on ``--device``. Printed and written (``--out``) as a table: entry,
precision, outcome, seconds a round (the rounds after the first, evaluation included; the first round alone when
there is one), peak GPU memory (``torch.cuda.max_memory_reserved``, reset before each run) and the first evaluation.

About 8 minutes on one H100 is the budget of the default (``--rounds 3``). ``--device cpu --quick --only ...`` is its
harness's test on the CPU (tests/sweep/test_gpu_paper.py, in ``make test``): the quick cut, one round.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import paperkit  # noqa: E402

#: (label, recipe, run name): a dataset x model family, a method family, or both; by dataset, so that the dataset
#: loaded for one entry serves the next (the sweep's memo)
ENTRIES = [
    ("ResNet20 CIFAR-10, FedLAMA", "recipes/fedlama/aaai-fig3-cifar10.toml", "FedLAMA"),
    ("ResNet18 CIFAR-10, Fed-LAMB", "recipes/fedlamb/fig4-table1-cifar10.toml", "Fed-LAMB"),
    ("CNN CIFAR-10, Ditto (personalized)", "recipes/fedala/aaai-table2.toml", "Ditto | Cifar10-path"),
    ("WRN-28-10 CIFAR-100", "recipes/fedlama/aaai-table2.toml", "FedAvg x1"),
    ("ResNet18 Tiny-ImageNet, FedALA", "recipes/fedala/aaai-table1.toml", "FedALA s=5"),
    ("CNN Tiny-ImageNet", "recipes/fedala/aaai-table2.toml", "FedAvg | Tiny-dir"),
    ("FEMNIST CNN, FedLAMA", "recipes/fedlama/aaai-fig3-femnist.toml", "FedLAMA"),
    ("fastText AG News", "recipes/fedala/aaai-table2.toml", "FedAvg | AGNews-dir"),
]
PRECISIONS = ("fp32", "bf16")


def entry(recipe: str, name: str) -> paperkit.Entry:
    from fedcli.recipes import read_sweep

    run = next((r for r in read_sweep(ROOT / recipe, "paper").runs if r.name == name), None)
    if run is None:
        raise SystemExit(f"gpu-paper: {recipe} has no [[runs]] entry named {name!r} at --scale paper")
    return paperkit.Entry(recipe, run)


def measure(out: Path) -> dict:
    """Seconds a round, the peak GPU memory and the first evaluation of a finished run folder."""
    try:
        with open(out / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    got = {"peak": manifest.get("cuda_peak_bytes")}
    if rows:
        first, last = rows[0], rows[-1]
        got["first_eval"] = f"acc {float(first['test_acc']):.4f}, loss {float(first['test_loss']):.4f}"
        rounds = int(last["round"]) - int(first["round"])
        if rounds > 0:
            got["s_round"], got["timed"] = (
                (float(last["wall_s"]) - float(first["wall_s"])) / rounds,
                f"rounds 2-{last['round']}",
            )
        else:
            got["s_round"], got["timed"] = float(first["wall_s"]) / max(1, int(first["round"])), "round 1"
    return got


def run_one(label: str, e: paperkit.Entry, precision: str, data_dirs: dict, work: Path, args) -> dict:
    import torch

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    done = paperkit.run_entry(
        e,
        data_dirs,
        work / precision,
        quick=args.quick,
        device=args.device,
        precision=precision,
        rounds=args.rounds,
        eval_every=1,
    )
    from fedcli.sweep.run import slugify

    return {
        "label": label,
        "entry": e.id,
        "precision": precision,
        "outcome": done.outcome,
        "seconds": done.seconds,
        **measure(work / precision / slugify(e.id)),
    }


def table(results: list[dict]) -> str:
    lines = [
        "| entry | precision | outcome | s/round | timed | peak GPU memory | first evaluation |",
        "|---|---|---|---:|---|---:|---|",
    ]
    for r in results:
        peak = f"{r['peak'] / 2**30:.2f} GiB" if r.get("peak") else "n/a"
        s_round = f"{r['s_round']:.2f}" if "s_round" in r else "n/a"
        outcome = r["outcome"].replace("\n", " ").replace("|", "\\|")[:200]
        lines.append(
            f"| {r['label']} | {r['precision']} | {outcome} | {s_round} | {r.get('timed', '')} | {peak} | "
            f"{r.get('first_eval', '')} |"
        )
    return "\n".join(lines)


def header(device: str) -> str:
    import torch

    where = device
    if device.startswith("cuda") and torch.cuda.is_available():
        where = f"{torch.cuda.get_device_name(torch.device(device))}, CUDA {torch.version.cuda}"
    return f"{where}; {paperkit.machine()}"


def _parser() -> argparse.ArgumentParser:
    """The script's flags: device, rounds, the quick cut, the entries, the precisions, the table and work folder."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:K, or cpu (the harness's test)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each run, an evaluation after each")
    p.add_argument("--quick", action="store_true", help="make test's cut: two clients, one local step")
    p.add_argument("--only", default="", help="the entries whose label contains one of these (comma separated)")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="comma separated: fp32, bf16")
    p.add_argument("--out", default=str(ROOT / "results" / "gpu-paper.md"), help="the table (Markdown)")
    p.add_argument("--work", default="", help="folder for the data and the runs (default: a temporary one)")
    return p


def _cuda_missing(device: str) -> bool:
    """Whether ``device`` asks for CUDA on a machine without it (said on stderr)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(
                "gpu-paper: no CUDA device is available here; run it on a GPU, or with DEVICE=cpu (its harness's "
                "test, a tiny budget)",
                file=sys.stderr,
            )
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    """Run each picked entry at each precision, write the table; 0 if every run is ok, 1 if not, 2 for bad flags."""
    args = _parser().parse_args(argv)
    if _cuda_missing(args.device):
        return 2
    picked = [
        (label, r, n)
        for label, r, n in ENTRIES
        if not args.only or any(w.strip() and w.strip() in label for w in args.only.split(","))
    ]
    if not picked:
        print(
            f"gpu-paper: --only {args.only!r} matches none of: {'; '.join(label for label, _, _ in ENTRIES)}",
            file=sys.stderr,
        )
        return 2
    from fedcli.sweep.executors import memoize_datasets

    memoize_datasets()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpu-paper-") as tmp:
        work = Path(args.work or tmp)
        t0 = time.perf_counter()
        todo = [(label, entry(r, n)) for label, r, n in picked]
        data_dirs = paperkit.write_data(work / "data", {str(e.values.get("dataset")) for _, e in todo})
        print(
            f"gpu-paper: {len(todo)} entries x {args.precisions} on {header(args.device)}; data written in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        for label, e in todo:
            for precision in args.precisions.split(","):
                r = run_one(label, e, precision, data_dirs, work / "runs", args)
                results.append(r)
                print(
                    f"{r['outcome'][:60]:<6} {precision} {r.get('s_round', float('nan')):8.2f} s/round  {label}",
                    flush=True,
                )
        text = (
            f"# make gpu-paper\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {header(args.device)}; "
            f"{args.rounds} round(s) an entry{', the quick cut' if args.quick else ''}, "
            f"{time.perf_counter() - t0:.0f} s in all (scripts/gpu_paper.py).\n\n{table(results)}\n"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(table(results))
    failed = [r for r in results if not paperkit.passed(r["outcome"])]
    print(f"gpu-paper: {len(results) - len(failed)} of {len(results)} runs ok; table in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
