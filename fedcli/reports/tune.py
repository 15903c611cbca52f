"""``fedcli report DIR`` on a study folder of ``fedcli tune`` (issue 58, section 3; docs/tuning.md, "Reading a study").

It is handed the study read back and analysed (``fedcli.tune.results.summary``: plain data and the trials) and
prints, per study, the trials by state, the compute spent against the budget (trials x the iterations of one full
trial) and against the full grid, the best configurations (one objective: the top k, with their run directories) or
the Pareto set (two objectives), the baseline (trial 0, the recipe's own configuration) marked, the parameters'
importances, the confirmation over seeds (``fedcli tune DIR --confirm K --seeds N``) when there is one, and the
validity notes, one sentence each. Figures (:func:`write_figures`, fedcli's report style,
``fedcli.reports.style``): ``history-<study>`` (the objective per trial in the order run, best so far as a line),
``pareto-<study>`` (two objectives: the front coloured, dominated trials grey), ``curves-<study>`` (the first
objective's metric per evaluation, coloured by state, each pruned trial's last point marked x, the rungs dotted) and
``importance-<study>`` (one panel per objective).
"""

from __future__ import annotations

import math
from pathlib import Path

from fedcli.reports import style

#: the colour of each state in the figures (fedcli's fallback palette; dominated and pruned trials quieter)
STATE_COLORS = {
    "COMPLETE": "#332288",
    "PRUNED": "#DDCC77",
    "diverged": "#CC6677",
    "RUNNING": "#88CCEE",
    "FAIL": "#882255",
    "WAITING": "#999933",
}
DOMINATED = "#BBBBBB"
BASELINE_MARKER = "*"


def _num(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return str(v)


def _state(t) -> str:
    return "diverged" if t.run_status == "diverged" else t.state


def _trial_cell(t) -> str:
    return f"{t.number} (baseline)" if t.baseline else str(t.number)


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    esc = [[str(c).replace("|", "\\|") for c in r] for r in [header, *rows]]
    return [
        "| " + " | ".join(esc[0]) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(r) + " |" for r in esc[1:]),
    ]


def _pct(a: int, b: int | None) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def _md_head(folder) -> list[str]:
    """The title and the one-paragraph summary of the study folder (recipe, sampler, objectives, selection split)."""
    rec, objs = folder.record, folder.objectives
    split = "the test set (optimistic)" if folder.select_on == "test" else "the validation split"
    return [
        f"# Study folder {folder.root}",
        "",
        f"Recipe {rec.get('recipe', '?')} at scale {rec.get('scale') or 'base'}; sampler {rec.get('sampler', '?')}, "
        f"pruner {rec.get('pruner', '?')}, seed {rec.get('seed', '?')}; objective{'s' if len(objs) > 1 else ''} "
        f"{' and '.join(o.label for o in objs)}; selected on {split}.",
        "",
    ]


def _md_counts(s: dict) -> list[str]:
    """A study's heading, its trial counts by state, and its compute spent against budget and full grid."""
    st = s["study"]
    counts = ", ".join(f"{n} {k}" for k, n in sorted(s["states"].items()))
    grid = (
        f"; the full grid of {st.grid_size} configurations would take {s['grid']} "
        f"({_pct(s['spent'], s['grid'])} of "
        f"it spent)"
        if s["grid"]
        else "; the space has no finite grid"
    )
    return [
        f"## Study '{st.name}'",
        "",
        f"Trials: {counts or 'none yet'} ({len(st.trials)} of {st.planned_trials} planned).",
        "",
        f"Compute: {s['spent']} {st.unit_name} spent of a budget of {s['budget']} ({st.planned_trials} trials x "
        f"{st.budget_iterations} {st.unit_name}, {_pct(s['spent'], s['budget'])}){grid}.",
        "",
    ]


def _trial_row(rank: str, t, names: list[str], root) -> list[str]:
    """One row of the best/Pareto table: rank, trial, state, its parameters, its objective values, its run folder."""
    return [
        rank,
        _trial_cell(t),
        _state(t),
        *(_num(t.params.get(n)) for n in names),
        *(_num(v) for v in t.values),
        str(root / t.run),
    ]


def _md_best(s: dict, folder, names: list[str]) -> list[str]:
    """The best configurations (one objective) or the Pareto set (several), and the baseline trial if not among them."""
    objs = folder.objectives
    if len(objs) == 1:
        shown = list(s["best"])
        title = f"Best {len(shown)} configuration(s), best first"
    else:
        shown = list(s["pareto"])
        title = f"Pareto set ({len(shown)} non-dominated of the completed trials), by {objs[0].metric}"
    base = s["baseline"]
    rows = [_trial_row(str(i + 1), t, names, folder.root) for i, t in enumerate(shown)]
    if base is not None and base not in shown:
        rows.append(_trial_row("-", base, names, folder.root))
    cols = [o.label for o in objs]
    out = [f"{title}:", ""]
    out += _table(rows, ["rank", "trial", "state", *names, *cols, "run"]) if rows else ["(no completed trial yet)"]
    return [*out, ""]


def _md_confirmed(s: dict, folder, names: list[str]) -> list[str]:
    """The table of the configurations confirmed over seeds, the chosen one marked (none if nothing confirmed)."""
    conf = s.get("confirmed")
    if not (conf and conf["rows"]):
        return []
    metric = folder.objectives[0].metric
    best = conf["best"]
    crows = [
        [
            f"{r['number']}{' (chosen)' if best is not None and r is best else ''}",
            *(_num(r["params"].get(n)) for n in names),
            _num(r["mean"]),
            str(r["seeds"]),
            ", ".join(_num(v) for v in r["values"]),
        ]
        for r in conf["rows"]
    ]
    out = [
        f"Confirmed over seeds ({folder.root / 'confirm'}; the chosen configuration has the best mean {metric}):",
        "",
    ]
    return [*out, *_table(crows, ["trial", *names, f"mean {metric}", "seeds", "per seed"]), ""]


def _md_importances(s: dict, objs) -> list[str]:
    """Each objective's parameter importances (eta^2: the share of its variance one parameter alone explains)."""
    out = []
    for o, imp in zip(objs, s["importances"]):
        if imp:
            said = ", ".join(f"{k} {v:.2f}" for k, v in sorted(imp.items(), key=lambda kv: -kv[1]))
            out += [
                f"Parameter importance for {o.metric} (share of its variance one parameter alone explains, "
                f"eta^2): {said}.",
                "",
            ]
    return out


def render_md(report: dict, top: int) -> str:
    """The study report as Markdown (module docstring)."""
    folder = report["folder"]
    out = _md_head(folder)
    for s in report["studies"]:
        st = s["study"]
        names = list(st.space) or sorted({k for t in st.trials for k in t.params})
        out += _md_counts(s)
        out += _md_best(s, folder, names)
        out += _md_confirmed(s, folder, names)
        out += _md_importances(s, folder.objectives)
    notes = [*report["validity"], *report["notes"]]
    if notes:
        out += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ figures


def _mark(ax, t, x, y, color, **kw) -> None:
    ax.plot(
        [x],
        [y],
        linestyle="none",
        marker=BASELINE_MARKER if t.baseline else "o",
        markersize=11 if t.baseline else 5,
        color=color,
        markeredgecolor="black" if t.baseline else color,
        **kw,
    )


def _legend_states(ax, states: list[str], baseline: bool, extra=()) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], linestyle="none", marker="o", color=STATE_COLORS.get(s, "#4D4D4D"), label=s.lower())
        for s in states
    ]
    handles += list(extra)
    if baseline:
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker=BASELINE_MARKER,
                markersize=11,
                color="#FFFFFF",
                markeredgecolor="black",
                label="baseline (trial 0)",
            )
        )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)


def _finish(fig, ax, out: Path, name: str, labels: tuple[str, str, str], caption: str) -> list[Path]:
    """Axis labels and title (``labels``: x, y, title), a light grid, and the figure saved (:func:`style.save`)."""
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(labels[2])
    ax.grid(alpha=0.3)
    return style.save(fig, out, name, caption)


def _history(plt, folder, s, out: Path) -> list[Path]:
    st, o = s["study"], folder.objectives[0]
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    pts = [(t.number, t.values[0], t) for t in st.trials if t.values and t.values[0] is not None]
    for x, y, t in pts:
        _mark(ax, t, x, y, STATE_COLORS.get(_state(t), "#4D4D4D"), zorder=3)
    best, line = None, []
    for x, y, t in sorted(pts, key=lambda p: p[0]):
        if t.usable and (best is None or o.better(y, best)):
            best = y
        if best is not None:
            line.append((x, best))
    if line:
        ax.step(
            [p[0] for p in line], [p[1] for p in line], where="post", color="#44AA99", label="best so far", zorder=2
        )
    from matplotlib.lines import Line2D

    _legend_states(
        ax,
        sorted({_state(t) for _, _, t in pts}),
        any(t.baseline for _, _, t in pts),
        [Line2D([], [], color="#44AA99", label="best so far")] if line else [],
    )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _finish(
        fig,
        ax,
        out,
        f"history-{st.name}",
        ("Trial number", o.label, f"Optimisation history: study '{st.name}'"),
        f"Optimisation history of study '{st.name}': {o.label} of each "
        f"trial in the order it was asked (pruned trials: their value where they stopped), the best "
        f"completed value so far as a line; the baseline (trial 0) as a star.",
    )


def _pareto(plt, folder, s, out: Path) -> list[Path]:
    st = s["study"]
    o0, o1 = folder.objectives
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    front = {id(t) for t in s["pareto"]}
    done = [t for t in st.trials if t.usable]
    for t in done:
        _mark(ax, t, t.values[1], t.values[0], STATE_COLORS["COMPLETE"] if id(t) in front else DOMINATED, zorder=3)
    line = sorted(((t.values[1], t.values[0]) for t in s["pareto"]))
    if line:
        ax.plot([p[0] for p in line], [p[1] for p in line], color=STATE_COLORS["COMPLETE"], alpha=0.6, zorder=2)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], linestyle="none", marker="o", color=STATE_COLORS["COMPLETE"], label="Pareto set"),
        Line2D([], [], linestyle="none", marker="o", color=DOMINATED, label="dominated"),
    ]
    _legend_states(ax, [], any(t.baseline for t in done), handles)
    return _finish(
        fig,
        ax,
        out,
        f"pareto-{st.name}",
        (o1.label, o0.label, f"Pareto front: study '{st.name}'"),
        f"Pareto front of study '{st.name}': each completed trial's "
        f"{o0.label} against its {o1.label}; the non-dominated trials coloured and joined, the dominated "
        f"ones grey; the baseline (trial 0) as a star.",
    )


def _curves(plt, folder, s, out: Path) -> list[Path]:
    st, o = s["study"], folder.objectives[0]
    x = st.unit  # the rungs' unit: a study whose budget is in rounds is drawn against rounds
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    seen = set()
    for t in st.trials:
        pts = [
            (float(r[x]), float(r[o.metric]))
            for r in t.rows
            if r.get(o.metric) not in (None, "") and r.get(x) not in (None, "")
        ]
        if not pts:
            continue
        word = _state(t)
        seen.add(word)
        color = STATE_COLORS.get(word, "#4D4D4D")
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            color=color,
            alpha=0.85,
            linewidth=1.8 if t.baseline else 1.0,
            linestyle="--" if t.baseline else "-",
        )
        if t.state == "PRUNED":
            ax.plot([pts[-1][0]], [pts[-1][1]], marker="x", markersize=8, color="black", linestyle="none", zorder=4)
        if word == "diverged":  # its last evaluation before the blow-up (often its only one: no line to see)
            ax.plot([pts[-1][0]], [pts[-1][1]], marker="D", markersize=5, color=color, linestyle="none", zorder=4)
    for r in st.rungs:
        ax.axvline(r, color="#999999", linestyle=":", linewidth=0.8)
    from matplotlib.lines import Line2D

    extra = (
        [Line2D([], [], marker="x", color="black", linestyle="none", label="pruned here")] if "PRUNED" in seen else []
    )
    extra += [Line2D([], [], color="#999999", linestyle=":", label="pruning rung")] if st.rungs else []
    extra += [Line2D([], [], color="#4D4D4D", linestyle="--", label="baseline (trial 0)")]
    handles = [Line2D([], [], color=STATE_COLORS.get(w, "#4D4D4D"), label=w.lower()) for w in sorted(seen)] + extra
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)
    return _finish(
        fig,
        ax,
        out,
        f"curves-{st.name}",
        (style.X_LABELS["rounds" if x == "round" else "iterations"], o.metric, f"Learning curves: study '{st.name}'"),
        f"Learning curves of study '{st.name}': {o.metric} at each "
        f"evaluation of every trial, coloured by state; each pruned trial's last evaluation marked x, "
        f"a diverged trial's last one a diamond; the pruning rungs dotted; the baseline (trial 0) dashed.",
    )


def _importance(plt, folder, s, out: Path) -> list[Path]:
    st = s["study"]
    panels = [(o, imp) for o, imp in zip(folder.objectives, s["importances"]) if imp]
    if not panels:
        return []
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for ax, (o, imp) in zip(axes[0], panels):
        names = sorted(imp, key=lambda k: imp[k])
        ax.barh(names, [imp[n] for n in names], color="#332288")
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"η² for {o.metric}")
        ax.set_title(o.label, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"Parameter importances: study '{st.name}'", fontsize=10)
    return style.save(
        fig,
        out,
        f"importance-{st.name}",
        f"Parameter importances of study '{st.name}', per objective: the "
        f"share of the objective's variance over the completed trials that each parameter alone explains "
        f"(correlation ratio eta^2; ranges in three bins of equal count), not Optuna's fANOVA.",
    )


def write_figures(report: dict, out_dir: str | Path) -> list[Path]:
    """The study's figures (module docstring) into ``out_dir``: PNG, PDF and a caption each."""
    plt = style.plt()
    out = Path(out_dir)
    from fedcli.safefs import make_dir

    make_dir(out)
    folder = report["folder"]
    files: list[Path] = []
    for s in report["studies"]:
        if not s["study"].trials:
            continue
        files += _history(plt, folder, s, out)
        if len(folder.objectives) > 1:
            files += _pareto(plt, folder, s, out)
        files += _curves(plt, folder, s, out)
        files += _importance(plt, folder, s, out)
    return files
