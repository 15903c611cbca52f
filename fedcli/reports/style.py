"""One style for every figure fedcli draws: a fixed colour and marker per method, the papers' labels, axes that say
what was measured, units without offsets, legends off the data, no suptitles (a caption file instead).

A method's colour and marker are its own (``Method.style``, registered with the method and recorded in each run's
manifest; a combination such as FedProx + FedLAMA gets one from its label), never from the order of the runs or the
panel, so FedLAMA is the same blue in every figure of a report. Several runs of one
method in one panel (FedLAMA with phi = 2, 4, 8) are told apart in the order of their labels (natural order: phi=2
before phi=10), again whatever the order of the arguments: the first keeps the method's colour, the others turn from it
in hue and lightness (:func:`shade`: four FedAvg variants are grey, brown, ochre and olive, never four greys), each
with its own dash (never a thin dotted line) and marker fill.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
from pathlib import Path

#: methods that record no style (your own, runs older than styles): a colour and marker from their label
FALLBACK_COLORS = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")
FALLBACK_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")
#: a method's variants (rank 0, 1, ...) in these dashes: no ``":"`` (a thin dotted line vanishes on its ± std band)
LINESTYLES = ("-", "--", "-.", (0, (6, 2, 1, 2, 1, 2)), (0, (8, 3)), (0, (3, 1, 1, 1, 1, 1)))

#: the x axes of curves (``fedcli report --x``, a recipe figure's ``x``): training progress, then what the training
#: cost (the communication axes; ``time``: the system model's simulated seconds); older recipe spellings map onto them
PROGRESS_AXES = ("iterations", "rounds")
COMM_AXES = ("params", "bytes", "time")
X_AXES = PROGRESS_AXES + COMM_AXES
X_ALIASES = {"iteration": "iterations", "round": "rounds", "comm": "params"}
X_LABELS = {
    "iterations": "Local iterations",
    "rounds": "Communication rounds",
    "params": "Communicated parameters, Eq. 8 (M params)",
    "bytes": "Data moved, up and down (MB)",
    "time": "Simulated time (s), system model",
}  # time: runs trained with --system (sim_time_s)
Y_LABELS = {
    "test_acc": "Test accuracy (%), global model",
    "personal_acc": "Personal accuracy (%), clients' models\non their local test splits",
    "val_acc": "Validation accuracy (%), global model",
    "val_loss": "Validation loss, global model",
    "personal_val_acc": "Personal validation accuracy (%),\nclients' models on their own validation samples",
    "auto": "Accuracy (%): personal (pFL), else global",
    "test_loss": "Test loss, global model",
    "train_loss": "Training loss, clients' mini-batches",
}


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


#: options a run's legend already names (``FedAvg (τ=20)``, ``FedLAMA (τ′=5, φ=2)``, ``FedALA (E=1)``)
IN_LEGEND = ("tau", "phi", "local_epochs")
#: the papers' symbols for the options a legend adds (``FedProx (τ=20), μ=0``); any other option by its name
SYMBOLS = {"mu": "μ", "lam": "λ", "alpha": "α", "beta": "β", "eta": "η", "lr": "lr"}
#: the system model's choices a legend adds where the drawn runs differ in them (docs/system-model.md), as plain words
SYSTEM_KEYS = ("speed", "uplink", "downlink", "latency", "availability", "deadline", "on_deadline", "server_time")
WORDS = {
    ("on_deadline", "drop"): "stragglers dropped",
    ("on_deadline", "keep-partial"): "stragglers' partial work kept",
}


def _said(key: str, value) -> str:
    """One option of a legend: ``μ=0``, ``stragglers dropped``, ``uplink constant:3e4``."""
    if (key, value) in WORDS:
        return WORDS[key, value]
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{SYMBOLS[key]}={shown}" if key in SYMBOLS else f"{key.replace('_', ' ')} {shown}"


def facets(run) -> dict:
    """What a run was run with, beyond its legend: the options its parts read (the manifest's ``params``: FedProx's
    ``mu``, never an option FedAvg ignores) and the system model's choices (the manifest's ``system``: deadline,
    ``on_deadline``, the distributions)."""
    out = {}
    for opts in (run.manifest.get("params") or {}).values():
        if isinstance(opts, dict):
            out.update({k: v for k, v in opts.items() if k not in IN_LEGEND and isinstance(v, (str, int, float, bool))})
    system = run.manifest.get("system")
    if isinstance(system, dict):
        out.update({k: system[k] for k in SYSTEM_KEYS if isinstance(system.get(k), (str, int, float, bool))})
    return out


def apart(runs: list, labels: list[str], names: list[str], own: bool = False) -> list[str]:
    """Legend texts that tell every pair of ``runs`` (RunData, drawn together) apart, from ``labels`` (their legends,
    or a recipe's own labels: ``own``): each legend adds the options that differ among the runs that have them
    (:func:`facets`: ``FedProx (τ=20), μ=0, stragglers' partial work kept`` beside ``FedAvg (τ=20), stragglers
    dropped``; a recipe's own labels are kept as written); legends still equal add the config values that differ
    between those runs, then their ``names`` (the recipe's run names, the folders)."""
    labels = list(labels)
    if not own:
        seen = [facets(r) for r in runs]
        keys = list(dict.fromkeys(k for f in seen for k in f))
        differ = sorted(
            (k for k in keys if len({repr(f[k]) for f in seen if k in f}) > 1), key=lambda k: k in SYSTEM_KEYS
        )
        labels = [", ".join([lab, *(_said(k, f[k]) for k in differ if k in f)]) for lab, f in zip(labels, seen)]
    for same in _collisions(labels):
        from fedcli.reports.groups import SEED_NEUTRAL

        cfgs = [runs[i].config for i in same]
        keys = [
            k
            for k in dict.fromkeys(k for c in cfgs for k in c)
            if k not in SEED_NEUTRAL and len({repr(c.get(k)) for c in cfgs}) > 1
        ]
        for i in same:
            labels[i] = ", ".join([labels[i], *(_said(k, runs[i].config.get(k)) for k in keys)])
    for same in _collisions(labels):
        for i in same:
            labels[i] = f"{labels[i]} [{names[i]}]"
    return labels


def _collisions(labels: list[str]) -> list[list[int]]:
    """The indices of each legend text that more than one run has."""
    at: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        at.setdefault(lab, []).append(i)
    return [v for v in at.values() if len(v) > 1]


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
        out.append(
            {
                "color": shade(color, rank, len(ranked)),
                "marker": marker,
                "linestyle": LINESTYLES[rank % len(LINESTYLES)],
                "fillstyle": FILLSTYLES[rank % len(FILLSTYLES)],
                "label": lab,
            }
        )
    return out


#: a method's variants (rank 0, 1, ...) differ in marker fill too (the marker's shape stays the method's own)
FILLSTYLES = ("full", "none", "left", "top", "right", "bottom")


def shade(color: str, rank: int, n: int) -> str:
    """The ``rank``-th of ``n`` variants of one method: rank 0 is the method's colour itself; the others turn from it
    in CIELAB, up to the last variant: hue by 90 degrees, lightness L* to 60 from a dark colour (30 from a light one,
    never outside 30..60), chroma at least 40 (so a grey method, FedAvg's, gets browns and olives; its own hue-less
    grey stays rank 0), the chroma lowered only as far as the sRGB gamut needs. L* 30..60 keeps every variant at a
    contrast of 3:1 or more
    against the white page (WCAG's minimum for graphics), and 2 to 4 variants stay 15 or more apart (CIE76 delta E)."""
    if n <= 1 or rank == 0:
        return color
    from matplotlib.colors import to_hex

    lightness, chroma, hue = lch(color)
    t = rank / (n - 1)
    if chroma < 10:  # a grey: no hue of its own to turn from
        hue = 40.0
    lightness = min(60.0, max(30.0, lightness + ((60.0 if lightness < 45 else 30.0) - lightness) * t))
    hue = (hue + 90.0 * t) % 360
    chroma = max(chroma, 40.0)
    rgb = from_lch(lightness, chroma, hue)
    while chroma > 0 and not all(-1e-9 <= v <= 1 + 1e-9 for v in rgb):  # out of the sRGB gamut: less saturated
        chroma = max(0.0, chroma - 1.0)
        rgb = from_lch(lightness, chroma, hue)
    return to_hex([min(1.0, max(0.0, v)) for v in rgb])


def ramp(color: str, rank: int, n: int) -> str:
    """The ``rank``-th of ``n`` steps of one ordered quantity in one colour (the intervals figure: the longest interval
    in the method's colour, shorter ones paler): rank 0 is the colour itself, the others step in HLS lightness away
    from it towards the roomier side (lighter from a dark colour, darker from a light one), by at most 0.18 a step and
    never past 0.78 or below 0.12; the hue stays, so the steps read as more and less of one thing."""
    import colorsys

    from matplotlib.colors import to_hex, to_rgb

    if n <= 1 or rank == 0:
        return color
    h, l, s = colorsys.rgb_to_hls(*to_rgb(color))
    direction = 1.0 if l < 0.5 else -1.0
    room = 0.78 - l if direction > 0 else l - 0.12
    target = l + direction * min(max(room, 0.0) / (n - 1), 0.18) * rank
    return to_hex(colorsys.hls_to_rgb(h, min(0.78, max(0.12, target)), s))


#: sRGB (D65) to CIE XYZ and back (IEC 61966-2-1), the white point for CIELAB
_XYZ = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750), (0.0193339, 0.1191920, 0.9503041))
_RGB = ((3.2404542, -1.5371385, -0.4985314), (-0.9692660, 1.8760108, 0.0415560), (0.0556434, -0.2040259, 1.0572252))
_WHITE = (0.95047, 1.0, 1.08883)
_EPS, _KAPPA = 216 / 24389, 24389 / 27  # CIE's constants of the L* curve


def lch(color) -> tuple[float, float, float]:
    """CIELAB lightness L* (0-100), chroma and hue (degrees) of a matplotlib colour (CIE 1976 L*a*b*, D65)."""
    import math

    from matplotlib.colors import to_rgb

    rgb = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(color)]
    f = [
        v ** (1 / 3) if v > _EPS else (_KAPPA * v + 16) / 116
        for v in (sum(m * c for m, c in zip(row, rgb)) / w for row, w in zip(_XYZ, _WHITE))
    ]
    a, b = 500 * (f[0] - f[1]), 200 * (f[1] - f[2])
    return 116 * f[1] - 16, math.hypot(a, b), math.degrees(math.atan2(b, a)) % 360


def from_lch(lightness: float, chroma: float, hue: float) -> list[float]:
    """sRGB (0-1, unclipped: outside [0, 1] when out of gamut) of a CIELAB L*, chroma, hue (the inverse of
    :func:`lch`)."""
    import math

    fy = (lightness + 16) / 116
    f = (fy + chroma * math.cos(math.radians(hue)) / 500, fy, fy - chroma * math.sin(math.radians(hue)) / 200)
    xyz = [w * (v**3 if v**3 > _EPS else (116 * v - 16) / _KAPPA) for v, w in zip(f, _WHITE)]
    return [
        12.92 * c if c <= 0.0031308 else 1.055 * max(c, 0.0) ** (1 / 2.4) - 0.055
        for c in (sum(m * x for m, x in zip(row, xyz)) for row in _RGB)
    ]


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
    _below(ax, *ax.get_legend_handles_labels(), ncol=min(n, 2))


def _below(ax, handles, labels, ncol: int):
    leg = ax.legend(
        handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, fontsize=8, frameon=False
    )
    leg.fedcli_below = ncol  # save() keeps it off the other legends and the data (_legends_apart)
    return leg


def _collides(fig, renderer) -> list:
    """The axes whose legend below them (:func:`legend_below`) covers another legend or another axes' data area, or
    is wider than its own axes by more than a tenth (it would push its panel narrow, or into the next one's room)."""
    legs = [(ax, ax.get_legend()) for ax in fig.axes if getattr(ax.get_legend(), "fedcli_below", None)]
    if not legs:
        return []
    boxes = {id(ax): leg.get_window_extent(renderer) for ax, leg in legs}
    others = [(id(ax), ax.get_window_extent(renderer)) for ax in fig.axes] + [
        (id(ax), b) for ax, _ in legs for b in [boxes[id(ax)]]
    ]
    return [
        ax
        for ax, _ in legs
        if any(k != id(ax) and boxes[id(ax)].overlaps(b) for k, b in others)
        or boxes[id(ax)].width > 1.1 * ax.get_window_extent(renderer).width
    ]


def _legends_apart(fig) -> None:
    """No legend below a panel covers another panel's legend or data (two panels' long legends side by side): a
    legend that does is set in one column, then its entries are wrapped narrower, laying the figure out again each
    time, until none does."""
    import textwrap
    import warnings

    for _ in range(8):
        with warnings.catch_warnings():  # a layout on the way (legends still too wide to fit) is not the last one
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()
        fig.draw_without_rendering()  # the layout (legend places, text sizes) without rasterizing it
        bad = _collides(fig, fig.canvas.get_renderer())
        if not bad:
            break
        for ax in bad:
            leg = ax.get_legend()
            handles, texts = leg.legend_handles, [t.get_text() for t in leg.get_texts()]
            if leg.fedcli_below > 1:
                _below(ax, handles, texts, 1)
                continue
            width = max(len(line) for t in texts for line in t.split("\n"))
            if width <= 16:
                continue
            _below(ax, handles, [textwrap.fill(t.replace("\n", " "), max(16, width * 3 // 4)) for t in texts], 1)
    _room_for_data(fig)


#: the least height (inches) of a panel's data area once legends below take their room (else the figure grows)
MIN_AXES_IN = 2.0


def _room_for_data(fig) -> None:
    """A figure whose legends below its panels (set in one column, wrapped) leave a panel's data area shorter than
    :data:`MIN_AXES_IN` grows taller by what it lacks, so the legends never squeeze the data flat."""
    import warnings

    legs = [ax for ax in fig.axes if getattr(ax.get_legend(), "fedcli_below", None)]
    if not legs:
        return
    r = fig.canvas.get_renderer()
    short = MIN_AXES_IN - min(ax.get_window_extent(r).height for ax in legs) / fig.dpi
    if short > 0.05:
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + short)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()


def legend_right(ax, title: str | None = None) -> None:
    """The legend right of the axes, off the data (bars, whose rotated layer names take the room below); in a figure
    printed one column wide (:func:`printed`), above the axes, where it does not take the data's width."""
    width = _PRINT_WIDTH.get()
    if width is not None and width < WIDE_IN:
        n = len(ax.get_legend_handles_labels()[0])
        for ncol in (min(n, 2), 1):  # two entries a row where they fit the width, else one
            leg = ax.legend(
                loc="lower center",
                bbox_to_anchor=(0.5, 1.02),
                ncol=ncol,
                fontsize=8,
                frameon=False,
                title=title,
                title_fontsize=8,
            )
            ax.figure.draw_without_rendering()
            if leg.get_window_extent().width <= 0.95 * width * ax.figure.dpi:
                break
        leg.fedcli_above = True  # the panel's title goes above it (_fit_width)
        return
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
        title=title,
        title_fontsize=8,
        alignment="left",
    )


def data_label(run) -> str:
    """The data a run was trained on, as figures and tables name it: ``dataset/model`` (``femnist/mlp``)."""
    return f"{run.config.get('dataset', '?')}/{run.config.get('model', '?')}"


def data_warning(runs: list, names: list[str] | None = None) -> str | None:
    """One line when ``runs`` (RunData) are not on one dataset, model and budget: they are drawn on one axis all the
    same, and the line names what differs and for which runs, by ``names`` (a sweep's run names, the report's short
    run names: ``digits/seed0``; default: each run's folder name)."""
    from fedcli.reports.groups import differences

    seen = list(dict.fromkeys(map(data_label, runs)))
    differ = differences(runs, names or [r.path.name for r in runs])
    if differ:
        return (
            f"runs of different datasets, models or budgets are drawn together ({', '.join(seen)}; "
            f"{'; '.join(differ)}): "
            f"their curves are not one comparison"
        )
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


#: printed at least this wide (inches), a figure spans both columns; narrower, one column
WIDE_IN = 5.0
#: the width (inches) figures are saved at inside :func:`printed` (None: as drawn)
_PRINT_WIDTH: contextvars.ContextVar = contextvars.ContextVar("fedcli_print_width", default=None)

#: text sizes of a figure printed at its width (:func:`printed`): ticks, axis labels and legends near a paper's
#: caption size (8-10 pt), not shrunk with the figure
PRINT_RC = {"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 9, "legend.fontsize": 8}


@contextlib.contextmanager
def printed(width_in: float):
    """Figures drawn and saved inside are laid out to print ``width_in`` inches wide, legends and labels included
    (a paper's column: 3.3 in; both columns: 7 in), with text at :data:`PRINT_RC` sizes: included at that width, their
    ticks and legends are near the caption's size (``fedcli report --paper``)."""
    token = _PRINT_WIDTH.set(float(width_in))
    try:
        with plt().rc_context(PRINT_RC):
            yield
    finally:
        _PRINT_WIDTH.reset(token)


def _fit_width(fig, width_in: float) -> None:
    """Resize ``fig`` so that its tight bounding box (what ``bbox_inches="tight"`` saves, legends outside the axes
    included) is ``width_in`` wide; the height follows the width, down to 70% of the drawn height."""
    import matplotlib

    w, h = fig.get_size_inches()
    fig.set_size_inches(width_in, h * max(0.7, width_in / w))  # ticks, labels and legends keep their size: keep height
    _title_above_legend(fig)
    want = width_in - 2 * float(matplotlib.rcParams["savefig.pad_inches"])  # savefig pads the tight box on each side
    for _ in range(4):  # the legends and labels outside the axes keep their size: shrink the axes by their overhang
        fig.tight_layout()
        got = fig.get_tightbbox(fig.canvas.get_renderer()).width
        if abs(got - want) < 0.02:
            break
        cur = fig.get_size_inches()
        fig.set_size_inches(max(1.0, cur[0] - (got - want)), cur[1])
    _title_above_legend(fig)


def _title_above_legend(fig) -> None:
    """A legend placed above its axes (:func:`legend_right` in a column): the panel's title above the legend."""
    fig.draw_without_rendering()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and getattr(leg, "fedcli_above", False) and ax.get_title():
            gap = leg.get_window_extent(r).y1 - ax.get_window_extent(r).y1
            ax.set_title(ax.get_title(), pad=4 + gap * 72 / fig.dpi)


def save(fig, out_dir: Path, name: str, caption: str = "") -> list[Path]:
    """Write ``name``.png, ``name``.pdf and the caption ``name``.txt into ``out_dir`` and close the figure (inside
    :func:`printed`: laid out at its width first). The files are written through a descriptor of ``out_dir`` reached
    from the folder the user named without following a link (``fedcli.safefs.open_dir``), so a link planted on the
    way while the figures are drawn changes nothing outside."""
    from fedcli.safefs import open_dir

    if _PRINT_WIDTH.get() is not None:
        _legends_apart(fig)
        _fit_width(fig, _PRINT_WIDTH.get())
    _legends_apart(fig)
    fig.tight_layout()
    files = []
    with open_dir(out_dir) as folder:
        for ext in ("png", "pdf"):
            with folder.open_file(f"{name}.{ext}", "wb") as fh:  # never through a symbolic link (fedcli/safefs.py)
                fig.savefig(fh, format=ext, dpi=150, bbox_inches="tight")
            files.append(Path(out_dir) / f"{name}.{ext}")
        if caption:
            folder.atomic_write(f"{name}.txt", caption.rstrip() + "\n")
            files.append(Path(out_dir) / f"{name}.txt")
    plt().close(fig)
    return files
