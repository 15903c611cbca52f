"""Confirming a study's best configurations over seeds, and the tuned rows of a paper table (issue 58, section 3).

:func:`run_confirm` (``fedcli tune DIR --confirm K --seeds N``): the top K configurations of each study of a study
folder (one objective: the best K completed trials; two: the first K of the Pareto set by the first objective) re-run
over N seeds as an ordinary sweep. It writes the sweep recipe ``DIR/confirm/recipe.toml`` (one ``[[runs]]`` row per
configuration: the study's ``base`` values with the trial's params, named ``"<study> trial <number>"``) and
``DIR/confirm/confirm.json`` (which study and trial each row confirms), then runs it with fedcli's sweep
(``fedcli.sweep.run.run_sweep``) into ``DIR/confirm``: resumable, one sweep at a time, a second call runs what is
missing.

:func:`confirmed` reads the confirmation back: per study, each row's mean over its completed seeds of the first
objective (its validation metric, reduced as ``tune.json`` says: ``fedcli.tune.results.reduce_rows``) and the best
row by that mean. :func:`tuned_rows` gives ``fedcli sweep RECIPE --tuned DIR`` the values of each ``[[runs]]`` row of
a paper recipe: the confirmed best of the study named as the row (the slug of its name), and the record that
``sweep.json`` keeps for ``fedcli report --paper``'s "Hyper-parameter selection" paragraph. A row with no study, or
a study with no confirmed configuration, is refused in one line (exit 2).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fedcli.errors import ConfigError

if TYPE_CHECKING:
    from fedcli.sweep.run import SweepOptions

FOLDER = "confirm"
RECIPE = "recipe.toml"
MAP = "confirm.json"
#: train values of a study's base that a sweep sets itself (the run's folder and seed) or that change nothing
DROPPED = ("out", "seed", "threads", "workers", "tracker", "resume", "overwrite")


def candidates(folder, top: int) -> list[dict]:
    """The configurations to confirm (module docstring), each {"name", "study", "number", "params", "values"}."""
    from fedcli.tune.results import pareto_set, ranked

    objs = folder.objectives
    rows = []
    for study in folder.studies:
        pool = ranked(study.trials, objs[0])
        if len(objs) > 1:
            front = {id(t) for t in pareto_set(study.trials, objs)}
            pool = [t for t in pool if id(t) in front]
        for t in pool[:top]:
            values = {k: v for k, v in study.base.items() if k not in DROPPED and k != "params"}
            # a run config's params sections ({"fedlama": {"phi": 4}}) are a recipe row's method tables
            values.update({k: v for k, v in (study.base.get("params") or {}).items() if isinstance(v, dict) and v})
            rows.append(
                {
                    "name": f"{study.name} trial {t.number}",
                    "study": study.name,
                    "number": t.number,
                    "params": dict(t.params),
                    "values": {**values, **t.params},
                }
            )
    return rows


def _toml(v) -> str:
    """A value of a study's base in TOML: a table (a method's params section) inline, a list as an array."""
    from fedcli.sweep.executors import toml_value

    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return toml_value(v)


def recipe_text(folder, rows: list[dict], seeds: int) -> str:
    from fedcli.sweep.executors import toml_value

    rec = folder.record
    lines = [
        f"# fedcli tune --confirm: the best configurations of the studies of {folder.root} re-run over {seeds} seed(s)",
        "# (fedcli/tune/confirm.py); confirm.json says which trial each run confirms",
        f"title = {toml_value('Confirmation of ' + str(rec.get('recipe', folder.root)))}",
        f"seeds = {seeds}",
        "",
    ]
    for r in rows:
        lines += [
            "[[runs]]",
            f"name = {toml_value(r['name'])}",
            *(f"{k} = {_toml(v)}" for k, v in r["values"].items() if v != {}),
            "",
        ]
    return "\n".join(lines)


def run_confirm(study_dir: str | Path, top: int, seeds: int, options: SweepOptions | None = None, **kwargs):
    """Re-run the top ``top`` configurations of each study of ``study_dir`` over ``seeds`` seeds (0..seeds-1) as an
    ordinary sweep into ``study_dir/confirm`` (module docstring). ``options``: a ``fedcli.sweep.run.SweepOptions``,
    or its fields by keyword (``kwargs``: ``jobs``, ``mpi``, ``in_process``, ``on_start``, ``on_done``, ``notify``
    mean what they mean for ``run_sweep``; its seeds and folder are the confirmation's), whose SweepResult is
    returned (SweepFailed when a run failed). No completed trial to confirm: ConfigError (exit 2), nothing written."""
    from fedcli.safefs import atomic_write, make_dir
    from fedcli.sweep.run import SweepOptions, run_sweep
    from fedcli.tune.results import read_study

    o = replace(options, **kwargs) if options is not None else SweepOptions(**kwargs)

    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"--confirm takes how many of each study's best configurations to re-run (>= 1), got {top!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"--seeds takes how many seeds each configuration is re-run with (>= 1), got {seeds!r}")
    folder = read_study(study_dir)
    rows = candidates(folder, top)
    if not rows:
        raise ConfigError(f"{study_dir}: no completed trial to confirm yet; run `fedcli tune` until some complete")
    out = make_dir(Path(study_dir) / FOLDER)
    atomic_write(
        out / MAP,
        json.dumps(
            {
                "kind": "fedcli-tune-confirm",
                "version": 1,
                "top": top,
                "seeds": list(range(seeds)),
                "objective": vars(folder.objectives[0]),
                "rows": [{k: r[k] for k in ("name", "study", "number", "params")} for r in rows],
            },
            indent=2,
        )
        + "\n",
    )
    atomic_write(out / RECIPE, recipe_text(folder, rows, seeds))
    return run_sweep(out / RECIPE, options=replace(o, seeds=seeds, out=out))


def _select_on(study_dir: Path) -> str:
    """The study's ``select_on`` (tune.json): what its objective reads, validation or (optimistic) the test set."""
    try:
        return str(json.loads((study_dir / "tune.json").read_text(encoding="utf-8")).get("select_on", "validation"))
    except (OSError, ValueError):
        return "validation"


def confirmed(study_dir: str | Path) -> dict:
    """{study: {"best": row or None, "rows": [row, ...]}} of a confirmation (module docstring); each row
    {"name", "study", "number", "params", "mean", "seeds": completed seeds, "values": per seed}. No confirmation
    in ``study_dir``: {}."""
    from fedcli.results.runstate import COMPLETED, read_manifest
    from fedcli.results.sweepdir import load_manifest
    from fedcli.tune.results import Objective, read_rows, reduce_rows

    root = Path(study_dir) / FOLDER
    if not (root / MAP).is_file():
        return {}
    try:
        mapping = json.loads((root / MAP).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{root / MAP}: not a readable confirmation record ({e})") from None
    objective = Objective(**mapping["objective"])
    select_on = _select_on(Path(study_dir))
    manifest = load_manifest(root, missing_ok=True) or {}
    dirs: dict[str, list[Path]] = {}
    for e in manifest.get("runs", []):
        if isinstance(e, dict) and "dir" in e:
            dirs.setdefault(e.get("name"), []).append(root / e["dir"])
    out: dict = {}
    for r in mapping.get("rows", []):
        vals = []
        for d in dirs.get(r["name"], []):
            status, _ = read_manifest(d)
            if status == COMPLETED and (v := reduce_rows(read_rows(d), objective, select_on)) is not None:
                vals.append(v)
        row = {**r, "values": vals, "seeds": len(vals), "mean": sum(vals) / len(vals) if vals else None}
        entry = out.setdefault(r["study"], {"best": None, "rows": []})
        entry["rows"].append(row)
        best = entry["best"]
        if row["mean"] is not None and (best is None or objective.better(row["mean"], best["mean"])):
            entry["best"] = row
    return out


def tuned_rows(study_dir: str | Path, run_names: list[str]) -> tuple[dict, dict]:
    """For ``fedcli sweep RECIPE --tuned DIR``: ({run name: the confirmed best params of its study}, the record
    ``sweep.json`` keeps as ``tuned``). A row whose study (the slug of its name) is not in the folder, or has no
    confirmed configuration: ConfigError (exit 2), one line."""
    from fedcli.sweep.run import slugify
    from fedcli.tune.results import read_study

    folder = read_study(study_dir)
    names = [s.name for s in folder.studies]
    conf = confirmed(study_dir)
    params, rows = {}, {}
    for run in run_names:
        slug = slugify(run)
        if slug not in names:
            raise ConfigError(
                f"--tuned {study_dir}: run '{run}' of the recipe has no study there (it would be '{slug}'; "
                f"the studies: {', '.join(names) or 'none'}); tune it with `fedcli tune`"
            )
        best = (conf.get(slug) or {}).get("best")
        if best is None:
            raise ConfigError(
                f"--tuned {study_dir}: study '{slug}' (run '{run}') has no confirmed configuration; run "
                f"`fedcli tune {study_dir} --confirm 3 --seeds 3` first"
            )
        study = next(s for s in folder.studies if s.name == slug)
        params[run] = dict(best["params"])
        rows[run] = {
            "study": slug,
            "trial": best["number"],
            "params": best["params"],
            "confirmed_mean": best["mean"],
            "confirmed_seeds": best["seeds"],
            "space": study.space,
            "trials": study.planned_trials,
            "val_fraction": study.base.get("val_fraction"),
            "client_val_fraction": study.base.get("client_val_fraction"),
        }
    rec = folder.record
    record = {
        "dir": str(Path(study_dir).resolve()),
        "recipe": rec.get("recipe"),
        "sampler": rec.get("sampler"),
        "pruner": rec.get("pruner"),
        "seed": rec.get("seed"),
        "select_on": folder.select_on,
        "objectives": [vars(o) for o in folder.objectives],
        "confirm_seeds": _confirm_seeds(study_dir),
        "rows": rows,
    }
    return params, record


def _confirm_seeds(study_dir) -> list:
    try:
        return list(json.loads((Path(study_dir) / FOLDER / MAP).read_text()).get("seeds", []))
    except (OSError, ValueError):
        return []
