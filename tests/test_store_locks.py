"""Checking a SQLite store must not drop this process's locks on it: POSIX record locks belong to the process and
the file, so closing ANY descriptor of the database file releases them all. A plain ``open()`` of mlflow.db in
``tracking.not_a_store`` did that while an earlier in-process sweep job's connection was open, and a run of
another process then check-pointed the write-ahead log away under it ("disk I/O error")."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys

import pytest

from bayesx.store.tracking import not_a_store

# another process's attempt to leave WAL mode: SQLite needs every other connection gone for it
LEAVE_WAL = ("import sqlite3, sys\n"
             "db = sqlite3.connect(sys.argv[1], timeout=0)\n"
             "try:\n"
             "    print(db.execute('PRAGMA journal_mode=DELETE').fetchone()[0])\n"
             "except sqlite3.OperationalError as exc:\n"
             "    print(exc)\n")


def other_process_leaves_wal(path) -> str:
    return subprocess.run([sys.executable, "-c", LEAVE_WAL, str(path)], capture_output=True, text=True,
                          timeout=60).stdout.strip()


@pytest.fixture
def held_store(tmp_path):
    """A WAL database with an MLflow table, held open by a connection of this process in a read transaction."""
    path = tmp_path / "mlflow.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE runs (id TEXT)")
        db.commit()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN")
    holder.execute("SELECT count(*) FROM runs").fetchone()
    yield path
    holder.close()


def test_checking_a_held_store_keeps_its_locks(held_store):
    assert not_a_store(held_store) is None
    assert other_process_leaves_wal(held_store) == "database is locked"


def test_negative_control_a_plain_open_drops_them(held_store):
    """What the check used to do: read the header with open() and close it; the lock is gone and the other process
    switches the journal under the open connection."""
    with held_store.open("rb") as handle:
        handle.read(16)
    assert other_process_leaves_wal(held_store) == "delete"


def test_a_file_that_is_no_sqlite_database_is_named(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database at all, just some text that is long enough\n" * 3)
    assert not_a_store(text) == "is not an SQLite database"
    empty = tmp_path / "new.db"
    empty.touch()
    assert not_a_store(empty) is None
