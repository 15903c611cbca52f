"""``fedcli sweep --executor slurm --wait`` (fedcli/sweep/slurm.py: ``wait``): Slurm is asked every ``poll_s``, and
sooner once every job it still had active has recorded its training's end in its job file (read every ``LOOK_S``);
on a fake clock, so that the test waits for nothing."""

from types import SimpleNamespace

import fedcli.sweep.slurm as slurm


def follow(monkeypatch, answers: list[str], end_t: float | None) -> list[float]:
    """``wait(poll_s=3)`` over two runs: Slurm answers ``answers[k]`` for both jobs at its k-th look, and their job
    files record the trainings' end from time ``end_t`` on (None: never); the times Slurm was asked."""
    runs = [SimpleNamespace(name="a"), SimpleNamespace(name="b")]
    clock, asked = [0.0], []

    def sleep(s):
        clock[0] += s

    def statuses(rs):
        asked.append(clock[0])
        return [slurm.RunStatus(p, "running", "7", answers[len(asked) - 1]) for p in rs]

    def read_job(p):
        return {"job_id": "7", "exit_code": 0, "ended": "now"} if end_t is not None and clock[0] >= end_t else {}

    monkeypatch.setattr(slurm.time, "sleep", sleep)
    monkeypatch.setattr(slurm.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(slurm, "statuses", statuses)
    monkeypatch.setattr(slurm, "read_job", read_job)
    monkeypatch.setattr("fedcli.results.sweepdir.run_state", lambda p: ("running", ""))
    try:
        st = slurm.wait(runs, poll_s=3.0)
    finally:
        monkeypatch.undo()
    assert [s.slurm for s in st] == ["COMPLETED", "COMPLETED"]
    return asked


def test_slurm_is_asked_again_once_every_active_job_recorded_its_end(monkeypatch):
    # the jobs end at 1.0 s; Slurm still says RUNNING once (completing): asked at 0, 1.0 and 1.5 s, not 0, 3 and 6
    assert follow(monkeypatch, ["RUNNING", "RUNNING", "COMPLETED"], end_t=1.0) == [0.0, 1.0, 1.5]
    # a job gone without recording its end (killed): Slurm alone tells, asked every poll_s
    assert follow(monkeypatch, ["RUNNING", "RUNNING", "COMPLETED"], end_t=None) == [0.0, 3.0, 6.0]
