"""One style for every figure fedcli draws: a fixed colour and marker per method, the papers' labels, axes that say
what was measured, units without offsets, legends off the data, no suptitles (a caption file instead).

A method's colour and marker depend on its label alone (``FedLAMA``, ``Fed-LAMB``, ``FedProx + FedLAMA``), never on
the order of the runs or the panel, so FedLAMA is the same blue in every figure of a report. Several runs of one
method in one panel (FedLAMA with phi = 2, 4, 8) share its colour and differ in line style, in the order of their
labels (natural order: phi=2 before phi=10), again whatever the order of the arguments.
"""

from __future__ import annotations

import hashlib
import re

#: the papers' methods, each with its own colour (Okabe-Ito first, then tab10's darker tones) and marker
METHOD_STYLE = {
    "FedAvg": ("#4D4D4D", "o"), "Fed-SGD": ("#4D4D4D", "o"),
    "FedLAMA": ("#0072B2", "s"), "FedALA": ("#009E73", "^"), "Fed-LAMB": ("#D55E00", "D"),
    "Mime-LAMB": ("#CC79A7", "v"), "Fed-AMS": ("#E69F00", "P"), "Mime": ("#56B4E9", "X"), "Adp-Fed": ("#8C564B", "*"),
    "FedProx": ("#9467BD", "<"), "SCAFFOLD": ("#17BECF", ">"), "FedNova": ("#BCBD22", "h"), "FedPAQ": ("#7F7F7F", "p"),
    "FedCOM": ("#E377C2", "d"), "FedDyn": ("#1F77B4", "H"), "FedAvg-C": ("#A6A6A6", "o"), "FedProx-C": ("#C5B0D5", "<"),
    "Per-FedAvg": ("#FF7F0E", "v"), "FedRep": ("#2CA02C", "P"), "pFedMe": ("#D62728", "X"), "Ditto": ("#98DF8A", "d"),
    "FedAMP": ("#FF9896", "h"), "FedPHP": ("#AEC7E8", "p"), "FedFomo": ("#C49C94", "*"), "APPLE": ("#F7B6D2", "D"),
    "PartialFed": ("#DBDB8D", "s"),
}
#: methods the table lacks (your own, combinations such as FedProx + FedLAMA): a colour and marker from their label
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


def method_style(method: str) -> tuple[str, str]:
    """(colour, marker) of a method label: the table's, else one chosen by the label's digest (stable)."""
    if method in METHOD_STYLE:
        return METHOD_STYLE[method]
    return _hashed(method, FALLBACK_COLORS), _hashed(method, FALLBACK_MARKERS)


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
    variants: dict[str, list[str]] = {}
    for m, lab in zip(methods, labels):
        variants.setdefault(m, [])
        if lab not in variants[m]:
            variants[m].append(lab)
    out = []
    for m, lab in zip(methods, labels):
        color, marker = method_style(m)
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
