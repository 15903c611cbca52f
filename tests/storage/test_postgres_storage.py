"""Optuna's RDBStorage on a real PostgreSQL (``scripts/postgres-local.sh``; tests/pgkit.py): the storage issue 59's
Slurm workers share. Four processes ask and tell trials of one study at the same moment; every trial gets its own
number (Optuna locks the study's row, ``SELECT ... FOR UPDATE``, while it numbers a new trial: PostgreSQL honours the
lock, SQLite has none). The password reaches no file but the script's 0600 one (the
workers' output and the server's folder are searched).
"""

import json
import multiprocessing
import stat
import time

import pytest

from pgkit import files_holding, state_dir

optuna = pytest.importorskip("optuna", reason="optuna (fedcli tune's dependency, issue 58) is not installed")

WORKERS, EACH = 4, 5


def worker(k: int, url: str, start, out: str) -> None:
    """One of the study's workers, in a process of its own (forked: optuna and SQLAlchemy are already imported, which
    a fresh interpreter takes seconds of CPU to do): its own connection, then at the start line (``start``, a barrier
    of all the workers) asks, suggests, waits 0.1 s and tells, EACH times; one JSON line per trial to ``out``."""
    study = optuna.load_study(
        study_name="race", storage=optuna.storages.RDBStorage(url), sampler=optuna.samplers.RandomSampler(seed=k)
    )
    start.wait(timeout=60)
    with open(out, "w") as f:
        for _ in range(EACH):
            asked = time.time()
            trial = study.ask()
            x = trial.suggest_float("x", -1.0, 1.0)
            time.sleep(0.1)
            study.tell(trial, x * x)
            f.write(
                json.dumps({"worker": k, "number": trial.number, "x": x, "asked": asked, "told": time.time()}) + "\n"
            )
            f.flush()


@pytest.mark.timeout(240)
def test_four_processes_ask_and_tell_twenty_trials_each_numbered_once(postgres_url, tmp_path):
    storage = optuna.storages.RDBStorage(postgres_url)
    study = optuna.create_study(study_name="race", storage=storage, direction="minimize")
    storage.engine.dispose()  # no pooled connection of this process is inherited by the workers
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(WORKERS)
    procs = [
        ctx.Process(target=worker, args=(k, postgres_url, start, str(tmp_path / f"worker-{k}.jsonl")))
        for k in range(WORKERS)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=120)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * WORKERS
    told = [
        json.loads(line) for k in range(WORKERS) for line in (tmp_path / f"worker-{k}.jsonl").read_text().splitlines()
    ]

    # every worker told its 5 trials; no two got one number; the storage holds exactly 20 trials, 0..19, complete,
    # each with the value its worker told (x^2 of the x it suggested)
    assert len(told) == WORKERS * EACH
    assert sorted(t["number"] for t in told) == list(range(WORKERS * EACH))
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(WORKERS * EACH))
    assert len({t._trial_id for t in trials}) == WORKERS * EACH
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    by_number = {t.number: t for t in trials}
    for t in told:
        assert by_number[t["number"]].params == {"x": t["x"]}
        assert by_number[t["number"]].value == t["x"] * t["x"]
    # and they ran at the same time: each worker asked its first trial before any worker told its last
    first = {k: min(t["asked"] for t in told if t["worker"] == k) for k in range(WORKERS)}
    last = {k: max(t["told"] for t in told if t["worker"] == k) for k in range(WORKERS)}
    assert max(first.values()) < min(last.values()), (first, last)

    # the password: in the script's 0600 file, and in no file this test or the server wrote
    password = postgres_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    secret = state_dir() / "password"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert files_holding(state_dir(), password) == [secret]  # the scan finds it where it is
    assert files_holding(tmp_path, password) == []
