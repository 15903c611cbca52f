"""The sweep's progress (issue 30): remaining time from the work done (runs done plus the in-flight runs' fractions,
read from their metrics.csv), the plan's estimate before that, and the runs in flight named. Numbers by hand."""

from types import SimpleNamespace

from fedcli.cli.sweep import SweepProgress, sofar


def planned(tmp_path, name, seed, iterations=100):
    d = tmp_path / name / f"seed{seed}"
    d.mkdir(parents=True)
    return SimpleNamespace(name=name, seed=seed, rel=f"{name}/seed{seed}", dir=d, config={"iterations": iterations, "rounds": 0})


def test_remaining_from_runs_done_and_in_flight(tmp_path):
    runs = [planned(tmp_path, n, s) for n in ("a", "b") for s in (0, 1)]
    now = [0.0]
    prog = SweepProgress(runs, 2, estimate_s=50.0)
    prog.now, prog.t0 = (lambda: now[0]), 0.0
    now[0] = 10.0
    assert prog.remaining() == 40.0  # nothing measured yet: the estimate, less the time gone
    assert prog.in_flight() == "in flight: a s0 0/100, a s1 0/100"
    (runs[0].dir / "metrics.csv").write_text("round,iteration,test_acc\n1,25,0.5\n2,50,0.6\n")
    now[0] = 20.0  # a s0 half done: 0.5 of 4 runs' work in 20 s, 3.5 left take 140 s
    assert prog.remaining() == 140.0 and prog.in_flight() == "in flight: a s0 50/100, a s1 0/100"
    (runs[0].dir / "metrics.csv").write_text("round,iteration,test_acc\n4,100,0.9\n")
    now[0] = 30.0
    prog.finished(runs[0])  # 1 run done, a s1 still at 0, b s0 next: 30 s per run, 3 left
    assert prog.in_flight() == "in flight: a s1 0/100, b s0 0/100"
    assert prog.remaining() == 90.0
    assert sofar(prog) == "  [1/4, elapsed 0:00:30  remaining 0:01:30]"
    prog2 = SweepProgress(runs[2:], 1, estimate_s=None)  # no estimate, nothing measured
    assert prog2.remaining() is None and "remaining estimating" in prog2.times()
