"""``fedcli report``: find sweeps under a folder, list their products, build tables and figures."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from fedcli.errors import ConfigError
from fedcli.reports.products import FigureDef, TableDef, product_from_dict
from fedcli.reports.rundata import RunData
from fedcli.results.runstate import DONE, RunState, run_state
from fedcli.results.sweepdir import MANIFEST, load_manifest, rerun_command
from fedcli.results.validate import diverged

FORMATS = ("md", "latex", "csv")


class MissingRuns(ConfigError):
    """A product's runs are missing or incomplete (exit 2); the message names them."""


@dataclass
class Sweep:
    root: Path
    manifest: dict
    #: the runs' states once read (:meth:`settled`: one report's view); None: read each time, as they may change
    memo: dict | None = field(default=None, repr=False, compare=False)

    def settled(self) -> "Sweep":
        """This sweep with each run's state read once and kept: what one report (``--paper``'s section, with its
        paragraph, tables and figures) sees, each run checked once instead of once per product and format."""
        return replace(self, memo={})

    @property
    def seeds(self) -> list[int]:
        return [int(s) for s in self.manifest.get("seeds", [])]

    @property
    def scale(self) -> str | None:
        return self.manifest.get("scale")

    @property
    def label(self) -> str:
        return str(self.root)

    def tables(self) -> list[TableDef]:
        return [product_from_dict(d) for d in self.manifest.get("tables", [])]

    def figures(self) -> list[FigureDef]:
        return [product_from_dict(d) for d in self.manifest.get("figures", [])]

    def products(self) -> list:
        return self.tables() + self.figures()

    def entries(self) -> dict[tuple[str, int], Path]:
        return {(e["name"], int(e["seed"])): self.root / e["dir"] for e in self.manifest.get("runs", [])}

    def state(self, name: str, seed: int) -> RunState | None:
        """A run's state as ``fedcli sweep`` (and ``--dry-run``) decides it: :func:`fedcli.results.runstate.run_state`
        against the config the sweep recorded for it (its ``config_hash`` in older sweep manifests); None if the
        sweep has no such run."""
        if self.memo is not None and (name, seed) in self.memo:
            return self.memo[(name, seed)]
        e = next((e for e in self.manifest.get("runs", []) if e["name"] == name and int(e["seed"]) == seed), None)
        st = None if e is None else run_state(self.root / e["dir"], e.get("config"), e.get("config_hash"))
        if self.memo is not None:
            self.memo[(name, seed)] = st
        return st

    def retimed(self) -> dict[str, dict]:
        """The sweep's re-timed runs (``sweep.json``'s ``retimed``, from its recipe's ``retime`` lists): name ->
        {"name", "of": the run it re-times, "options": the system options}."""
        return {str(e["name"]): e for e in self.manifest.get("retimed", []) or []}

    def status(self, names: list[str]) -> tuple[dict, list[str]]:
        """({name: {seed: RunData}} for complete (or diverged) runs, ["name seed k (state)"] for the others, in the
        words ``fedcli sweep --dry-run`` uses). A re-timed run (:meth:`retimed`) is the run it re-times, read from its
        records under its own options (``fedcli.reports.retime.variant``), and lacks what that run lacks."""
        entries, variants = self.entries(), self.retimed()
        runs, problems = {}, []
        for name in names:
            variant = variants.get(name)
            source = str(variant["of"]) if variant else name
            said = f" (re-timed from '{source}'" if variant else " ("
            for seed in self.seeds:
                st = self.state(source, seed)
                if st is None:
                    problems.append(f"'{name}' seed {seed}{said}{': ' if variant else ''}not in the sweep)")
                    continue
                if st.state != DONE and not st.diverged:
                    problems.append(f"'{name}' seed {seed}{said}{': ' if variant else ''}{st.words()})")
                    continue
                run = RunData(entries[(source, seed)], st.manifest)
                if variant:
                    run = self._retimed_run(name, seed, run, variant["options"])
                runs.setdefault(name, {})[seed] = run
        return runs, problems

    def _retimed_run(self, name: str, seed: int, run: RunData, options: dict) -> RunData:
        """``run`` re-timed under ``options`` (kept for the report when the sweep is :meth:`settled`)."""
        from fedcli.reports.retime import variant

        key = ("retimed", name, seed)
        if self.memo is not None and key in self.memo:
            return self.memo[key]
        out = variant(run, options)
        if self.memo is not None:
            self.memo[key] = out
        return out

    def retry_hint(self) -> str:
        return rerun_command(self.manifest, self.root)

    def need(self, product) -> dict:
        runs, problems = self.status(product.run_names())
        if problems:
            shown = ", ".join(problems[:6]) + (f" and {len(problems) - 6} more" if len(problems) > 6 else "")
            what = "table" if isinstance(product, TableDef) else "figure"
            raise MissingRuns(
                f"{what} '{product.name}' in {self.root} needs {len(problems)} run(s) that are missing, "
                f"incomplete or damaged: {shown}; (re-)run them with `{self.retry_hint()}`"
            )
        return runs


def find_sweeps(folder: str | Path, warn=None) -> list[Sweep]:
    """The sweep in ``folder``, or the sweeps in its subfolders (two levels down). Of several sweeps found, one whose
    ``sweep.json`` cannot be read is named through ``warn(msg)`` and left out (none readable: its error)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder")
    if (folder / MANIFEST).exists():
        return [Sweep(folder, load_manifest(folder))]
    found = sorted({p.parent for pat in (f"*/{MANIFEST}", f"*/*/{MANIFEST}") for p in folder.glob(pat)})
    if not found:
        raise ConfigError(
            f"{folder}: no sweep here ({MANIFEST} not found in it or its subfolders); run `fedcli sweep RECIPE` first"
        )
    sweeps, errors = [], []
    for p in found:
        try:
            sweeps.append(Sweep(p, load_manifest(p)))
        except ConfigError as e:
            errors.append(e)
            if warn is not None:
                warn(f"left out {p}: {e}")
    if not sweeps:
        raise errors[0]
    if errors and warn is None:
        raise errors[0]
    return sweeps


def pick(sweeps: list[Sweep], name: str, kind: str):
    """(sweep, product) of the product ``name``; ConfigError if unknown or ambiguous."""
    from fedcli.method_names import suggest

    hits = [(s, p) for s in sweeps for p in s.products() if p.name == name]
    if not hits:  # the names of this kind only (a figure is no answer to --table), the closest first
        cls = TableDef if kind == "table" else FigureDef
        avail = sorted({p.name for s in sweeps for p in s.products() if isinstance(p, cls)})
        raise ConfigError(
            f"no {kind} named '{name}' here; {suggest(name, avail)}the {kind}s here: "
            f"{', '.join(avail) or 'none'} (`fedcli report DIR` lists them)"
        )
    if len(hits) > 1:
        raise ConfigError(
            f"'{name}' is in {len(hits)} sweeps ({', '.join(str(s.root) for s, _ in hits)}); pass one of those folders"
        )
    return hits[0]


def listing(sweeps: list[Sweep]) -> list[dict]:
    """What the folder can produce: one dict per product, with its readiness."""
    rows = []
    for s in sweeps:
        for p in s.products():
            _, problems = s.status(p.run_names())
            total = len(p.run_names()) * len(s.seeds)
            rows.append(
                {
                    "sweep": str(s.root),
                    "scale": s.scale,
                    "name": p.name,
                    "kind": "table" if isinstance(p, TableDef) else f"figure ({p.kind})",
                    "paper": p.paper,
                    "title": p.title,
                    "runs": total,
                    "missing": len(problems),
                }
            )
    return rows


def scaled_title(product, sweep: Sweep, runs: dict):
    """At a scale other than the paper's (smoke), a product is titled as that scale of the paper's setting, with the
    data and models the runs actually used: "smoke scale of: FedLAMA AAAI 2023, Table 3 — ...; ran femnist/mlp"."""
    import dataclasses

    if not sweep.scale or sweep.scale == "paper":
        return product
    ran = ", ".join(
        dict.fromkeys(
            f"{r.config.get('dataset', '?')}/{r.config.get('model', '?')}"
            for per_seed in runs.values()
            for r in per_seed.values()
        )
    )
    paper = " — ".join(x for x in (product.paper, product.title) if x) or product.name
    return dataclasses.replace(product, paper="", title=f"{sweep.scale} scale of: {paper}; ran {ran}")


def make_table(sweeps: list[Sweep], name: str, fmt: str = "md") -> str:
    """The table ``name`` of ``sweeps`` rendered as ``fmt`` (md, latex, csv)."""
    from fedcli.reports.tables import render

    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    return render(sweep_table(sweeps, name)[1], fmt)


def sweep_table(sweeps: list[Sweep], name: str):
    """(sweep, :class:`fedcli.reports.tables.Table`) of the table ``name``: its runs checked, built, diverged runs
    noted."""
    from fedcli.reports.matrix import build_matrix
    from fedcli.reports.tables import build_table

    sweep, table_def = pick(sweeps, name, "table")
    if not isinstance(table_def, TableDef):
        raise ConfigError(f"'{name}' is a figure, not a table; write it with --figures OUTDIR --figure {name}")
    runs = sweep.need(table_def)
    build = build_matrix if table_def.layout == "matrix" else build_table  # FedALA's methods x settings tables
    table = build(scaled_title(table_def, sweep, runs), runs, sweep.seeds, sweep.scale)
    stopped = [
        f"'{name}' seed {seed} ({r.manifest['error'].split(': ', 1)[-1]})"
        for name, per_seed in runs.items()
        for seed, r in sorted(per_seed.items())
        if diverged(r.manifest)
    ]
    if stopped:
        table.notes.append("Diverged (exit 4), counted with the evaluations made before: " + "; ".join(stopped) + ".")
    return sweep, table


def chosen_figures(sweeps: list[Sweep], names: list[str] | None = None) -> list[tuple[Sweep, FigureDef]]:
    """(sweep, figure) of each figure ``names`` names (None: every figure of ``sweeps``)."""
    if not names:
        return [(s, f) for s in sweeps for f in s.figures()]
    chosen = []
    for n in names:
        s, figure_def = pick(sweeps, n, "figure")
        if not isinstance(figure_def, FigureDef):
            raise ConfigError(f"'{n}' is a table, not a figure; print it with --table {n}")
        chosen.append((s, figure_def))
    return chosen


def check_time_axis(sweeps: list[Sweep], names: list[str] | None = None, x: str | None = None) -> None:
    """The curves figures of ``sweeps`` (``names``: only these) drawn against simulated time (``x``, else the figure's
    own ``x``) need every run they draw to have it: ConfigError (exit 2) naming one without it, before the report
    prints a table or writes a file (``fedcli.reports.figures.check_simulated_time``)."""
    for s, figure_def in chosen_figures(sweeps, names):
        if _against_time(figure_def, x):
            _check_time(s.need(figure_def))


def _against_time(figure_def: FigureDef, x: str | None) -> bool:
    """Whether the figure draws simulated time (its kind's ``FigureKind.draws_time`` against its x axis)."""
    from fedcli.reports import style
    from fedcli.reports.figures import FIGURE_KINDS

    return FIGURE_KINDS[figure_def.kind].draws_time(style.x_axis(x or figure_def.x))


def _check_time(runs: dict) -> None:
    """``runs`` (name -> {seed: RunData}) all have simulated time, else ConfigError naming one."""
    from fedcli.reports.figures import check_simulated_time

    check_simulated_time(r for per_seed in runs.values() for r in per_seed.values())


def make_figures(
    sweeps: list[Sweep], out_dir: str | Path, names: list[str] | None = None, x: str | None = None, warn=None
) -> list[Path]:
    """The figures of ``sweeps`` (``names``: only these) into ``out_dir``; ``x`` overrides the curves' x axis."""
    from fedcli.reports.figures import draw

    chosen = chosen_figures(sweeps, names)
    # check everything first, so that a missing run (or one without the simulated time --x time draws) fails before
    # any file is written
    needed = [(s, figure_def, s.need(figure_def)) for s, figure_def in chosen]
    for _, figure_def, runs in needed:
        if _against_time(figure_def, x):
            _check_time(runs)
    files = []
    for s, figure_def, runs in needed:
        try:
            files.extend(draw(scaled_title(figure_def, s, runs), runs, Path(out_dir), x=x, warn=warn))
        except ValueError as e:
            raise ConfigError(f"figure '{figure_def.name}': {e}") from None
        except OSError as e:  # a read-only place, a full disk, a file where a folder is wanted
            from fedcli.errors import os_error

            raise os_error(e, e.filename or out_dir) from None
    return files
