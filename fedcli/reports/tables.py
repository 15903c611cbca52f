"""Paper tables from run directories: build a :class:`Table`, then render it as md, latex or csv."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field

from fedcli.reports.aggregate import Stat, early_stop, mean_std, pct, rounds_to_target
from fedcli.reports.products import TableDef
from fedcli.results.validate import diverged

# ------------------------------------------------------------------------------------------------ model


@dataclass
class Cell:
    text: str  # markdown/plain text
    latex: str | None = None  # LaTeX (default: escaped text)
    values: dict = field(default_factory=dict)  # csv columns -> numbers


@dataclass
class Column:
    key: str
    md: str
    latex: str


@dataclass
class Section:
    label: str
    header: list[list[tuple[str, str, int]]]  # rows of (md, latex, span) above the column names
    columns: list[Column]
    rows: list[list[Cell]]
    meta: list[dict]  # csv identifiers per row (group, run names)


@dataclass
class Table:
    name: str
    title: str
    paper: str
    sections: list[Section]
    notes: list[str]


# ------------------------------------------------------------------------------------------------ cells


def fmt_acc(s: Stat) -> Cell:
    """Mean +- std over the seeds; seeds whose value is not finite (nan) are left out and flagged "(k nan)", never
    silently (a cell of nan seeds only reads "n/a (k nan)")."""
    flag = f" ({s.dropped} nan)" if s.dropped else ""
    if not s.ok:
        return Cell(f"n/a{flag}", f"n/a{flag}", {"mean": float("nan"), "std": float("nan"), "n": s.n})
    if s.n == 1:  # one value: no spread to show (and none in the csv: a sample std needs two)
        return Cell(
            f"{100 * s.mean:.2f}%{flag}",
            f"{100 * s.mean:.2f}\\%{flag}",
            {"mean": 100 * s.mean, "std": float("nan"), "n": 1},
        )
    return Cell(
        f"{100 * s.mean:.2f} ± {100 * s.std:.2f}%{flag}",
        f"${100 * s.mean:.2f} \\pm {100 * s.std:.2f}$\\%{flag}",
        {"mean": 100 * s.mean, "std": 100 * s.std, "n": s.n},
    )


def diverged_mark(cell: Cell, per_seed: dict) -> Cell:
    """An accuracy cell of a run some of whose seeds diverged (exit 4; :func:`fedcli.results.validate.diverged`):
    "(k diverged)" after its number, as "(k nan)" says what was left out; the table's notes name those seeds."""
    k = sum(diverged(r.manifest) for r in per_seed.values())
    if not k:
        return cell
    flag = f" ({k} diverged)"
    return Cell(
        cell.text + flag, (cell.latex if cell.latex is not None else latex_escape(cell.text)) + flag, cell.values
    )


def fmt_pct(s: Stat) -> Cell:
    """A percentage (communication): mean, and "± std" where the seeds differ (a fixed schedule's cost is the same for
    every seed: no "± 0.00"; FedLAMA's adaptive one, or an early stop, may differ)."""
    if not s.ok:
        return Cell("n/a", "n/a", {"mean": float("nan"), "std": float("nan")})
    if s.n > 1 and round(s.std, 2) > 0:
        return Cell(
            f"{s.mean:.2f} ± {s.std:.2f}%", f"${s.mean:.2f} \\pm {s.std:.2f}$\\%", {"mean": s.mean, "std": s.std}
        )
    return Cell(f"{s.mean:.2f}%", f"{s.mean:.2f}\\%", {"mean": s.mean, "std": s.std})


#: an early-stopping cell of a row none of whose seeds reached the target (accuracy, steps and C ratio alike)
NOT_REACHED = "not reached"


def not_reached(**values) -> Cell:
    """A "not reached" cell; ``values``: its csv columns beside mean and std (NaN), as the reached cells have them."""
    return Cell(NOT_REACHED, NOT_REACHED, {"mean": float("nan"), "std": float("nan"), **values})


def fmt_steps(s: Stat, reached: int, n: int) -> Cell:
    if reached == 0:
        return not_reached(reached=0, n=n)
    text = f"{s.mean:,.0f}" + (f" ± {s.std:,.0f}" if s.std > 0 else "")
    latex = f"{s.mean:,.0f}".replace(",", "{,}") + (f" $\\pm$ {s.std:,.0f}".replace(",", "{,}") if s.std > 0 else "")
    if reached < n:
        text += f" ({reached}/{n})"
        latex += f" ({reached}/{n})"
    return Cell(text, latex, {"mean": s.mean, "std": s.std, "reached": reached, "n": n})


def fmt_reach(s: Stat, reached: int, n: int, digits: int, one: str, counts: bool = True) -> Cell:
    """Target layout: "mean ± std" over the seeds that reached the target, " (k/n)" when some did not, "—" if none
    did."""
    values = {
        "mean": s.mean if reached else float("nan"),
        "std": s.std if reached else float("nan"),
        "reached": reached,
        "n": n,
    }
    if reached == 0:
        return Cell("—", "---", values)
    if reached == 1:
        text = one.format(s.mean)
        latex = text
    else:
        text = f"{s.mean:.{digits}f} ± {s.std:.{digits}f}"
        latex = f"${s.mean:.{digits}f} \\pm {s.std:.{digits}f}$"
    if counts and reached < n:
        text += f" ({reached}/{n})"
        latex += f" ({reached}/{n})"
    return Cell(text, latex, values)


def plain(v) -> Cell:
    if isinstance(v, float):
        t = f"{v:g}"
    else:
        t = str(v)
    return Cell(t, latex_escape(t), {"value": v})


LATEX_ESCAPES = {
    **{ch: "\\" + ch for ch in "&%$#_{}"},
    "~": "\\textasciitilde{}",
    "^": "\\textasciicircum{}",
    "\\": "\\textbackslash{}",
    "±": "$\\pm$",
    "—": "---",
    "–": "--",
    "τ": "$\\tau$",
    "φ": "$\\phi$",
    # the symbols recipes and reports write (a standard LaTeX has no Unicode Greek in text)
    "Σ": "$\\Sigma$",
    "δ": "$\\delta$",
    "λ": "$\\lambda$",
    "μ": "$\\mu$",
    "α": "$\\alpha$",
    "β": "$\\beta$",
    "η": "$\\eta$",
    "ε": "$\\epsilon$",
    "σ": "$\\sigma$",
    "θ": "$\\theta$",
    "Δ": "$\\Delta$",
    "′": "$'$",
    "−": "$-$",
    "·": "$\\cdot$",
    "≥": "$\\geq$",
    "≤": "$\\leq$",
    "×": "$\\times$",
    "→": "$\\to$",
    "≈": "$\\approx$",
    "`": "\\textasciigrave{}",
}


def latex_escape(s: str) -> str:
    """``s`` as LaTeX text: the specials escaped, the symbols fedcli writes as math, and two ASCII hyphens written
    ``-{}-`` (``--`` would print an en dash, and under ``\\usepackage[T1]{fontenc}`` one hyphen in ``\\texttt``:
    ``--scale`` must print as typed); a power of ten written ``10^6`` as math, ``10$^{6}$`` (never a caret)."""
    parts = _POWER.split(s)  # text, exponent, text, ...
    return "".join(f"$^{{{p}}}$" if k % 2 else _escape_chars(p) for k, p in enumerate(parts))


#: an exponent written after a number (``10^6``, ``2^-3``): set as a superscript in LaTeX
_POWER = re.compile(r"(?<=\d)\^(-?\d+)")


def _escape_chars(s: str) -> str:
    return "".join(
        "-{}" if ch == "-" and s[i + 1 : i + 2] == "-" else LATEX_ESCAPES.get(ch, ch) for i, ch in enumerate(s)
    )


def latex_text(s: str) -> str:
    """Text that marks code Markdown's way (between backticks) as LaTeX: the code in ``\\texttt`` (its characters as
    typed, a break allowed after each ``/``: :func:`_breakable`), the rest escaped (:func:`latex_escape`); an unpaired
    backtick stays a character."""
    parts = s.split("`")
    if len(parts) % 2 == 0:
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return "".join(
        f"\\texttt{{{_breakable(_escape_chars(p))}}}" if k % 2 else _open_quotes(latex_escape(p))
        for k, p in enumerate(parts)
    )


def _breakable(tex: str) -> str:
    """Code in ``\\texttt`` that may break after each ``/`` (a long path never runs into the margin: typewriter type
    breaks only at spaces), with no package (``\\allowbreak``: no hyphen is added, the path reads as typed)."""
    return tex.replace("/", "/\\allowbreak{}")


def _open_quotes(tex: str) -> str:
    """A single quote that opens a quotation ('FedAvg x1') as LaTeX's opening quote (`), outside code."""
    return re.sub(r"(^|[\s(\[])'(?=\S)", r"\1`", tex)


def phi_of(run) -> int:
    """The run's phi: its layer-wise schedule's option (read as the schedule's spec declares it), 1 for any other."""
    return run.params("schedule").phi if run.layerwise else 1


def phi_cell(run) -> Cell:
    phi = phi_of(run)
    t = f"{phi} ({run.method_label()})"
    return Cell(t, latex_escape(t), {"value": phi})


def partition_value(run):
    cfg = run.config
    if cfg.get("partition_file"):
        return "file"
    scheme = cfg.get("partition", "")
    return {
        "dirichlet": cfg.get("alpha"),
        "iid": "IID",
        "pathological": f"{cfg.get('classes_per_client')} classes",
        "natural": f"{cfg.get('writers_per_client')} writers",
    }.get(scheme, scheme)


HEADERS = {
    "name": ("Run", "Run"),
    "method": ("Method", "Method"),
    "lr": ("LR", "LR"),
    "tau": ("τ'", "$\\tau'$"),
    "phi": ("φ", "$\\phi$"),
    "active_ratio": ("Active ratio", "Active ratio"),
    "alpha": ("Dirichlet coeff.", "Dirichlet coeff."),
    "clients": ("# of clients", "\\# of clients"),
    "batch_size": ("Local batch size", "Local batch size"),
    "iterations": ("Iterations", "Iterations"),
    "acc": ("Accuracy", "Accuracy"),  # a table's: acc_header
    "final_acc": ("Final acc.", "Final acc."),
    "best_acc": ("Best acc.", "Best acc."),
    "comm": ("Comm. cost", "Comm. cost"),
    "comm_bytes": ("Bytes moved", "Bytes moved"),
    "seeds": ("Seeds", "Seeds"),
}


def over_seeds(seeds: list[int]) -> str:
    """The first words of a table's notes: what its cells are over the seeds."""
    if len(seeds) == 1:
        return f"One seed ({seeds[0]}): single values, no standard deviation"
    return f"Mean ± sample std over {len(seeds)} seeds ({', '.join(map(str, seeds))})"


def accuracy_source(metric: str, runs: dict | None = None) -> str:
    """What the accuracy of a table is measured on (its notes). ``auto`` is told by what the table's ``runs``
    ({name: {seed: RunData}}) are: all personalized, none, or both."""
    texts = {
        "test_acc": "global model, test set",
        "personal_acc": "each client's model on its local test split, pooled over the clients (personal_acc)",
        "val_acc": "global model, validation set held out of the training pool (--val-fraction)",
        "personal_val_acc": "each client's model on its own validation samples, pooled over the clients "
        "(--client-val-fraction)",
        "auto": "personalized methods: each client's model on its local test split, pooled over the clients "
        "(personal_acc); "
        "traditional FL: the global model on the test set (test_acc)",
    }
    metric = measured(metric, runs)
    return texts.get(metric, metric)


def measured(metric: str, runs: dict | None = None) -> str:
    """The accuracy column a table's ``metric`` reads from its ``runs`` ({name: {seed: RunData}}): ``auto`` resolved
    to ``test_acc`` or ``personal_acc`` when all runs are of one kind (else ``auto``)."""
    if metric == "auto" and runs:
        kinds = {r.acc_metric("auto") for per_seed in runs.values() for r in per_seed.values()}
        if len(kinds) == 1:
            return kinds.pop()
    return metric


#: the header of a table's accuracy column, by what it measures (the notes say the same: :func:`accuracy_source`)
ACC_HEADERS = {
    "test_acc": "Test acc.",
    "personal_acc": "Personal acc.",
    "val_acc": "Val. acc.",
    "personal_val_acc": "Personal val. acc.",
}


def acc_header(metric: str, runs: dict | None = None) -> str:
    """ "Test acc." for the global model on the test set, "Personal acc." for clients' own models, "Accuracy" for a
    table of both kinds; "Val. acc." for the validation set of --val-fraction, and never the papers' "Validation acc."
    for what fedcli measures on the test set."""
    return ACC_HEADERS.get(measured(metric, runs), "Accuracy")


def column(key: str) -> Column:
    md, tex = HEADERS.get(key, (key, latex_escape(key)))
    return Column(key, md, tex)


# ------------------------------------------------------------------------------------------------ select = "best"

#: config keys that differ between the runs of one grid cell without making them different settings
RUN_KEYS = ("seed", "out")


def grid_sets(names: list[str], runs: dict, keys: list[str]) -> list[list[str]]:
    """``names`` in sets of runs whose configs are equal but for the grid ``keys`` (and the seed and folder), in the
    order of each set's first run. ``runs``: name -> {seed: RunData}."""
    sets: dict[str, list[str]] = {}
    for name in names:
        cfg = next(iter(runs[name].values())).config
        sig = json.dumps(
            {k: v for k, v in cfg.items() if k not in keys and k not in RUN_KEYS}, sort_keys=True, default=str
        )
        sets.setdefault(sig, []).append(name)
    return list(sets.values())


def select_score(table_def: TableDef, per_seed: dict) -> tuple:
    """How good a run is for ``select = "best"`` (larger is better): the mean over the seeds of an accuracy
    (``acc``: the table's ``accuracy``; ``best_acc``, ``final_acc``), a run whose mean is not finite last; ``rounds``:
    the seeds that reach the target, then the fewest mean rounds to it."""
    if table_def.select_on == "rounds":
        reach = rounds_to_target(per_seed, table_def.target, table_def.metric)
        return (reach.reached, -reach.rounds.mean if reach.reached else -math.inf)
    which = table_def.accuracy if table_def.select_on == "acc" else table_def.select_on.split("_")[0]
    s = mean_std(r.accuracy(which, table_def.metric) for r in per_seed.values())
    return (1, s.mean) if s.ok else (0, -math.inf)


def select_best(table_def: TableDef, names: list[str], runs: dict) -> list[tuple[str, list[str]]]:
    """The rows a ``rows``/``target`` table shows: every run (``select = "all"``), or of each set of runs differing
    only in ``select_by`` the best by :func:`select_score` (the first listed on a tie), with the set it was picked
    from."""
    if table_def.select != "best":
        return [(n, [n]) for n in names]
    out = []
    for cands in grid_sets(names, runs, table_def.select_by):
        scores = [select_score(table_def, runs[n]) for n in cands]
        out.append((cands[max(range(len(cands)), key=lambda i: (scores[i], -i))], cands))
    return out


def select_note(table_def: TableDef, picked: list[tuple[str, list[str]]], runs: dict) -> str:
    """The note that says what ``select = "best"`` picked, from which runs and by what."""
    by = ", ".join(table_def.select_by)
    how = {
        "acc": f"the highest mean {table_def.accuracy} accuracy over the seeds",
        "best_acc": "the highest mean best accuracy over the seeds",
        "final_acc": "the highest mean last accuracy over the seeds",
        "rounds": "the most seeds reaching the target, then the fewest mean rounds",
    }[table_def.select_on]
    parts = []
    for name, cands in picked:
        if len(cands) > 1:
            cfg = next(iter(runs[name].values())).config
            vals = ", ".join(f"{k} {cfg.get(k)}" for k in table_def.select_by)
            parts.append(f"'{name}' ({vals}) of {', '.join(repr(c) for c in cands)}")
    return f"Best over {by}: of the runs that differ only in {by}, the row shown is the one with {how}" + (
        f"; picked {'; '.join(parts)}." if parts else "; no row had more than one run to pick from."
    )


# ------------------------------------------------------------------------------------------------ build


class ReportError(Exception):
    """Runs that a product needs are missing or incomplete (the CLI turns this into exit 2)."""


def build_table(table_def: TableDef, runs: dict, seeds: list[int], scale: str | None = None) -> Table:
    """``runs`` maps run name -> {seed: RunData} (complete for every name the table needs); the ``matrix`` layout is
    ``fedcli.reports.matrix.build_matrix``'s. One section per group (:func:`_rows_section` for the ``rows`` and
    ``target`` layouts, :func:`_paired_section` for ``paired``), then the notes (:func:`_table_notes`)."""
    stats = _RunStats(table_def, runs)
    sections, picks = [], []
    for g in table_def.groups:
        if table_def.layout in ("rows", "target"):
            section, picked = _rows_section(table_def, g, runs, stats)
            sections.append(section)
            picks += picked
        else:
            sections.append(_paired_section(table_def, g, stats))
    return Table(
        table_def.name, table_def.title, table_def.paper, sections, _table_notes(table_def, runs, seeds, picks, scale)
    )


class _RunStats:
    """A table's numbers over the seeds of one run: accuracy and communication (mean ± std), the first seed's run."""

    def __init__(self, table_def: TableDef, runs: dict):
        self.table_def, self.runs = table_def, runs

    def per_seed(self, name: str) -> dict:
        return self.runs[name]

    def acc(self, name: str, which: str | None = None):
        return mean_std(
            r.accuracy(which or self.table_def.accuracy, self.table_def.metric) for r in self.per_seed(name).values()
        )

    def acc_cell(self, name: str, which: str | None = None) -> Cell:
        """Run ``name``'s accuracy cell, marked where seeds of it diverged (:func:`diverged_mark`)."""
        return diverged_mark(fmt_acc(self.acc(name, which)), self.per_seed(name))

    def comm(self, name: str, base_comm: float, attr: str = "comm_params"):
        return mean_std(pct(getattr(r, attr), base_comm) for r in self.per_seed(name).values())

    def first(self, name: str):
        return next(iter(self.per_seed(name).values()))

    def baseline(self, g, attr: str) -> float:
        """The mean ``attr`` (comm_params, comm_bytes) of the group's baseline over its seeds; NaN without one."""
        return (
            mean_std(getattr(r, attr) for r in self.per_seed(g.baseline).values()).mean if g.baseline else float("nan")
        )


def simulated_time(runs) -> bool:
    """Some of ``runs`` (RunData) were trained with the system model (``--system``: sim_time_s in metrics.csv)."""
    return any(r.simulated for r in runs)


def _rows_section(table_def: TableDef, g, runs: dict, stats: _RunStats) -> tuple[Section, list]:
    """A ``rows``/``target`` group: the runs it shows (:func:`select_best`), one row each of the table's columns
    (:func:`_column_cell`) and, for ``target``, the rounds and megabytes to the target (and the simulated seconds, for
    runs trained with ``--system``), and the local iterations to it (rounds of different methods are of different
    lengths: :func:`round_lengths`). Returns (section, the picks)."""
    base_comm, base_bytes = stats.baseline(g, "comm_params"), stats.baseline(g, "comm_bytes")
    acc = acc_header(table_def.metric, {n: runs[n] for n in table_def.run_names() if n in runs})
    cols = [Column(c, acc, acc) if c == "acc" else column(c) for c in table_def.columns]
    picked = select_best(table_def, g.runs, runs)
    # --system runs: the simulated time to the target too (docs/system-model.md)
    timed = table_def.layout == "target" and simulated_time([stats.first(name) for name, _ in picked])
    if table_def.layout == "target":
        tgt = f"{100 * table_def.target:g}%"
        cols += [
            Column("rounds", f"Rounds to {tgt}", f"Rounds to {latex_escape(tgt)}"),
            Column("iters", f"Iterations to {tgt}", f"Iterations to {latex_escape(tgt)}"),
            Column("comm_mb", f"Comm. to {tgt} (MB)", f"Comm. to {latex_escape(tgt)} (MB)"),
        ]
        cols += [Column("time_s", f"Time to {tgt} (s)", f"Time to {latex_escape(tgt)} (s)")] if timed else []
    rows, meta = [], []
    for name, cands in picked:
        cells = [_column_cell(c, name, stats, base_comm, base_bytes) for c in table_def.columns]
        if table_def.layout == "target":
            reach = rounds_to_target(stats.per_seed(name), table_def.target, table_def.metric)
            cells += [
                diverged_mark(fmt_reach(reach.rounds, reach.reached, reach.n, 1, "{:g}"), stats.per_seed(name)),
                fmt_reach(reach.iterations, reach.reached, reach.n, 1, "{:g}", counts=False),
                fmt_reach(reach.comm_mb, reach.reached, reach.n, 2, "{:.2f}", counts=False),
            ]
            cells += [fmt_reach(reach.time_s, reach.reached, reach.n, 1, "{:.1f}", counts=False)] if timed else []
        rows.append(cells)
        meta.append(
            {"group": g.label, "run": name} | ({"picked_from": "; ".join(cands)} if table_def.select == "best" else {})
        )
    return Section(g.label, [], cols, rows, meta), picked


def _column_cell(c: str, name: str, stats: _RunStats, base_comm: float, base_bytes: float) -> Cell:
    """Run ``name``'s cell in column ``c`` of a ``rows``/``target`` table (any other column: that config value)."""
    r0 = stats.first(name)
    if c == "acc":
        return stats.acc_cell(name)
    if c in ("final_acc", "best_acc"):
        return stats.acc_cell(name, c.split("_")[0])
    if c == "comm":
        return fmt_pct(stats.comm(name, base_comm))
    if c == "comm_bytes":
        return fmt_pct(stats.comm(name, base_bytes, "comm_bytes"))
    if c == "name":
        return plain(name)
    if c == "method":
        return plain(r0.method_label())
    if c == "phi":
        return phi_cell(r0)
    if c == "active_ratio":
        v = r0.config.get("active_ratio", float("nan"))
        return Cell(f"{100 * v:g}%", f"{100 * v:g}\\%", {"value": v})
    if c == "alpha":
        return plain(partition_value(r0))
    if c == "clients":
        return plain(r0.manifest.get("clients", r0.config.get("clients")))
    if c == "seeds":
        return plain(len(stats.per_seed(name)))
    return plain(r0.config.get(c, ""))


def _paired_columns(g, acc: str) -> tuple[list[Column], list]:
    """The 13 columns of a ``paired`` group and its two-level header (the two runs' titles; full/early-stop spans)."""
    cols = [
        Column("left_lr", "LR", "LR"),
        Column("left_tau", "τ'", "$\\tau'$"),
        Column("left_phi", "φ", "$\\phi$"),
        Column("left_acc", acc, acc),
        Column("left_comm", "C ratio", "C ratio"),
        Column("right_lr", "LR", "LR"),
        Column("right_tau", "τ'", "$\\tau'$"),
        Column("right_phi", "φ", "$\\phi$"),
        Column("es_acc", f"ES: {acc}", acc),
        Column("es_steps", "ES: # of steps", "\\# of steps"),
        Column("es_comm", "ES: C ratio", "C ratio"),
        Column("full_acc", f"Full: {acc}", acc),
        Column("full_comm", "Full: C ratio", "C ratio"),
    ]
    header = [
        [(g.left_title, latex_escape(g.left_title), 5), (g.right_title, latex_escape(g.right_title), 8)],
        [
            ("Full training", "Full training", 5),
            ("Early stopping", "Early stopping", 6),
            ("Full training", "Full training", 2),
        ],
    ]
    return cols, header


def _paired_cells(stats: _RunStats, pair: tuple[str, str], firsts: tuple, es, base_comm) -> list[str]:
    """One row of a ``paired`` group: each run's LR, tau', phi; the left run's accuracy and C ratio; the right run's
    early stop (``es``) and full training."""
    (left, right), (lr0, rr0) = pair, firsts
    return [
        plain(lr0.config.get("lr")),
        plain(lr0.config.get("tau")),
        plain(phi_of(lr0)),
        stats.acc_cell(left),
        fmt_pct(stats.comm(left, base_comm)),
        plain(rr0.config.get("lr")),
        plain(rr0.config.get("tau")),
        plain(phi_of(rr0)),
        fmt_acc(es.acc) if es.reached else not_reached(n=0),
        fmt_steps(es.steps, es.reached, es.n),
        fmt_pct(es.comm_pct) if es.reached else not_reached(),
        stats.acc_cell(right),
        fmt_pct(stats.comm(right, base_comm)),
    ]


def _paired_section(table_def: TableDef, g, stats: _RunStats) -> Section:
    """A ``paired`` group (FedLAMA's Table 5 shape): per row the left run's full training, the right run's early stop
    at the left one's accuracy (:func:`early_stop`) and its full training, under a two-level header."""
    base_comm = stats.baseline(g, "comm_params")
    acc = acc_header(table_def.metric, {n: stats.runs[n] for pair in g.rows for n in pair})  # the notes say the same
    cols, header = _paired_columns(g, acc)
    rows, meta = [], []
    for left, right in g.rows:
        lr0, rr0 = stats.first(left), stats.first(right)
        es = early_stop(
            stats.per_seed(right),
            stats.per_seed(left),
            base_comm,
            table_def.accuracy,
            table_def.early_stop_target,
            table_def.metric,
        )
        rows.append(_paired_cells(stats, (left, right), (lr0, rr0), es, base_comm))
        meta.append({"group": g.label, "left_run": left, "right_run": right})
    label = g.label or (f"{g.left_title} vs {g.right_title}" if len(table_def.groups) > 1 else "")
    return Section(label, header, cols, rows, meta)


#: which evaluation of a run an accuracy column shows (a table's ``accuracy``; the final_acc and best_acc columns)
EVALUATION = {"best": "best evaluation of each run", "final": "last evaluation of each run"}


def accuracy_what(table_def: TableDef) -> str:
    """Which evaluation each accuracy column of the table shows: the table's ``accuracy`` for its accuracy column
    ("best evaluation of each run"), and the Final acc. / Best acc. columns by their own ("last evaluation of each
    run in Final acc., best evaluation of each run in Best acc."), never one word over columns that differ."""
    own = [
        f"{EVALUATION[c.split('_')[0]]} in {HEADERS[c][0]}" for c in table_def.columns if c in ("final_acc", "best_acc")
    ]
    if own and not ("acc" in table_def.columns or table_def.layout not in ("rows", "target")):
        return ", ".join(own)
    return "; ".join([EVALUATION[table_def.accuracy], *own])


def _table_notes(table_def: TableDef, runs: dict, seeds: list[int], picks: list, scale: str | None) -> list[str]:
    """The notes under a table: seeds and where the accuracy comes from, the communication baseline, the target, what
    ``select = "best"`` picked, early stopping, the scale, the table's own notes."""
    notes = [
        f"{over_seeds(seeds)}; accuracy: {accuracy_what(table_def)} "
        f"({accuracy_source(table_def.metric, {n: runs[n] for n in table_def.run_names()})})."
    ]
    bases = list(dict.fromkeys(g.baseline for g in table_def.groups if g.baseline))
    if table_def.layout == "paired" or "comm" in table_def.columns:
        notes.append(
            f"Communication (Eq. 8, parameters) as % of the full training of {', '.join(repr(b) for b in bases)}."
        )
    if table_def.layout == "target":
        reach_note = _reach_note(table_def, runs, seeds)
        if any(c in ("acc", "final_acc", "best_acc") for c in table_def.columns):
            notes.append(reach_note)
        else:
            notes[0] = reach_note
    if table_def.select == "best":
        notes.append(select_note(table_def, picks, runs))
    if table_def.layout == "paired":
        tgt = "the same seed's" if table_def.early_stop_target == "seed" else "the mean"
        notes.append(
            f"Early stopping (ES): first evaluation at which the right-hand run reaches {tgt} accuracy of "
            f"the left-hand run "
            "of its row; C ratio there is its communication so far; (k/n): only k of n seeds reached it."
        )
    if scale == "smoke":
        notes.append(
            f"Scale '{scale}': a reduced version of the paper's grid; the numbers check the pipeline, not the paper."
        )
    elif scale and scale != "paper":  # e.g. cpu: a setting reduced to run offline on a CPU, chosen as evidence
        notes.append(f"Scale '{scale}': a reduced version of the paper's setting; the recipe's header says how.")
    if table_def.notes:
        notes.append(table_def.notes)
    return notes


def _reach_note(table_def: TableDef, runs: dict, seeds: list[int]) -> str:
    """The note of a target table: what reaching the target means, over which seeds, read off which grid."""
    what = {"test_acc": "test accuracy", "auto": "accuracy (personal_acc for personalized runs, else test_acc)"}.get(
        table_def.metric, f"`{table_def.metric}`"
    )
    timed = simulated_time(next(iter(runs[n].values())) for n in table_def.run_names() if runs.get(n))
    reach_note = (
        f"Mean ± sample std over the seeds ({', '.join(map(str, seeds))}) that reach the target: the first evaluation "
        f"whose {what} is at least {100 * table_def.target:g}%, the communication rounds completed there, the local "
        f"iterations done there, the bytes moved so far (comm_bytes, 1 MB = 10^6 bytes)"
        + (" and the simulated seconds so far (sim_time_s, the system model)" if timed else "")
        + "; (k/n): only k of n seeds reached it; —: none did. "
        + round_lengths(table_def, runs)
        + " Read off the evaluation grid (no interpolation), the rounds, iterations, bytes"
        + (" and seconds" if timed else "")
        + " to the target are upper bounds: the target may have been "
        "crossed up to one evaluation interval earlier" + eval_intervals(table_def, runs) + "."
    )
    return reach_note


def round_lengths(table_def: TableDef, runs: dict) -> str:
    """What a round is for each row of a target table: the local iterations between two full synchronizations, by
    the runs' legends ("A round is 20 local iterations for every row (FedAvg (τ=20), FedProx (τ=20))"; "Rounds are
    of different lengths: a round is 6 local iterations for FedAvg (τ=6); 12 for FedLAMA (τ′=6, φ=2), φ × τ′"), read
    from each run's metrics.csv, over its seeds (a run of local epochs: its seeds' means, whose rounds vary)."""
    from fedcli.reports.groups import iterations_per_round

    per: dict[str, list[str]] = {}
    for name in table_def.run_names():
        if not runs.get(name):
            continue
        r0 = next(iter(runs[name].values()))
        lengths = sorted({iterations_per_round(r) for r in runs[name].values()} - {float("nan")})
        lengths = [v for v in lengths if v == v]  # no evaluation yet: nan
        if not lengths:
            continue
        lo, hi = lengths[0], lengths[-1]
        said = f"{lo:.4g}" if lo == hi else f"{lo:.4g} to {hi:.4g}"
        said += "" if all(float(v).is_integer() for v in lengths) else " on average"
        per.setdefault(said, []).append(r0.legend() + (", φ × τ′" if r0.layerwise else ""))
    if not per:
        return ""
    said = [f"{k} local iterations for {', '.join(dict.fromkeys(v))}" for k, v in per.items()]
    if len(said) == 1:
        return f"A round is {said[0]}."
    return "Rounds are of different lengths (compare iterations, not rounds): a round is " + "; ".join(said) + "."


def eval_intervals(table_def: TableDef, runs: dict) -> str:
    """ " (an evaluation every 24 local iterations)" (or "every 4 to 24 ...") from the runs' evaluation grids."""
    steps = set()
    for name in table_def.run_names():
        for r in (runs.get(name) or {}).values():
            its = [row["iteration"] for row in r.metrics]
            steps |= {b - a for a, b in zip(its, its[1:])}
    if not steps:
        return ""
    lo, hi = min(steps), max(steps)
    return (
        f" (an evaluation every {lo:g} local iterations)"
        if lo == hi
        else f" (evaluations {lo:g} to {hi:g} local iterations apart)"
    )


# ------------------------------------------------------------------------------------------------ render


def render(table: Table, fmt: str) -> str:
    return {"md": render_md, "latex": render_latex, "csv": render_csv}[fmt](table)


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def _md_spans(header) -> str:
    """The spanning header rows as one line: 'FedAvg (...) [1-5]: Full training [1-5] · FedLAMA [6-13]: ...'."""

    def ranges(row):
        out, start = [], 1
        for md, _, span in row:
            out.append((md, start, start + span - 1))
            start += span
        return out

    top = ranges(header[0])
    sub = ranges(header[1]) if len(header) > 1 else []
    parts = []
    for md, a, b in top:
        if not md:  # an empty span (above the row labels)
            continue
        inner = [f"{smd} ({sa}–{sb})" for smd, sa, sb in sub if a <= sa and sb <= b]
        parts.append(f"**{md}** (columns {a}–{b})" + (": " + ", ".join(inner) if inner else ""))
    return " · ".join(parts)


def render_md(t: Table) -> str:
    out = []
    title = " — ".join(x for x in (t.paper, t.title) if x)
    out.append(f"### {title}" if title else f"### {t.name}")
    out.append("")
    for sec in t.sections:
        if sec.label:
            out.append(f"**{_md_escape(sec.label)}**")
            out.append("")
        if sec.header:
            out.append(_md_spans(sec.header))
            out.append("")
        out.append("| " + " | ".join(_md_escape(c.md) for c in sec.columns) + " |")
        out.append(
            "|"
            + "|".join(
                "---" if i == 0 and not sec.header and sec.columns[0].key in ("name", "method") else "---:"
                for i, _ in enumerate(sec.columns)
            )
            + "|"
        )
        for row in sec.rows:
            out.append("| " + " | ".join(_md_escape(c.text) for c in row) + " |")
        out.append("")
    out.extend(f"{n}" for n in t.notes)
    return "\n".join(out) + "\n"


#: a table with more columns than this spans both columns of a two-column paper (``table*``)
WIDE_COLUMNS = 7


def caption_text(title: str, notes: list[str]) -> str:
    """The caption: the title as a sentence, then the notes (never "ran femnist/mlp Mean" run together)."""
    title = title.strip()
    if title and title[-1] not in ".!?:":
        title += "."
    text = " ".join(x for x in (title, *notes) if x)
    return sentence(text)


def sentence(text: str) -> str:
    """``text`` starting upper-case, as a caption starts ("smoke scale of: ..." -> "Smoke scale of: ...")."""
    return text[:1].upper() + text[1:]


def text_cell(cell: Cell) -> bool:
    """A cell that holds text (a run's name, a method, a status), not a number: set left-aligned."""
    return set(cell.values) == {"value"} and isinstance(cell.values["value"], str)


def alignment(t: Table, ncols: int) -> str:
    """The tabular's column types: ``l`` for a column of text in every row (:func:`text_cell`: "Run", "Method"),
    ``r`` for numbers."""
    cols = []
    for i in range(ncols):
        cells = [row[i] for sec in t.sections for row in sec.rows if i < len(row)]
        cols.append("l" if cells and all(map(text_cell, cells)) else "r")
    return "".join(cols)


def render_latex(t: Table) -> str:
    """A booktabs table (``\\usepackage{booktabs}`` in the preamble: ``\\toprule``, ``\\midrule``, ``\\cmidrule``,
    ``\\bottomrule``); wider than :data:`WIDE_COLUMNS` columns, a ``table*`` scaled to the text width (graphicx)."""
    ncols = max(len(s.columns) for s in t.sections)
    env = "table*" if ncols > WIDE_COLUMNS else "table"
    wide = env == "table*"  # scaled to the text width (graphicx's \\resizebox): 13 columns overflow a page otherwise
    lines = [
        "% needs \\usepackage{booktabs}" + (" and \\usepackage{graphicx}" if wide else "") + " in the preamble",
        f"\\begin{{{env}}}[t]",
        "\\centering",
        "\\small",
        *(["\\resizebox{\\textwidth}{!}{%"] if wide else []),
        f"\\begin{{tabular}}{{{alignment(t, ncols)}}}",
        "\\toprule",
    ]
    prev_header = None
    for k, sec in enumerate(t.sections):
        if k:
            lines.append("\\midrule")
        if sec.label:
            lines.append(f"\\multicolumn{{{ncols}}}{{l}}{{\\textbf{{{latex_escape(sec.label)}}}}} \\\\")
        hdr = (tuple(tuple(r) for r in sec.header), tuple(c.latex for c in sec.columns))
        if hdr != prev_header:
            for r in sec.header:
                cells, start, rules = [], 1, []
                for _, tex, span in r:
                    cells.append(f"\\multicolumn{{{span}}}{{c}}{{{tex}}}")
                    if tex:
                        rules.append(f"\\cmidrule(lr){{{start}-{start + span - 1}}}")
                    start += span
                lines.append(" & ".join(cells) + " \\\\ " + " ".join(rules))
            lines.append(" & ".join(c.latex for c in sec.columns) + " \\\\")
            lines.append("\\midrule")
            prev_header = hdr
        for row in sec.rows:
            lines.append(" & ".join(c.latex if c.latex is not None else latex_escape(c.text) for c in row) + " \\\\")
    lines.append("\\bottomrule")
    lines.append("\\end{tabular}" + ("}" if wide else ""))
    lines.append(f"\\caption{{{latex_text(caption_text(t.title, t.notes))}}}")
    lines.append(f"\\label{{tab:{t.name}}}")
    lines.append(f"\\end{{{env}}}")
    return "\n".join(lines) + "\n"


def render_csv(t: Table) -> str:
    """Tidy CSV: one line per table row, numeric columns (``<col>_mean``, ``<col>_std``, ...)."""
    records, fields = [], []

    def add(key):
        if key not in fields:
            fields.append(key)

    for sec in t.sections:
        for meta, row in zip(sec.meta, sec.rows):
            rec = {"table": t.name, **meta}
            for key in rec:
                add(key)
            for col, cell in zip(sec.columns, row):
                if set(cell.values) == {"value"}:
                    rec[col.key] = cell.values["value"]
                    add(col.key)
                else:
                    for sub, v in cell.values.items():
                        rec[f"{col.key}_{sub}"] = v
                        add(f"{col.key}_{sub}")
            records.append(rec)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for rec in records:
        w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()})
    return buf.getvalue()
