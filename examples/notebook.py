"""fedcli from a notebook: train, load the results as pandas DataFrames, aggregate seeds, draw the report.

    python examples/notebook.py [OUT]        # OUT: a folder for the runs (default: results/notebook)

Each block below is a notebook cell. Small runs (digits, 40 local iterations) so that it takes seconds.
"""

import sys
from pathlib import Path

import fedcli

out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/notebook")

# %% two methods, two seeds each: fedcli.train(OUT, **flags) is `fedcli train --out OUT --flag value ...`
small = dict(dataset="digits", mlp_hidden="32", clients=8, iterations=40, eval_every=10, threads=1, quiet=True)
for algo in ("fedavg", "fedlama"):
    for seed in (0, 1):
        fedcli.train(out / algo / f"s{seed}", algo=algo, tau=2, seed=seed, **small)

# %% every run under OUT: one row per run, its config and summary
results = fedcli.load(out)
print(results)
print(results.runs[["run", "experiment", "method", "seed", "summary.final_acc", "summary.comm_params"]])

# %% the learning curves: metrics.csv of every run; mean and std over the seeds of each experiment
m = results.metrics
last = m[m.iteration == m.iteration.max()]
print(last.groupby("method").test_acc.agg(["mean", "std", "count"]))

# %% per layer: synchronizations and data moved (layers.csv); FedLAMA's intervals over time (intervals.csv)
print(results.layers.pivot_table(index="name", columns="method", values="syncs", aggfunc="mean"))
print(results.intervals.groupby(["name", "interval"]).size().unstack(fill_value=0))

# %% the report: the table (seeds aggregated) and the figures, as `fedcli report` writes them; it returns the table as
# a DataFrame (the columns of --format csv) and the files it drew, and prints the table only when asked (print=True)
table, figures = fedcli.report(out, figures=out / "figures")
print(table[["name", "final_acc_mean", "final_acc_std", "final_acc_n"]].to_string())
print(sorted(p.name for p in figures if p.suffix == ".png"))
