"""FedALA's Figures 3 and 5 from a run recorded with ``--ala-trace`` (``ala.csv``, ``local_loss.csv``).

- ``ala-loss`` (FedALA Figure 3: "the local loss on client #8 regarding weight learning epochs in ALA"): the loss of
  every weight-learning pass (epoch) of one client, passes numbered over the whole run, the initial stage's passes
  apart from the one pass of each later round; the other clients thin and grey behind it.
- ``local-loss`` (FedALA Figure 5: "the training loss of the global objective (Eq. 8)"): per round, the
  sample-weighted mean over the clients of the loss of the initialized local models (after ALA, before local
  training: red circles) and of the trained local models (green squares), G = sum_i k_i L_i, k_i = |D_i| / sum_j |D_j|.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from fedcli.reports.rundata import read_csv

FIG3_CLIENT = 8  # the paper's client #8 (when the run has one; else the first client)


def ala_passes(rows: list[dict]) -> dict[int, list[dict]]:
    """client -> its passes in run order (round, then pass)."""
    out: dict[int, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (int(r["client"]), int(r["round"]), int(r["pass"]))):
        out[int(r["client"])].append(r)
    return dict(out)


def objective(rows: list[dict]) -> list[tuple[int, float, float]]:
    """(round, G of the initialized models, G of the trained models) per round: the sample-weighted means."""
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        a = acc[int(r["round"])]
        n = float(r["samples"])
        a[0] += n
        a[1] += n * float(r["initialized"])
        a[2] += n * float(r["trained"])
    return [(k, a[1] / a[0], a[2] / a[0]) for k, a in sorted(acc.items()) if a[0] > 0]


def ala_loss_figure(rows: list[dict], what: str):
    from fedcli.reports.style import plt as _plt

    plt = _plt()
    by_client = ala_passes(rows)
    client = FIG3_CLIENT if FIG3_CLIENT in by_client else min(by_client)
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    others = [c for c in by_client if c != client]
    for c in others:
        passes = by_client[c]
        ax.plot(
            range(1, len(passes) + 1),
            [float(p["loss"]) for p in passes],
            color="#BBBBBB",
            lw=0.6,
            zorder=1,
            label="the other clients" if c == others[0] else None,
        )
    mine = by_client[client]
    xs = list(range(1, len(mine) + 1))
    ax.plot(xs, [float(p["loss"]) for p in mine], color="#332288", lw=1.2, zorder=2, label=f"client #{client}")
    initial = [(x, float(p["loss"])) for x, p in zip(xs, mine) if p["stage"] == "initial"]
    later = [(x, float(p["loss"])) for x, p in zip(xs, mine) if p["stage"] != "initial"]
    if initial:
        ax.scatter(
            *zip(*initial), s=14, color="#CC6677", zorder=3, label="initial stage (round %d)" % int(mine[0]["round"])
        )
    if later:
        ax.scatter(*zip(*later), s=14, marker="s", color="#117733", zorder=3, label="one pass per later round")
    ax.set_xlabel("ALA weight-learning epochs (passes over the s% slice), over the run")
    ax.set_ylabel("Local loss (last batch of the pass)")
    ax.legend(frameon=False, fontsize=8)
    caption = (
        f"FedALA Figure 3: the loss of ALA's weight learning on client #{client} ({what}), every pass of the run; "
        f"grey: the other clients. The initial stage repeats passes until the loss settles; later rounds run one."
    )
    return fig, caption


def local_loss_figure(rows: list[dict], what: str):
    from fedcli.reports.style import plt as _plt

    plt = _plt()
    pts = objective(rows)
    step = max(1, -(-len(pts) // 60))  # at most about 60 dots (the paper: one per 60 of its 2000 rounds)
    pts = pts[step - 1 :: step] if step > 1 else pts
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    ax.plot(
        [p[0] for p in pts],
        [p[1] for p in pts],
        "o",
        ms=4,
        color="#CC3311",
        label="initialized local models (after ALA)",
    )
    ax.plot([p[0] for p in pts], [p[2] for p in pts], "s", ms=4, color="#117733", label="trained local models")
    ax.set_xlabel("Communication rounds")
    ax.set_ylabel("Training loss of the global objective (Eq. 8)")
    ax.legend(frameon=False, fontsize=8)
    caption = (
        f"FedALA Figure 5 ({what}): per round, sum_i k_i L_i over the clients' training splits, k_i = |D_i| / "
        f"sum_j |D_j|, of the models after ALA and before local training (red circles) and after it (green squares)"
        f"{f'; one dot per {step} rounds' if step > 1 else ''}."
    )
    return fig, caption


def write_ala_figures(run, out_dir: Path, what: str, suffix: str = "") -> list[Path]:
    """The two figures of a run recorded with ``--ala-trace`` (none without its CSVs)."""
    from fedcli.reports.style import save

    files = []
    rows = read_csv(Path(run.path) / "ala.csv")
    if rows:
        fig, caption = ala_loss_figure(rows, what)
        files += save(fig, out_dir, f"ala-loss{suffix}", caption)
    rows = read_csv(Path(run.path) / "local_loss.csv")
    if rows:
        fig, caption = local_loss_figure(rows, what)
        files += save(fig, out_dir, f"local-loss{suffix}", caption)
    return files
