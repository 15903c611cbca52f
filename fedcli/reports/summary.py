"""The ``time-to-target`` figure: the question a system-model sweep asks ("which method reaches X% first in wall-clock
time on this network, and on which networks does it not?") in one paper-sized figure (docs/reports.md, "Time to a
target against the network").

Upper panel: each line's simulated time to the target accuracy (``fedcli.reports.aggregate.rounds_to_target``: the
first evaluation at or above it, mean over the seeds that reach it) against a system option (``along``: the uplink
bandwidth, say) on log-log axes, one run per point, one line per method. Lower panel, on the same x axis: each
other line's time divided by the ``baseline`` line's at the same x (below 1: it reaches the target sooner), with
parity (1) drawn and each ratio written at its point; where the ratio crosses 1 between two points the crossing
(interpolated in log x and log ratio) is marked on both panels: there the advantage flips. Drawn for one paper
column (3.3 in, text at 8 pt; the PDF's fonts are Type 42, :func:`fedcli.reports.style.plt`).
"""

from __future__ import annotations

import math

from fedcli.errors import ConfigError
from fedcli.reports import style

#: the figure's size (inches): a paper's single column, two panels stacked
WIDTH_IN, HEIGHT_IN = 3.3, 3.9
#: units of the x axis, by option (``fedcli.specs.system.QUANTITIES``'s, in words a reader knows)
UNITS = {"uplink": "B/s", "downlink": "B/s", "speed": "FLOP/s", "latency": "s", "server_time": "s"}
AXIS = {
    "uplink": "Uplink bandwidth",
    "downlink": "Downlink bandwidth",
    "speed": "Device speed",
    "latency": "Latency (one way)",
    "server_time": "Server time per round",
}


def option_value(run, along: str) -> float:
    """The run's value of the system option ``along``: a number, or a ``constant:V`` distribution (a run whose
    clients draw it from another distribution has no one value: ConfigError)."""
    v = run.config.get(along)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    text = str(v or "").strip()
    kind, _, rest = text.partition(":")
    try:
        return float(rest if kind == "constant" else text)
    except ValueError:
        raise ConfigError(
            f"{run.path}: --{along.replace('_', '-')} is '{text}', not one value (constant:V); a "
            f"time-to-target figure places each run at one value of it"
        ) from None


def human(v: float, unit: str) -> str:
    """``30 KB/s``, ``3 MB/s``, ``1 GFLOP/s``, ``50 ms``: a tick label (powers of 1,000)."""
    if unit == "s":
        return f"{v * 1e3:g} ms" if 0 < v < 1 else f"{v:g} s"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= factor:
            return f"{v / factor:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def points(figure_def, runs: dict) -> list[tuple[str, list[tuple[float, float, int, int, str]]]]:
    """Per line (its title): (x, mean seconds to the target or nan, seeds reaching it, seeds, run name), by x."""
    from fedcli.reports.aggregate import rounds_to_target

    out = []
    for line in figure_def.lines:
        pts = []
        for name in line.runs:
            per_seed = runs[name]
            first = next(iter(per_seed.values()))
            reach = rounds_to_target(per_seed, figure_def.target, figure_def.y)
            secs = reach.time_s.mean if reach.reached and reach.time_s.ok else float("nan")
            pts.append((option_value(first, figure_def.along), secs, reach.reached, reach.n, name))
        xs = [p[0] for p in pts]
        if len(set(xs)) != len(xs):
            raise ConfigError(
                f"figure '{figure_def.name}': line '{line.title}' has two runs at {figure_def.along} = "
                f"{xs[0]:g}; each of its runs is one point"
            )
        out.append((line.title, sorted(pts)))
    return out


def crossings(xs: list[float], ratios: list[float]) -> list[float]:
    """Where ``ratios`` (a line's time / the baseline's, at ``xs``) cross 1, each interpolated linearly in log x and
    log ratio between the two points around it (a point exactly at 1: that x)."""
    out = []
    pairs = [(x, r) for x, r in zip(xs, ratios) if r > 0 and math.isfinite(r)]
    for (x0, r0), (x1, r1) in zip(pairs, pairs[1:]):
        a, b = math.log(r0), math.log(r1)
        if a == 0:
            out.append(x0)
        elif a * b < 0:
            t = a / (a - b)
            out.append(math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))
    if pairs and math.log(pairs[-1][1]) == 0 and (not out or out[-1] != pairs[-1][0]):
        out.append(pairs[-1][0])
    return out


def build(figure_def, runs: dict):
    """The figure and its caption (fedcli/reports/figures.py saves them)."""
    from fedcli.reports.rundata import check_simulated_time

    plt = style.plt()
    check_simulated_time(r for name in figure_def.run_names() for r in runs[name].values())
    lines = points(figure_def, runs)
    unit = UNITS[figure_def.along]
    target = f"{100 * figure_def.target:g}%"
    reps = [next(iter(runs[line.runs[0]].values())) for line in figure_def.lines]
    with plt.rc_context(style.PRINT_RC):
        fig, (top, low) = plt.subplots(
            2, 1, figsize=(WIDTH_IN, HEIGHT_IN), sharex=True, gridspec_kw={"height_ratios": [1.6, 1]}
        )
        kws = style.styles(reps, [t for t, _ in lines])
        base = dict(lines)[figure_def.baseline]
        base_at = {x: s for x, s, *_ in base}
        said, flips = [], []
        for (title, pts), kw in zip(lines, kws):
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            top.plot(xs, ys, linewidth=1.4, markersize=4, **kw)
            missed = [p for p in pts if not p[2]]
            if missed:
                said.append(f"{title} does not reach {target} at " + ", ".join(human(p[0], unit) for p in missed))
            if title == figure_def.baseline:
                continue
            ratio = [s / base_at[x] if x in base_at and base_at[x] > 0 else float("nan") for x, s, *_ in pts]
            line_flips = _ratio_line(top, low, title, xs, ratio, kw, unit, figure_def.baseline)
            flips += line_flips
            finite = [(x, r) for x, r in zip(xs, ratio) if math.isfinite(r)]
            if finite and not line_flips:
                said += _sooner_or_later(title, finite, figure_def.baseline, target, unit)
        _finish_axes(plt, fig, (top, low), lines, figure_def, target)
    return fig, _caption(figure_def, runs, target, flips, said)


def _ratio_line(top, low, title: str, xs: list, ratio: list, kw: dict, unit: str, baseline: str) -> list[str]:
    """The lower panel's line of ``title``'s time over the baseline's, each finite ratio written at its point, and a
    dashed line on both panels where the ratio crosses 1 (:func:`crossings`); returns the crossings in words."""
    low.plot(xs, ratio, linewidth=1.4, markersize=4, **{**kw, "label": f"{title} / {baseline}"})
    for x, r in zip(xs, ratio):
        if math.isfinite(r):
            low.annotate(
                f"{r:.2f}×",
                (x, r),
                textcoords="offset points",
                xytext=(0, 5),
                ha="center",
                fontsize=7,
                color=kw["color"],
            )
    flips = []
    for c in crossings(xs, ratio):
        flips.append(f"{title}'s advantage flips near {human(c, unit)}")
        for ax in (top, low):
            ax.axvline(c, color="#555555", linestyle=(0, (2, 2)), linewidth=0.9)
        low.annotate(
            f"parity ≈ {human(c, unit)}",
            (c, 1),
            textcoords="offset points",
            xytext=(3, -11),
            fontsize=7,
            color="#555555",
        )
    return flips


def _sooner_or_later(title: str, finite: list, baseline: str, target: str, unit: str) -> list[str]:
    """The sentence for a line whose ratio to the baseline stays on one side of 1 at every point (``finite``: the
    (x, ratio) points), with its largest and smallest advantage; none when it touches 1."""
    best = min(finite, key=lambda p: p[1])
    worst = max(finite, key=lambda p: p[1])
    side = ("sooner" if worst[1] < 1 else "later") if worst[1] < 1 or best[1] > 1 else ""
    if side == "sooner":
        return [
            f"{title} reaches {target} sooner than {baseline} at every point drawn, its "
            f"advantage largest at {human(best[0], unit)} ({best[1]:.2f}×) and smallest at "
            f"{human(worst[0], unit)} ({worst[1]:.2f}×)"
        ]
    if side == "later":
        return [
            f"{title} reaches {target} later than {baseline} at every point drawn "
            f"({best[1]:.2f}× at {human(best[0], unit)} to {worst[1]:.2f}× at {human(worst[0], unit)})"
        ]
    return []


def _finish_axes(plt, fig, axes, lines, figure_def, target: str) -> None:
    """Scales, labels, ticks at the points drawn, the parity line and the legend of the two panels."""
    top, low = axes
    unit = UNITS[figure_def.along]
    all_x = sorted({p[0] for _, pts in lines for p in pts})
    low.axhline(1.0, color="black", linewidth=0.8)
    top.set_xscale("log")
    top.margins(x=0.1)  # room for the ratios written at the first and last points
    ys = [p[1] for _, pts in lines for p in pts if math.isfinite(p[1]) and p[1] > 0]
    if ys and max(ys) >= 10 * min(ys):
        top.set_yscale("log")
    top.set_ylabel(f"Sim. time to {target} (s)")
    low.set_ylabel(f"Time / {figure_def.baseline}'s")
    rs = [l.get_ydata() for l in low.get_lines()]
    finite = [float(v) for r in rs for v in r if math.isfinite(float(v))]
    if finite:
        lo, hi = min(finite + [1.0]), max(finite + [1.0])
        pad = 0.25 * (hi - lo or 1.0)
        low.set_ylim(max(0.0, lo - pad), hi + pad)
    low.set_xlabel(f"{AXIS[figure_def.along]} ({unit}), log scale")
    low.set_xticks(all_x)
    low.set_xticklabels([human(v, unit) for v in all_x])
    low.xaxis.set_minor_locator(plt.NullLocator())
    for ax in (top, low):
        ax.grid(alpha=0.3, which="major")
    top.legend(loc="best", frameon=False, fontsize=7)
    fig.align_ylabels((top, low))
    fig.tight_layout(h_pad=0.4)


def _caption(figure_def, runs: dict, target: str, flips: list[str], said: list[str]) -> str:
    """The figure's caption: what the two panels draw, then the crossings, the per-line verdicts and the notes."""
    from fedcli.reports.aggregate import seeds_drawn

    names = figure_def.run_names()
    caption = " — ".join(t for t in (figure_def.paper, figure_def.title) if t)
    drawn = (
        f"Upper panel: the simulated time to {target} {_metric(figure_def.y)} (the first evaluation at or above it, "
        f"read off the evaluation grid: an upper bound by up to one evaluation interval; {seeds_drawn(runs, names)}) "
        f"against the {AXIS[figure_def.along].lower()}, log axes, one line per method. Lower panel: each line's "
        f"time divided by {figure_def.baseline}'s at the same {AXIS[figure_def.along].lower()} (below 1: it reaches "
        f"{target} sooner)"
        + (
            "; where the ratio crosses 1 the crossing (interpolated in log x, log ratio) is marked with a dashed line"
            if flips
            else ""
        )
    )
    caption = ". ".join(t.rstrip(".") for t in (caption, drawn, *flips, *said, figure_def.notes) if t)
    return caption[:1].upper() + caption[1:]


def _metric(y: str) -> str:
    return {
        "auto": "accuracy",
        "test_acc": "test accuracy",
        "personal_acc": "personal accuracy",
        "val_acc": "validation accuracy",
    }.get(y, y)
