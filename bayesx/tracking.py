"""MLflow tracking: the only module of bayesx that imports mlflow.

A :class:`Tracker` owns one store (a tracking URI) and one experiment; :meth:`Tracker.run`
opens a run as a context manager that ends it FINISHED, FAILED (an exception) or KILLED
(Ctrl-C, SIGTERM), so a run is never left RUNNING and never marked FINISHED by mistake.

Many processes may share one SQLite store (a parallel sweep): the store's schema is created and its
experiment found or created once, under a file lock beside the database (MLflow migrates an empty
store on first use, and processes that race there all fail); the database runs in WAL mode (readers
do not block the writer), and a write that still meets ``database is locked`` is retried.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pandas as pd
from filelock import FileLock, Timeout
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from bayesx.errors import BayesxError, RunInterrupted

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
logging.getLogger("alembic").setLevel(logging.WARNING)

PARENT_TAG = "mlflow.parentRunId"
COMPARE_TAG = "compare_metrics"  # each run names its key metrics for `bayesx compare` (its family's choice)
MAX_PARAM_LENGTH = 6000


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (one line) when an http(s) tracking server does not answer: MLflow itself
    retries with back-off for minutes before giving up."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname or "localhost", port), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        raise BayesxError(f"cannot reach the MLflow tracking server at {uri} ({exc.strerror or exc}); "
                          "start it (mlflow server) or set tracking.uri / MLFLOW_TRACKING_URI") from None


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///path`` URI (relative paths are relative to the cwd)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):])


STORE_LOCK_TIMEOUT_S = 300
LOCKED_RETRIES = 8


def store_lock(path: Path) -> FileLock:
    """The lock that serialises creating (and migrating) a SQLite store and its experiments."""
    return FileLock(str(path) + ".lock", timeout=STORE_LOCK_TIMEOUT_S)


def prepare_sqlite_store(client: MlflowClient, path: Path) -> None:
    """Switch the database (its tables made by the client's construction) to WAL mode; call under
    :func:`store_lock`."""
    with contextlib.closing(sqlite3.connect(path, timeout=60)) as db:
        db.execute("PRAGMA journal_mode=WAL")


def is_locked_error(exc: BaseException) -> bool:
    return "database is locked" in str(exc)


def retry_locked(call, *args, **kwargs):
    """``call(*args, **kwargs)``, retried with back-off while SQLite answers ``database is locked``."""
    for attempt in range(LOCKED_RETRIES):
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            if not is_locked_error(exc) or attempt == LOCKED_RETRIES - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


class TrackedRun:
    """An open MLflow run: params, metrics, tags and artifacts go through here."""

    def __init__(self, client: MlflowClient, run_id: str):
        self.client, self.run_id = client, run_id

    def log_params(self, params: dict[str, object]) -> None:
        items = [Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            retry_locked(self.client.log_batch, self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)
        self._log_batch([Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None])

    def log_series(self, name: str, points: list[tuple[int, float]]) -> None:
        now = int(time.time() * 1000)
        self._log_batch([Metric(name, float(v), now, int(s)) for s, v in points])

    def _log_batch(self, metrics: list[Metric]) -> None:
        for i in range(0, len(metrics), 500):  # the store's limit per batch is 1000
            retry_locked(self.client.log_batch, self.run_id, metrics=metrics[i:i + 500])

    def set_tags(self, tags: dict[str, object]) -> None:
        for k, v in tags.items():
            retry_locked(self.client.set_tag, self.run_id, k, str(v))

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        retry_locked(self.client.log_artifact, self.run_id, str(path), folder)

    def log_text(self, text: str, name: str) -> None:
        retry_locked(self.client.log_text, self.run_id, text, name)


class Tracker:
    """One tracking store and experiment."""

    def __init__(self, uri: str, experiment_name: str, artifact_root: str | None = None):
        self.uri = uri
        path = sqlite_path(uri)
        if path is not None and not path.parent.exists():
            raise BayesxError(f"the folder of the MLflow database '{path}' does not exist; create it or set tracking.uri")
        check_reachable(uri)
        if path is None:
            self.client = MlflowClient(tracking_uri=uri)
            self.experiment_id = self._experiment(experiment_name, artifact_root)
            return
        try:
            with store_lock(path):  # MlflowClient creates the store's tables on construction
                self.client = MlflowClient(tracking_uri=uri)
                prepare_sqlite_store(self.client, path)
                self.experiment_id = self._experiment(experiment_name, artifact_root)
        except Timeout:
            raise BayesxError(f"another process has held the lock on the MLflow store '{path}' for "
                              f"{STORE_LOCK_TIMEOUT_S} s; if none is running, delete {path}.lock") from None

    def _experiment(self, name: str, artifact_root: str | None) -> str:
        try:
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                if found.lifecycle_stage == "deleted":
                    self.client.restore_experiment(found.experiment_id)
                return found.experiment_id
            location = None
            if artifact_root and is_local_store(self.uri):
                location = (Path(artifact_root).resolve() / name).as_uri()
            return self.client.create_experiment(name, artifact_location=location)
        except MlflowException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BayesxError(f"cannot use the MLflow store '{self.uri}': {first}; check tracking.uri") from exc

    @contextlib.contextmanager
    def run(self, run_name: str, tags: dict[str, str], parent_run_id: str | None = None) -> Iterator[TrackedRun]:
        """Open a run; it ends FINISHED, or FAILED on an error, or KILLED on an interrupt."""
        all_tags = dict(tags)
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        run = retry_locked(self.client.create_run, self.experiment_id, run_name=run_name, tags=all_tags)
        tracked = TrackedRun(self.client, run.info.run_id)
        status = "FINISHED"
        try:
            yield tracked
        except (KeyboardInterrupt, RunInterrupted):
            status = "KILLED"
            raise
        except BaseException:
            status = "FAILED"
            raise
        finally:
            retry_locked(self.client.set_terminated, tracked.run_id, status)

    def start_parent(self, run_name: str, tags: dict[str, str]) -> str:
        return retry_locked(self.client.create_run, self.experiment_id, run_name=run_name, tags=tags).info.run_id

    def end_parent(self, run_id: str) -> str:
        """End a sweep's parent run: FAILED if a child failed, KILLED if one was killed."""
        children = self.client.search_runs([self.experiment_id], f"tags.`{PARENT_TAG}` = '{run_id}'")
        statuses = {c.info.status for c in children}
        status = "FAILED" if "FAILED" in statuses else "KILLED" if "KILLED" in statuses else "FINISHED"
        retry_locked(self.client.set_terminated, run_id, status)
        return status

    def terminate(self, run_id: str, status: str) -> None:
        retry_locked(self.client.set_terminated, run_id, status)


def search_runs(uri: str, experiment: str | None = None) -> pd.DataFrame:
    """All runs of one experiment (or of every experiment) as a DataFrame, newest first."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():  # reading must not create an empty store
        if experiment:
            raise BayesxError(f"no MLflow store at '{path}', so no experiment '{experiment}'; check tracking.uri")
        return pd.DataFrame()
    check_reachable(uri)
    if path is not None:
        with store_lock(path):  # not while another process creates the store's tables
            client = MlflowClient(tracking_uri=uri)
    else:
        client = MlflowClient(tracking_uri=uri)
    try:
        if experiment:
            found = client.get_experiment_by_name(experiment)
            if found is None:
                names = [e.name for e in client.search_experiments()]
                raise BayesxError(f"no experiment named '{experiment}' in {uri}; known: {', '.join(names) or 'none'}")
            ids = [found.experiment_id]
        else:
            ids = [e.experiment_id for e in client.search_experiments()]
        if not ids:
            return pd.DataFrame()
        mlflow.set_tracking_uri(uri)
        return mlflow.search_runs(experiment_ids=ids, order_by=["attributes.start_time DESC"])
    except MlflowException as exc:
        raise BayesxError(f"cannot read the MLflow store '{uri}': {str(exc).splitlines()[0]}; check tracking.uri") from exc


def ui_command(uri: str, host: str, port: int, artifact_root: str | None) -> list[str]:
    """The command line that serves the MLflow UI on ``uri``."""
    import sys

    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if artifact_root and is_local_store(uri):
        cmd += ["--default-artifact-root", Path(artifact_root).resolve().as_uri()]
    return cmd

