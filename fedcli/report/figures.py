"""Paper figures from run directories, as PNG and PDF (matplotlib, Agg backend).

- ``curves``: learning curves (FedLAMA arXiv Figures 4-6, AAAI Figure 3): accuracy (``y``: default ``auto``,
  personal_acc for personalized runs, test_acc otherwise), or a loss, against local iterations (``x = "round"``: communication rounds, as Fed-LAMB Figures 2-5;
  ``x = "comm"``: cumulative communication), mean over seeds with a +- std band.
- ``layer-syncs``: communications per layer over the whole training (arXiv Figure 2, AAAI Figure 4).
- ``layer-size``: data size per layer, dim(u_l) * c_l of Eq. 8 (arXiv Figure 3, AAAI Figure 5).
- ``delta-lambda``: delta_l (Eq. 3) and 1 - lambda_l (Eq. 4) along the layers sorted by d_l, at one
  interval adjustment of a FedLAMA run (arXiv Figure 1, AAAI Figure 2), with the cross point marked.
"""

from __future__ import annotations

from pathlib import Path

from fedcli.report.aggregate import mean_std
from fedcli.report.spec import FigureSpec


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _labels(panel, runs: dict) -> list[str]:
    if panel.labels:
        return list(panel.labels)
    return [next(iter(runs[name].values())).legend() for name in panel.runs]


def _curve(per_seed: dict, x: str, y: str, base_comm: float):
    """Mean and std of ``y`` over seeds at the evaluation points all seeds share.

    Evaluation points are matched by iteration, or by round for ``x = "round"`` (with ``--local-epochs`` a
    round's local steps depend on its cohort, so seeds evaluate at the same rounds but not the same iterations)."""
    key = "round" if x == "round" else "iteration"
    col = next(iter(per_seed.values())).acc_metric(y) if per_seed else y  # auto: the run's own accuracy
    grids = [{r[key]: r for r in run.metrics} for run in per_seed.values()]
    common = sorted(set.intersection(*(set(g) for g in grids))) if grids else []
    xs, means, stds = [], [], []
    for it in common:
        rows = [g[it] for g in grids]
        s = mean_std(r[col] for r in rows)
        if not s.ok:
            continue
        if x == "comm":
            xs.append(100.0 * mean_std(r["comm_params"] for r in rows).mean / base_comm if base_comm else float("nan"))
        else:
            xs.append(it)
        scale = 100.0 if col.endswith("_acc") else 1.0
        means.append(scale * s.mean)
        stds.append(scale * s.std)
    return xs, means, stds


def y_label(y: str, per_run: list[dict]) -> str:
    """The y axis of a curves panel; ``auto`` says which accuracy its runs show."""
    if y == "auto":
        cols = {next(iter(r.values())).acc_metric("auto") for r in per_run if r}
        y = cols.pop() if len(cols) == 1 else y
    return {"test_acc": "Validation accuracy (%)", "personal_acc": "Personal accuracy (%): local test splits",
            "auto": "Accuracy (%)\npersonal_acc (pFL), test_acc (others)",
            "test_loss": "Test loss", "train_loss": "Training loss"}[y]


def _layer_values(per_seed: dict, key: str) -> tuple[list[int], list[str], list[float]]:
    runs = list(per_seed.values())
    layers = runs[0].layers
    idx = [int(r["layer"]) for r in layers]
    names = [str(r["name"]) for r in layers]
    vals = []
    for k in range(len(layers)):
        vals.append(mean_std(float(run.layers[k][key]) for run in runs if k < len(run.layers)).mean)
    return idx, names, vals


def delta_lambda_curves(run, round_index: int = -1):
    """(deltas, one_minus_lambdas, order, round, iteration) at one adjustment of a FedLAMA run."""
    from fedcli.fl.schedules import delta_lambda

    rows = run.intervals
    if not rows:
        raise ValueError(f"{run.path} has no intervals.csv rows (not a layer-wise run, or no adjustment yet)")
    rounds = sorted({int(r["round"]) for r in rows})
    rnd = rounds[round_index] if round_index < 0 else round_index
    if rnd not in rounds:
        raise ValueError(f"{run.path}/intervals.csv has no adjustment at round {rnd} (it has rounds {rounds[0]}..{rounds[-1]})")
    group = sorted((r for r in rows if int(r["round"]) == rnd), key=lambda r: int(r["layer"]))
    d = [float(r["d"]) for r in group]
    numel = [int(r["numel"]) for r in group]
    eligible = [bool(int(r.get("eligible", 1))) for r in group]
    order = sorted((i for i in range(len(d)) if eligible[i]), key=lambda i: (d[i], i))
    deltas, lambdas = delta_lambda(d, numel, order, eligible)
    return deltas, [1.0 - lam for lam in lambdas], order, rnd, int(group[0]["iteration"])


def cross_point(deltas: list[float], one_minus: list[float]) -> int | None:
    """First l (1-based) where delta_l >= 1 - lambda_l (the curves cross), or None."""
    for k, (a, b) in enumerate(zip(deltas, one_minus)):
        if a >= b:
            return k + 1
    return None


def draw(spec: FigureSpec, runs: dict, out_dir: Path) -> list[Path]:
    """Draw one figure; ``runs`` maps run name -> {seed: RunData}. Returns the files written."""
    plt = _plt()
    n = len(spec.panels)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.9), squeeze=False)
    for ax, panel in zip(axes[0], spec.panels):
        labels = _labels(panel, runs)
        if spec.kind == "curves":
            base_comm = None
            if spec.x == "comm":
                first = runs[panel.runs[0]]
                base_comm = mean_std(r.comm_params for r in first.values()).mean
            for name, label in zip(panel.runs, labels):
                xs, m, s = _curve(runs[name], spec.x, spec.y, base_comm)
                (line,) = ax.plot(xs, m, label=label, linewidth=1.6)
                if len(runs[name]) > 1:
                    ax.fill_between(xs, [a - b for a, b in zip(m, s)], [a + b for a, b in zip(m, s)], color=line.get_color(), alpha=0.18, linewidth=0)
            ax.set_xlabel({"iteration": "Iterations (local steps)", "round": "Communication rounds"}.get(spec.x, f"Communication (% of {labels[0]})"))
            if spec.x == "round":
                from matplotlib.ticker import MaxNLocator

                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(y_label(spec.y, [runs[n] for n in panel.runs]))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        elif spec.kind in ("layer-syncs", "layer-size"):
            key = "syncs" if spec.kind == "layer-syncs" else "comm_params"
            k = len(panel.runs)
            width = 0.8 / k
            names = None
            for j, (name, label) in enumerate(zip(panel.runs, labels)):
                idx, names, vals = _layer_values(runs[name], key)
                ax.bar([i + (j - (k - 1) / 2) * width for i in idx], vals, width=width, label=label)
            ax.set_xlabel("Layer (parameter tensor, forward order)")
            ax.set_ylabel("Number of communications" if key == "syncs" else "Data size (parameters)")
            if names is not None and len(names) <= 16:
                ax.set_xticks(range(len(names)))
                ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
            if spec.log:
                ax.set_yscale("log")
            else:
                lo, hi = ax.get_ylim()
                ax.set_ylim(lo, hi * 1.22)  # room for the legend above the bars
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8, loc="upper right", ncol=min(k, 3))
        elif spec.kind == "delta-lambda":
            name = panel.runs[0]
            per_seed = runs[name]
            seeds = sorted(per_seed)
            seed = seeds[spec.seed] if -len(seeds) <= spec.seed < len(seeds) else seeds[0]
            deltas, one_minus, order, rnd, it = delta_lambda_curves(per_seed[seed], spec.round)
            ls = list(range(1, len(deltas) + 1))
            ax.plot(ls, deltas, marker="o", markersize=3, label="δ_l (discrepancy ratio, Eq. 3)")
            ax.plot(ls, one_minus, marker="s", markersize=3, label="1 − λ_l (size ratio, Eq. 4)")
            cp = cross_point(deltas, one_minus)
            if cp is not None:
                ax.axvline(cp, color="grey", linestyle=":", linewidth=1)
                ax.annotate(f"cross at l={cp}", (cp, one_minus[cp - 1]), textcoords="offset points", xytext=(6, 8), fontsize=8)
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("l (number of layers with the smallest d_l)")
            ax.set_ylabel("Ratio")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, title=f"{labels[0]}, seed {seed}, round {rnd} (iteration {it})", title_fontsize=7)
        ax.set_title(panel.title or "", fontsize=10)
    title = " — ".join(x for x in (spec.paper, spec.title) if x)
    if title:
        import textwrap

        fig.suptitle(textwrap.fill(title, width=int(12 * 5.2 * n)), fontsize=9)
    return save(fig, out_dir, spec.name)


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.pdf into ``out_dir`` and close the figure; the files written."""
    from fedcli.results.safefs import make_dir, open_file

    fig.tight_layout()
    make_dir(out_dir)
    files = []
    for ext in ("png", "pdf"):
        f = out_dir / f"{name}.{ext}"
        with open_file(f, "wb") as fh:  # never through a symbolic link (fedcli/results/safefs.py)
            fig.savefig(fh, format=ext, dpi=150)
        files.append(f)
    _plt().close(fig)
    return files

