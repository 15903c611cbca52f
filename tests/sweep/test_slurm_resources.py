"""What each Slurm job asks for (fedcli/sweep/slurm.py): the recipe's [slurm] table, its per-scale overrides and the
flags.

No Slurm needed: these check the parsing, with values worked out by hand."""

import pytest

from fedcli.errors import ConfigError
from fedcli.recipes import read_sweep
from fedcli.sweep.slurm import fmt_minutes, resources, sbatch_options, sbatch_preview, time_minutes

RECIPE = """\
[slurm]
partition = "gpu"
time = "1-02:03:04"
gpus = 1
options = ["--account=lab"]

[slurm.scale.smoke]
partition = "debug"
time = 30

[scale.smoke]
iterations = 8

[scale.paper]

[base]
dataset = "digits"

[[runs]]
name = "a"
"""


def test_times():
    # 1 day 2 h 3 min 4 s = 1563 min + 4 s: seconds round up to a minute
    assert [time_minutes(t) for t in ("90", 90, "5:30", "2:00:00", "1-02:03:04", "2-0", "1-1:1")] == [
        90,
        90,
        6,
        120,
        1564,
        2880,
        1501,
    ]
    assert fmt_minutes(1564) == "1-02:04:00" and fmt_minutes(90) == "01:30:00"
    for bad in ("x", "0", "1:2:3:4"):
        with pytest.raises(ConfigError):
            time_minutes(bad)


def test_recipe_scale_and_flags(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(RECIPE)
    paper = resources(read_sweep(path, "paper"), {})
    assert (paper.partition, paper.minutes, paper.gpus, paper.cpus, paper.options) == (
        "gpu",
        1564,
        1,
        1,
        ["--account=lab"],
    )
    smoke = resources(read_sweep(path, "smoke"), {"cpus": 4, "options": ["--qos=high"], "mem": None})
    assert (smoke.partition, smoke.minutes, smoke.gpus, smoke.cpus) == ("debug", 30, 1, 4)
    assert smoke.options == ["--account=lab", "--qos=high"]  # --sbatch adds to the recipe's options
    assert sbatch_preview(smoke, mpi=8) == (
        "--partition=debug --time=00:30:00 --cpus-per-task=8 --signal=TERM@120 "
        "--gpus-per-node=1 --account=lab --qos=high"
    )
    assert sbatch_options(["--account=lab", "--exclusive", "--mail-type=END"]) == {
        "account": "lab",
        "exclusive": True,
        "mail_type": "END",
    }
    with pytest.raises(ConfigError, match="signal"):
        resources(read_sweep(path, "smoke"), {"time": "1", "signal": 60})  # the warning must come before a 60 s limit
    path.write_text(RECIPE.replace("gpus = 1", "gpu = 1"))
    with pytest.raises(ConfigError, match=r"r.toml, line 4: unknown \[slurm\] key 'gpu'"):
        resources(read_sweep(path, "paper"), {})


def test_runs_per_job_multiplies_the_cpus_not_the_gpus(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(RECIPE.replace("gpus = 1", "gpus = 1\nruns_per_job = 2"))
    res = resources(read_sweep(path, "paper"), {"cpus": 3})
    assert (res.runs_per_job, res.job_cpus(), res.job_cpus(mpi=4)) == (2, 6, 8)  # 2 runs x max(3 CPUs, 4 ranks)
    assert sbatch_preview(res, mpi=0) == (
        "--partition=gpu --time=1-02:04:00 --cpus-per-task=6 --signal=TERM@120 --gpus-per-node=1 --account=lab"
    )
    assert "2 runs per job" in res.describe()
    assert resources(read_sweep(path, "paper"), {"runs_per_job": 4}).runs_per_job == 4  # --runs-per-job overrides
    with pytest.raises(ConfigError, match="runs_per_job must be an integer >= 1"):
        resources(read_sweep(path, "paper"), {"runs_per_job": 0})


def test_jobs_submitted_before_the_sweep_package_still_unpickle():
    """A job's call is pickled at submission and read when the job starts (submitit's ``*_submitted.pkl``), maybe after
    fedcli moved on: the module paths such a pickle names (``fedcli.slurm.run_job``, ``fedcli.slurm.run_jobs``, the
    executor class ``fedcli.sweep.Executor``) still resolve, to the code of the sweep package. The pickles are
    written by hand here (protocol 0's GLOBAL opcode: module and name, as every protocol resolves them)."""
    import pickle

    from fedcli.sweep import slurm
    from fedcli.sweep.executors import Executor

    assert pickle.loads(b"cfedcli.slurm\nrun_job\n.") is slurm.run_job
    assert pickle.loads(b"cfedcli.slurm\nrun_jobs\n.") is slurm.run_jobs
    assert pickle.loads(b"cfedcli.sweep\nExecutor\n.") is Executor
