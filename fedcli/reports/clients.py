"""The distribution of accuracy across clients of personalized runs, from ``clients.csv`` (docs/run-directory.md).

A personalized method is judged by the pooled accuracy of its clients' models (``personal_acc``), but reviewers of
personalized FL ask how the worst clients fare. For each run, the clients' personal accuracies at its last evaluation
(or at its best, the evaluation ``personal_acc`` peaked) give:

- the **worst-10% mean**: the mean accuracy of the ceil(0.1 N) clients with the lowest accuracy (at least one
  client; each client counts once, whatever its sample count), :func:`worst_mean`;
- a **figure** (``clients.png``): left, the empirical CDF of the clients' accuracies (the fraction of clients at or
  below an accuracy), one step curve per run with its worst-10% mean as a dashed vertical line; right, one box per
  run (median, quartiles, whiskers to 1.5 IQR) with every client as a dot and the worst-10% mean as a diamond.

In a sweep the figure is a recipe's ``[[figures]]`` entry of ``kind = "clients"`` (:func:`panel_clients`): one box per
run over the clients of all its seeds, and the worst-10% mean per seed, mean +- std over the seeds.
"""

from __future__ import annotations

import math
from pathlib import Path

#: the share of clients the worst-clients mean is taken over
WORST = 0.1


def worst_mean(values: list[float], share: float = WORST) -> float:
    """Mean of the ceil(``share`` * N) smallest of ``values`` (at least one); nan for none."""
    vals = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if not vals:
        return float("nan")
    k = max(1, math.ceil(share * len(vals) - 1e-9))
    return sum(vals[:k]) / k


def evaluation_rows(run, which: str = "final") -> list[dict]:
    """The clients.csv rows of one evaluation: the last (``final``), or the one with the best ``personal_acc`` in
    metrics.csv (``best``); [] for a run without clients.csv."""
    rows = run.clients
    if not rows:
        return []
    rounds = sorted({r["round"] for r in rows})
    at = rounds[-1]
    if which == "best":
        evals = [m for m in run.evaluations("personal_acc") if m["round"] in rounds]
        if evals:
            at = max(evals, key=lambda m: m["personal_acc"])["round"]
    return [r for r in rows if r["round"] == at]


def accuracies(run, which: str = "final", column: str = "personal_acc") -> list[float]:
    """Each client's accuracy (``column``: ``personal_acc`` or ``global_acc``) at one evaluation."""
    return [float(r[column]) for r in evaluation_rows(run, which) if isinstance(r.get(column), (int, float))]


def _box(ax, pos: float, values: list[float], look: dict) -> None:
    """One box (median, quartiles, whiskers to 1.5 IQR) at ``pos`` in the run's colour, with every value as a dot."""
    parts = ax.boxplot([values], positions=[pos], widths=0.5, showfliers=False, patch_artist=True)
    parts["boxes"][0].set_facecolor(look["color"])
    parts["boxes"][0].set_alpha(0.3)
    ax.scatter(
        [pos + 0.18 * ((k % 7) / 6.0 - 0.5) for k in range(len(values))],
        values,
        s=9,
        color=look["color"],
        alpha=0.7,
        zorder=3,
    )


def clients_figure(runs: list, labels: list[str], which: str = "final"):
    """(figure, caption) of the clients' personal accuracy across clients for the ``runs`` (RunData) that have
    clients.csv; None when none has."""
    from fedcli.reports import style
    from fedcli.reports.style import plt as _plt

    have = [(r, lab) for r, lab in zip(runs, labels) if accuracies(r, which)]
    if not have:
        return None
    plt = _plt()
    looks = style.styles([r for r, _ in have], [lab for _, lab in have])
    fig, (cdf, box) = plt.subplots(1, 2, figsize=(10.4, 3.9))
    data, worst = [], []
    for (run, lab), look in zip(have, looks):
        acc = sorted(100.0 * a for a in accuracies(run, which))
        w = 100.0 * worst_mean([a / 100.0 for a in acc])
        data.append(acc)
        worst.append(w)
        n = len(acc)
        cdf.step(
            [acc[0], *acc],
            [0.0, *((i + 1) / n for i in range(n))],
            where="post",
            color=look["color"],
            linestyle=look["linestyle"],
            label=f"{lab}: worst 10% {w:.1f}%",
        )
        cdf.axvline(w, color=look["color"], linestyle=":", linewidth=1.2)
    cdf.set_xlabel("Personal accuracy of a client (%), its model on its local test split")
    cdf.set_ylabel("Fraction of clients at or below")
    cdf.set_ylim(0.0, 1.02)
    style.legend_below(cdf, len(have))
    pos = list(range(1, len(have) + 1))
    for p, acc, w, look in zip(pos, data, worst, looks):
        _box(box, p, acc, look)
        box.scatter([p], [w], marker="D", s=40, color="black", zorder=4, label="worst-10% mean" if p == 1 else None)
    box.set_xticks(pos)
    box.set_xticklabels([lab for _, lab in have], rotation=20, ha="right", fontsize=8)
    box.set_ylabel("Personal accuracy of a client (%)")
    style.legend_right(box)  # off the data: the lowest clients sit where a corner legend would
    when = "last evaluation" if which == "final" else "evaluation with the best personal_acc"
    caption = (
        f"Personal accuracy across clients at each run's {when} (clients.csv): left, the empirical CDF of the "
        f"clients' accuracies (each client's model on its own local test split), the dotted line at the mean of "
        f"the worst 10% of clients (ceil(0.1 N) clients); right, box plots (median, quartiles, whiskers to 1.5 "
        f"IQR) with every client as a dot and the worst-10% mean as a black diamond. Runs: "
        + "; ".join(f"{lab} ({len(acc)} clients, worst 10% {w:.2f}%)" for (_, lab), acc, w in zip(have, data, worst))
        + "."
    )
    return fig, caption


def write_clients_figure(runs: list, labels: list[str], out_dir: str | Path) -> list[Path]:
    """``clients.png``/``.pdf``/``.txt`` in ``out_dir`` when some run has clients.csv; [] otherwise."""
    from fedcli.reports.style import save

    made = clients_figure(runs, labels)
    if made is None:
        return []
    fig, caption = made
    return save(fig, Path(out_dir), "clients", caption)


def panel_clients(ax, panel, runs: dict) -> str:
    """A sweep figure's ``clients`` panel (``runs``: run name -> {seed: RunData}): per run, one box over the clients
    of every seed at each seed's last evaluation (dots: the clients), and the worst-10% mean of each seed, mean +- std
    over the seeds (black diamond, error bar). Returns the panel's description for the caption."""
    from fedcli.reports import style
    from fedcli.reports.aggregate import mean_std

    reps = [next(iter(runs[name].values())) for name in panel.runs]
    looks = style.styles(reps, list(panel.labels) or None)
    pos, said = [], []
    for i, (name, look) in enumerate(zip(panel.runs, looks), start=1):
        per_seed = [accuracies(run) for _, run in sorted(runs[name].items())]
        pooled = [100.0 * a for accs in per_seed for a in accs]
        if not pooled:
            continue
        worst = mean_std(100.0 * worst_mean(accs) for accs in per_seed if accs)
        _box(ax, i, pooled, look)
        ax.errorbar(
            [i],
            [worst.mean],
            yerr=[worst.std if worst.n > 1 else 0.0],
            fmt="D",
            color="black",
            markersize=6,
            capsize=3,
            zorder=4,
            label="worst-10% mean" if not pos else None,
        )
        pos.append((i, look["label"]))
        spread = f" ± {worst.std:.2f}" if worst.n > 1 else ""
        said.append(
            f"{look['label']}: worst 10% {worst.mean:.2f}%{spread} over {worst.n} seed(s), {len(pooled)} client results"
        )
    ax.set_xticks([p for p, _ in pos])
    ax.set_xticklabels([lab for _, lab in pos], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Personal accuracy of a client (%),\nits model on its local test split")
    ax.grid(alpha=0.3, axis="y")
    if pos:
        style.legend_right(ax)
    return (
        "Personal accuracy across clients at each seed's last evaluation (clients.csv): a box per run over the "
        "clients of all its seeds (median, quartiles, whiskers to 1.5 IQR; dots: the clients), the black diamond the "
        "mean over the seeds of each seed's worst-10% mean (ceil(0.1 N) clients), with its std; "
        + "; ".join(said or ["no run of this panel has clients.csv"])
    )
