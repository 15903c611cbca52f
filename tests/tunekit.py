"""Study folders of ``fedcli tune`` built for the report's tests from REAL ``fedcli train`` runs (digits, MLP 32, a
validation split, 8 local iterations), in the exact layout of the tune contract (issue 58; docs/tuning.md):
``tune.json``,
``trials.csv`` and one run directory per trial, ``DIR/<study>/trial-NNNN``, whose manifest carries the ``tune`` entry.

This mirrors the contract; it is not the coordinator. A pruned trial is a real run trained to its pruning iteration
whose manifest is then closed as the contract says a pruned run's is (``status: interrupted``, ``reason: pruned``,
``pruned: {iteration, round, why}``, its config's ``iterations`` the full budget). When the real coordinator lands,
the merger may build these folders with ``fedcli tune`` instead. Test modules import it from here."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

#: the train values every trial shares (the study's ``base``): 8 local iterations, an evaluation every 2
BASE = {
    "algo": "fedavg",
    "dataset": "digits",
    "model": "mlp",
    "mlp_hidden": "32",
    "clients": 4,
    "active_ratio": 0.5,
    "iterations": 8,
    "eval_every": 2,
    "tau": 2,
    "lr": 0.1,
    "val_fraction": 0.2,
    "threads": 1,
    "trainer": "loop",
}
BUDGET = 8
ONE = [{"metric": "val_acc", "reduce": "last2", "direction": "maximize"}]
TWO = [
    {"metric": "val_acc", "reduce": "final", "direction": "maximize"},
    {"metric": "comm_bytes", "reduce": "final", "direction": "minimize"},
]


def train_run(out: Path, values: dict) -> Path:
    """A real ``fedcli train`` run (in this process) with ``values`` as its flags."""
    import fedcli

    fedcli.train(out, **values)
    return out


def _close_as_pruned(run: Path, iteration: int, budget: int, why: str) -> None:
    m = json.loads((run / "manifest.json").read_text())
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    m.update(
        status="interrupted",
        reason="pruned",
        pruned={"iteration": iteration, "round": int(rows[-1]["round"]), "why": why},
    )
    m["config"]["iterations"] = budget
    (run / "manifest.json").write_text(json.dumps(m, indent=2))


def _tag(run: Path, entry: dict) -> None:
    m = json.loads((run / "manifest.json").read_text())
    m["tune"] = entry
    (run / "manifest.json").write_text(json.dumps(m, indent=2))


def build_study(  # noqa: PLR0913
    root: Path,
    studies: dict,
    objectives: list | None = None,
    space: dict | None = None,
    rungs: list | None = None,
    grid_size: int | None = None,
    select_on: str = "validation",
    sampler: str = "tpe",
    pruner: str = "sha",
    base: dict | None = None,
    budgets: dict | None = None,
) -> Path:
    """A study folder at ``root``. ``studies``: {study name: [trial, ...]}, each trial a dict with ``params`` (train
    values the trial sets), optionally ``prune_at`` (the iteration it is pruned at), ``diverges`` (True: its params
    make the run diverge, exit 4; trials.csv lists it COMPLETE with the value 0.0) and ``state`` (what trials.csv
    says, when it should disagree with the run directory). Trial 0 of each study is its baseline. ``budgets``: per
    study, the ``trials`` tune.json gives it (default: how many it has)."""
    from fedcli.errors import FedcliError
    from fedcli.tune.results import Objective, reduce_rows

    objectives = objectives or ONE
    space = space or {"lr": {"log": [0.01, 1.0]}}
    base = {**BASE, **(base or {})}
    root.mkdir(parents=True, exist_ok=True)
    names = [f"values_{i}" for i in range(len(objectives))] if len(objectives) > 1 else ["value"]
    pnames = sorted({k for trials in studies.values() for t in trials for k in t["params"]})
    lines = []
    record_studies = []
    for study, trials in studies.items():
        record_studies.append(
            {
                "name": study,
                "optuna_study": f"tiny/{study}",
                "base": base,
                "space": space,
                "rungs": rungs if rungs is not None else [4],
                "floor": 2,
                "grid_size": grid_size,
                "budget_iterations": base["iterations"],
                "trials": (budgets or {}).get(study, len(trials)),
            }
        )
        for number, t in enumerate(trials):
            rel = f"{study}/trial-{number:04d}"
            run = root / rel
            values = {**base, **t["params"]}
            if "prune_at" in t:
                values["iterations"] = t["prune_at"]
            try:
                train_run(run, values)
            except FedcliError as e:  # a trial that diverges (exit 4) is a result: COMPLETE with the worst value
                if e.exit_code != 4 or not t.get("diverges"):
                    raise
            if "prune_at" in t:
                _close_as_pruned(run, t["prune_at"], base["iterations"], "successive halving at rung 4")
            _tag(run, {"study": study, "number": number, "params": t["params"], "baseline": number == 0})
            rows = list(csv.DictReader(open(run / "metrics.csv")))
            vals = [reduce_rows(rows, Objective(**o)) for o in objectives]
            if t.get("diverges"):  # the coordinator tells it the worst value (CORE documents which): 0.0 here
                vals = [0.0] * len(objectives)
            state = t.get("state") or ("PRUNED" if "prune_at" in t else "COMPLETE")
            lines.append(
                {
                    "study": study,
                    "number": number,
                    "state": state,
                    **{f"params_{k}": t["params"].get(k, "") for k in pnames},
                    **dict(zip(names, ["" if v is None else repr(v) for v in vals])),
                    "run": rel,
                    "pruned_iteration": t.get("prune_at", ""),
                    "baseline": int(number == 0),
                }
            )
    record = {
        "kind": "fedcli-tune",
        "version": 1,
        "recipe": "recipes/tiny.toml",
        "recipe_sha256": "0" * 64,
        "scale": "smoke",
        "storage": "journal",
        "sampler": sampler,
        "pruner": pruner,
        "seed": 0,
        "trials": max(len(t) for t in studies.values()),
        "select_on": select_on,
        "objectives": objectives,
        "studies": record_studies,
        "versions": {"fedcli": "0.1.0", "optuna": "4", "torch": "2"},
    }
    (root / "tune.json").write_text(json.dumps(record, indent=2))
    write_trials_csv(root, lines)
    return root


def write_trials_csv(root: Path, lines: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(lines[0]))
    w.writeheader()
    w.writerows(lines)
    (root / "trials.csv").write_text(buf.getvalue())


def read_trials_csv(root: Path) -> list[dict]:
    return list(csv.DictReader(open(root / "trials.csv")))


def last2(run: Path) -> float:
    """The mean of a run's last two val_acc (the ONE objective, read here with the csv module)."""
    vals = [float(r["val_acc"]) for r in csv.DictReader(open(run / "metrics.csv"))][-2:]
    return sum(vals) / len(vals)


def table_recipe(runs: list[dict], paper: str = "Fed-LAMB (a tuned test)") -> str:
    """A paper-table sweep recipe whose [base] is :data:`BASE` (but algo, tau and lr, set per row or by --tuned) and
    whose [[runs]] are ``runs`` (each a dict with its name)."""
    from fedcli.sweep.executors import toml_value

    base = {k: v for k, v in BASE.items() if k not in ("algo", "tau")}
    lines = [
        'title = "a tuned table"',
        f"paper = {toml_value(paper)}",
        "seeds = 1",
        "",
        "[base]",
        *(f"{k} = {toml_value(v)}" for k, v in base.items()),
    ]
    for r in runs:
        lines += ["", "[[runs]]", *(f"{k} = {toml_value(v)}" for k, v in r.items())]
    return "\n".join(lines) + "\n"


def report_text(root: Path) -> str:
    """The Markdown ``fedcli report ROOT`` prints for a study folder, made by the functions its ``_study`` calls
    (fedcli/cli/report.py) without drawing the figures (PNG and PDF each, the most of the command's time): for the
    tests that read only the text (tests/report/test_tune_report.py::test_report_of_a_study runs the command)."""
    from fedcli.cli.report import TOP
    from fedcli.reports.tune import render_md
    from fedcli.tune.confirm import confirmed
    from fedcli.tune.results import read_study, summary

    return render_md(summary(read_study(str(root)), TOP, confirmed(Path(root))), TOP)
