"""The SQLite store under concurrent writers: processes started at the same instant on a fresh
directory all record their runs (MLflow alone races on creating the schema and all fail)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from bayesx.store.tracking import retry_locked

pytestmark = pytest.mark.slow


def eight_runs_at_once(folder, overrides: list[str], timeout_s: float):
    """``bayesx run OVERRIDES seed=i`` for i < 8 in eight processes started together on a fresh store in ``folder``;
    each must exit 0. Returns the store's client and its runs."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "bayesx", "run", *overrides, f"seed={i}", "progress=false"],
                              cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(8)]
    outputs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    return store_runs(folder)


def store_runs(folder):
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    return client, client.search_runs([e.experiment_id for e in client.search_experiments()])


def test_eight_processes_on_a_fresh_store(tmp_path):
    client, runs = eight_runs_at_once(tmp_path, ["method=laplace", "model=gaussian"], 600)
    assert sorted(r.data.tags["seed"] for r in runs) == [str(i) for i in range(8)]
    for run in runs:
        assert run.info.status == "FINISHED"
        assert "wall_time_s" in run.data.metrics
        assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert (tmp_path / "mlflow.db-wal").exists() or _journal_mode(tmp_path / "mlflow.db") == "wal"


LOGREG_DIGITS = ["method=laplace", "model=logreg", "data=digits", "plots.n_coords=0", "reference.enabled=false"]


def test_eight_processes_logging_the_same_dataset_all_finish(tmp_path):
    """Eight runs at once on a fresh store, all logging the digits data as their dataset input: the inserts of the
    same dataset race (UNIQUE constraint on datasets), and the loser retries and links to the winner's row."""
    _, runs = eight_runs_at_once(tmp_path, LOGREG_DIGITS, 900)
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert all(r.inputs.dataset_inputs for r in runs)


def test_a_parallel_sweep_of_eight_jobs_logging_the_same_dataset_all_finish(tmp_path):
    """The same through Hydra's parallel launcher: one sweep, eight jobs at once, every child and the parent
    FINISHED."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "bayesx", "run", "-m", *LOGREG_DIGITS, "seed=0,1,2,3,4,5,6,7",
                           "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=8", "progress=false"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    _, runs = store_runs(tmp_path)
    children = [r for r in runs if r.data.tags.get("seed") is not None]
    assert len(children) == 8 and len(runs) == 9, [r.data.tags for r in runs]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(r.inputs.dataset_inputs for r in children)


def test_a_dataset_insert_race_is_retried():
    calls = []

    def racing():
        calls.append(1)
        if len(calls) < 2:
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                               "datasets.name, datasets.digest")
        return "linked"

    from bayesx.store.tracking import is_dataset_race

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


def test_a_sweep_and_other_runs_on_an_existing_store_all_finish(tmp_path):
    """A store that already holds a run; a sweep (its jobs in one process, one after another) and, beside it, runs
    of another process one after another. Each single run closes the store as it ends, check-pointing the
    write-ahead log when it thinks itself the last user; the sweep's later jobs must still record (they failed
    with "disk I/O error" while checking the store dropped the sweep process's locks: tests/test_store_locks.py)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "OMP_NUM_THREADS": "1"}
    quick = ["method=laplace", "model=gaussian", "progress=false"]
    subprocess.run([sys.executable, "-m", "bayesx", "run", *quick], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=600)
    sweep = subprocess.Popen([sys.executable, "-m", "bayesx", "run", "-m", "method=laplace,vi,pathfinder",
                              "model=gaussian", "seed=0,1", "progress=false"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    singles = [subprocess.run([sys.executable, "-m", "bayesx", "run", *quick, f"seed={10 + i}"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600) for i in range(3)]
    out = sweep.communicate(timeout=1200)[0]
    assert sweep.returncode == 0, out[-3000:]
    for single in singles:
        assert single.returncode == 0, (single.stdout + single.stderr)[-2000:]
    _, runs = store_runs(tmp_path)
    assert len(runs) == 1 + 6 + 1 + 3, [r.data.tags.get("mlflow.runName") for r in runs]  # + the sweep's parent
    assert all(r.info.status == "FINISHED" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
