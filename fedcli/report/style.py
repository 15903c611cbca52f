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
X_AXES = ("iterations", "rounds", "params", "bytes")
X_ALIASES = {"iteration": "iterations", "round": "rounds", "comm": "params"}
X_LABELS = {"iterations": "Local iterations", "rounds": "Communication rounds",
            "params": "Communicated parameters, Eq. 8 (M params)", "bytes": "Data moved, up and down (MB)"}
Y_LABELS = {"test_acc": "Test accuracy (%), global model", "personal_acc": "Personal accuracy (%), clients' models\non their local test splits",
            "auto": "Accuracy (%): personal (pFL), else global", "test_loss": "Test loss, global model",
            "train_loss": "Training loss, clients' mini-batches"}


def x_axis(name: str) -> str:
    """The canonical x axis of ``name`` (``iterations``, ``rounds``, ``params``, ``bytes``; older spellings too)."""
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
        rank = sorted(variants[m], key=natural_key).index(lab)
        out.append({"color": color, "marker": marker, "linestyle": LINESTYLES[rank % len(LINESTYLES)], "label": lab})
    return out


def plain_axis(axis) -> None:
    """Tick labels as plain numbers: no ``1e7`` offset or scientific factor at the axis end."""
    from matplotlib.ticker import ScalarFormatter

    f = ScalarFormatter(useOffset=False)
    f.set_scientific(False)
    axis.set_major_formatter(f)


def legend_below(ax, n: int) -> None:
    """The legend under the axes, off the data (curves: panels stand side by side)."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(n, 2), fontsize=8, frameon=False)


def legend_right(ax, title: str | None = None) -> None:
    """The legend right of the axes, off the data (bars, whose rotated layer names take the room below)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title=title, title_fontsize=8,
              alignment="left")


def data_warning(runs: list) -> str | None:
    """One line when ``runs`` (RunData) are not on one dataset and model: they are drawn on one axis all the same."""
    seen = list(dict.fromkeys(f"{r.config.get('dataset', '?')}/{r.config.get('model', '?')}" for r in runs))
    if len(seen) > 1:
        return f"runs of different datasets or models are drawn together ({', '.join(seen)}): their curves are not comparable"
    return None


def plt():
    """matplotlib's pyplot on the file-only Agg backend (imported when a figure is drawn, never at start-up)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
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
