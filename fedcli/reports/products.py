"""What a recipe asks ``fedcli report`` to produce: ``[[tables]]`` and ``[[figures]]`` over its runs.

Tables have one of two layouts:

``layout = "rows"`` (FedLAMA arXiv/ICLR Tables 1-12): one row per run, in ``groups`` (e.g. one per
active ratio and Dirichlet coefficient), each with its own ``baseline`` run (default: the group's
first run) for the communication column. ``columns`` come from :data:`COLUMNS` or are any
``fedcli train`` key (shown as its value)::

    [[tables]]
    name = "arxiv-table3"
    layout = "rows"
    columns = ["lr", "tau", "phi", "active_ratio", "acc", "comm"]
    groups = [ { label = "25% active", runs = ["FedAvg 10 (25%)", ...] }, ... ]

``layout = "paired"`` (FedLAMA AAAI Tables 1-4): each row pairs a periodic-averaging run (left:
full training) with a FedLAMA run (right: early stopping and full training). The early-stopping
columns give the first evaluation at which the right run reaches the left run's accuracy (per seed,
``early_stop_target = "seed"``, or the left run's mean, ``"mean"``), the accuracy there, and the
communication so far as % of the group's baseline (its full-training communication)::

    [[tables]]
    name = "aaai-table3"
    layout = "paired"
    baseline = "FedAvg x1"
    rows = [["FedAvg x1", "FedAvg x1"], ["FedAvg x2", "FedLAMA phi=2"], ...]

``layout = "target"`` (Fed-LAMB: "Fed-AMS requires 20 rounds to achieve 90% accuracy, while Fed-LAMB only
takes 5"): one row per run, as in ``rows``; for each seed the first evaluation whose ``metric`` (default
``auto``, see below) is at least ``target`` (a fraction: 0.9 is 90%), and mean +- std over the seeds that reach it of
the round there (``round`` of metrics.csv: rounds completed) and of the bytes moved so far (``comm_bytes``, MB);
``(k/n)`` when only k of n seeds reach it, ``—`` when none does. ``columns`` are the columns before those two
(default ``["method"]``)::

    [[tables]]
    name = "fig2-rounds-to-target"
    layout = "target"
    target = 0.9
    scale.smoke = { target = 0.5 }     # per-scale values of any table or figure key
    groups = [ { label = "MNIST, CNN, 1 local epoch", runs = ["Fed-SGD", "Fed-LAMB", ...] }, ... ]

``layout = "matrix"`` (FedALA AAAI 2023, Tables 1-4, 6, 7): rows are methods (shown as ``method_labels``, default the
keys), columns are settings (datasets, heterogeneity, client counts; shown as ``setting_labels``), and each cell is one
run, named by the template ``cell`` (default
``"{method} | {setting}"``). ``values`` are the quantities shown per cell (default ``["acc"]``; see
:mod:`fedcli.reports.matrix`): ``acc``, ``imp`` (accuracy gain over the run named by ``compare``), ``ala_params``,
``time_total``, ``time_round``, ``time_init``, ``params_round``. ``metric`` (default ``auto``: ``personal_acc`` for
personalized runs, ``test_acc`` for the others) picks the accuracy. ``header`` spans settings
(``[["Pathological", 3], ["Practical", 2]]``), ``skip`` lists cells shown as "—" (runs the paper leaves out).
Table-level matrix keys are the defaults of every group::

    [[tables]]
    name = "aaai-table2"
    layout = "matrix"
    methods = ["FedAvg", "FedProx", "FedALA"]
    settings = ["MNIST-path", "Cifar10-path"]
    setting_labels = ["MNIST", "Cifar10"]

Every layout shows the accuracy named by ``metric``: ``auto`` (the default) is ``personal_acc`` for a personalized
run (each client's model on its local test split, the metric of pFedMe and FedALA) and ``test_acc`` (the global
model on the test set) for the others; ``test_acc`` or ``personal_acc`` force one column for every run. The
``curves`` figures take the same choice in ``y`` (default ``auto``).

``select = "best"`` (layouts ``rows`` and ``target``; Fed-LAMB, Section 5: lambda "tuned" over {0, 0.01, 0.1} and the
best one reported) shows, of the runs of a group that differ only in the grid key(s) ``select_by`` (e.g.
``"weight_decay"``; their configs equal but for it and the seed), the one row that is best by ``select_on``:
``acc`` (the default of ``rows``: the highest mean over the seeds of the table's ``accuracy``), ``best_acc`` or
``final_acc`` (the highest mean best or last accuracy), ``rounds`` (the default of ``target``: the most seeds
reaching the target, then the fewest mean rounds). Ties go to the run listed first. ``select_by`` must be among
the table's ``columns``, so each row shows the value picked; the notes name the runs each row was picked from.
``select = "all"`` (the default) shows every run::

    [[tables]]
    name = "fig2-mnist-mlp-e1-best"
    columns = ["method", "lr", "weight_decay", "acc", "final_acc"]
    select = "best"
    select_by = "weight_decay"
    runs = ["Fed-LAMB", "Fed-LAMB lambda 0.01", "Fed-LAMB lambda 0.1", ...]

All layouts take the shorthand of one group at table level (``runs``/``rows``, ``baseline``,
``label``). ``accuracy = "best"`` (default: the best evaluation of the run, as the AAAI paper reports
"full training") or ``"final"`` (the last evaluation).

``scale.<name> = { key = value, ... }`` in a ``[[tables]]`` or ``[[figures]]`` entry overrides its keys at that
``--scale`` (the sweep stores the resolved product in sweep.json).

Figures (``kind``): ``curves`` (accuracy against ``x``: ``"iterations"`` (default), ``"rounds"``, ``"params"``
(communicated parameters, Eq. 8), ``"bytes"`` (data moved both ways) or ``"time"`` (simulated seconds, runs trained
with ``--system``: docs/system-model.md); ``iteration``, ``round`` and ``comm`` are
older spellings of the first three; mean and std band over seeds), ``layer-syncs`` (communications per layer),
``layer-size`` (data moved per layer in MB; ``y = "params"``: Eq. 8's data size) and
``delta-lambda`` (delta_l and 1 - lambda_l of Algorithm 1 along the layers sorted by d_l, from one
adjustment in ``intervals.csv``), ``intervals`` (each layer's synchronization interval at every adjustment of one
layer-wise run, from ``intervals.csv``) and ``clients`` (personalized runs: personal accuracy across clients at the last
evaluation, from ``clients.csv``, the worst-10% mean marked) and ``time-to-target`` (fedcli/reports/summary.py: the
simulated time to ``target`` against the system option ``along``, one line per entry of ``lines``, and each line's time
over the ``baseline`` line's; docs/reports.md). ``panels`` holds one or more panels, each with ``runs`` (or ``run``)
and a ``title``; the shorthand is ``runs``/``run`` at figure level. A ``curves`` figure's ``target`` draws a line at
that accuracy, its ``sharex = true`` gives its panels one x axis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fedcli.errors import ConfigError
from fedcli.reports import style

LAYOUTS = ("rows", "paired", "target", "matrix")
#: what a time-to-target figure's x axis may be: a system option a run is re-timed under, a number per run
ALONG = ("speed", "uplink", "downlink", "latency", "server_time")
ACCURACY = ("best", "final")
X_AXES = style.X_AXES + tuple(style.X_ALIASES)  # a recipe figure's x: an axis, or an older spelling of one
#: the accuracy a table or curve shows (every layout; figures' ``y``): auto (the default) = personal_acc for
#: personalized runs (each client's model on its local test split, the papers' metric), test_acc otherwise
#: val_acc / personal_val_acc: runs trained with --val-fraction / --client-val-fraction
ACC_METRICS = ("test_acc", "personal_acc", "val_acc", "personal_val_acc", "auto")
SELECT = ("all", "best")
#: what ``select = "best"`` picks by: a mean accuracy over the seeds (higher is better) or rounds to the target
SELECT_ON = ("acc", "best_acc", "final_acc", "rounds")
#: keys of a matrix group (table level: the defaults of every group)
MATRIX_KEYS = ("methods", "method_labels", "settings", "setting_labels", "values", "cell", "compare", "header", "skip")
#: computed columns of the ``rows`` layout (any train key is also a column)
COLUMNS = (
    "name",
    "method",
    "lr",
    "tau",
    "phi",
    "active_ratio",
    "alpha",
    "clients",
    "batch_size",
    "iterations",
    "acc",
    "final_acc",
    "best_acc",
    "comm",
    "comm_bytes",
    "seeds",
)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

TABLE_KEYS = {
    "name",
    "title",
    "paper",
    "layout",
    "accuracy",
    "columns",
    "groups",
    "runs",
    "rows",
    "baseline",
    "label",
    "left_title",
    "right_title",
    "early_stop_target",
    "target",
    "metric",
    "notes",
    "scale",
    "row_title",
    "select",
    "select_by",
    "select_on",
    *MATRIX_KEYS,
}
GROUP_KEYS = {"label", "baseline", "runs", "rows", "left_title", "right_title", *MATRIX_KEYS}
FIGURE_KEYS = {
    "name",
    "title",
    "paper",
    "kind",
    "panels",
    "runs",
    "run",
    "labels",
    "x",
    "y",
    "seed",
    "round",
    "log",
    "notes",
    "scale",
    "target",
    "sharex",
    "along",
    "lines",
    "baseline",
}
PANEL_KEYS = {"title", "runs", "run", "labels"}
#: a figure's keys added since sweep.json's products were first written (issue 57): stored only where set, so that a
#: sweep.json written before reads and writes the same
LATER_FIGURE_KEYS = ("target", "sharex", "along", "lines", "baseline")


@dataclass
class Group:
    label: str = ""
    baseline: str | None = None
    runs: list[str] = field(default_factory=list)  # rows layout
    rows: list[tuple[str, str]] = field(default_factory=list)  # paired layout
    left_title: str = "FedAvg (Periodic Full Avg.)"
    right_title: str = "FedLAMA"
    # matrix layout: rows = methods, columns = settings, each cell a run (fedcli/reports/matrix.py)
    methods: list[str] = field(default_factory=list)
    method_labels: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    setting_labels: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    cell: str = "{method} | {setting}"
    compare: str = ""  # imp: the run the cell's accuracy is compared with (same placeholders)
    header: list = field(default_factory=list)  # [[label, number of settings], ...] above the settings
    skip: list[str] = field(default_factory=list)  # cells (run names) shown as "—"

    def cell_run(self, method: str, setting: str, template: str | None = None) -> str | None:
        """The run name of a matrix cell (None for a skipped cell)."""
        name = (self.cell if template is None else template).replace("{method}", method).replace("{setting}", setting)
        return None if name in self.skip else name

    def run_names(self) -> list[str]:
        names = list(self.runs) + [n for pair in self.rows for n in pair]
        for m in self.methods:
            for st in self.settings:
                names += [n for t in (self.cell, self.compare) if t and (n := self.cell_run(m, st, t))]
        if self.baseline:
            names.append(self.baseline)
        return list(dict.fromkeys(names))


@dataclass
class TableDef:
    """One ``[[tables]]`` entry of a recipe, as parsed (:func:`parse_table`): what ``fedcli report --table`` builds.
    The sweep stores it in sweep.json (:func:`product_to_dict`)."""

    name: str
    title: str = ""
    paper: str = ""
    layout: str = "rows"
    accuracy: str = "best"
    columns: list[str] = field(default_factory=lambda: ["lr", "tau", "phi", "acc", "comm"])
    groups: list[Group] = field(default_factory=list)
    early_stop_target: str = "seed"
    target: float | None = None  # target layout: accuracy threshold (fraction)
    metric: str = "auto"  # the accuracy shown (target layout: compared with ``target``); auto: see ACC_METRICS
    row_title: str = "Method"  # matrix layout: heading of the first column
    notes: str = ""
    select: str = "all"  # rows/target: "best" shows one row per set of runs differing only in select_by
    select_by: list[str] = field(default_factory=list)  # the grid key(s) select = "best" picks over
    select_on: str = ""  # acc, best_acc, final_acc (highest mean) or rounds (target: fewest); "" = layout's default

    kind = "table"

    def run_names(self) -> list[str]:
        return list(dict.fromkeys(n for g in self.groups for n in g.run_names()))


@dataclass
class Panel:
    title: str = ""
    runs: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


@dataclass
class FigureDef:
    """One ``[[figures]]`` entry of a recipe, as parsed (:func:`parse_figure`): what ``fedcli report --figure`` draws.
    The sweep stores it in sweep.json (:func:`product_to_dict`)."""

    name: str
    kind: str
    title: str = ""
    paper: str = ""
    panels: list[Panel] = field(default_factory=list)
    x: str = "iterations"  # curves: iterations, rounds, params or bytes (fedcli/reports/style.py)
    y: str = "auto"  # curves: an accuracy of ACC_METRICS (auto: personal_acc for personalized runs) or a loss
    seed: int = 0  # delta-lambda: index into the sweep's seeds
    round: int = -1  # delta-lambda: which adjustment (row group of intervals.csv); -1 the last
    log: bool | None = None  # log-scale y axis; None: layer-size on a log axis when its bars span two decades
    notes: str = ""
    target: float | None = None  # curves: a line at this accuracy; time-to-target: the accuracy timed (a fraction)
    sharex: bool = False  # curves: the panels share their x axis (log when the panels' ranges span two decades)
    along: str = ""  # time-to-target: the system option on the x axis (ALONG), its value per run
    lines: list[Panel] = field(default_factory=list)  # time-to-target: one line per method, a run per x value
    baseline: str = ""  # time-to-target: the line the others' times are divided by (default: the first)

    def run_names(self) -> list[str]:
        return list(dict.fromkeys(n for p in [*self.panels, *self.lines] for n in p.runs))


# ------------------------------------------------------------------------------------------------
def _names(value, loc: str, what: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{loc}: {what} must be a non-empty list of run names")
    return list(value)


def _str(d: dict, key: str, loc, default: str = "") -> str:
    v = d.get(key, default)
    if not isinstance(v, str):
        raise ConfigError(f"{loc(key)}: key '{key}' must be a string")
    return v


def _choice(d: dict, key: str, choices, default: str, loc) -> str:
    v = _str(d, key, loc, default)
    if v not in choices:
        raise ConfigError(f"{loc(key)}: {key} must be one of {', '.join(choices)}, got '{v}'")
    return v


def _check_known(d: dict, allowed: set, loc, what: str) -> None:
    for k in d:
        if k not in allowed:
            raise ConfigError(f"{loc(k)}: unknown key '{k}' in {what} (allowed: {', '.join(sorted(allowed))})")


def _scaled(d: dict, loc, scale: str | None, scales, what: str, allowed: set) -> dict:
    """``d`` with its ``scale.<scale>`` overrides applied (``scale`` key removed); checks every override table."""
    over = d.get("scale")
    if over is None:
        return d
    if not isinstance(over, dict) or not all(isinstance(v, dict) for v in over.values()):
        raise ConfigError(
            f"{loc('scale')}: `scale` of a {what} entry must be tables of per-scale values "
            f"(scale.smoke = {{ target = 0.5 }})"
        )
    for sname, vals in over.items():
        if scales is not None and sname not in scales:
            raise ConfigError(
                f"{loc('scale')}: {what} entry overrides scale '{sname}', which the recipe does not define "
                f"(add [scale.{sname}])"
            )
        for k in vals:
            if k in ("name", "scale"):
                raise ConfigError(f"{loc('scale')}: scale.{sname} cannot override '{k}'")
            if k not in allowed:
                raise ConfigError(
                    f"{loc('scale')}: unknown key '{k}' in scale.{sname} of a {what} entry "
                    f"(allowed: {', '.join(sorted(allowed - {'name', 'scale'}))})"
                )
    out = {k: v for k, v in d.items() if k != "scale"}
    if scale is not None:
        out.update(over.get(scale, {}))
    return out


def _entry(d: dict, loc, scale, scales, what: str, keys) -> tuple[dict, str]:
    """Check a ``[[tables]]``/``[[figures]]`` entry's keys, apply its scale overrides, validate its name."""
    _check_known(d, keys, loc, what)
    d = _scaled(d, loc, scale, scales, what, keys)
    name = _str(d, "name", loc)
    if not NAME_RE.match(name):
        raise ConfigError(
            f"{loc('name')}: every {what} entry needs a `name` of letters, digits, '.', '_', '-' (got '{name}')"
        )
    return d, name


def parse_table(d: dict, loc, scale: str | None = None, scales=None) -> TableDef:
    """One ``[[tables]]`` entry at ``scale`` (its ``scale.<name>`` overrides applied; ``scales``: the recipe's)."""
    d, name = _entry(d, loc, scale, scales, "[[tables]]", TABLE_KEYS)
    t = TableDef(
        name=name,
        title=_str(d, "title", loc),
        paper=_str(d, "paper", loc),
        notes=_str(d, "notes", loc),
        layout=_choice(d, "layout", LAYOUTS, "rows", loc),
        accuracy=_choice(d, "accuracy", ACCURACY, "best", loc),
        early_stop_target=_choice(d, "early_stop_target", ("seed", "mean"), "seed", loc),
    )
    _parse_columns_and_target(t, d, loc)
    t.metric = _choice(d, "metric", ACC_METRICS, "auto", loc)
    parse_select(t, d, loc)
    t.row_title = _str(d, "row_title", loc, "Method")
    if t.layout != "matrix":
        for k in MATRIX_KEYS + ("row_title",):
            if k in d:
                raise ConfigError(
                    f"{loc(k)}: key '{k}' is for layout = \"matrix\" (table '{name}' has layout = \"{t.layout}\")"
                )
    left, right = _str(d, "left_title", loc, Group.left_title), _str(d, "right_title", loc, Group.right_title)
    raw_groups = d.get("groups")
    if raw_groups is None:
        raw_groups = [{k: d[k] for k in ("label", "baseline", "runs", "rows") if k in d}]
    elif any(k in d for k in ("runs", "rows")):
        raise ConfigError(f"{loc('groups')}: give either `groups` or `runs`/`rows` at table level, not both")
    if t.layout == "matrix" and isinstance(raw_groups, list):  # table-level matrix keys: defaults of every group
        raw_groups = [
            {**{k: d[k] for k in MATRIX_KEYS if k in d}, **g} if isinstance(g, dict) else g for g in raw_groups
        ]
    if not isinstance(raw_groups, list) or not raw_groups or not all(isinstance(g, dict) for g in raw_groups):
        raise ConfigError(f"{loc('groups')}: groups must be a list of tables ({{ label = ..., runs = [...] }})")
    for g in raw_groups:
        t.groups.append(_parse_group(t, d, g, loc, (left, right)))
    return t


def _parse_columns_and_target(t: TableDef, d: dict, loc) -> None:
    """A table's ``columns`` (the row layouts' own choice; ``method`` alone for a target table) and the ``target`` of
    a target table (an accuracy as a fraction in (0, 1]), each refused where its layout does not take it."""
    name = t.name
    if "columns" in d:
        from fedcli.config import FIELDS  # the config's fields (every method file's): only for a table naming columns

        cols = d["columns"]
        if not isinstance(cols, list) or not cols or not all(isinstance(c, str) for c in cols):
            raise ConfigError(f"{loc('columns')}: columns must be a non-empty list of column names")
        for c in cols:
            if c not in COLUMNS and c not in FIELDS:
                raise ConfigError(f"{loc('columns')}: unknown column '{c}' (use {', '.join(COLUMNS)} or a train key)")
        if t.layout in ("paired", "matrix"):
            raise ConfigError(
                f"{loc('columns')}: the {t.layout} layout has fixed columns; `columns` is for layout = "
                f'"rows" or "target"'
                + (" (a matrix table lists its per-cell `values`)" if t.layout == "matrix" else "")
            )
        t.columns = list(cols)
    elif t.layout == "target":
        t.columns = ["method"]
    if t.layout == "target":
        v = d.get("target")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ConfigError(
                f"{loc('target')}: table '{name}' has layout = \"target\": it needs `target`, an accuracy "
                f"as a fraction in (0, 1] (0.9 for 90%), got {v!r}"
            )
        t.target = float(v)
    elif "target" in d:
        raise ConfigError(
            f"{loc('target')}: key 'target' is for layout = \"target\" (table '{name}' has layout = \"{t.layout}\")"
        )


def _parse_group(t: TableDef, d: dict, g: dict, loc, titles: tuple[str, str]) -> Group:
    """One group of table ``t`` (``d``: the table's entry, whose ``baseline`` is the groups' default; ``titles``: the
    table's left and right titles): its runs (rows, target), pairs (paired) or matrix cells, and its baseline."""
    name = t.name
    left, right = titles
    _check_known(g, GROUP_KEYS, loc, f"a group of table '{name}'")
    grp = Group(
        label=_str(g, "label", loc),
        left_title=_str(g, "left_title", loc, left),
        right_title=_str(g, "right_title", loc, right),
    )
    if t.layout == "matrix":
        parse_matrix_group(grp, g, loc, name)
        return grp
    if t.layout in ("rows", "target"):
        if "rows" in g:
            raise ConfigError(f"{loc('rows')}: table '{name}' has layout = \"{t.layout}\": list its runs in `runs`")
        grp.runs = _names(g.get("runs"), loc("runs"), f"`runs` of table '{name}'")
    else:
        if "runs" in g:
            raise ConfigError(
                f"{loc('runs')}: table '{name}' has layout = \"paired\": list [left, right] pairs in `rows`"
            )
        rows = g.get("rows")
        if (
            not isinstance(rows, list)
            or not rows
            or not all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in rows)
        ):
            raise ConfigError(f"{loc('rows')}: `rows` of table '{name}' must be a list of [left run, right run] pairs")
        grp.rows = [(a, b) for a, b in rows]
    base = g.get("baseline", d.get("baseline"))
    if base is not None and not isinstance(base, str):
        raise ConfigError(f"{loc('baseline')}: baseline must be a run name")
    grp.baseline = base or (grp.runs[0] if grp.runs else grp.rows[0][0])
    return grp


def parse_select(t: TableDef, d: dict, loc) -> None:
    """The ``select``/``select_by``/``select_on`` keys of a ``rows`` or ``target`` table (see the module docstring)."""
    t.select = _choice(d, "select", SELECT, "all", loc)
    if t.select == "all":
        for k in ("select_by", "select_on"):
            if k in d:
                raise ConfigError(f"{loc(k)}: key '{k}' is for select = \"best\" (table '{t.name}' shows every run)")
        return
    if t.layout not in ("rows", "target"):
        raise ConfigError(
            f'{loc("select")}: select = "best" is for layout = "rows" or "target" (table \'{t.name}\' '
            f'has layout = "{t.layout}")'
        )
    by = d.get("select_by")
    by = [by] if isinstance(by, str) else by
    if not isinstance(by, list) or not by or not all(isinstance(k, str) and k for k in by):
        raise ConfigError(
            f"{loc('select_by')}: table '{t.name}' has select = \"best\": it needs `select_by`, the grid "
            'key (or list of keys) to pick over, e.g. "weight_decay"'
        )
    missing = [k for k in by if k not in t.columns]
    if missing:
        raise ConfigError(
            f"{loc('select_by')}: add {', '.join(repr(k) for k in missing)} to the `columns` of table "
            f"'{t.name}', so each row shows the value select = \"best\" picked"
        )
    t.select_by = list(by)
    default = "rounds" if t.layout == "target" else "acc"
    t.select_on = _choice(d, "select_on", SELECT_ON, default, loc)
    if t.select_on == "rounds" and t.layout != "target":
        raise ConfigError(
            f'{loc("select_on")}: select_on = "rounds" is for layout = "target" (table \'{t.name}\' has '
            f'layout = "{t.layout}")'
        )


def parse_figure(d: dict, loc, scale: str | None = None, scales=None) -> FigureDef:
    """One ``[[figures]]`` entry at ``scale`` (its ``scale.<name>`` overrides applied; ``scales``: the recipe's)."""
    from fedcli.reports.figures import FIGURE_KINDS  # kind -> what draws it and the keys it accepts

    d, name = _entry(d, loc, scale, scales, "[[figures]]", FIGURE_KEYS)
    f = FigureDef(
        name=name,
        kind=_choice(d, "kind", tuple(FIGURE_KINDS), "", loc) if "kind" in d else "",
        title=_str(d, "title", loc),
        paper=_str(d, "paper", loc),
        notes=_str(d, "notes", loc),
        x=_choice(d, "x", X_AXES, "iterations", loc),
        y=_choice(d, "y", ACC_METRICS + ("test_loss", "val_loss", "train_loss", "params", "bytes"), "auto", loc),
    )
    from fedcli.reports.style import x_axis

    f.x = x_axis(f.x)
    if not f.kind:
        raise ConfigError(f"{loc('name')}: figure '{name}' needs a `kind` ({', '.join(FIGURE_KINDS)})")
    kind = FIGURE_KINDS[f.kind]
    _figure_options(f, d, loc, kind)
    if "lines" in kind.keys:  # its runs listed in lines (time-to-target), not in panels
        parse_time_to_target(f, d, loc)
        return f
    _figure_panels(f, d, loc, kind)
    return f


def _figure_options(f: FigureDef, d: dict, loc, kind) -> None:
    """Set the figure's ``seed``, ``round``, ``log``, ``sharex`` and ``target`` from ``d``, each checked (``sharex``
    and ``target`` only for the kinds that accept them)."""
    name = f.name
    for key in ("seed", "round"):
        if key in d:
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{loc(key)}: key '{key}' must be an integer")
            setattr(f, key, v)
    if "log" in d:
        if not isinstance(d["log"], bool):
            raise ConfigError(f"{loc('log')}: key 'log' must be true or false")
        f.log = d["log"]
    if "sharex" in d:
        if not isinstance(d["sharex"], bool) or "sharex" not in kind.keys:
            raise ConfigError(f"{loc('sharex')}: key 'sharex' is true or false, for kind = {_kinds_with('sharex')}")
        f.sharex = d["sharex"]
    if "target" in d:
        v = d["target"]
        if "target" not in kind.keys:
            raise ConfigError(f"{loc('target')}: key 'target' is for kind = {_kinds_with('target')}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ConfigError(
                f"{loc('target')}: `target` of figure '{name}' is an accuracy as a fraction in (0, 1] "
                f"(0.9 for 90%), got {v!r}"
            )
        f.target = float(v)


def _figure_panels(f: FigureDef, d: dict, loc, kind) -> None:
    """Append the figure's panels (``panels``, or one panel of the figure-level ``runs``), each checked."""
    name = f.name
    for k in ("along", "lines", "baseline"):
        if k in d:
            raise ConfigError(
                f"{loc(k)}: key '{k}' is for kind = {_kinds_with(k)} (figure '{name}' has kind = \"{f.kind}\")"
            )
    raw = d.get("panels")
    if raw is None:
        raw = [{k: d[k] for k in ("runs", "run", "labels") if k in d}]
    elif any(k in d for k in ("runs", "run")):
        raise ConfigError(f"{loc('panels')}: give either `panels` or `runs` at figure level, not both")
    if not isinstance(raw, list) or not raw or not all(isinstance(p, dict) for p in raw):
        raise ConfigError(f"{loc('panels')}: panels must be a list of tables ({{ title = ..., runs = [...] }})")
    for p in raw:
        _check_known(p, PANEL_KEYS, loc, f"a panel of figure '{name}'")
        runs = _names(p.get("runs", p.get("run")), loc("runs"), f"`runs` of figure '{name}'")
        labels = p.get("labels", [])
        if (
            not isinstance(labels, list)
            or not all(isinstance(x, str) for x in labels)
            or (labels and len(labels) != len(runs))
        ):
            raise ConfigError(f"{loc('labels')}: `labels` of figure '{name}' must be one string per run")
        if kind.one_run and len(runs) != 1:
            raise ConfigError(
                f"{loc('runs')}: a {f.kind} panel shows one FedLAMA run; figure '{name}' lists {len(runs)}"
            )
        f.panels.append(Panel(title=_str(p, "title", loc), runs=runs, labels=list(labels)))


def _kinds_with(key: str) -> str:
    """The figure kinds that accept ``key``, for an error message: ``"curves" or "time-to-target"``."""
    from fedcli.reports.figures import FIGURE_KINDS

    return " or ".join(f'"{k.name}"' for k in FIGURE_KINDS.values() if key in k.keys)


def parse_time_to_target(f: FigureDef, d: dict, loc) -> None:
    """The keys of a ``time-to-target`` figure (fedcli/reports/summary.py): ``target``, ``along`` (the system option
    on the log x axis: each run's value of it, a constant), ``lines`` (``{ title = "FedAvg", runs = [...] }``, one run
    per x value) and ``baseline`` (the line the others' times are divided by in the lower panel)."""
    name = f.name
    for k in ("panels", "runs", "run", "labels"):
        if k in d:
            raise ConfigError(
                f'{loc(k)}: a time-to-target figure lists its runs in `lines` ({{ title = "FedAvg", '
                f"runs = [...] }}, one line per method), not in `{k}`"
            )
    if f.target is None:
        raise ConfigError(
            f"{loc('name')}: figure '{name}' has kind = \"time-to-target\": it needs `target`, an "
            f"accuracy as a fraction in (0, 1]"
        )
    f.along = _choice(d, "along", ALONG, "", loc) if "along" in d else ""
    if not f.along:
        raise ConfigError(
            f"{loc('name')}: figure '{name}' has kind = \"time-to-target\": it needs `along`, the system "
            f"option on its x axis ({', '.join(ALONG)})"
        )
    raw = d.get("lines")
    if not isinstance(raw, list) or not raw or not all(isinstance(p, dict) for p in raw):
        raise ConfigError(
            f"{loc('lines')}: `lines` of figure '{name}' must be a list of tables ({{ title = \"FedAvg\", "
            f"runs = [...] }})"
        )
    for p in raw:
        _check_known(p, {"title", "runs"}, loc, f"a line of figure '{name}'")
        title = _str(p, "title", loc)
        if not title:
            raise ConfigError(f"{loc('lines')}: every line of figure '{name}' needs a `title` (its legend)")
        f.lines.append(
            Panel(title=title, runs=_names(p.get("runs"), loc("lines"), f"`runs` of a line of figure '{name}'"))
        )
    titles = [p.title for p in f.lines]
    if len(set(titles)) != len(titles):
        raise ConfigError(f"{loc('lines')}: the lines of figure '{name}' need titles apart, got {titles}")
    f.baseline = _str(d, "baseline", loc, titles[0])
    if f.baseline not in titles:
        raise ConfigError(
            f"{loc('baseline')}: `baseline` of figure '{name}' names a line's title ({', '.join(titles)}), "
            f"got '{f.baseline}'"
        )


def parse_products(recipe) -> tuple[list[TableDef], list[FigureDef]]:
    """Parse and check a recipe's [[tables]] and [[figures]] against its run names (exit 2 with the line)."""
    names = set(getattr(recipe, "product_names", recipe.run_names))  # the runs trained and their re-timed variants
    tables, figures, seen = [], [], {}
    for kind, items, parse in (("tables", recipe.tables, parse_table), ("figures", recipe.figures, parse_figure)):
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            raise ConfigError(f"{recipe.where(kind)}: [[{kind}]] must be an array of tables")
        for i, d in enumerate(items):

            def loc(key, kind=kind, i=i):
                return recipe.where(key, kind, i)

            product = parse(d, loc, recipe.scale, recipe.scales)
            if product.name in seen:
                raise ConfigError(f"{loc('name')}: product name '{product.name}' is used twice")
            seen[product.name] = True
            for n in product.run_names():
                if n not in names:
                    raise ConfigError(
                        f"{_value_where(recipe, kind, i, n)}: {kind[:-1]} '{product.name}' "
                        f"names run '{n}', which is not in [[runs]] (nor a re-timed run of their "
                        f"`retime` lists)"
                    )
            (tables if kind == "tables" else figures).append(product)
    return tables, figures


def _value_where(recipe, kind: str, index: int, value: str) -> str:
    """``file, line N`` of the first line of the index-th [[kind]] block that quotes ``value``."""
    span = recipe.block_span(kind, index)
    lo, hi = span or (0, len(recipe.text))
    for quoted in (f'"{value}"', f"'{value}'"):
        pos = recipe.text.find(quoted, lo, hi)
        if pos >= 0:
            return f"{recipe.path}, line {recipe.text.count(chr(10), 0, pos) + 1}"
    return recipe.where("name", kind, index)


def product_to_dict(product) -> dict:
    """JSON-able form (stored in the sweep manifest, so reports do not need the recipe file)."""
    import dataclasses

    d = dataclasses.asdict(product)
    d["kind"] = "table" if isinstance(product, TableDef) else product.kind
    if isinstance(product, FigureDef):  # keys later than sweep.json's first format: written only where set
        for f in dataclasses.fields(FigureDef):
            if f.name in LATER_FIGURE_KEYS and getattr(product, f.name) == (
                f.default_factory() if f.default is dataclasses.MISSING else f.default
            ):
                d.pop(f.name)
    return d


def product_from_dict(d: dict):
    d = dict(d)
    kind = d.pop("kind")
    if kind == "table":
        groups = [Group(**{**g, "rows": [tuple(r) for r in g.get("rows", [])]}) for g in d.pop("groups")]
        return TableDef(groups=groups, **d)
    panels = [Panel(**p) for p in d.pop("panels")]
    lines = [Panel(**p) for p in d.pop("lines", [])]
    return FigureDef(kind=kind, panels=panels, lines=lines, **d)


#: per-cell quantities of a matrix table: (markdown heading, LaTeX heading)
VALUES = {
    "acc": ("Acc.", "Acc."),
    "imp": ("Imps.", "Imps."),
    "ala_params": ("ALA weights", "ALA weights"),
    "time_total": ("Total time", "Total time"),
    "time_round": ("Time/iter.", "Time/iter."),
    "time_init": ("ALA initial stage", "ALA initial stage"),
    "params_round": ("Param./iter.", "Param./iter."),
}


# ------------------------------------------------------------------------------------------------ matrix groups
# (fedcli/reports/matrix.py builds them)


def _strings(v, key: str, loc, name: str, allow_empty: bool = False) -> list[str]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or (not v and not allow_empty) or not all(isinstance(x, str) and x for x in v):
        raise ConfigError(
            f"{loc(key)}: `{key}` of table '{name}' must be a {'' if allow_empty else 'non-empty '}list of strings"
        )
    return list(v)


def _matrix_axes(grp: Group, g: dict, loc, name: str) -> None:
    """Set the matrix's methods, settings, their labels (one per key, if given) and its values (of VALUES)."""
    grp.methods = _strings(g.get("methods"), "methods", loc, name)
    grp.settings = _strings(g.get("settings"), "settings", loc, name)
    for what in ("method", "setting"):
        keys = getattr(grp, f"{what}s")
        labels = _strings(g.get(f"{what}_labels", []), f"{what}_labels", loc, name, allow_empty=True)
        if labels and len(labels) != len(keys):
            raise ConfigError(
                f"{loc(f'{what}_labels')}: table '{name}': `{what}_labels` must give one label per {what} "
                f"({len(keys)}), got {len(labels)}"
            )
        setattr(grp, f"{what}_labels", labels)
    grp.values = _strings(g.get("values", ["acc"]), "values", loc, name)
    for v in grp.values:
        if v not in VALUES:
            raise ConfigError(f"{loc('values')}: unknown value '{v}' in table '{name}' (use {', '.join(VALUES)})")


def _matrix_templates(grp: Group, g: dict, loc, name: str) -> None:
    """Set the ``cell`` and ``compare`` run-name templates: each cell names its own run; ``compare`` iff 'imp'."""
    for k in ("cell", "compare"):
        v = g.get(k, getattr(Group, k))
        if not isinstance(v, str):
            raise ConfigError(
                f"{loc(k)}: `{k}` of table '{name}' must be a run-name template (\"{{method}} | {{setting}}\")"
            )
        setattr(grp, k, v)
    if "{method}" not in grp.cell and len(grp.methods) > 1 or "{setting}" not in grp.cell and len(grp.settings) > 1:
        raise ConfigError(
            f"{loc('cell')}: `cell` of table '{name}' must contain {{method}} and {{setting}} "
            f"(got '{grp.cell}'), so that every cell names its own run"
        )
    if ("imp" in grp.values) != bool(grp.compare):
        raise ConfigError(
            f"{loc('compare' if grp.compare else 'values')}: table '{name}': the value 'imp' and the template "
            "`compare` (the run without ALA each cell is compared with) go together"
        )


def _matrix_header(grp: Group, g: dict, loc, name: str) -> None:
    """Set the header row: [label, number of settings] pairs that cover the settings."""
    header = g.get("header", [])
    if (
        not isinstance(header, list)
        or not all(
            isinstance(h, list)
            and len(h) == 2
            and isinstance(h[0], str)
            and isinstance(h[1], int)
            and not isinstance(h[1], bool)
            and h[1] > 0
            for h in header
        )
        or (header and sum(h[1] for h in header) != len(grp.settings))
    ):
        raise ConfigError(
            f"{loc('header')}: `header` of table '{name}' must be [label, number of settings] pairs "
            f"covering its {len(grp.settings)} settings"
        )
    grp.header = [list(h) for h in header]


def _matrix_skip(grp: Group, g: dict, loc, name: str) -> None:
    """Set the cells to skip, each one of the matrix's cells (or compared runs)."""
    grp.skip = _strings(g.get("skip", []), "skip", loc, name, allow_empty=True)
    cells = {
        t.replace("{method}", m).replace("{setting}", s)
        for m in grp.methods
        for s in grp.settings
        for t in (grp.cell, grp.compare)
        if t
    }
    for n in grp.skip:
        if n not in cells:
            raise ConfigError(f"{loc('skip')}: table '{name}' skips '{n}', which is not one of its cells")


def parse_matrix_group(grp: Group, g: dict, loc, name: str) -> None:
    """Fill ``grp`` from one matrix group (table-level matrix keys already merged in); ConfigError names the key."""
    for k in ("runs", "rows", "baseline"):
        if k in g:
            raise ConfigError(
                f"{loc(k)}: table '{name}' has layout = \"matrix\": its cells are runs named by `cell` "
                f"from `methods` and `settings` (no `{k}`)"
            )
    _matrix_axes(grp, g, loc, name)
    _matrix_templates(grp, g, loc, name)
    _matrix_header(grp, g, loc, name)
    _matrix_skip(grp, g, loc, name)
    grp.baseline = None
