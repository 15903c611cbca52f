"""Paper figures from run directories, as PNG and PDF (matplotlib, Agg backend), in one style (fedcli/reports/style.py).

- ``curves``: learning curves (FedLAMA arXiv Figures 4-6, AAAI Figure 3): accuracy (``y``: default ``auto``,
  personal_acc for personalized runs, test_acc otherwise), or a loss, against ``x``: local iterations, communication
  rounds (Fed-LAMB Figures 2-5), communicated parameters (Eq. 8, M params) or the bytes moved both ways (MB); mean
  over seeds with a +- std band.
- ``layer-syncs``: communications per layer over the whole training (arXiv Figure 2, AAAI Figure 4).
- ``layer-size``: data moved per layer over the whole training, in MB (everything that travels for the layer, both
  ways, every cohort client: ``layers.csv``'s ``comm_bytes``); ``y = "params"``: Eq. 8's dim(u_l) * c_l (arXiv
  Figure 3, AAAI Figure 5), in M params.
- ``delta-lambda``: delta_l (Eq. 3) and 1 - lambda_l (Eq. 4) along the layers sorted by d_l, at one
  interval adjustment of a FedLAMA run (arXiv Figure 1, AAAI Figure 2), with the cross point marked.
- ``intervals``: each layer's synchronization interval at every adjustment of a layer-wise run (``intervals.csv``):
  layers down, iterations across, the interval as the cell's shade (FedLAMA Algorithm 1 over time).
- ``clients``: personalized runs' personal accuracy across clients (clients.csv), the worst-10% mean marked
  (:mod:`fedcli.reports.clients`).

- ``time-to-target``: simulated time to a target accuracy against a system option, in a layout of its own
  (:mod:`fedcli.reports.summary`).

Each kind is a :class:`FigureKind` registered by name (:data:`FIGURE_KINDS`: the built-in ones listed in
:data:`BUILTIN`, a kind of your own with :func:`register_figure_kind`): its panel's drawing function, the keys of a
``[[figures]]`` entry it accepts beyond every kind's own (the recipe parser, ``fedcli.reports.products``, reads them),
and how its panels are laid out. No figure has a suptitle: its description (paper, title, notes, what was drawn) goes
into ``NAME.txt`` beside ``NAME.png`` and ``NAME.pdf``, for a caption.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedcli.reports import style
from fedcli.reports.aggregate import mean_std, seeds_drawn
from fedcli.reports.clients import panel_clients
from fedcli.reports.rundata import check_simulated_time
from fedcli.reports.style import plt as _plt
from fedcli.reports.style import save


def _first(per_seed: dict):
    return next(iter(per_seed.values()))


def _curve(per_seed: dict, x: str, y: str):
    """Mean and std of ``y`` over seeds at the evaluation points all seeds share, against ``x`` (style.X_AXES).

    Evaluation points are matched by iteration, or by round for ``x = "rounds"`` (with ``--local-epochs`` a
    round's local steps depend on its cohort, so seeds evaluate at the same rounds but not the same iterations)."""
    key = "round" if x == "rounds" else "iteration"
    col = _first(per_seed).acc_metric(y) if per_seed else y  # auto: the run's own accuracy
    grids = [{r[key]: r for r in run.metrics} for run in per_seed.values()]
    common = sorted(set.intersection(*(set(g) for g in grids))) if grids else []
    xs, means, stds = [], [], []
    for it in common:
        rows = [g[it] for g in grids]
        s = mean_std(r[col] for r in rows)
        if not s.ok:
            continue
        if x in ("params", "bytes"):
            xs.append(mean_std(r["comm_params" if x == "params" else "comm_bytes"] for r in rows).mean / 1e6)
        elif x == "time":  # --system runs: the simulated seconds at the evaluation (docs/system-model.md)
            xs.append(mean_std(r["sim_time_s"] for r in rows).mean)
        else:
            xs.append(it)
        scale = 100.0 if col.endswith("_acc") else 1.0
        means.append(scale * s.mean)
        stds.append(scale * s.std)
    return xs, means, stds


def y_label(y: str, per_run: list[dict]) -> str:
    """The y axis of a curves panel: what was measured, on which model; ``auto`` names the accuracy its runs show."""
    if y == "auto":
        cols = {_first(r).acc_metric("auto") for r in per_run if r}
        y = cols.pop() if len(cols) == 1 else y
    return style.Y_LABELS[y]


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
    from fedcli.fl.layerwise import delta_lambda

    rows = run.intervals
    if not rows:
        raise ValueError(f"{run.path} has no intervals.csv rows (not a layer-wise run, or no adjustment yet)")
    rounds = sorted({int(r["round"]) for r in rows})
    rnd = rounds[round_index] if round_index < 0 else round_index
    if rnd not in rounds:
        raise ValueError(
            f"{run.path}/intervals.csv has no adjustment at round {rnd} (it has rounds {rounds[0]}..{rounds[-1]})"
        )
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


def panel_labels(panel, runs: dict) -> list[str]:
    """The legend texts of a panel's runs (the recipe's labels, else each run's legend), each followed by its data
    (``FedLAMA (τ′=2, φ=2), femnist/mlp``) when the panel's runs are not all on one dataset and model: two FedLAMA
    curves that differ in their data are never told apart by τ′ alone; and by what else differs between them
    (:func:`fedcli.reports.style.apart`: options, the system model's choices, else the recipe's run names)."""
    reps = [_first(runs[name]) for name in panel.runs]
    labels = list(panel.labels) or [r.legend() for r in reps]
    if len({style.data_label(r) for r in reps}) > 1:
        labels = [f"{lab}, {style.data_label(r)}" for lab, r in zip(labels, reps)]
    return style.apart(reps, labels, list(panel.runs), own=bool(panel.labels))  # every pair of runs told apart


def _panel_curves(ax, panel, runs: dict, x: str, y: str, target: float | None = None) -> None:
    """One curves panel; ``target`` (a recipe figure's): a horizontal line at that accuracy, labelled."""
    reps = [_first(runs[name]) for name in panel.runs]
    for name, kw in zip(panel.runs, style.styles(reps, panel_labels(panel, runs))):
        xs, m, s = _curve(runs[name], x, y)
        ax.plot(xs, m, linewidth=1.6, markersize=4, markevery=max(1, len(xs) // 8), **kw)
        if len(runs[name]) > 1:
            ax.fill_between(
                xs,
                [a - b for a, b in zip(m, s)],
                [a + b for a, b in zip(m, s)],
                color=kw["color"],
                alpha=0.15,
                linewidth=0,
            )
    ax.set_xlabel(style.X_LABELS[x])
    if x in style.PROGRESS_AXES:  # counts: integer ticks
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))
    style.plain_axis(ax.xaxis)
    ax.set_ylabel(y_label(y, [runs[n] for n in panel.runs]))
    ax.grid(alpha=0.3)
    if target is not None and y not in ("test_loss", "val_loss", "train_loss"):
        ax.axhline(100 * target, color="#555555", linestyle=(0, (4, 2)), linewidth=0.9, zorder=1)
        # under the line at the right: a learning curve rises from the lower left, so the lower right is free
        ax.annotate(
            f"target {100 * target:g}%",
            (1, 100 * target),
            xycoords=("axes fraction", "data"),
            textcoords="offset points",
            xytext=(-3, -3),
            ha="right",
            va="top",
            fontsize=7,
            color="#555555",
        )
    style.legend_below(ax, len(panel.runs))


def spans_decades(values) -> bool:
    """Whether positive ``values`` span two decades or more (largest >= 100 x smallest): on a linear axis every bar
    but the largest would be hidden (the bias tensors' 0.01 M params against a kernel's 8 M)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) >= 100 * min(positive)


def layer_signature(run) -> tuple:
    """A run's model as the per-layer figures see it: its tensors' (name, numel) in forward order (layers.csv)."""
    return tuple((str(r["name"]), int(r["numel"])) for r in run.layers)


def split_by_model(panel, runs: dict) -> list:
    """``panel`` as one panel per model among its runs (by :func:`layer_signature`): bars are placed by layer index
    and named by the layer, so runs of two models (digits' MLP and FEMNIST's, both ``hidden.0.weight``...) never
    share one axis; each panel of a split is titled by its data and size (``femnist/mlp, 109,386 params``)."""
    from dataclasses import replace

    groups: dict[tuple, list[int]] = {}
    for i, name in enumerate(panel.runs):
        groups.setdefault(layer_signature(_first(runs[name])), []).append(i)
    if len(groups) < 2:
        return [panel]
    labels = list(panel.labels) or [_first(runs[name]).legend() for name in panel.runs]  # the title names the data
    out = []
    for sig, members in groups.items():
        rep = _first(runs[panel.runs[members[0]]])
        data = f"{style.data_label(rep)}, {sum(n for _, n in sig):,} params"
        out.append(
            replace(
                panel,
                title=f"{panel.title}: {data}" if panel.title else data,
                runs=[panel.runs[i] for i in members],
                labels=[labels[i] for i in members],
            )
        )
    return out


def _panel_layers(ax, panel, runs: dict, kind: str, unit: str, log: bool | None) -> bool:
    """One bar per run and layer (the mean over the run's seeds); returns whether the y axis is logarithmic (``log``:
    a recipe's choice; None: for layer-size, when the bars span two decades, :func:`spans_decades`)."""
    key = "syncs" if kind == "layer-syncs" else ("comm_params" if unit == "params" else "comm_bytes")
    reps = [_first(runs[name]) for name in panel.runs]
    k = len(panel.runs)
    width = 0.8 / k
    names = None
    hatches = {"-": "", "--": "//", "-.": ".."}
    drawn = []
    for j, (name, kw) in enumerate(zip(panel.runs, style.styles(reps, panel_labels(panel, runs)))):
        idx, names, vals = _layer_values(runs[name], key)
        if key != "syncs":
            vals = [v / 1e6 for v in vals]
        drawn += vals
        ax.bar(
            [i + (j - (k - 1) / 2) * width for i in idx],
            vals,
            width=width,
            color=kw["color"],
            label=kw["label"],
            hatch=hatches.get(kw["linestyle"], "++"),
            edgecolor="white",
            linewidth=0.3,
        )
    ax.set_xlabel("Layer (parameter tensor, forward order)")
    ax.set_ylabel(
        {
            "syncs": "Synchronizations over the run",
            "comm_params": "Data size per layer, Eq. 8 (M params)",
            "comm_bytes": "Data moved per layer over the run (MB)",
        }[key]
    )
    if names is not None and len(names) <= 24:
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    if log is None:
        log = kind == "layer-size" and spans_decades(drawn)
    log = bool(log) and ax.dataLim.ymax > 0  # a log axis needs a positive bar (a run that moved nothing stays linear)
    if log:
        ax.set_yscale("log")
    else:
        style.plain_axis(ax.yaxis)
    if key == "syncs":  # a count: whole synchronizations, never 0.25 of one on a short run
        from matplotlib.ticker import MaxNLocator

        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="y", alpha=0.3)
    style.legend_right(ax)
    return log


def _panel_delta_lambda(ax, panel, runs: dict, figure_def) -> str:
    """delta_l and 1 - lambda_l of one FedLAMA run; returns the caption's description of what is drawn."""
    name = panel.runs[0]
    per_seed = runs[name]
    seeds = sorted(per_seed)
    seed = seeds[figure_def.seed] if -len(seeds) <= figure_def.seed < len(seeds) else seeds[0]
    run = per_seed[seed]
    deltas, one_minus, order, rnd, it = delta_lambda_curves(run, figure_def.round)
    ls = list(range(1, len(deltas) + 1))
    color = style.method_style(run)[0]
    ax.plot(ls, deltas, marker="o", markersize=4, color=color, label=r"$\delta_l$: discrepancy ratio (Eq. 3)")
    ax.plot(
        ls,
        one_minus,
        marker="s",
        markersize=4,
        color="#707070",
        linestyle="--",
        label=r"$1 - \lambda_l$: size ratio (Eq. 4)",
    )
    cp = cross_point(deltas, one_minus)
    # the caption (plain text) and the legend (mathtext: subscripts set as subscripts) say the same
    if cp is None:
        short, math = "no crossing: δ_l < 1 − λ_l for every l", r"no crossing: $\delta_l < 1 - \lambda_l$ for every $l$"
    elif cp == 1:
        short, math = (
            "no crossing: δ_l ≥ 1 − λ_l from l = 1",
            r"no crossing: $\delta_l \geq 1 - \lambda_l$ from $l = 1$",
        )
    else:
        short = f"the curves cross at l = {cp}"
        math = rf"the curves cross at $l = {cp}$"
        ax.axvline(cp, color="grey", linestyle=":", linewidth=1)
    where = _given_long(run, rnd)
    layer_names = {int(r["layer"]): str(r["name"]) for r in run.layers} if run.layers else {}
    ax.set_xticks(ls)
    if layer_names and len(ls) <= 24:
        ax.set_xticklabels(
            [f"{l}: {layer_names.get(order[l - 1], order[l - 1])}" for l in ls], rotation=60, ha="right", fontsize=7
        )
    ax.set_xlabel(r"$l$: layers in ascending order of $d_l$")
    ax.set_ylabel("Ratio")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    style.legend_right(ax, f"after round {rnd} (iteration {it}):\n{math}")
    return (
        f"{panel.labels[0] if panel.labels else run.legend()}, seed {seed}: the adjustment after round {rnd} "
        f"(iteration {it}); {short}: {where}."
    )


def _interval_grid(rows: list[dict]) -> tuple:
    """The adjustments' iterations, the layers, their names, and the grid [layer, adjustment] of intervals (NaN where
    intervals.csv has no row)."""
    import numpy as np

    its = sorted({int(r["iteration"]) for r in rows})
    layers = sorted({int(r["layer"]) for r in rows})
    names = {int(r["layer"]): str(r["name"]) for r in rows}
    grid = np.full((len(layers), len(its)), np.nan)
    for r in rows:
        grid[layers.index(int(r["layer"])), its.index(int(r["iteration"]))] = float(r["interval"])
    return its, layers, names, grid


def _write_intervals(ax, grid, its: list[int], colours: list, values: list[int]) -> None:
    """Write each cell's interval in it, white on dark shades and black on light ones."""
    import numpy as np
    from matplotlib.colors import to_rgb

    for i in range(grid.shape[0]):
        for j in range(len(its)):
            if np.isfinite(grid[i, j]):
                ax.text(
                    its[j],
                    i,
                    f"{int(grid[i, j])}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if sum(to_rgb(colours[values.index(int(grid[i, j]))])) < 1.6 else "black",
                )


def _column_edges(its: list[int]) -> list[float]:
    """The columns' edges: halfway between adjacent adjustments, and half a step beyond the first and the last."""
    return (
        [its[0] - (its[1] - its[0] if len(its) > 1 else 1) / 2]
        + [(a + b) / 2 for a, b in zip(its, its[1:])]
        + [its[-1] + (its[-1] - its[-2] if len(its) > 1 else 1) / 2]
    )


def _panel_intervals(ax, panel, runs: dict, figure_def) -> str:
    """Each layer's interval at each adjustment of one layer-wise run (intervals.csv), as a grid of layers (rows, in
    forward order) by adjustments (columns, at their iterations), shaded by the interval, with the interval written in
    the cells when they are few enough to read; returns the caption's description."""
    import numpy as np
    from matplotlib.colors import BoundaryNorm, ListedColormap

    name = panel.runs[0]
    per_seed = runs[name]
    seeds = sorted(per_seed)
    seed = seeds[figure_def.seed] if -len(seeds) <= figure_def.seed < len(seeds) else seeds[0]
    run = per_seed[seed]
    rows = run.intervals
    if not rows:
        raise ValueError(f"{run.path} has no intervals.csv rows (not a layer-wise run, or no adjustment yet)")
    its, layers, names, grid = _interval_grid(rows)
    values = sorted({int(v) for v in grid[np.isfinite(grid)]})
    base = style.method_style(run)[0]
    colours = [
        style.ramp(base, len(values) - 1 - k, len(values)) for k in range(len(values))
    ]  # longest: the method's own
    bounds = [values[0] - 0.5] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 0.5]
    mesh = ax.pcolormesh(
        _column_edges(its),
        np.arange(len(layers) + 1) - 0.5,
        grid,
        cmap=ListedColormap(colours),
        norm=BoundaryNorm(bounds, len(values)),
        edgecolors="white" if len(its) <= 40 else "face",
        linewidth=0.5 if len(its) <= 40 else 0,
    )
    if len(its) <= 24 and len(layers) <= 40:  # a number fits a cell only when the columns are wide enough to read it
        _write_intervals(ax, grid, its, colours, values)
    ax.set_yticks(range(len(layers)))
    ax.set_yticklabels([names[l] for l in layers], fontsize=7 if len(layers) <= 24 else 5)
    ax.invert_yaxis()  # forward order from the top
    ax.set_xlabel("Local iterations (at each interval adjustment)")
    ax.set_ylabel("Layer (parameter tensor)")
    ax.set_xticks(adjustment_ticks(its))
    style.plain_axis(ax.xaxis)
    bar = ax.figure.colorbar(mesh, ax=ax, ticks=values, fraction=0.05, pad=0.02)
    bar.set_label("Interval (local iterations)")
    long = sum(
        1 for l in layers if grid[layers.index(l)][np.isfinite(grid[layers.index(l)])].max(initial=0) == values[-1]
    )
    return (
        f"{panel.labels[0] if panel.labels else run.legend()}, seed {seed}: {len(its)} adjustment(s) from iteration "
        f"{its[0]} to {its[-1]}; intervals {', '.join(map(str, values))}; {long} of {len(layers)} layer(s) had the "
        f"longest ({values[-1]}) at some adjustment"
    )


def adjustment_ticks(its: list[int], most: int = 10) -> list[int]:
    """The intervals figure's x ticks: adjustments themselves (the columns' centres), every k-th from the first so
    that at most ``most`` are labelled; never a tick between two adjustments or past the last (the run's end)."""
    return its[:: -(-len(its) // most)] if its else []


def _given_long(run, rnd: int) -> str:
    """What the adjustment after round ``rnd`` gave, read from intervals.csv (the run's own rule: ``--lama-rule``
    ``reference`` also gives the first layer past the cross point the long interval, ``paper`` does not): "at this
    adjustment 1 of 6 layer(s) got the long interval φτ′ = 8 (hidden.1.weight)"; other adjustments may differ (the
    intervals figure shows them all, layer-syncs counts the whole run)."""
    group = [r for r in run.intervals if int(r["round"]) == rnd]
    schedule = run.params("schedule")  # the layer-wise schedule's options, as its spec declares them
    longest = int(schedule.tau or 0) * int(schedule.phi or 0) or max(int(r["interval"]) for r in group)
    got = [str(r["name"]) for r in group if int(r["interval"]) >= longest]
    rule = schedule.lama_rule
    return (
        f"at this adjustment {len(got)} of {len(group)} layer(s) got the long interval φτ′ = {longest}"
        + (f" ({', '.join(got)})" if got else "")
        + f" under --lama-rule {rule}; other adjustments may differ (the "
        f"intervals figure shows each one, layer-syncs counts the whole run)"
    )


def _lower(label: str) -> str:
    label = label.replace("\n", " ")
    return label[:1].lower() + label[1:]


def _drawn(figure_def, axes, panels: list, runs: dict) -> str:
    """What a curves or per-layer figure draws, read from its axes: the quantity against what, the panels from left,
    how the seeds are combined (mean ± std band, or one seed), a log scale; for its caption."""
    logs = [ax.get_yscale() == "log" for ax in axes]
    names = list(dict.fromkeys(n for p in panels for n in p.runs))
    seeds = seeds_drawn(runs, names)
    many = not seeds.startswith(("one", "no"))
    y = f"Y axis: {_lower(axes[0].get_ylabel())}" + (", log scale" if any(logs) else "")
    if not FIGURE_KINDS[figure_def.kind].per_layer:
        text = f"{y}; x axis: {_lower(axes[0].get_xlabel())}; each line is {seeds}" + (
            ", with a band of ± one standard deviation (sample std)" if many else ", no band"
        )
    else:
        text = (
            f"{y}; x axis: the layers (parameter tensors, in forward order), one bar per run; each bar is {seeds}"
            + (" (no spread drawn)" if many else "")
        )
    if len(panels) > 1 and any(p.title for p in panels):
        text += "; panels from left: " + "; ".join(p.title or "untitled" for p in panels)
    if len(panels) > len(figure_def.panels):
        text += " (one panel per model: their layers differ, so no two models share a layer axis)"
    return text


def build(figure_def, runs: dict, x: str | None = None):
    """The matplotlib figure of ``figure_def`` (a ``FigureDef``; ``runs``: run name -> {seed: RunData}) and its caption
    text: the paper and title, then what is drawn (the axes, how seeds are combined; :func:`_drawn`), then each panel's
    own account (delta-lambda, intervals, clients) and the figure's notes. ``x``: the x axis of curves, over the
    figure's own (``fedcli report --x``). Per-layer figures get one panel per model among a panel's runs
    (:func:`split_by_model`). A kind with a layout of its own (``FigureKind.build``) draws the whole figure."""
    kind = FIGURE_KINDS[figure_def.kind]
    if kind.build is not None:
        return kind.build(figure_def, runs)
    plt = _plt()
    x = style.x_axis(x or figure_def.x)
    if kind.x_axis and x == "time":
        check_simulated_time(r for per_seed in runs.values() for r in per_seed.values())
    panels = (
        [q for p in figure_def.panels for q in split_by_model(p, runs)] if kind.per_layer else list(figure_def.panels)
    )
    n = len(panels)
    shared = "sharex" in kind.keys and figure_def.sharex and n > 1
    fig, axes = plt.subplots(1, n, figsize=(kind.width * n, 3.9), squeeze=False, sharex=shared, sharey=shared)
    described = []
    for ax, panel in zip(axes[0], panels):
        said = kind.panel(ax, panel, runs, figure_def, x)
        if said:
            described.append(said)
        ax.set_title(panel.title or "", fontsize=10)
    if shared:
        described.append(_share_x(axes[0], x))
    if "target" in kind.keys and figure_def.target is not None:
        described.append(f"The dashed line marks the target, {100 * figure_def.target:g}%")
    if kind.axes_caption:
        described.insert(0, _drawn(figure_def, axes[0], panels, runs))
    caption = " — ".join(t for t in (figure_def.paper, figure_def.title) if t)
    caption = ". ".join(t.rstrip(".") for t in (caption, *described, figure_def.notes) if t)
    return fig, caption[:1].upper() + caption[1:]  # a caption starts upper-case ("Smoke scale of: ...")


def _share_x(axes, x: str) -> str:
    """Panels that share their x axis (a recipe figure's ``sharex``): one range for all, logarithmic where the
    panels' ranges span two decades (a curve at 30 KB/s and one at 30 MB/s), labelled once; the caption's words."""
    ends = [max(line.get_xdata(), default=0) for ax in axes for line in ax.get_lines() if len(line.get_xdata())]
    starts = [v for ax in axes for line in ax.get_lines() for v in line.get_xdata() if v > 0]
    for ax in axes[1:]:
        ax.set_ylabel("")
        ax.tick_params(labelleft=False)
    handles, labels = axes[0].get_legend_handles_labels()
    if labels and all(ax.get_legend_handles_labels()[1] == labels for ax in axes):  # the same runs' legend: once,
        for ax in axes:  # above the panels
            if ax.get_legend() is not None:
                ax.get_legend().remove()
        axes[0].figure.legend(
            handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(labels), frameon=False, fontsize=8
        )
    if x == "time":
        for ax in axes:  # a narrow panel's label: the caption says it is the system model's
            ax.set_xlabel("Simulated time (s)")
    if ends and starts and spans_decades(ends):
        axes[0].set_xscale("log")
        axes[0].set_xlim(min(starts) * 0.8, max(ends) * 1.25)
        return "The panels share one x axis, logarithmic (their ranges span two decades or more)"
    return "The panels share one x axis"


def draw(figure_def, runs: dict, out_dir: Path, x: str | None = None, warn=None) -> list[Path]:
    """Draw one figure; ``runs`` maps run name -> {seed: RunData}. Returns the files written (PNG, PDF, caption).
    ``warn``: called with one line, naming the runs by their names in ``runs``, when the figure's runs are not on one
    dataset, model and budget."""
    drawn = [name for name in figure_def.run_names() if runs.get(name)] or [name for name in runs if runs[name]]
    msg = style.data_warning([_first(runs[name]) for name in drawn], drawn)
    if msg and warn is not None:
        warn(f"{figure_def.name}: {msg}")
    fig, caption = build(figure_def, runs, x)
    return save(fig, out_dir, figure_def.name, caption)


# ------------------------------------------------------------------------------------------------- figure kinds
@dataclass(frozen=True)
class FigureKind:
    """One ``kind`` of a recipe's ``[[figures]]`` entry: what draws it and what it accepts.

    ``panel(ax, panel, runs, figure_def, x)`` draws one panel and returns what the caption says of it (or None);
    ``build(figure_def, runs)`` instead draws the whole figure in a layout of its own and returns (figure, caption).
    ``keys``: the keys of a ``[[figures]]`` entry this kind accepts beyond every kind's own (``sharex``, ``target``,
    ``along``...; ``lines``: its runs are listed in lines, not panels); ``one_run``: each panel shows one run;
    ``per_layer``: the x axis is the layers (one panel per model); ``x_axis``: it draws against the figure's ``x``
    (``--x``); ``timed``: it draws simulated time whatever ``x``; ``axes_caption``: the caption says what the axes
    draw (:func:`_drawn`); ``width``: inches a panel."""

    name: str
    panel: Callable | None = None
    build: Callable | None = None
    keys: frozenset = frozenset()
    one_run: bool = False
    per_layer: bool = False
    x_axis: bool = False
    timed: bool = False
    axes_caption: bool = False
    width: float = 6.4

    def draws_time(self, x: str) -> bool:
        """Whether a figure of this kind drawn against ``x`` (an axis name) needs every run's simulated time."""
        return self.timed or (self.x_axis and x == "time")


def _curves(ax, panel, runs: dict, figure_def, x: str) -> None:
    _panel_curves(ax, panel, runs, x, figure_def.y, figure_def.target)


def _layers(ax, panel, runs: dict, figure_def, x: str) -> None:
    _panel_layers(ax, panel, runs, figure_def.kind, "params" if figure_def.y == "params" else "bytes", figure_def.log)


def _time_to_target(figure_def, runs: dict):
    from fedcli.reports.summary import build as summary  # its own layout, a paper column (fedcli/reports/summary.py)

    return summary(figure_def, runs)


#: the built-in figure kinds, in the order recipes' error messages list them
BUILTIN = (
    FigureKind("curves", _curves, keys=frozenset({"sharex", "target"}), x_axis=True, axes_caption=True, width=5.2),
    FigureKind("layer-syncs", _layers, per_layer=True, axes_caption=True),
    FigureKind("layer-size", _layers, per_layer=True, axes_caption=True),
    FigureKind(
        "delta-lambda",
        lambda ax, panel, runs, figure_def, x: _panel_delta_lambda(ax, panel, runs, figure_def),
        one_run=True,
    ),
    FigureKind(
        "intervals", lambda ax, panel, runs, figure_def, x: _panel_intervals(ax, panel, runs, figure_def), one_run=True
    ),
    FigureKind("clients", lambda ax, panel, runs, figure_def, x: panel_clients(ax, panel, runs)),
    FigureKind(
        "time-to-target", build=_time_to_target, keys=frozenset({"target", "along", "lines", "baseline"}), timed=True
    ),
)

#: kind name -> its :class:`FigureKind`: the built-in ones, then any registered with :func:`register_figure_kind`
FIGURE_KINDS: dict[str, FigureKind] = {k.name: k for k in BUILTIN}


def register_figure_kind(kind: FigureKind) -> FigureKind:
    """Make ``kind`` a recipe's ``[[figures]]`` ``kind = "NAME"`` (one kind a name; it needs ``panel`` or ``build``)."""
    if not kind.name or kind.name in FIGURE_KINDS or (kind.panel is None) == (kind.build is None):
        raise TypeError(f"figure kind {kind.name!r}: a name of its own and one of panel or build")
    FIGURE_KINDS[kind.name] = kind
    return kind
