"""``fedcli sweep --executor slurm`` against a real Slurm (``scripts/slurm-local.sh up``: slurmctld + slurmd + munged).

No mock: jobs are submitted with sbatch (through submitit), run by slurmd, cancelled with scancel and killed at
their time limit by slurmctld. Without a reachable Slurm these tests skip, unless FEDCLI_REQUIRE_SLURM is set (CI,
``.ci/run``), where that is a failure. Trainings are tiny (digits, small MLPs, one thread).
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.sweep.slurm import ACTIVE, job_states
from sweepkit import require_slurm, wait_for

# one Slurm test at a time under pytest-xdist (`make test`: --dist loadfile, this file on one worker):
# test_missing_dataset_refused_before_any_job checks that the queue gains no job
pytestmark = [pytest.mark.timeout(900), pytest.mark.slurm]

TINY = """\
title = "tiny"
seeds = 2

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "32"
clients = 4
active_ratio = 0.5
iterations = 8
eval_every = 2
lr = 0.1
threads = 1
trainer = "loop"

[[runs]]
name = "FedAvg x1"
algo = "fedavg"
tau = 2

[[runs]]
name = "FedLAMA phi=2"
algo = "fedlama"
tau = 1
phi = 2

[[tables]]
name = "t"
layout = "paired"
rows = [["FedAvg x1", "FedAvg x1"], ["FedAvg x1", "FedLAMA phi=2"]]
"""

# two runs long enough to be stopped: "cancelled" (scancel after a few rounds) and "timed" (24,000 local steps, about
# 110 s of one idle core, more while the reference sweep shares the cores: Slurm kills it at its 1-minute limit,
# between 60 and 90 s after it started)
LONG = """\
title = "long"
seeds = 1

[slurm]
time = 1
signal = 0

[base]
dataset = "digits"
model = "mlp"
mlp_hidden = "256,256"
clients = 4
active_ratio = 1.0
tau = 5
lr = 0.05
eval_every = 50
checkpoint_every = 10
threads = 1
trainer = "loop"
algo = "fedavg"

[[runs]]
name = "cancelled"
iterations = 3000

[[runs]]
name = "timed"
iterations = 24000
"""


@pytest.fixture(scope="module")
def slurm():
    require_slurm()


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    """`--wait` looks at the queue every 3 s, a cluster's pace; every 0.5 s here, where a tiny job takes seconds."""
    from fedcli.sweep import slurm

    wait = slurm.wait
    monkeypatch.setattr(slurm, "wait", lambda runs, poll_s=5.0, on_poll=None: wait(runs, min(poll_s, 0.5), on_poll))


def cli(*args) -> int:
    try:
        return main([str(a) for a in args])
    except SystemExit as e:
        return e.code


def job(root: Path, rel: str) -> dict:
    return json.loads((root / f"{rel}.job.json").read_text())


def ended(job_id: str) -> dict | None:
    st = job_states([job_id]).get(job_id)
    return st if st and st["state"] not in ACTIVE else None


def rows(path: Path) -> list[list[str]]:
    """metrics.csv without its wall_s column (the only one that may differ)."""
    lines = path.read_text().splitlines()
    head = lines[0].split(",")
    keep = [i for i, c in enumerate(head) if c != "wall_s"]
    return [[line.split(",")[i] for i in keep] for line in lines]


def same_run(a: Path, b: Path) -> None:
    assert rows(a / "metrics.csv") == rows(b / "metrics.csv")
    assert (a / "layers.csv").read_text() == (b / "layers.csv").read_text()
    assert json.loads((a / "manifest.json").read_text())["status"] == "completed"


def test_submit_wait_report_equals_local_then_only_missing_and_failed_status(slurm, tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "bad.toml").write_text(
        TINY.replace("seeds = 2", "seeds = 1").replace(
            'trainer = "loop"', f'trainer = "loop"\npartition_file = "{tmp_path}/none.json"'
        )
    )  # the run exits 3 in its job
    sl, bad, local = tmp_path / "slurm", tmp_path / "bad", tmp_path / "local"
    assert cli("sweep", tmp_path / "bad.toml", "--out", bad, "--executor", "slurm", "--quiet") == 0
    assert cli("sweep", tmp_path / "tiny.toml", "--out", sl, "--executor", "slurm", "--wait") == 0
    err = capsys.readouterr().err
    assert "submitted 4 job(s) to Slurm" in err and "4 runs complete" in err
    ids = {
        rel: job(sl, rel)["job_id"]
        for rel in ("fedavg-x1/seed0", "fedavg-x1/seed1", "fedlama-phi-2/seed0", "fedlama-phi-2/seed1")
    }
    assert all(ended(j)["state"] == "COMPLETED" for j in ids.values())
    assert all(job(sl, rel)["exit_code"] == 0 for rel in ids)
    # the same sweep run locally with --jobs 2: the same metrics, bit for bit, and the same report table
    assert cli("sweep", tmp_path / "tiny.toml", "--out", local, "--jobs", "2", "--quiet") == 0
    for rel in ids:
        same_run(sl / rel, local / rel)
    capsys.readouterr()
    assert cli("report", sl, "--table", "t") == 0
    table_slurm = capsys.readouterr().out
    assert cli("report", local, "--table", "t") == 0
    assert (
        table_slurm.replace(str(sl), "DIR") == capsys.readouterr().out.replace(str(local), "DIR")
        and "FedLAMA" in table_slurm
    )

    # a second call submits nothing; after deleting one run's folder, exactly that one
    assert cli("sweep", tmp_path / "tiny.toml", "--out", sl, "--executor", "slurm") == 0
    assert "nothing to submit" in capsys.readouterr().err
    assert {rel: job(sl, rel)["job_id"] for rel in ids} == ids
    import shutil

    shutil.rmtree(sl / "fedlama-phi-2/seed1")
    assert cli("sweep", tmp_path / "tiny.toml", "--out", sl, "--executor", "slurm", "--wait") == 0
    assert "submitted 1 job(s)" in capsys.readouterr().err
    now = {rel: job(sl, rel)["job_id"] for rel in ids}
    assert [rel for rel in ids if now[rel] != ids[rel]] == ["fedlama-phi-2/seed1"]
    same_run(sl / "fedlama-phi-2/seed1", local / "fedlama-phi-2/seed1")
    assert json.loads((sl / "sweep.json").read_text())["runs"][3]["job_id"] == now["fedlama-phi-2/seed1"]

    # the failing run: --status shows its Slurm state, exit code and log
    bad_id = job(bad, "fedavg-x1/seed0")["job_id"]
    st = wait_for(lambda: ended(bad_id), 120, "the failing job to end")
    assert st["state"] == "FAILED" and st["exit"].startswith("3:")
    capsys.readouterr()
    assert cli("sweep", tmp_path / "bad.toml", "--out", bad, "--status") == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if "FedAvg x1" in l)
    assert "failed" in line and bad_id in line and "FAILED" in line and " 3 " in line
    assert "seed0.log" in out and "none.json" in out


def cancel_after_a_few_rounds(sl: Path) -> None:
    """scancel the run "cancelled" of sweep ``sl`` once it has logged a few rounds; it ends as interrupted (SIGTERM)."""
    c_id = job(sl, "cancelled/seed0")["job_id"]
    metrics = sl / "cancelled/seed0/metrics.csv"
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) > 3, 300, "a few rounds of 'cancelled'")
    subprocess.run(["scancel", c_id], check=True)
    st = wait_for(lambda: ended(c_id), 60, "the cancelled job to end")
    assert st["state"] == "CANCELLED"
    m = json.loads((sl / "cancelled/seed0/manifest.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m.get("error", "") + (sl / "cancelled/seed0.log").read_text()


@pytest.mark.long(
    reason="two Slurm jobs, one cancelled, then a second call (15 s): make test keeps the "
    "submit/wait/status test on the real queue"
)
def test_scancel_then_next_call_resumes_bitwise(slurm, tmp_path, capsys):
    """scancel (SIGTERM) stops a run at its round boundary as interrupted, ``--status`` shows CANCELLED, and the next
    call resumes it to the metrics of an uninterrupted local run, bit for bit (the quick half of the test below)."""
    recipe = tmp_path / "cancel.toml"
    recipe.write_text(LONG.split("[[runs]]")[0] + '[[runs]]\nname = "cancelled"\niterations = 1500\n')
    sl, ref = tmp_path / "slurm", tmp_path / "ref"
    assert cli("sweep", recipe, "--out", sl, "--executor", "slurm") == 0
    assert "submitted 1 job(s)" in capsys.readouterr().err
    cancel_after_a_few_rounds(sl)
    capsys.readouterr()
    assert cli("sweep", recipe, "--out", sl, "--status") == 0
    out = capsys.readouterr().out
    assert "interrupted" in out and "CANCELLED" in out
    assert cli("sweep", recipe, "--out", sl, "--executor", "slurm", "--time", "20", "--wait") == 0
    assert "submitted 1 job(s)" in capsys.readouterr().err and job(sl, "cancelled/seed0")["resume"]
    assert cli("sweep", recipe, "--out", ref, "--quiet") == 0  # the uninterrupted reference, locally
    same_run(sl / "cancelled/seed0", ref / "cancelled/seed0")
    assert "resum" in (sl / "cancelled/seed0.log").read_text().lower()


# Slow: Slurm's smallest time limit is 1 minute and slurmctld checks limits about every 30 s, so the timed job alone
# runs 60 to 90 s, and its uninterrupted reference (24,000 steps, about 110 s of a core) and the resumed rest take as
# long again: about 130 s of wall time and 250 s of CPU, a third of what the rest of `make test` costs on 2 cores.
# What only it checks is Slurm's TIMEOUT path (the job killed at its limit, TIMEOUT in --status, resumed with a longer
# --time); the scancel path it shares with the test above, which `make test` runs.
@pytest.mark.slow
def test_scancel_and_time_limit_then_next_call_resumes_bitwise(slurm, tmp_path, capsys):
    recipe = tmp_path / "long.toml"
    recipe.write_text(LONG)
    sl, ref = tmp_path / "slurm", tmp_path / "ref"
    assert cli("sweep", recipe, "--out", sl, "--executor", "slurm") == 0
    assert "submitted 2 job(s)" in capsys.readouterr().err
    # meanwhile, the uninterrupted reference: the same sweep, locally
    local = subprocess.Popen(
        [sys.executable, "-m", "fedcli", "sweep", str(recipe), "--out", str(ref), "--jobs", "2", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t_id = job(sl, "timed/seed0")["job_id"]
        cancel_after_a_few_rounds(sl)
        st = wait_for(lambda: ended(t_id), 400, "the time limit of 'timed'", every=3)
        assert st["state"] == "TIMEOUT"
        m = json.loads((sl / "timed/seed0/manifest.json").read_text())
        assert m["status"] == "interrupted", (m.get("error"), (sl / "timed/seed0.log").read_text())
        capsys.readouterr()
        assert cli("sweep", recipe, "--out", sl, "--status") == 0
        out = capsys.readouterr().out
        assert "interrupted" in out and "CANCELLED" in out and "TIMEOUT" in out
        # the next call resumes both from their last round boundary (with a longer limit)
        assert cli("sweep", recipe, "--out", sl, "--executor", "slurm", "--time", "20", "--wait") == 0
        assert "submitted 2 job(s)" in capsys.readouterr().err
        assert job(sl, "timed/seed0")["resume"] and job(sl, "cancelled/seed0")["resume"]
        assert local.wait(timeout=600) == 0, local.stderr.read()
    finally:
        if local.poll() is None:
            local.terminate()
            local.wait(timeout=60)
    for rel in ("cancelled/seed0", "timed/seed0"):
        same_run(sl / rel, ref / rel)
        assert "resum" in (sl / f"{rel}.log").read_text().lower()


def test_missing_dataset_refused_before_any_job(slurm, tmp_path, capsys):
    recipe = tmp_path / "paper.toml"
    recipe.write_text(TINY.replace('dataset = "digits"', f'dataset = "femnist"\ndata_dir = "{tmp_path}/femnist"'))
    root = tmp_path / "missing-femnist"  # its jobs would be named fedcli-missing-femnist

    # the queue may hold other jobs of this user (another test's, submitted meanwhile on the other xdist worker;
    # another checkout's on a shared Slurm): the refusal must add none of its own, named after its folder
    def queued() -> set[str]:
        rows = subprocess.run(
            ["squeue", "-h", "--me", "-o", "%i %100j"], capture_output=True, text=True
        ).stdout.splitlines()
        return {r.split()[0].split("_")[0] for r in rows if r.split()[1:] == [f"fedcli-{root.name}"]}

    before = queued()
    assert cli("sweep", recipe, "--out", root, "--executor", "slurm") == 3
    err = capsys.readouterr().err
    assert f"femnist for 4 run(s) at {tmp_path}/femnist: no FEMNIST (LEAF JSON) files there" in err and "LEAF" in err
    assert not root.exists()
    assert cli("sweep", recipe, "--out", root, "--executor", "slurm", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "MISSING" in out and "--time=01:00:00" in out and not root.exists()
    assert queued() <= before


@pytest.mark.long(
    reason="a packed Slurm job and a local sweep to compare (11 s): make test keeps the "
    "submit/wait/status test on the real queue"
)
def test_runs_per_job_packs_runs_together_and_equals_local(slurm, tmp_path, capsys):
    """``--runs-per-job 2``: the 4 runs go in 2 jobs (asking for 2 CPUs each), a job's two runs share its id and run at
    the same time, and the metrics are those of a local sweep, bit for bit."""
    (tmp_path / "tiny.toml").write_text(TINY)
    sl, local = tmp_path / "slurm", tmp_path / "local"
    assert (
        cli("sweep", tmp_path / "tiny.toml", "--out", sl, "--executor", "slurm", "--runs-per-job", "2", "--dry-run")
        == 0
    )
    out = capsys.readouterr().out
    assert "2 runs per job (2 jobs)" in out and "--cpus-per-task=2" in out
    assert (
        cli("sweep", tmp_path / "tiny.toml", "--out", sl, "--executor", "slurm", "--runs-per-job", "2", "--wait") == 0
    )
    err = capsys.readouterr().err
    assert "submitted 2 job(s) holding 4 runs to Slurm" in err and "4 runs complete" in err
    rels = ("fedavg-x1/seed0", "fedavg-x1/seed1", "fedlama-phi-2/seed0", "fedlama-phi-2/seed1")
    jobs = {rel: job(sl, rel) for rel in rels}
    assert jobs[rels[0]]["job_id"] == jobs[rels[1]]["job_id"] != jobs[rels[2]]["job_id"] == jobs[rels[3]]["job_id"]
    assert all(j["exit_code"] == 0 for j in jobs.values())
    for a, b in ((rels[0], rels[1]), (rels[2], rels[3])):  # together: each started before the other ended
        assert jobs[a]["started"] <= jobs[b]["ended"] and jobs[b]["started"] <= jobs[a]["ended"]
    assert ended(jobs[rels[0]]["job_id"])["state"] == "COMPLETED"
    assert cli("sweep", tmp_path / "tiny.toml", "--out", local, "--jobs", "2", "--quiet") == 0
    for rel in rels:
        same_run(sl / rel, local / rel)


@pytest.mark.long(reason="a Slurm job pruned mid-run through its stop file (about 15 s)")
def test_stop_file_from_the_login_node_prunes_the_job_within_one_round(slurm, tmp_path, capsys):
    """issue 59: pruning reaches a run on a compute node through RUN/stop.json, written where the sweep runs: the run
    closes pruned (exit 5 in its job file) at the boundary of the round in progress at the latest; ``--status`` says
    pruned, and the next call submits nothing (a pruned run is never resumed by accident)."""
    from fedcli.results.stopfile import request_stop

    recipe = tmp_path / "prune.toml"
    # a metrics row every round (eval_every = tau): the rows count the rounds done
    recipe.write_text(
        LONG.split("[[runs]]")[0].replace("eval_every = 50", "eval_every = 5")
        + '[[runs]]\nname = "pruned"\niterations = 3000\n'
    )
    sl = tmp_path / "slurm"
    assert cli("sweep", recipe, "--out", sl, "--executor", "slurm") == 0
    run, jid = sl / "pruned/seed0", job(sl, "pruned/seed0")["job_id"]

    def rounds() -> int:
        return max(
            0, sum(1 for line in (run / "metrics.csv").read_text().splitlines(keepends=True) if line.endswith("\n")) - 1
        )

    wait_for(lambda: (run / "metrics.csv").exists() and rounds() >= 3, 300, "a few rounds of the job", every=0.05)
    before = rounds()
    request_stop(run, why="from the login node")
    after = rounds()
    wait_for(lambda: ended(jid), 120, "the pruned job to end")
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["reason"] == "pruned", man
    assert before <= man["pruned"]["round"] <= after + 1 < 600, (before, man["pruned"], after)
    assert man["pruned"]["why"] == "from the login node" and rounds() == man["pruned"]["round"]
    assert job(sl, "pruned/seed0")["exit_code"] == 5
    capsys.readouterr()
    assert cli("sweep", recipe, "--out", sl, "--status") == 0
    assert "pruned" in capsys.readouterr().out
    assert cli("sweep", recipe, "--out", sl, "--executor", "slurm") == 0
    assert "nothing to submit" in capsys.readouterr().err and job(sl, "pruned/seed0")["job_id"] == jid
