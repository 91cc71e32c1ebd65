"""The SQLite store under concurrent writers: processes started at the same instant on a fresh
directory all record their runs (MLflow alone races on creating the schema and all fail)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from bayesx.tracking import retry_locked

pytestmark = pytest.mark.slow


def test_eight_processes_on_a_fresh_store(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "bayesx", "run", "method=laplace", "model=gaussian",
                               f"seed={i}", "progress=false"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(8)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert sorted(r.data.tags["seed"] for r in runs) == [str(i) for i in range(8)]
    for run in runs:
        assert run.info.status == "FINISHED"
        assert "wall_time_s" in run.data.metrics
        assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert (tmp_path / "mlflow.db-wal").exists() or _journal_mode(tmp_path / "mlflow.db") == "wal"


def test_eight_processes_logging_the_same_dataset_all_finish(tmp_path):
    """Eight runs at once on a fresh store, all logging the digits data as their dataset input: the inserts of the
    same dataset race (UNIQUE constraint on datasets), and the loser retries and links to the winner's row."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "bayesx", "run", "method=laplace", "model=logreg", "data=digits",
                               f"seed={i}", "progress=false", "plots.n_coords=0", "reference.enabled=false"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(8)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert all(r.inputs.dataset_inputs for r in runs)


def test_a_dataset_insert_race_is_retried():
    calls = []

    def racing():
        calls.append(1)
        if len(calls) < 2:
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                               "datasets.name, datasets.digest")
        return "linked"

    from bayesx.tracking import is_dataset_race

    assert retry_locked(racing, also=is_dataset_race) == "linked" and len(calls) == 2
    calls.clear()
    with pytest.raises(RuntimeError, match="UNIQUE"):  # the control: without the predicate it is not retried
        retry_locked(racing)


def _journal_mode(path) -> str:
    import sqlite3

    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA journal_mode").fetchone()[0]


def test_locked_writes_are_retried_and_other_errors_are_not():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert retry_locked(flaky) == "ok" and len(calls) == 3

    def broken():
        calls.append(1)
        raise RuntimeError("no such table: runs")

    calls.clear()
    with pytest.raises(RuntimeError, match="no such table"):
        retry_locked(broken)
    assert len(calls) == 1
