"""MLflow tracking: the only module of bayesx that imports mlflow.

A :class:`Tracker` owns one store (a tracking URI) and one experiment; :meth:`Tracker.run`
opens a run as a context manager that ends it FINISHED, FAILED (an exception) or KILLED
(Ctrl-C, SIGTERM), so a run is never left RUNNING and never marked FINISHED by mistake.

Many processes may share one SQLite store (a parallel sweep): the store's schema is created and its
experiment found or created once, under a file lock beside the database (MLflow migrates an empty
store on first use, and processes that race there all fail); the database runs in WAL mode (readers
do not block the writer), and a write that still meets ``database is locked`` is retried.

A run that dies without a word (SIGKILL, out of memory, a preempted node) cannot close itself, so
every run records its host and process id and refreshes a heartbeat tag from a background thread;
:func:`dead_runs` finds RUNNING runs whose process is gone (same host, pid not alive) or whose
heartbeat is stale (any host), and :func:`mark_killed` ends them KILLED. A run whose process is
alive on this host is never touched.

Failures are one line and recorded: a run stopped by an exception that is not a user error (a bug in bayesx
or in a method's code) ends FAILED with :func:`fault_line` as its ``error`` tag and its traceback saved as
its file ``traceback.txt`` (printed too with ``BAYESX_DEBUG=1``). A sweep's parent ends FAILED when any job
failed, before or after recording its run, and names the failed jobs in its description
(:func:`failed_jobs_note`, one paragraph of ``mlflow.note.content``; the others are left as they are).
A tracking URI with a scheme MLflow cannot open, one that names no store (a folder, a file that is not an SQLite
database, MLflow's retired folder store: :func:`check_store`), or a SQLite store or local artifact folder that
cannot be written (a read-only file system, a folder without write permission), is refused in one line before a
run opens; the commands that only read (compare, report, ui) read a read-only SQLite store from a consistent
copy (:func:`snapshot`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import logging
import math
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
from filelock import FileLock, Timeout
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from bayesx.errors import BayesxError, RunInterrupted
from bayesx.store.credentials import check_credentials
from bayesx.store.record import DataInput, RunRecord, RunStart

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# "Creating initial MLflow database tables...", and a traceback logged with every SQLAlchemy error (a full disk's
# 40 lines): the error itself reaches bayesx, which says it in one line
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
logging.getLogger("alembic").setLevel(logging.WARNING)

PARENT_TAG = "mlflow.parentRunId"
HOST_TAG, PID_TAG, HEARTBEAT_TAG = "host", "pid", "heartbeat"  # heartbeat: unix time of the last beat
SLURM_JOB_TAG = "slurm_job_id"  # the Slurm job a run ran in (a resumed run: the last one)
COMPARE_TAG = "compare_metrics"  # each run names its key metrics for `bayesx compare` (its family's choice)
WARNINGS_TAG, NOTES_TAG, ERROR_TAG = "health_warnings", "evaluation_notes", "error"
DESCRIPTION_TAG = "mlflow.note.content"  # a run's description, as MLflow's UI shows and edits it
UNRECORDED_FAILURES_TAG = "sweep_unrecorded_failures"  # a sweep parent's jobs that failed before recording a run
FAULT_FILE = "traceback.txt"  # a run stopped by an internal error keeps its traceback here
DEBUG_ENV = "BAYESX_DEBUG"  # "1": an internal error's traceback is printed too, not only saved with the run
CONFIG_FILE = "config.yaml"
IDENTITY_TAGS = ("method", "model", "data", "family", "seed", "n_chains", "device", "dtype")  # what a run ran
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000  # MLflow's limit on a tag's value (a description is a tag)


def _finite(value) -> bool:
    """A metric value the store may hold: a number that is not NaN or infinite (a metric that does not
    apply is absent, never NaN)."""
    return value is not None and math.isfinite(float(value))


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (one line) when an http(s) tracking server does not answer (MLflow itself
    retries with back-off for minutes before giving up) or refuses our credentials
    (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, which MLflow's client sends)."""
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
    check_credentials(uri)  # a wrong password is one line here, not a failure after the run


SCHEMES = {"sqlite": "sqlite:///PATH (a file)", "file": "",
           "http": "http(s)://HOST:PORT (an MLflow server)", "https": "", "postgresql": "postgresql://, mysql:// or "
           "mssql:// (a database)", "mysql": "", "mssql": "", "databricks": "", "databricks-uc": "", "uc": ""}
"""The tracking URI schemes MLflow can open; those with a text are the ones bayesx documents (``file``: MLflow 3's
retired folder store, refused by :func:`check_store`)."""


def check_scheme(uri: str) -> None:
    """One line for a tracking URI whose scheme MLflow cannot open (``foo://bar``), naming those it can."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else "file"
    if scheme not in SCHEMES:
        known = ", ".join(text for text in SCHEMES.values() if text)
        raise BayesxError(f"the tracking URI '{uri}' has the scheme '{scheme}', which MLflow cannot open; use "
                          f"{known}, in tracking.uri or MLFLOW_TRACKING_URI")


MLFLOW_TABLES = ("experiments", "runs", "metrics", "params", "tags", "alembic_version")  # any one: an MLflow store
# (or one that another process is creating now)
VALID_STORES = ("an SQLite file, e.g. sqlite:///mlflow.db (created if missing), or an MLflow server, "
                "http://HOST:PORT")
NOT_A_DATABASE = "file is not a database"  # SQLite's words for a file without its header


def check_store(uri: str) -> None:
    """One line, at once, for a tracking URI that names no store bayesx can use (:func:`check_scheme`, then): a
    folder store (``file://`` or a bare path: MLflow 3 refuses its retired file store unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set), an ``sqlite:///`` URI naming a folder (MLflow retried it for about 100 s,
    with 36 warnings), a file that is not an SQLite database, or an SQLite database that is not an MLflow store
    (MLflow would add its tables to it)."""
    check_scheme(uri)
    from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE

    if (uri.startswith("file:") or "://" not in uri) and not MLFLOW_ALLOW_FILE_STORE.get():
        raise BayesxError(f"the tracking URI '{uri}' names a folder store (MLflow's file store), which MLflow "
                          f"{mlflow.__version__} no longer opens; use {VALID_STORES} (`mlflow migrate-filestore` moves "
                          f"a folder store's runs into an SQLite file)")
    path = sqlite_path(uri)
    if path is None:
        return
    if path.is_dir():
        raise BayesxError(f"the tracking URI '{uri}' names the folder {path}, but an SQLite store is a file: use a "
                          f"file in it, sqlite:///{path / 'mlflow.db'} (created if missing), or an MLflow server, "
                          f"http://HOST:PORT")
    problem = not_a_store(path) if path.is_file() else None
    if problem:
        raise BayesxError(f"the tracking URI '{uri}' names {path}, which {problem}; use {VALID_STORES}, "
                          f"in tracking.uri or MLFLOW_TRACKING_URI")


def not_a_store(path: Path) -> str | None:
    """What makes the existing file ``path`` no MLflow store (a phrase after 'which'), or None: it is not an SQLite
    database, or it is one with tables but none of MLflow's. An empty file is a new database; a database that cannot
    be read now (locked, or in a folder this process cannot write) is left to MLflow.

    The file is read through SQLite only, never opened directly: closing any descriptor of a database file drops
    every POSIX lock this process holds on it (fcntl's semantics), so a plain ``open()`` here, while an earlier
    run of the same process (a sweep's in-process job) still had the store open, let another process check-point
    and remove the write-ahead log under it, and the next statement failed with "disk I/O error". SQLite's own
    connections share one set of locks per file within a process and keep the descriptor until they are released."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=5)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        return "is not an SQLite database" if NOT_A_DATABASE in str(exc) else None
    if tables and not tables & set(MLFLOW_TABLES):
        return f"is an SQLite database of something else (tables {', '.join(sorted(tables)[:4])}), not an MLflow store"
    return None


NO_ROOM_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")
IO_ERROR_TEXT = "disk i/o error"  # SQLite's word where a full disk stops its WAL or shared memory from growing


def out_of_room(exc: BaseException) -> str | None:
    """What is wrong with the disk when ``exc`` (or an exception it was raised from) says that it is full: SQLite's
    SQLITE_FULL through SQLAlchemy and MLflow, an OSError ENOSPC / EDQUOT from writing a run's files ("is full"),
    or SQLite's disk I/O error ("is full or failing"); None for any other error."""
    seen: set[int] = set()
    found = None
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or \
                any(t in text for t in NO_ROOM_TEXTS):
            return "is full"
        if IO_ERROR_TEXT in text:
            found = "is full or failing"
        exc = exc.__cause__ or exc.__context__
    return found


def first_line(exc: BaseException) -> str:
    """An exception's first line (SQLAlchemy adds a second, '(Background on this error at: ...)'), or its type."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def traceback_text(exc: BaseException) -> str:
    """An internal error's traceback, to keep with what it stopped; printed too with ``BAYESX_DEBUG=1``."""
    text = "".join(traceback.format_exception(exc))
    if os.environ.get(DEBUG_ENV) == "1":
        print(text, file=sys.stderr, end="")
    return text


def fault_line(exc: BaseException, method: str, where: str) -> str:
    """The one line for an exception that is not a user error (a bug in bayesx or in a method's code): the
    method, the exception's type and first line, and ``where`` its traceback was kept."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    if isinstance(exc, MemoryError) or "out of memory" in message.lower() or "can't allocate memory" in message.lower():
        return (f"method={method} ran out of memory ({type(exc).__name__}: {message}); {where}; the run needs more "
                f"than the machine had free: use fewer n_chains, a smaller method.num_draws or model, or a larger machine")
    return (f"method={method} stopped on an internal error, {type(exc).__name__}: {message}; {where} (a fault of "
            f"bayesx or of the method's code, not of your input: please report it)")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///path`` URI (relative paths are relative to the cwd)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):])


def unwritable_reason(path: Path) -> str | None:
    """Why this process cannot write the file ``path`` or create files beside it (a SQLite store's lock,
    journal and shared memory; an artifact folder's files), or None when it can. ``path`` need not exist:
    its nearest existing folder decides. A read-only mount refuses everyone, root included."""
    path = path.resolve()
    folder = path if path.is_dir() else path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    with contextlib.suppress(OSError):
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"{folder} is on a read-only file system"
    if not os.access(folder, os.W_OK):
        return f"the folder {folder} is not writable by this user"
    if path.is_file() and not os.access(path, os.W_OK):
        return f"the file {path} is read-only"
    return None


def store_writable(uri: str) -> bool:
    """Whether runs can be written to ``uri`` as far as this machine can tell (a SQLite file's folder and
    file; a server or database is taken as writable, and says otherwise when written to)."""
    path = sqlite_path(uri)
    return path is None or unwritable_reason(path) is None


def check_writable(uri: str, doing: str) -> None:
    """One line when a SQLite store cannot be written (``doing``: what needed to write, e.g. 'record runs')."""
    path = sqlite_path(uri)
    reason = unwritable_reason(path) if path is not None else None
    if reason:
        raise BayesxError(f"cannot {doing} in the MLflow store '{path}': {reason}; point tracking.uri (or "
                          f"MLFLOW_TRACKING_URI) at a writable place, e.g. sqlite:///$HOME/mlflow.db "
                          f"(bayesx compare, report and ui only read it)")


def snapshot(path: Path, into: Path) -> Path:
    """A copy, in the folder ``into``, of the SQLite store ``path`` that this process cannot write, for the
    commands that only read (compare, report, ui). A WAL database (bayesx's) cannot be opened in place in a
    folder nobody can write (SQLite wants to create its shared-memory file), and MLflow's engine would try
    to create folders for a ``file:`` URI; SQLite's backup reads it read-only (``immutable`` where no writer
    has it open) into a consistent copy."""
    copy = into / path.name
    last: sqlite3.Error | None = None
    for mode in ("mode=ro", "immutable=1"):
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path.resolve()}?{mode}", uri=True, timeout=60)) as src, \
                    contextlib.closing(sqlite3.connect(copy)) as dst:
                src.backup(dst)
            return copy
        except sqlite3.Error as exc:
            last = exc
            copy.unlink(missing_ok=True)
    raise BayesxError(f"cannot read the MLflow store '{path}' ({last}); check tracking.uri")


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


def is_dataset_race(exc: BaseException) -> bool:
    """Two runs logging the same dataset at once: both found it absent and the second insert hit the store's unique
    key; a retry finds the first run's row and links to it."""
    text = str(exc)
    sqlite = "UNIQUE constraint failed: datasets" in text
    postgres = "duplicate key value violates unique constraint" in text and "datasets" in text
    return sqlite or postgres


def retry_locked(call, *args, also=None, **kwargs):
    """``call(*args, **kwargs)``, retried with back-off while SQLite answers ``database is locked`` (or while the
    error satisfies ``also``)."""
    for attempt in range(LOCKED_RETRIES):
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            retryable = is_locked_error(exc) or (also is not None and also(exc))
            if not retryable or attempt == LOCKED_RETRIES - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


class TrackedRun:
    """An open MLflow run: params, metrics, tags and artifacts go through here."""

    def __init__(self, client: MlflowClient, run_id: str):
        self.client, self.run_id = client, run_id
        self.status = "FINISHED"  # what the run ends as when its block exits normally (see ``store``)
        self.error: str | None = None  # the error its record stored, if any

    def log_params(self, params: dict[str, object]) -> None:
        items = [Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            retry_locked(self.client.log_batch, self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)
        self._log_batch([Metric(k, float(v), now, step) for k, v in metrics.items() if _finite(v)])

    def log_series(self, name: str, points: list[tuple[int, float]]) -> None:
        now = int(time.time() * 1000)
        self._log_batch([Metric(name, float(v), now, int(s)) for s, v in points if _finite(v)])

    def _log_batch(self, metrics: list[Metric]) -> None:
        for i in range(0, len(metrics), 500):  # the store's limit per batch is 1000
            retry_locked(self.client.log_batch, self.run_id, metrics=metrics[i:i + 500])

    def set_tags(self, tags: dict[str, object]) -> None:
        items = [RunTag(k, str(v)) for k, v in tags.items()]
        for i in range(0, len(items), 100):  # one store call per 100 tags
            retry_locked(self.client.log_batch, self.run_id, tags=items[i:i + 100])

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        retry_locked(self.client.log_artifact, self.run_id, str(path), folder)

    def log_text(self, text: str, name: str) -> None:
        retry_locked(self.client.log_text, self.run_id, text, name)

    def store(self, record: RunRecord) -> None:
        """Store the run's record (bayesx.store.record): its metrics, the steps of its series not logged yet,
        its tags with the summary's (the compared metrics, warnings, remarks, the error), its files;
        the folders it discards are removed. The run then ends with the record's status."""
        stepped = {name for name, points in record.series.items() if points}  # their last step is the final value
        self.log_metrics({k: v for k, v in record.metrics.items() if k not in stepped})
        for name, points in record.series.items():
            self.log_series(name, [(step, value) for step, value in points if step > record.logged_until])
        summary = record.summary
        tags = {**record.tags, COMPARE_TAG: ",".join(summary.compared)}
        if summary.warnings:
            tags[WARNINGS_TAG] = " | ".join(summary.warnings)
        if summary.remarks:
            tags[NOTES_TAG] = " | ".join(summary.remarks)
        if record.error:
            tags[ERROR_TAG] = self.error = record.error
        if summary.description:
            tags[DESCRIPTION_TAG] = summary.description[:MAX_TAG_LENGTH]
        self.set_tags(tags)
        for artifact in record.artifacts:
            self.log_artifact(artifact.path, artifact.folder)
        for folder in record.discard:  # last: a run stopped while it stores (SIGKILL, a full disk) keeps its checkpoint
            self.delete_artifacts(folder)
        self.status = record.status

    def log_datasets(self, inputs: tuple[DataInput, ...]) -> None:
        """The run's data as MLflow dataset inputs (name, content digest, shapes and types, where it came
        from, and an ``mlflow.data.context`` tag: training or test), so the run table's Dataset column names it."""
        import mlflow.data
        from mlflow.data.code_dataset_source import CodeDatasetSource
        from mlflow.entities import DatasetInput, InputTag

        entries = [DatasetInput(mlflow.data.from_numpy(d.features, targets=d.targets, name=d.name, digest=d.digest,
                                                       source=CodeDatasetSource({"origin": d.origin}))
                                ._to_mlflow_entity(), [InputTag("mlflow.data.context", d.context)]) for d in inputs]
        if entries:
            retry_locked(self.client.log_inputs, self.run_id, datasets=entries, also=is_dataset_race)

    def delete_artifacts(self, folder: str) -> bool:
        """Remove an artifact folder where the artifact store allows it (local files, most servers)."""
        from mlflow.store.artifact.artifact_repository_registry import (
            get_artifact_repository,
        )

        try:
            uri = self.client.get_run(self.run_id).info.artifact_uri
            get_artifact_repository(uri).delete_artifacts(folder)
            return True
        except Exception:  # noqa: BLE001 - a store without deletion keeps the folder; nothing is lost
            return False


class Heartbeat:
    """Sets a run's heartbeat tag to the current time every ``interval`` seconds, from a daemon thread."""

    def __init__(self, client: MlflowClient, run_id: str, interval: float):
        self.client, self.run_id, self.interval = client, run_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{run_id[:8]}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a missed beat only ages the tag; the next one retries
                retry_locked(self.client.set_tag, self.run_id, HEARTBEAT_TAG, f"{time.time():.0f}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def liveness_tags() -> dict[str, str]:
    """Who runs this run: the host, the process id and the first heartbeat; inside a Slurm job also its
    job id (``SLURM_JOB_ID``: an array task's own id), which ``scancel`` and ``sacct`` take."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()), HEARTBEAT_TAG: f"{time.time():.0f}"}
    if os.environ.get("SLURM_JOB_ID"):
        tags[SLURM_JOB_TAG] = os.environ["SLURM_JOB_ID"]
    return tags


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def dead_reason(tags: dict[str, str], start_time_ms: int, now: float, stale_after_s: float,
                host: str | None = None, alive=process_alive) -> str | None:
    """Why a RUNNING run is dead, or None when it may be alive: on this host its pid decides (a live
    pid is never declared dead); elsewhere, a heartbeat (or, for runs without one, a start) older
    than ``stale_after_s``."""
    host = host or socket.gethostname()
    pid = tags.get(PID_TAG, "")
    if tags.get(HOST_TAG) == host and pid.isdigit():
        return None if alive(int(pid)) else f"its process {pid} on {host} is gone"
    last = float(tags[HEARTBEAT_TAG]) if tags.get(HEARTBEAT_TAG) else start_time_ms / 1000.0
    age = now - last
    if age > stale_after_s:
        where = tags.get(HOST_TAG, "an unknown host")
        return f"no heartbeat from {where} for {age:.0f} s (more than {stale_after_s:.0f} s)"
    return None


# --- a sweep parent's failed jobs, named in its description ---------------------------------------
FAILED_JOBS_HEAD = "Failed jobs"  # the paragraph of a parent's description that names them starts so
ERROR_SHOWN = 300  # characters of each failed job's error in that paragraph


@dataclass(frozen=True)
class FailedJob:
    """One failed job of a sweep: what to call it (its overrides, or its run's name), how it ended (FAILED: a
    recorded run; REJECTED: refused before it recorded one) and its error line."""

    name: str
    status: str
    error: str
    run_id: str | None = None


def failed_jobs_note(jobs: Sequence[FailedJob]) -> str:
    """The paragraph of a sweep parent's description that names its failed jobs ('' when none failed):
    ``Failed jobs (2): seed=1 (FAILED, run 1a2b3c4d): <error>; seed=3 (REJECTED): <error>``."""
    if not jobs:
        return ""
    named = []
    for job in jobs:
        where = f"{job.status}, run {job.run_id[:8]}" if job.run_id else job.status
        error = job.error if len(job.error) <= ERROR_SHOWN else job.error[:ERROR_SHOWN - 3] + "..."
        named.append(f"{job.name} ({where}): {error}")
    return f"{FAILED_JOBS_HEAD} ({len(jobs)}): " + "; ".join(named)


def failed_child(run) -> FailedJob:
    """A sweep's child run that ended FAILED, as its description names it."""
    return FailedJob(run.info.run_name or run.info.run_id[:8], run.info.status,
                     run.data.tags.get(ERROR_TAG) or "no error recorded (see the job's output)", run.info.run_id)


def note_failed_jobs(client: MlflowClient, run_id: str) -> tuple[list, list]:
    """A sweep's children and failed jobs (:func:`sweep_failures`), the failed jobs named in its description."""
    children, jobs = sweep_failures(client, run_id)
    set_description_part(client, run_id, FAILED_JOBS_HEAD, failed_jobs_note(jobs))
    return children, jobs


def sweep_failures(client: MlflowClient, parent_id: str) -> tuple[list, list[FailedJob]]:
    """A sweep parent's child runs and its failed jobs: those that failed before recording a run (kept in
    the parent's tags), then its FAILED children in the order they started."""
    parent = retry_locked(client.get_run, parent_id)
    children = retry_locked(client.search_runs, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_id}'",
                            order_by=["attributes.start_time ASC"])
    failed = [failed_child(c) for c in children if c.info.status == "FAILED"]
    return children, unrecorded_failures(parent.data.tags) + failed


def unrecorded_failures(tags: dict[str, str]) -> list[FailedJob]:
    """The failed jobs that recorded no run, as the parent's tag keeps them (:meth:`Tracker.end_parent`)."""
    with contextlib.suppress(ValueError, TypeError):
        return [FailedJob(**job) for job in json.loads(tags.get(UNRECORDED_FAILURES_TAG) or "[]")]
    return []


def set_description_part(client: MlflowClient, run_id: str, head: str, part: str, end: str | None = None) -> None:
    """Put ``part`` in the run's description in place of its part that starts with ``head`` (removed when ``part``
    is empty). A part is one paragraph (up to a blank line), or with ``end`` everything from ``head`` to ``end``
    (a part with blank lines inside: a sweep's comparison). The description's other parts (another summary, what a
    user wrote in the UI) stay as they are. Where the whole would pass MLflow's limit on a tag, ``part`` is
    shortened, its ``end`` kept, so that the next call still finds where it ends."""
    current = retry_locked(client.get_run, run_id).data.tags.get(DESCRIPTION_TAG, "")
    others = without_part(current, head, end)
    if part:
        room = MAX_TAG_LENGTH - len("\n\n".join([*others, ""]))
        if len(part) > room:
            tail = f"\n{end}" if end else ""
            part = part[:max(room - len(tail), 0)] + tail
        others.append(part)
    text = "\n\n".join(others)[:MAX_TAG_LENGTH]
    if text != current:
        retry_locked(client.set_tag, run_id, DESCRIPTION_TAG, text)


def without_part(description: str, head: str, end: str | None) -> list[str]:
    """The paragraphs of ``description`` other than the part that starts with ``head`` (and runs to ``end``, or to
    the description's end where an earlier cut lost ``end``)."""
    if end is None:
        return [p for p in description.split("\n\n") if p.strip() and not p.startswith(head)]
    if head in description:
        start = description.index(head)
        stop = description.find(end, start)
        description = description[:start] + (description[stop + len(end):] if stop >= 0 else "")
    return [p for p in description.split("\n\n") if p.strip()]


class Tracker:
    """One tracking store and experiment."""

    def __init__(self, uri: str, experiment_name: str, artifact_root: str | None = None,
                 heartbeat_s: float = 30.0, parent_ended: Callable[[Tracker, str, str], None] | None = None):
        """``parent_ended(tracker, parent_run_id, status)`` is called after a resumed run settled its sweep's
        parent (:meth:`settle_parent`): the runner passes the sweep's summary (bayesx.reports), which the store
        does not import."""
        self.uri, self.heartbeat_s, self.experiment_name = uri, heartbeat_s, experiment_name
        self.parent_ended = parent_ended
        check_store(uri)
        path = sqlite_path(uri)
        if path is not None and not path.parent.exists():
            raise BayesxError(f"the folder of the MLflow database '{path}' does not exist; create it or set tracking.uri")
        check_writable(uri, "record runs")
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
        except BayesxError:
            raise
        except Exception as exc:
            if out_of_room(exc):  # making the store's tables or the experiment
                raise BayesxError(self._no_room_line(exc, None, False, None)) from None
            if not isinstance(exc, OSError):
                raise
            # a refusal the checks above did not foresee (a lock file left read-only, say)
            raise BayesxError(f"cannot record runs in the MLflow store '{path}': {exc.strerror or exc} "
                              f"({exc.filename or path}); point tracking.uri at a writable place") from None
        self._check_artifact_location()

    def _check_artifact_location(self) -> None:
        """One line, before a run opens, when the experiment's artifact folder (a local one) cannot be written:
        every run stores its config and files there."""
        from urllib.parse import unquote, urlsplit

        location = retry_locked(self.client.get_experiment, self.experiment_id).artifact_location or ""
        parts = urlsplit(location)
        if parts.scheme not in ("", "file"):
            return
        folder = Path(unquote(parts.path))
        reason = unwritable_reason(folder)
        if reason:
            raise BayesxError(f"cannot store the runs' files in '{folder}', experiment '{self.experiment_name}''s "
                              f"artifact folder: {reason}; make it writable, or use another experiment_name with a "
                              f"writable tracking.artifact_root")

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
            try:
                return self.client.create_experiment(name, artifact_location=location)
            except MlflowException as exc:  # another process (a parallel job on a server) created it first
                if exc.error_code == "PERMISSION_DENIED":  # a server's user who may only read (bayesx server --auth)
                    user = os.environ.get("MLFLOW_TRACKING_USERNAME", "?")
                    raise BayesxError(f"the tracking server {self.uri} does not let user '{user}' create experiment "
                                      f"'{name}' (HTTP 403: a read-only user); its admin can grant more with  bayesx "
                                      f"server user add {user} --permission edit  (or create the experiment and "
                                      f"grant edit on it with --experiment {name})") from None
                again = self.client.get_experiment_by_name(name)
                if again is None:
                    raise
                return again.experiment_id
        except MlflowException as exc:
            if out_of_room(exc):
                raise BayesxError(self._no_room_line(exc, None, False, None)) from None
            raise BayesxError(f"cannot use the MLflow store '{self.uri}': {first_line(exc)}; check tracking.uri") from exc

    def find_resumable(self, run_id: str, stale_after_s: float):
        """The run ``run_id`` (or an unambiguous prefix of at least 8 characters) if it can be resumed: it
        exists, did not finish, and its process is gone. One-line errors otherwise."""
        matches = []
        if len(run_id) == 32:  # a whole id: one lookup
            with contextlib.suppress(MlflowException):
                found = self.client.get_run(run_id)
                matches = [found] if found.info.experiment_id == self.experiment_id else []
        elif len(run_id) >= 8:  # a prefix, as `bayesx compare` prints them
            matches = [r for r in self.client.search_runs([self.experiment_id], max_results=50000)
                       if r.info.run_id.startswith(run_id)]
        if len(matches) != 1:
            what = "no run" if not matches else f"{len(matches)} runs"
            raise BayesxError(f"resume={run_id}: {what} with that id in experiment '{self.experiment_name}' of "
                              f"{self.uri}; give a run id (at least 8 characters) from `bayesx compare`")
        run = matches[0]
        if run.info.status == "FINISHED":
            raise BayesxError(f"resume={run_id}: that run FINISHED, so there is nothing to resume; "
                              "start a new run without resume=")
        if run.info.status == "RUNNING" and dead_reason(run.data.tags, run.info.start_time, time.time(),
                                                        stale_after_s) is None:
            raise BayesxError(f"resume={run_id}: that run is still running (process {run.data.tags.get(PID_TAG)} on "
                              f"{run.data.tags.get(HOST_TAG)}); stop it first, or wait for it")
        return run

    def download(self, run_id: str, folder: str, into: Path) -> Path | None:
        """A run's artifact folder, downloaded into ``into``; None when the run has no such folder."""
        if not self.client.list_artifacts(run_id, folder):
            return None
        return Path(self.client.download_artifacts(run_id, folder, str(into)))

    @contextlib.contextmanager
    def run(self, start: RunStart, opened: Callable[[str], None] | None = None) -> Iterator[TrackedRun]:
        """Open a run with its params and config (or reopen ``start.resume_run_id``, a killed one, whose
        params are already there); it ends with the status of the record it stored, FAILED on an error
        or KILLED on an interrupt. While open, it carries its host and pid and a heartbeat (see the
        module's docstring). A resumed run of an ended sweep then settles its parent (:meth:`settle_parent`).
        ``opened(run_id)`` is told the run's id as soon as the store holds it, before its params are logged.
        A store with no room left (:func:`out_of_room`) is one line, and the run ends FAILED where the store
        still lets it end."""
        all_tags = {**start.tags, **liveness_tags()}
        if start.parent_run_id:
            all_tags[PARENT_TAG] = start.parent_run_id
        tracked: TrackedRun | None = None
        status, failing = None, False
        try:
            tracked = self._open(start, all_tags)
            if opened is not None:
                opened(tracked.run_id)
            if not start.resume_run_id:  # a resumed run has its params, config and data already
                tracked.log_params(start.params)
                tracked.log_text(start.config_text, CONFIG_FILE)
                tracked.log_datasets(start.datasets)
            with Heartbeat(self.client, tracked.run_id, self.heartbeat_s):
                yield tracked
        except (KeyboardInterrupt, RunInterrupted):
            status, failing = "KILLED", True
            raise
        except BayesxError as exc:
            status, failing = "FAILED", True
            if tracked is not None and tracked.error is None:  # raised in the block rather than stored with a record
                self._tag_error(tracked, str(exc))
            raise
        except Exception as exc:  # a fault inside bayesx or a method's code: one line, its traceback kept
            status, failing = "FAILED", True
            if out_of_room(exc):
                run_id = tracked.run_id if tracked is not None else None
                if tracked is not None:  # where the store still takes a tag
                    self._tag_error(tracked, self._no_room_line(exc, all_tags.get("method"), True, run_id))
                ended = tracked is not None and self._end(tracked, "FAILED")
                tracked = None  # ended here, or not endable: the finally leaves it
                raise BayesxError(self._no_room_line(exc, all_tags.get("method"), ended, run_id)) from None
            if tracked is None:
                raise
            raise self._record_fault(tracked, start, exc) from exc
        except BaseException:
            status, failing = "FAILED", True
            raise
        finally:
            if tracked is not None:
                try:
                    retry_locked(self.client.set_terminated, tracked.run_id, status or tracked.status)
                except Exception as exc:
                    if not failing:  # else the run's own error, raised above, is the one to tell
                        if out_of_room(exc):
                            raise BayesxError(self._no_room_line(exc, all_tags.get("method"), False,
                                                                 tracked.run_id)) from None
                        raise
                if start.resume_run_id:
                    self.settle_parent(tracked.run_id)

    def _open(self, start: RunStart, tags: dict[str, str]) -> TrackedRun:
        """The run: created with its tags, or the killed one ``start.resume_run_id`` reopened (RUNNING, its tags
        renewed)."""
        if start.resume_run_id:
            retry_locked(self.client.update_run, start.resume_run_id, status="RUNNING")
            tracked = TrackedRun(self.client, start.resume_run_id)
            tracked.set_tags(tags)
            return tracked
        return TrackedRun(self.client, self._create_run(start.name, tags).info.run_id)

    def _end(self, tracked: TrackedRun, status: str) -> bool:
        """End the run with ``status`` where the store lets it; whether it did."""
        try:
            retry_locked(self.client.set_terminated, tracked.run_id, status)
            return True
        except Exception:  # noqa: BLE001 - a store that cannot even end it: the run's line says so
            return False

    def _no_room_line(self, exc: BaseException, method: str | None, ended: bool, run_id: str | None) -> str:
        """The one line for a store (or artifact folder) whose disk is full (:func:`out_of_room`): what failed, what
        became of the run, and the fix."""
        if run_id is None:
            outcome = "nothing was recorded"
        elif ended:
            outcome = f"the run {run_id[:8]} is recorded FAILED with what it had stored"
        else:
            outcome = (f"the run {run_id[:8]} could not even be ended, so it shows RUNNING until `bayesx runs clean` "
                       f"marks it KILLED")
        where = f"the MLflow store '{self.uri}'" + (" or its artifact folder" if is_local_store(self.uri) else "")
        return (f"{'method=' + method + ': ' if method else ''}cannot record the run: the disk of {where} "
                f"{out_of_room(exc) or 'is full'} ({first_line(exc)}); {outcome}; free space on that disk, or point "
                f"tracking.uri (and tracking.artifact_root) at one with room")

    def _tag_error(self, tracked: TrackedRun, line: str) -> None:
        with contextlib.suppress(Exception):  # a store that fails here must not hide the run's own error
            tracked.set_tags({ERROR_TAG: line})

    def _record_fault(self, tracked: TrackedRun, start: RunStart, exc: Exception) -> BayesxError:
        """A run stopped by an exception that is not a user error (a bug in bayesx or in a method's code):
        :func:`fault_line`, stored as the run's error, with the traceback saved as the run's file
        ``traceback.txt``."""
        try:
            tracked.log_text(traceback_text(exc), FAULT_FILE)
            where = f"the run {tracked.run_id[:8]} is recorded FAILED and its traceback is the run's file {FAULT_FILE}"
        except Exception:  # noqa: BLE001 - the store refuses files: the line says where else to look
            where = (f"the run {tracked.run_id[:8]} is recorded FAILED; its traceback could not be saved with it "
                     f"(rerun with {DEBUG_ENV}=1 to print it)")
        line = fault_line(exc, start.tags.get("method") or "?", where)
        self._tag_error(tracked, line)
        return BayesxError(line)

    def resume(self, run_id: str, params: dict[str, object], ignored: tuple[str, ...], stale_after_s: float,
               folder: str, into: Path, reasons: dict[str, str] | None = None) -> tuple[str, Path | None]:
        """A killed run to continue: :meth:`find_resumable`, then its params compared with ``params`` (keys
        starting with one of ``ignored`` may differ), then its artifact ``folder`` downloaded into ``into``
        (None where it has none). Returns the run's whole id and the folder. ``reasons`` names params that are
        facts about the run rather than options (a digest of its posterior), each with what a difference in it
        means; they are compared after the options (a changed option is the likelier news), and not at all for a
        run that lacks them (made before they were logged)."""
        run = self.find_resumable(run_id, stale_after_s)
        reasons = reasons or {}
        mine = {k: str(v)[:MAX_PARAM_LENGTH] for k, v in params.items() if not k.startswith(ignored)}
        theirs = {k: v for k, v in run.data.params.items() if not k.startswith(ignored)}
        differing = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        options = [k for k in differing if k not in reasons]
        if options:
            shown = ", ".join(f"{k}: {theirs.get(k)} there, {mine.get(k)} here" for k in options[:3])
            raise BayesxError(f"resume={run_id}: this command's config differs from the run's ({shown}); "
                              f"repeat the run's own command with resume=")
        for key in (k for k in differing if k in reasons and k in theirs):
            raise BayesxError(f"resume={run_id}: {reasons[key]} ({key} differs); run it afresh without resume=")
        return run.info.run_id, self.download(run.info.run_id, folder, into)

    def find_finished(self, tag: str, value: str) -> str | None:
        """The newest FINISHED run of any experiment of this store whose tag ``tag`` is ``value``; None
        where there is none (how a cached product such as a reference posterior is found)."""
        ids = [e.experiment_id for e in self.client.search_experiments()]
        found = retry_locked(self.client.search_runs, ids, f"tags.`{tag}` = '{value}' and attributes.status = 'FINISHED'",
                             max_results=1, order_by=["attributes.start_time DESC"])
        return found[0].info.run_id if found else None

    def tag_of(self, run_id: str, key: str) -> str | None:
        """One tag of a run (e.g. a sweep parent's ``sweep_overrides``); None where it has none."""
        return retry_locked(self.client.get_run, run_id).data.tags.get(key)

    def start_parent(self, run_name: str, tags: dict[str, str]) -> str:
        """A sweep's parent run; it carries the sweeping process's host and pid (its children beat)."""
        return self._create_run(run_name, {**tags, **liveness_tags()}).info.run_id

    def _create_run(self, run_name: str, tags: dict[str, str]):
        """A new run in our experiment; a server's refusal (HTTP 403: a user who may only read) in one line."""
        try:
            return retry_locked(self.client.create_run, self.experiment_id, run_name=run_name, tags=tags)
        except MlflowException as exc:
            if exc.error_code != "PERMISSION_DENIED":
                raise
            user = os.environ.get("MLFLOW_TRACKING_USERNAME", "?")
            raise BayesxError(f"the tracking server {self.uri} lets user '{user}' only read experiment "
                              f"'{self.experiment_name}' (HTTP 403); its admin can grant more with  bayesx server "
                              f"user add {user} --permission edit --experiment {self.experiment_name}") from None

    def end_parent(self, run_id: str, unrecorded: Sequence[FailedJob] = (), failed: bool = False) -> str:
        """End a sweep's parent run: FAILED if a child failed, a job failed before it recorded a run
        (``unrecorded``, kept in the parent's tags for a later settling) or the sweep says so (``failed``);
        else KILLED if a child was killed, else FINISHED. The failed jobs are named in its description.
        A child still RUNNING when a failed sweep ends was stopped with it: Slurm's ``scancel`` sends SIGTERM
        and then SIGKILL after its KillWait, which can come before the job's run has recorded itself KILLED
        (``bayesx runs clean`` ends it KILLED later); the sweep is then KILLED, as with a recorded KILLED child."""
        if unrecorded:
            kept = [{**vars(job), "error": job.error[:ERROR_SHOWN]} for job in unrecorded]
            while len(json.dumps(kept)) > MAX_TAG_LENGTH:  # whole entries only: the tag stays JSON
                kept.pop()
            retry_locked(self.client.set_tag, run_id, UNRECORDED_FAILURES_TAG, json.dumps(kept))
        children, jobs = note_failed_jobs(self.client, run_id)
        statuses = {c.info.status for c in children}
        # a killed child explains a sweep that stopped on an error (Slurm's scancel: submitit's UncompletedJobError)
        stopped = "KILLED" in statuses or (failed and "RUNNING" in statuses)
        status = "FAILED" if jobs else "KILLED" if stopped else "FAILED" if failed else "FINISHED"
        retry_locked(self.client.set_terminated, run_id, status)
        return status

    def settle_parent(self, child_id: str) -> None:
        """After a resumed run ends: the sweep it belongs to, if that sweep has ended, ends again with its
        children's statuses (:meth:`end_parent`), so a sweep whose killed job was resumed to the end
        is FINISHED, and is then handed to ``parent_ended`` (the sweep's comparison, made again). A parent still RUNNING is its sweep's to close, and one with a child still RUNNING (another
        resumed job) is left to that child. Runs inside the run's ``finally``: a store that fails here is a
        warning, never the run's outcome."""
        try:
            parent_id = retry_locked(self.client.get_run, child_id).data.tags.get(PARENT_TAG)
            if not parent_id or retry_locked(self.client.get_run, parent_id).info.status == "RUNNING":
                return
            children = retry_locked(self.client.search_runs, [self.experiment_id],
                                    f"tags.`{PARENT_TAG}` = '{parent_id}'")
            if all(c.info.status != "RUNNING" for c in children):
                status = self.end_parent(parent_id)
                if self.parent_ended is not None:
                    self.parent_ended(self, parent_id, status)
        except Exception as exc:  # noqa: BLE001 - the sweep's status is a courtesy; the run's own is recorded
            print(f"bayesx: warning: the sweep's parent run was not settled ({type(exc).__name__}: {exc})",
                  file=sys.stderr)

    def terminate(self, run_id: str, status: str) -> None:
        retry_locked(self.client.set_terminated, run_id, status)

    def describe(self, run_id: str) -> dict[str, object]:
        """A run as the store holds it, for a script (``bayesx run --json``): its id, status, name, experiment,
        sweep parent, final metrics, the tags that say what it ran, its error, where its files are, and the
        tracking URI to reach it with (a relative SQLite path made absolute, so it holds from any folder)."""
        run = retry_locked(self.client.get_run, run_id)
        tags = run.data.tags
        path = sqlite_path(self.uri)
        return {"run_id": run.info.run_id, "status": run.info.status, "run_name": run.info.run_name,
                "experiment_name": self.experiment_name, "experiment_id": run.info.experiment_id,
                "parent_run_id": tags.get(PARENT_TAG), "metrics": dict(run.data.metrics),
                "tags": {k: tags[k] for k in IDENTITY_TAGS if k in tags}, "error": tags.get(ERROR_TAG),
                "artifact_uri": run.info.artifact_uri,
                "tracking_uri": f"sqlite:///{path.resolve()}" if path is not None else self.uri}


def experiment_runs(uri: str, experiment: str, filter_string: str = "") -> list:
    """The runs of one experiment as MLflow ``Run`` objects (``run.info``, ``run.data.metrics``, ``.params``,
    ``.tags``), newest first, every page; [] where the store has no such experiment. For scripts that read runs
    without importing MLflow themselves (experiments/, the GPU check)."""
    client = MlflowClient(tracking_uri=uri)
    found = retry_locked(client.get_experiment_by_name, experiment)
    if found is None:
        return []
    runs, token = [], None
    while True:
        page = retry_locked(client.search_runs, [found.experiment_id], filter_string, max_results=1000,
                            order_by=["attributes.start_time DESC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def run_artifact(uri: str, run_id: str, name: str, folder: str | Path) -> Path | None:
    """The run's top-level artifact ``name`` downloaded into ``folder``; None where the run has none."""
    client = MlflowClient(tracking_uri=uri)
    if name not in {a.path for a in retry_locked(client.list_artifacts, run_id)}:
        return None
    return Path(retry_locked(client.download_artifacts, run_id, name, str(folder)))


def search_runs(uri: str, experiment: str | None = None) -> pd.DataFrame:
    """All runs of one experiment (or of every experiment) as a DataFrame, newest first."""
    check_store(uri)
    path = sqlite_path(uri)
    if path is not None and not path.is_file():  # reading must not create an empty store
        if experiment:
            raise BayesxError(f"no MLflow store at '{path}', so no experiment '{experiment}'; check tracking.uri")
        return pd.DataFrame()
    check_reachable(uri)
    if path is not None and unwritable_reason(path):  # read-only: a copy is read, without the store's lock
        with tempfile.TemporaryDirectory(prefix="bayesx-store-") as tmp:
            return _search_runs(f"sqlite:///{snapshot(path, Path(tmp))}", experiment, uri)
    if path is not None:
        with store_lock(path):  # not while another process creates the store's tables
            MlflowClient(tracking_uri=uri)
    return _search_runs(uri, experiment, uri)


def _search_runs(uri: str, experiment: str | None, shown: str) -> pd.DataFrame:
    """:func:`search_runs` on a store that exists (``shown``: its URI as the user gave it, for the messages)."""
    client = MlflowClient(tracking_uri=uri)
    try:
        if experiment:
            found = client.get_experiment_by_name(experiment)
            if found is None:
                names = [e.name for e in client.search_experiments()]
                raise BayesxError(f"no experiment named '{experiment}' in {shown}; known: {', '.join(names) or 'none'}")
            ids = [found.experiment_id]
        else:
            ids = [e.experiment_id for e in client.search_experiments()]
        if not ids:
            return pd.DataFrame()
        mlflow.set_tracking_uri(uri)
        return mlflow.search_runs(experiment_ids=ids, order_by=["attributes.start_time DESC"])
    except MlflowException as exc:
        first = str(exc).splitlines()[0]
        raise BayesxError(f"cannot read the MLflow store '{shown}': {first}; check tracking.uri") from exc


def ui_command(uri: str, host: str, port: int, artifact_root: str | None) -> list[str]:
    """The command line that serves the MLflow UI on ``uri`` (a SQLite store this process cannot write: a copy
    of it, :func:`snapshot`, since MLflow's server cannot open a WAL database in a folder it cannot write)."""
    check_store(uri)
    path = sqlite_path(uri)
    reason = unwritable_reason(path) if path is not None and path.is_file() else None
    if reason:
        copy = snapshot(path, Path(tempfile.mkdtemp(prefix="bayesx-ui-")))
        atexit.register(shutil.rmtree, copy.parent, True)
        print(f"bayesx: note: {reason}, so the UI shows a copy of the store made now: what you "
              "change in it is not kept", file=sys.stderr)
        uri = f"sqlite:///{copy}"
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if artifact_root and is_local_store(uri):
        cmd += ["--default-artifact-root", Path(artifact_root).resolve().as_uri()]
    return cmd



@dataclass(frozen=True)
class DeadRun:
    run_id: str
    run_name: str
    reason: str
    status: str = "KILLED"  # what it is marked: KILLED, or FAILED for a sweep's parent whose jobs failed


def dead_runs(df: pd.DataFrame, stale_after_s: float) -> list[DeadRun]:
    """The RUNNING runs among ``df`` (:func:`search_runs`) whose process is gone (:func:`dead_reason`).
    A sweep's parent counts as alive while any of its children is; a dead one whose sweep had a failed job
    (a FAILED child, or a job that failed before it recorded a run) is to be marked FAILED, else KILLED."""
    if df.empty:
        return []
    running = df[df["status"] == "RUNNING"]
    now = time.time()
    out, parents = [], {}
    for _, row in running.iterrows():
        tags = {k[len("tags."):]: v for k, v in row.items() if k.startswith("tags.") and isinstance(v, str)}
        start_ms = int(row["start_time"].timestamp() * 1000)
        reason = dead_reason(tags, start_ms, now, stale_after_s)
        if tags.get("sweep") == "parent":
            parents[row["run_id"]] = (tags.get("mlflow.runName", ""), reason, bool(unrecorded_failures(tags)))
        elif reason:
            out.append(DeadRun(row["run_id"], tags.get("mlflow.runName", ""), reason))
    dead_ids = {d.run_id for d in out}
    parent_col = f"tags.{PARENT_TAG}"
    for run_id, (name, reason, unrecorded) in parents.items():
        children = df[df[parent_col] == run_id] if parent_col in df else df.iloc[:0]
        alive = [c for c in children[children["status"] == "RUNNING"]["run_id"] if c not in dead_ids]
        if reason and not alive:
            failed = unrecorded or (children["status"] == "FAILED").any()
            out.append(DeadRun(run_id, name, reason, "FAILED" if failed else "KILLED"))
    return out


def mark_killed(uri: str, runs: list[DeadRun]) -> None:
    """End the given runs with their status (KILLED; FAILED for a sweep whose jobs failed, which are then
    named in its description), each with a ``killed_reason`` tag."""
    if not runs:
        return
    check_writable(uri, "mark dead runs")
    path = sqlite_path(uri)
    with store_lock(path) if path is not None else contextlib.nullcontext():
        client = MlflowClient(tracking_uri=uri)
    for run in runs:
        retry_locked(client.set_tag, run.run_id, "killed_reason", run.reason)
        if run.status == "FAILED":
            note_failed_jobs(client, run.run_id)
        retry_locked(client.set_terminated, run.run_id, run.status)
