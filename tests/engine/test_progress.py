"""The progress bar and the closing summary: communication so far against FedAvg's so far, and the accuracy a run is
judged by (personal_acc for personalized methods). Numbers worked out by hand."""

from rich.console import Console

from fedcli.cli.console import TrainProgress, summary_table
from fedcli.cli.train import LOADING_LINE
from fedcli.config import TrainConfig
from fedcli.fl.engine import Summary


def row(**kw):
    return {"round": 40, "iteration": 200, "test_acc": 0.5083, "comm_params": 40_000, "personal_acc": "", **kw}


def test_comm_is_against_fedavg_so_far():
    # 1,000 parameters, tau 5, 400 iterations in all; after 200 iterations FedAvg has synchronized 200 // 5 = 40 times
    p = TrainProgress(400, 1_000, 5, enabled=False)
    assert "comm 100.0% of FedAvg" in p.info(row())  # FedAvg's own schedule: 40,000 / 40,000 (the whole run's
    assert "comm 75.0% of FedAvg" in p.info(row(comm_params=30_000))  # 80,000 would say 50% and 37.5%)
    assert "comm 100.0% of FedAvg" in p.info(row(iteration=5, round=1, comm_params=1_000))  # the first round too
    # FedLAMA rounds of phi * tau' = 10 iterations: after 3 rounds (30 iterations) FedAvg(tau' = 5) synchronized 6 times
    assert "comm 50.0% of FedAvg" in p.info(row(iteration=30, round=3, comm_params=3_000))


def test_comm_with_local_epochs_is_per_round():
    # --local-epochs: a round is one local phase of 7 steps; FedAvg synchronizes once per round: 3 rounds = 3,000
    p = TrainProgress(600, 1_000, 5, per_round=True, enabled=False)
    assert "comm 100.0% of FedAvg" in p.info(row(iteration=21, round=3, comm_params=3_000))
    assert "comm 50.0% of FedAvg" in p.info(row(iteration=21, round=3, comm_params=1_500))


def test_bar_counts_rounds_under_a_round_budget():
    p = TrainProgress(50, 1_000, 5, rounds=True, per_round=True, enabled=False)
    p(row(iteration=210, round=30, comm_params=30_000))
    assert p.progress.tasks[0].completed == 30 and p.progress.tasks[0].total == 50
    q = TrainProgress(600, 1_000, 5, enabled=False)
    q(row())
    assert q.progress.tasks[0].completed == 200


def test_personalized_runs_show_personal_acc():
    p = TrainProgress(400, 1_000, 5, enabled=False)
    info = p.info(row(personal_acc=0.4812))
    assert "personal acc 48.12%" in info and "50.83" not in info
    assert "acc 50.83%" in p.info(row()) and "personal" not in p.info(row())


def render(table) -> str:
    c = Console(record=True, width=200)
    c.print(table)
    return c.export_text()


def test_summary_leads_with_personal_acc():
    cfg = TrainConfig(algo="fedala", dataset="digits", model="mlp", tau=5, local_epochs=1.0)
    s = Summary(
        rounds=86,
        iteration=600,
        final_acc=0.5083,
        best_acc=0.52,
        best_iteration=570,
        comm_params=3_000,
        fedavg_comm_params=3_000,
        best_personal_acc=0.4905,
        best_personal_round=80,
        final_personal_acc=0.4812,
    )
    text = render(summary_table(cfg, s, "results/x"))
    lines = [ln for ln in text.splitlines() if "accuracy" in ln]
    assert "final personal accuracy" in lines[0] and "48.12%" in lines[0]
    assert "best personal accuracy" in lines[1] and "49.05% (round 80)" in lines[1]
    assert "global model accuracy" in lines[2] and "50.83% final" in lines[2]
    assert "100.00% of FedAvg with one synchronization per round" in text
    plain = TrainConfig(algo="fedavg", dataset="digits", model="mlp", tau=5, local_epochs=0.0)
    text = render(
        summary_table(plain, Summary(final_acc=0.9, best_acc=0.91, comm_params=10, fedavg_comm_params=20), "r")
    )
    assert (
        "final accuracy" in text
        and "90.00%" in text
        and "personal" not in text
        and "50.00% of FedAvg with tau=5" in text
    )


def test_progress_lines_in_a_log_while_the_run_goes(tmp_path):
    """``fedcli train 2>log`` (stderr not a terminal): one plain line per evaluation, written as the run goes and never
    cut at 80 columns; the log is read while the process still runs (20 evaluations of 300 iterations: the 18 left
    after the second line take longer than the 0.05 s between reads)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "80"}
    with open(log, "w") as err:
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fedcli",
                "train",
                "--algo",
                "fedavg",
                "--iterations",
                "300",
                "--eval-every",
                "15",
                "--out",
                str(tmp_path / "run"),
            ],
            stderr=err,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        try:
            seen, deadline = [], time.time() + 300
            while time.time() < deadline and p.poll() is None:
                seen = [ln for ln in log.read_text().splitlines() if ln.startswith("fedcli train: iteration ")]
                if len(seen) >= 2:
                    break
                time.sleep(0.05)
            assert len(seen) >= 2 and p.poll() is None, "no progress lines while the run was going"
            assert p.wait(timeout=300) == 0
        finally:
            if p.poll() is None:
                p.kill()
    text = log.read_text()
    first, second = text.splitlines()[
        :2
    ]  # the job is seen alive from its first second: the loading line, then the header
    assert first == LOADING_LINE and second.startswith("fedcli train: fedavg ")
    lines = [ln for ln in text.splitlines() if ln.startswith("fedcli train: iteration ")]
    assert [ln.split()[3] for ln in lines] == [f"{i}/300" for i in range(15, 301, 15)]  # one line per evaluation
    for ln in lines:
        assert len(ln) > 80 and "acc " in ln and "loss " in ln and " params, " in ln and " MB)" in ln
        assert ln.rsplit("remaining ", 1)[-1].count(":") == 2  # the whole line, up to the last field
    header = [ln for ln in text.splitlines() if ln.startswith("fedcli train: fedavg ")]
    assert len(header) == 1 and header[0].endswith("1 process(es)")


def test_progress_mode_and_remaining_time():
    import io

    from fedcli.cli.console import _Clock, progress_mode

    assert progress_mode("auto", io.StringIO()) == "lines"
    assert progress_mode("none", io.StringIO()) == "none"
    now = [100.0]
    c = _Clock()
    c.now = lambda: now[0]
    c.start = c.at = 100.0
    assert c.remaining(1000) is None and "remaining estimating" in c.text(1000)
    now[0] = 110.0
    c.update(250)  # 10 s for 250 iterations: 750 left take 30 s
    assert c.remaining(1000) == 30.0
    now[0] = 115.0  # counts down between evaluations
    assert c.remaining(1000) == 25.0 and c.text(1000) == "elapsed 0:00:15  remaining 0:00:25"
    c2 = _Clock()  # a resumed run: the rate counts only what this process ran
    c2.now = lambda: now[0]
    c2.start = c2.at = 115.0
    c2.base = 500
    c2.update(500)
    now[0] = 125.0
    c2.update(600)  # 100 iterations in 10 s; 400 left
    assert c2.remaining(1000) == 40.0


def test_lines_mode_writes_one_flushed_line_per_row():
    import io

    buf = io.StringIO()
    p = TrainProgress(400, 1_000, 5, mode="lines", stream=buf)
    with p:
        p(row(train_loss=0.5, comm_bytes=8_000_000))
        p(row(iteration=400, round=80, test_acc=0.40, train_loss=0.25, comm_params=80_000, comm_bytes=16_000_000))
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "fedcli train: iteration 200/400 (50.0%)  round 40  acc 50.83%  best 50.83%  loss 0.5000  "
        "comm 100.0% of FedAvg (40,000 params, 8.00 MB)  elapsed "
    )
    assert "acc 40.00%  best 50.83%  loss 0.2500" in lines[1]  # the best so far stays


def test_iterations_rounded_up_to_whole_rounds_said_once_never_past_100(tmp_path, capfd):
    """``--iterations 60`` with ``--local-epochs`` runs whole rounds (64 iterations for FedALA in issue 48, 18): the run
    says the rounding once, and the progress counts to the iterations it does, never "64/60 (106.7%)". Under partial
    participation the rounds' length depends on the cohorts: said too, and the total grows to what was done."""
    import csv

    from fedcli.cli.main import main

    args = [
        "train",
        "--algo",
        "fedavg-c",
        "--dataset",
        "digits",
        "--mlp-hidden",
        "16",
        "--clients",
        "4",
        "--iterations",
        "60",
        "--eval-every",
        "20",
        "--threads",
        "1",
        "--progress",
        "lines",
    ]
    for name, extra in (("full", []), ("partial", ["--active-ratio", "0.5", "--clients", "6"])):
        capfd.readouterr()
        assert main([*args, *extra, "--out", str(tmp_path / name)]) in (0, None)
        err = capfd.readouterr().err
        with open(tmp_path / name / "metrics.csv") as f:
            done = int(list(csv.DictReader(f))[-1]["iteration"])
        lines = [ln.split()[3:5] for ln in err.splitlines() if ln.startswith("fedcli train: iteration ")]
        assert done > 60 and lines[-1] == [f"{done}/{done}", "(100.0%)"], (done, lines)
        assert all(float(pct.strip("(%)")) <= 100 for _, pct in lines)
        if name == "full":  # every round as long as the longest client's: the count is known before the run
            said = [ln for ln in err.splitlines() if "rounded up" in ln]
            assert len(said) == 1 and said[0].startswith(f"fedcli: --iterations 60 rounded up to {done}: "), said
            assert "a round is not cut" in said[0] and all(n.endswith(f"/{done}") for n, _ in lines)
        else:
            assert err.count("may end a few iterations past 60") == 1


def test_a_line_past_its_total_counts_to_what_was_done():
    p = TrainProgress(60, 1_000, 5, enabled=False)
    assert "iteration 64/64 (100.0%)" in p.line(row(iteration=64, round=8))
    assert "iteration 32/60 (53.3%)" in p.line(row(iteration=32, round=4))
