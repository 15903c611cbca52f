"""Check FedLAMA's claim on a ``recipes/fedlama/reproduce-femnist.toml`` sweep and write it as markdown.

The claim (AAAI 2023, Table 3, phi = 2): FedLAMA(tau', 2) is within 1 point of FedAvg(tau')'s accuracy at no more
than 60% of its communication (Eq. 8), and above FedAvg(2 tau')'s accuracy. Accuracy is each run's best evaluation
(the paper's "full training" columns) and, for reference, its last; mean ± sample std over the seeds; the checks
compare the means. Communication is the run's Eq. 8 parameter count as % of FedAvg(tau')'s with the same seed.

    python scripts/fedlama_claim.py SWEEP_DIR OUT.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedcli.reports.aggregate import mean_std, pct
from fedcli.reports.core import find_sweeps

BASE, LONG, LAMA = "FedAvg x1", "FedAvg x2", "FedLAMA phi=2"


def _per_seed_table(runs: dict, seeds: list, comm: dict) -> list[str]:
    """The per-seed Markdown table: each run's best accuracy and FedLAMA's communication (% of the baseline's)."""
    per_seed = [
        "| seed | " + " | ".join(f"{n} best" for n in (BASE, LONG, LAMA)) + f" | {LAMA} comm. |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in seeds:
        accs = " | ".join(f"{100 * runs[n][s].accuracy('best'):.2f}%" for n in (BASE, LONG, LAMA))
        per_seed.append(f"| {s} | {accs} | {pct(comm[LAMA][s], comm[BASE][s]):.2f}% |")
    return per_seed


def summarize(folder: str) -> str:
    sweep = find_sweeps(folder)[0]
    runs, problems = sweep.status([BASE, LONG, LAMA])
    if problems:
        raise SystemExit(f"{folder}: incomplete runs: {', '.join(problems)}")
    seeds = sorted(runs[BASE])
    comm = {name: {s: r.metrics[-1]["comm_params"] for s, r in per.items()} for name, per in runs.items()}
    stats = {}
    for name, per in runs.items():
        stats[name] = {
            "best": mean_std(100 * per[s].accuracy("best") for s in seeds),
            "final": mean_std(100 * per[s].accuracy("final") for s in seeds),
            "comm": mean_std(pct(comm[name][s], comm[BASE][s]) for s in seeds),
        }
    lines = [f"| run | tau | phi | best acc. | final acc. | comm. (% of {BASE}) |", "|---|---:|---:|---:|---:|---:|"]
    for name in (BASE, LONG, LAMA):
        cfg = runs[name][seeds[0]].config
        st = stats[name]
        phi = cfg.get("phi") if runs[name][seeds[0]].layerwise else 1
        lines.append(
            f"| {runs[name][seeds[0]].legend()} | {cfg.get('tau')} | {phi} | {st['best'].mean:.2f} ± "
            f"{st['best'].std:.2f}% "
            f"| {st['final'].mean:.2f} ± {st['final'].std:.2f}% | {st['comm'].mean:.2f} ± {st['comm'].std:.2f}% |"
        )
    b, lo, la = stats[BASE]["best"].mean, stats[LONG]["best"].mean, stats[LAMA]["best"].mean
    c = stats[LAMA]["comm"].mean
    checks = [
        (
            f"FedLAMA within 1 point of {runs[BASE][seeds[0]].legend()}",
            la >= b - 1.0,
            f"{la:.2f}% vs {b:.2f}% ({la - b:+.2f} points)",
        ),
        ("FedLAMA at most 60% of its communication", c <= 60.0, f"{c:.2f}%"),
        (f"FedLAMA above {runs[LONG][seeds[0]].legend()}", la > lo, f"{la:.2f}% vs {lo:.2f}% ({la - lo:+.2f} points)"),
    ]
    per_seed = _per_seed_table(runs, seeds, comm)
    out = [
        f"Seeds: {', '.join(map(str, seeds))} (mean ± sample std). Sweep: `{Path(folder)}`.",
        "",
        *lines,
        "",
        "| claim (means over seeds) | holds | numbers |",
        "|---|---|---|",
    ]
    out += [f"| {what} | {'yes' if ok else '**no**'} | {nums} |" for what, ok, nums in checks]
    out += ["", "Per seed:", "", *per_seed, ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    text = summarize(argv[0])
    Path(argv[1]).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
