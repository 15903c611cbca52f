"""``--tracker mlflow``: one MLflow run in the store of ``MLFLOW_TRACKING_URI`` (MLflow's default when unset),
through ``MlflowClient`` (no global active run, so runs of one process never mix).

Experiment: a sweep's folder name (one experiment per sweep), else ``MLFLOW_EXPERIMENT_NAME`` or ``fedcli``; run name:
the sweep's ``<run slug>/seed<k>`` or the run folder's name; tags: method, dataset, model, seed (sweeps: sweep, run,
scale). Parameters: the resolved config and the method's parts. Metrics: one batch per round that evaluated or
adjusted intervals. At the end: manifest and CSVs as artifacts, the report's figures under ``figures/``, and the run's
status (FINISHED, FAILED, KILLED for an interrupted run). A resume reopens the same run (its id is in
``trackers.json``). Server requests give up after 2 retries and 10 s unless ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` /
``MLFLOW_HTTP_REQUEST_TIMEOUT`` say otherwise, so a server that is down is found out in seconds.
"""

from __future__ import annotations

import logging
import os
import time

from fedcli.specs.trackers import MLFLOW
from fedcli.trackers.base import FIGURE_SUFFIXES, RunInfo, Tracker

STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
BATCH_PARAMS, BATCH_METRICS = 100, 1000  # MLflow's log_batch limits


class MLflowRun(Tracker):
    declaration = MLFLOW

    def start(self, run: RunInfo) -> dict:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        import mlflow

        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        uri = run.saved.get("tracking_uri") or mlflow.get_tracking_uri()
        self.client = client = connect(MlflowClient, uri)
        if run.saved.get("run_id"):
            self.run_id = run.saved["run_id"]
            client.update_run(self.run_id, status="RUNNING")
            return dict(run.saved)
        experiment = run.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "fedcli"
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            try:
                exp_id = client.create_experiment(experiment)
            except mlflow.exceptions.MlflowException:  # another run of the sweep created it meanwhile
                exp_id = client.get_experiment_by_name(experiment).experiment_id
        else:
            exp_id = exp.experiment_id
        self.run_id = client.create_run(exp_id, run_name=run.name, tags=dict(run.tags)).info.run_id
        params = [Param(k, str(v)) for k, v in run.params.items()]
        for i in range(0, len(params), BATCH_PARAMS):
            client.log_batch(self.run_id, params=params[i : i + BATCH_PARAMS])
        client.log_batch(self.run_id, tags=[RunTag("mlflow.note.content", f"fedcli run {run.run_dir}")])
        return {"run_id": self.run_id, "tracking_uri": uri, "experiment_id": exp_id}

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        metrics = [Metric(k, v, ts, step) for k, v in values.items()]
        for i in range(0, len(metrics), BATCH_METRICS):
            busy_retry(lambda: self.client.log_batch(self.run_id, metrics=metrics[i : i + BATCH_METRICS]))

    def stored_step(self) -> int | None:
        """The last step of any metric the reopened run holds (-1: none yet)."""
        keys = busy_retry(lambda: self.client.get_run(self.run_id)).data.metrics
        return max(
            (m.step for k in keys for m in busy_retry(lambda k=k: self.client.get_metric_history(self.run_id, k))),
            default=-1,
        )

    def finish(self, status: str, files) -> None:
        for f in files:
            self.client.log_artifact(
                self.run_id, str(f), artifact_path="figures" if f.suffix in FIGURE_SUFFIXES else None
            )
        busy_retry(lambda: self.client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED")))


#: what MLflow says when two processes create the tables of one new SQL store at once (its schema migrations race)
RACING = ("migration", "alembic", "database is locked", "already exists", "circular dependency")


def connect(client_class, uri: str, tries: int = 5, wait_s: float = 1.0):
    """An MLflow client whose store is ready. The first process to open a new SQLite store migrates its schema; others
    opening it meanwhile (the runs of a sweep, whose trackers finish in the background while the next run starts, or
    a reader) would fail their own migration ("Online migration expected to match one row ...", SQLAlchemy's
    "Circular dependency detected"): on this machine they take turns (an ``flock`` on the database file itself, which
    SQLite's own locks do not use), and elsewhere one that fails so waits and opens it again, by then migrated."""
    for attempt in range(tries):
        try:
            with store_turn(uri):
                client = client_class(tracking_uri=uri)
                client.search_experiments(max_results=1)
            return client
        except Exception as e:
            if attempt == tries - 1 or not any(w in str(e).lower() for w in RACING):
                raise
            time.sleep(wait_s * (attempt + 1))
    raise AssertionError("unreachable")


def busy_retry(call, tries: int = 6, wait_s: float = 0.5):
    """``call()``, again after a pause while a SQLite store is busy with another process's write ("database is
    locked": the runs of a sweep whose trackers finish in the background write to one store at once)."""
    for attempt in range(tries):
        try:
            return call()
        except Exception as e:
            if attempt == tries - 1 or "database is locked" not in str(e).lower():
                raise
            time.sleep(wait_s * (attempt + 1))


class store_turn:
    """While held, no other fedcli process opens the same SQLite store (``sqlite:///PATH``); anything else: nothing."""

    def __init__(self, uri: str):
        self.path = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else None
        self.fd = None

    def __enter__(self):
        if self.path and self.path != ":memory:":
            try:
                import fcntl

                self.fd = os.open(
                    self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644
                )  # an empty file is a new store
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except (OSError, ImportError):  # a folder that does not exist yet, no flock here: MLflow says what is wrong
                self.__exit__()
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
