"""The hand-made FedALA-like sweep the report tests read (run folders written by hand: manifest.json, metrics.csv,
layers.csv), with every number of the expected tables worked out in the comments. Test modules import it from here."""

import json

from fedcli.reports.products import parse_table, product_to_dict
from fedcli.results.rundir import LAYERS_COLUMNS, METRICS_COLUMNS
from simkit import write_csv

SIGMA = 100  # the fake model's parameters: layers of 60, 30, 9, 1
LAYERS = [60, 30, 9, 1]
ACTIVE, ROUNDS = 4, 3


def loc(key):
    return f"test, key {key}"


def fake_run(path, *, algo, seed, test, personal=None, wall=(1.0, 2.0, 3.0), sigmas=2.0, init="", ala_layers=2):  # noqa: PLR0913
    """Three evaluations (rounds 1-3); ``sigmas``: parameters moved per client and round, in units of SIGMA."""
    path.mkdir(parents=True, exist_ok=True)
    comm_bytes = 4.0 * sigmas * SIGMA * ACTIVE * ROUNDS
    cfg = {
        "algo": algo,
        "seed": seed,
        "clients": 8,
        "active_ratio": 0.5,
        "init": init,
        "ala_layers": ala_layers,
        "rounds": ROUNDS,
    }
    method_init = "ala" if algo == "fedala" or init == "ala" else "overwrite"
    manifest = {
        "status": "completed",
        "config": cfg,
        "method": {"name": algo, "schedule": "periodic", "init": method_init},
        "seed": seed,
        "clients": 8,
        "active_clients": ACTIVE,
        "model": {"name": "tiny", "parameters": SIGMA, "layers": 4},
        "summary": {"rounds": ROUNDS, "comm_params": 0, "comm_bytes": comm_bytes, "wall_s": wall[-1]},
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    write_csv(
        path / "metrics.csv",
        METRICS_COLUMNS,
        [
            {
                "round": r + 1,
                "iteration": 5 * (r + 1),
                "test_acc": test[r],
                "wall_s": wall[r],
                "train_loss": 1.0,
                "test_loss": 1.0,
                "comm_params": 0,
                "comm_bytes": comm_bytes * (r + 1) / ROUNDS,
                "personal_acc": "" if personal is None else personal[r],
            }
            for r in range(ROUNDS)
        ],
    )
    write_csv(
        path / "layers.csv",
        LAYERS_COLUMNS,
        [{"layer": i, "name": f"t{i}", "kind": "kernel", "numel": n, "syncs": ROUNDS} for i, n in enumerate(LAYERS)],
    )


# ------------------------------------------------------------------------------------------------ a fake sweep, 2 seeds
# "FedAvg | A" (traditional: no personal_acc): best test_acc .60, .58                 -> 59.00 ± 1.41
# "FedALA | A": test_acc .30 everywhere (not reported), best personal_acc .90, .88   -> 89.00 ± 1.41
# wall_s seed 0: 10, 40, 45 -> rounds 10, 30, 5: median 10, initial stage 30 - 10 = 20, total at the best (round 2) 40
# seed 1: 12, 30, 36 -> rounds 12, 18, 6: median 12, initial stage 18 - 12 = 6, total at the best (round 3) 36
#     -> total 38.00 ± 2.83 s, time/iter. 11.00 ± 1.41 s, initial stage 13.00 ± 9.90 s; ALA weights: 9 + 1 = 10
# "FedFomo | A": (1 + M) Sigma with M = 4 -> 5.00 Σ; "FedRep | A": 2 alpha_f Sigma with alpha_f = 0.9 -> 1.80 Σ
# "FedAvg + ALA | A" (fedavg, init ala, ala_layers 3: 30 + 9 + 1 = 40 weights): best personal .95, .93 -> 94.00,
#     Imps. over "FedAvg | A": 94.00 - 59.00 = +35.00
# "FedALA | B": best personal .80, .84 -> 82.00 ± 2.83; "FedAvg | B": skipped ("—")
RUNS = {
    ("FedAvg | A", 0): dict(algo="fedavg", test=[0.50, 0.60, 0.55]),
    ("FedAvg | A", 1): dict(algo="fedavg", test=[0.52, 0.58, 0.57]),
    ("FedALA | A", 0): dict(algo="fedala", test=[0.3, 0.3, 0.3], personal=[0.70, 0.90, 0.80], wall=(10.0, 40.0, 45.0)),
    ("FedALA | A", 1): dict(algo="fedala", test=[0.3, 0.3, 0.3], personal=[0.72, 0.86, 0.88], wall=(12.0, 30.0, 36.0)),
    ("FedFomo | A", 0): dict(algo="fedfomo", test=[0.1, 0.1, 0.1], personal=[0.5, 0.5, 0.5], sigmas=5.0),
    ("FedFomo | A", 1): dict(algo="fedfomo", test=[0.1, 0.1, 0.1], personal=[0.5, 0.5, 0.5], sigmas=5.0),
    ("FedRep | A", 0): dict(algo="fedrep", test=[0.1, 0.1, 0.1], personal=[0.6, 0.6, 0.6], sigmas=1.8),
    ("FedRep | A", 1): dict(algo="fedrep", test=[0.1, 0.1, 0.1], personal=[0.6, 0.6, 0.6], sigmas=1.8),
    ("FedAvg + ALA | A", 0): dict(
        algo="fedavg", init="ala", ala_layers=3, test=[0.2, 0.2, 0.2], personal=[0.95, 0.9, 0.9]
    ),
    ("FedAvg + ALA | A", 1): dict(
        algo="fedavg", init="ala", ala_layers=3, test=[0.2, 0.2, 0.2], personal=[0.9, 0.93, 0.9]
    ),
    ("FedALA | B", 0): dict(algo="fedala", test=[0.3, 0.3, 0.3], personal=[0.80, 0.70, 0.70]),
    ("FedALA | B", 1): dict(algo="fedala", test=[0.3, 0.3, 0.3], personal=[0.70, 0.84, 0.70]),
}


def make_sweep(root, tables, scale="smoke", runs=None):
    entries = []
    for (name, seed), kw in {**RUNS, **(runs or {})}.items():
        rel = f"{name.lower().replace(' ', '').replace('|', '-').replace('+', 'p')}/seed{seed}"
        fake_run(root / rel, seed=seed, **kw)
        entries.append({"name": name, "seed": seed, "dir": rel, "status": "completed"})
    manifest = {
        "fedcli_sweep": 1,
        "recipe": "recipes/test.toml",
        "scale": scale,
        "seeds": [0, 1],
        "title": "t",
        "paper": "FedALA-like",
        "tables": [product_to_dict(parse_table(t, loc, scale)) for t in tables],
        "figures": [],
        "runs": entries,
    }
    (root / "sweep.json").write_text(json.dumps(manifest))
    return root


def md_rows(md):
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
