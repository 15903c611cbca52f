"""The sweep's progress (issue 30): remaining time from the estimate of each run, recalibrated on the runs finished and
less the in-flight runs' progress (read from their metrics.csv), the work rate without an estimate, the runs in flight
named, and ``--progress lines``: one plain line per event. Numbers by hand, on a fake clock."""

import io
from types import SimpleNamespace

from fedcli.cli.sweep import SweepProgress, sofar

HEAD = "round,iteration,test_acc,train_loss\n"


def planned(tmp_path, name, seed, iterations=100):
    d = tmp_path / name / f"seed{seed}"
    d.mkdir(parents=True)
    return SimpleNamespace(
        name=name,
        seed=seed,
        rel=f"{name}/seed{seed}",
        dir=d,
        config={"iterations": iterations, "rounds": 0},
        label=f"{name} seed {seed}",
        wall_s=None,
    )


def clocked(prog, now):
    prog.now, prog.t0 = (lambda: now[0]), 0.0
    return prog


def test_remaining_from_the_estimate_recalibrated_on_runs_done(tmp_path):
    runs = [planned(tmp_path, n, s) for n in ("a", "b") for s in (0, 1)]
    est = SimpleNamespace(per_run={id(p): 10.0 for p in runs}, startup_s=4.0, unknown=[])
    now = [1.0]
    prog = clocked(SweepProgress(runs, 2, est), now)
    # nothing moved: the workers' start-up left (4 - 1) + 4 runs of 10 s over 2 jobs
    assert prog.remaining() == 23.0
    now[0] = 3.0
    assert prog.remaining() == 21.0  # counts down between readings
    assert prog.in_flight() == "in flight: a s0 0/100, s1 0/100"  # the seeds of one run under its name
    (runs[0].dir / "metrics.csv").write_text(HEAD + "1,25,0.5,1.0\n2,50,0.6,0.9\n")
    now[0] = 10.0  # a s0 half done: 5 + 10 + 10 + 10 over 2 jobs
    assert prog.remaining() == 17.5 and prog.in_flight() == "in flight: a s0 50/100, s1 0/100"
    now[0] = 12.0
    assert prog.remaining() == 15.5
    (runs[1].dir / "metrics.csv").write_text(HEAD + "1,25,0.5,1.0\n")
    now[0] = 20.0
    runs[0].wall_s = 16.0
    prog.finished(runs[0])  # it took 16 s for 10 estimated: x1.6; a s1 a quarter done: 12 + 16 + 16 over 2 jobs
    assert prog.factor() == 1.6 and prog.remaining() == 22.0
    assert prog.in_flight() == "in flight: a s1 25/100, b s0 0/100"
    assert sofar(prog) == "  [1/4, elapsed 0:00:20  remaining 0:00:22]"
    now[0] = 42.5  # nothing read changed for longer than that: past the estimate, no "0:00:00" while runs go on
    assert prog.remaining() is None and "remaining estimating" in prog.times()


def test_remaining_from_the_work_rate_without_an_estimate(tmp_path):
    runs = [planned(tmp_path, n, s) for n in ("a", "b") for s in (0, 1)]
    now = [10.0]
    prog = clocked(SweepProgress(runs, 2, None), now)
    assert prog.remaining() is None and "remaining estimating" in prog.times()
    (runs[0].dir / "metrics.csv").write_text(HEAD + "2,50,0.6,0.9\n")
    now[0] = 20.0  # 0.5 of 4 runs' work in 20 s: 3.5 left take 140 s
    assert prog.remaining() == 140.0
    runs[0].wall_s = 30.0
    (runs[0].dir / "metrics.csv").write_text(HEAD + "4,100,0.9,0.5\n")
    now[0] = 30.0
    prog.finished(runs[0])  # 1 run done, a s1 at 0: 30 s per run, 3 left
    assert prog.remaining() == 90.0


def test_lines_mode_says_each_event_once(tmp_path):
    runs = [planned(tmp_path, n, 0) for n in ("a", "b", "c")]
    est = SimpleNamespace(per_run={id(p): 10.0 for p in runs}, startup_s=0.0, unknown=[])
    now, log = [0.0], io.StringIO()
    prog = clocked(SweepProgress(runs, 2, est, mode="lines", stream=log), now)
    prog.tick()
    assert log.getvalue().splitlines() == [
        "fedcli sweep: started a seed 0  [0/3, elapsed 0:00:00  remaining 0:00:15]",
        "fedcli sweep: started b seed 0  [0/3, elapsed 0:00:00  remaining 0:00:15]",
    ]
    log.seek(0), log.truncate()
    (runs[0].dir / "metrics.csv").write_text(HEAD + "1,5,0.25,2.5\n")
    now[0] = 1.0
    prog.tick()  # a's first evaluation: a tenth not yet reached, but nothing said about it so far
    (runs[0].dir / "metrics.csv").write_text(HEAD + "1,5,0.25,2.5\n2,8,0.3,2.0\n")
    now[0] = 2.0
    prog.tick()  # 8% of its budget: the same tenth (0), under a minute after its last line: nothing
    (runs[0].dir / "metrics.csv").write_text(HEAD + "1,5,0.25,2.5\n2,8,0.3,2.0\n3,12,0.4,1.5\n")
    now[0] = 3.0
    prog.tick()  # 12%: a new tenth
    lines = log.getvalue().splitlines()
    assert [line.split("  [")[0] for line in lines] == [
        "fedcli sweep: a seed 0: iteration 5/100 (5.0%)  round 1  acc 25.00%  loss 2.5000",
        "fedcli sweep: a seed 0: iteration 12/100 (12.0%)  round 3  acc 40.00%  loss 1.5000",
    ]
    log.seek(0), log.truncate()
    (runs[0].dir / "metrics.csv").write_text(HEAD + "4,14,0.45,1.4\n")
    now[0] = 64.0  # the same tenth, but a minute after its last line: said
    prog.tick()
    assert log.getvalue().startswith("fedcli sweep: a seed 0: iteration 14/100 (14.0%)")
    log.seek(0), log.truncate()
    runs[0].wall_s = 8.0
    prog.finished(runs[0])
    prog.tick()  # c starts in a's place (the CLI ticks after its "done" line)
    assert log.getvalue().startswith("fedcli sweep: started c seed 0  [1/3, elapsed 0:01:04")
    prog.say("x" * 300)  # never cut
    assert log.getvalue().splitlines()[-1] == "x" * 300
