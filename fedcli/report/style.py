"""One style for every figure fedcli draws: a fixed colour and marker per method, the papers' labels, axes that say
what was measured, units without offsets, legends off the data, no suptitles (a caption file instead).

A method's colour and marker are its own (``Method.style``, registered with the method and recorded in each run's
manifest; a combination such as FedProx + FedLAMA gets one from its label), never from the order of the runs or the
panel, so FedLAMA is the same blue in every figure of a report. Several runs of one
method in one panel (FedLAMA with phi = 2, 4, 8) share its colour and differ in line style, in the order of their
labels (natural order: phi=2 before phi=10), again whatever the order of the arguments.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

#: methods that record no style (your own, runs older than styles): a colour and marker from their label
FALLBACK_COLORS = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")
FALLBACK_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))

#: the x axes of curves (``fedcli report --x``, a recipe figure's ``x``); older recipe spellings map onto them
X_AXES = ("iterations", "rounds", "params", "bytes", "time")
X_ALIASES = {"iteration": "iterations", "round": "rounds", "comm": "params"}
X_LABELS = {"iterations": "Local iterations", "rounds": "Communication rounds",
            "params": "Communicated parameters, Eq. 8 (M params)", "bytes": "Data moved, up and down (MB)",
            "time": "Simulated time (s), system model"}  # time: runs trained with --system (sim_time_s)
Y_LABELS = {"test_acc": "Test accuracy (%), global model", "personal_acc": "Personal accuracy (%), clients' models\non their local test splits",
            "auto": "Accuracy (%): personal (pFL), else global", "test_loss": "Test loss, global model",
            "train_loss": "Training loss, clients' mini-batches"}


def x_axis(name: str) -> str:
    """The canonical x axis of ``name`` (``iterations``, ``rounds``, ``params``, ``bytes``, ``time``; older spellings
    too)."""
    return X_ALIASES.get(name, name)


def _hashed(label: str, choices):
    return choices[int(hashlib.sha1(label.encode()).hexdigest(), 16) % len(choices)]


def method_style(run) -> tuple[str, str]:
    """(colour, marker) of a run's method: the style its method registers (``Method.style``, in the manifest), kept
    for a run whose parts are its preset's own; else (a part put in place of the preset's, a method without a style)
    one chosen by the digest of its label, stable across figures."""
    label = run.method_label()
    recorded = run.method.get("style") or ()
    if len(recorded) == 2 and label == run.method.get("label"):
        return recorded[0], recorded[1]
    if "style" not in run.method:  # a run recorded before styles were: its method's registered style (loads torch)
        preset = run.preset()
        if preset is not None and preset.style and label == preset.label_for(run.config.get("algo")):
            return preset.style
    return _hashed(label, FALLBACK_COLORS), _hashed(label, FALLBACK_MARKERS)


def natural_key(text: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def legend(run) -> str:
    """The label a run has in every figure and table: the papers' name and symbols, ``FedLAMA (τ′=5, φ=2)``."""
    return run.legend()


def styles(runs: list, labels: list[str] | None = None) -> list[dict]:
    """Matplotlib keyword arguments (color, marker, linestyle, label) for each of ``runs`` (RunData) drawn together.
    ``labels`` replaces the legend text only (a recipe's own labels); colour and marker follow the method."""
    labels = labels or [legend(r) for r in runs]
    methods = [r.method_label() for r in runs]
    looks = {m: method_style(r) for m, r in zip(methods, runs)}
    variants: dict[str, list[str]] = {}
    for m, lab in zip(methods, labels):
        variants.setdefault(m, [])
        if lab not in variants[m]:
            variants[m].append(lab)
    out = []
    for m, lab in zip(methods, labels):
        color, marker = looks[m]
        ranked = sorted(variants[m], key=natural_key)
        rank = ranked.index(lab)
        out.append({"color": shade(color, rank, len(ranked)), "marker": marker, "linestyle": LINESTYLES[rank % len(LINESTYLES)],
                    "fillstyle": FILLSTYLES[rank % len(FILLSTYLES)], "label": lab})
    return out


#: a method's variants (rank 0, 1, ...) differ in marker fill too (the marker's shape stays the method's own)
FILLSTYLES = ("full", "none", "left", "top", "right", "bottom")


def shade(color: str, rank: int, n: int) -> str:
    """The ``rank``-th of ``n`` variants of one method in a shade of the method's colour: rank 0 is the colour itself,
    the others step in HLS lightness away from it towards the roomier side (lighter from a dark colour, darker from a
    light one), by at most 0.18 a step and never past 0.78 (lighter is too faint on white) or below 0.12."""
    import colorsys

    from matplotlib.colors import to_hex, to_rgb

    if n <= 1 or rank == 0:
        return color
    h, l, s = colorsys.rgb_to_hls(*to_rgb(color))
    direction = 1.0 if l < 0.5 else -1.0
    room = 0.78 - l if direction > 0 else l - 0.12
    target = l + direction * min(max(room, 0.0) / (n - 1), 0.18) * rank
    return to_hex(colorsys.hls_to_rgb(h, min(0.78, max(0.12, target)), s))


def plain_axis(axis) -> None:
    """Tick labels as plain numbers: no ``1e7`` offset or scientific factor at the axis end."""
    from matplotlib.ticker import ScalarFormatter

    f = ScalarFormatter(useOffset=False)
    f.set_scientific(False)
    axis.set_major_formatter(f)


def legend_below(ax, n: int) -> None:
    """The legend under the axes, off the data (curves: panels stand side by side); none when nothing is labelled."""
    if n < 1 or not ax.get_legend_handles_labels()[0]:
        return
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(n, 2), fontsize=8, frameon=False)


def legend_right(ax, title: str | None = None) -> None:
    """The legend right of the axes, off the data (bars, whose rotated layer names take the room below)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title=title, title_fontsize=8,
              alignment="left")


def data_warning(runs: list) -> str | None:
    """One line when ``runs`` (RunData) are not on one dataset, model and budget: they are drawn on one axis all the
    same, and the line (also put in the figure's caption) names what differs and for which runs."""
    from fedcli.report.groups import differences

    seen = list(dict.fromkeys(f"{r.config.get('dataset', '?')}/{r.config.get('model', '?')}" for r in runs))
    differ = differences(runs, [r.path.name for r in runs])
    if differ:
        return (f"runs of different datasets, models or budgets are drawn together ({', '.join(seen)}; {'; '.join(differ)}): "
                f"their curves are not one comparison")
    return None


def plt():
    """matplotlib's pyplot on the file-only Agg backend (imported when a figure is drawn, never at start-up)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    # TrueType (Type 42) fonts in PDF and PostScript, never Type 3 (matplotlib's default), which publishers' checkers
    # (IEEE PDF eXpress, ACM) reject
    matplotlib.rcParams["pdf.fonttype"] = 42
    matplotlib.rcParams["ps.fonttype"] = 42
    import matplotlib.pyplot as pyplot

    return pyplot


def save(fig, out_dir: Path, name: str, caption: str = "") -> list[Path]:
    """Write ``name``.png, ``name``.pdf and the caption ``name``.txt into ``out_dir`` and close the figure."""
    from fedcli.results.rundir import atomic_write
    from fedcli.results.safefs import make_dir, open_file

    fig.tight_layout()
    make_dir(out_dir)
    files = []
    for ext in ("png", "pdf"):
        f = out_dir / f"{name}.{ext}"
        with open_file(f, "wb") as fh:  # never through a symbolic link (fedcli/safefs.py)
            fig.savefig(fh, format=ext, dpi=150, bbox_inches="tight")
        files.append(f)
    if caption:
        atomic_write(out_dir / f"{name}.txt", caption.rstrip() + "\n")
        files.append(out_dir / f"{name}.txt")
    plt().close(fig)
    return files
