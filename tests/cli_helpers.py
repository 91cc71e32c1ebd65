"""Helpers shared by the end-to-end tests: call the CLI in-process, read the MLflow store back."""

from __future__ import annotations

import contextlib
import io
import sys

import pytest
import torch
from mlflow.tracking import MlflowClient

from bayesx.cli.commands import main


def all_runs(uri: str):
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids) if ids else []


def statuses(uri: str) -> list[str]:
    """The statuses of the store's runs, reference posteriors aside: a reference is a run of its own that
    finished (and is reused) whatever becomes of the run that asked for it."""
    return [r.info.status for r in all_runs(uri) if r.data.tags.get("role") != "reference"]


def call(argv: list[str]) -> tuple[int, str, str]:
    """Run ``bayesx argv`` in-process; return (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_threads = sys.argv[:], torch.get_num_threads()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved_argv
        torch.set_num_threads(saved_threads)  # device.num_threads must not leak into other tests
    return code, out.getvalue(), err.getvalue()


def error_line(stderr: str) -> str:
    """The one line of a user error: exactly one non-empty line, ``bayesx: error: ...``, no traceback."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, f"expected exactly one error line on stderr, got:\n{stderr}"
    assert lines[0].startswith("bayesx: error: "), lines[0]
    return lines[0]


def assert_rejected(argv: list[str], uri: str, *needles: str, may_fail_a_run: bool = False) -> str:
    """A bad input: one error line naming the problem (with every needle), exit status 2, and no FINISHED
    or RUNNING run. An error found only once a run is under way (``may_fail_a_run``, e.g. an
    auto-encoder that fails to train after pre-sampling) may leave one FAILED run, and then exits 1
    (a run failed); others leave none."""
    before = statuses(uri)
    code, out, err = call(argv)
    assert code != 0, f"bayesx {' '.join(argv)} succeeded:\n{out}"
    line = error_line(err)
    assert "Traceback" not in out
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"
    after = statuses(uri)
    assert "FINISHED" not in after and "RUNNING" not in after, after
    new = sorted(after)
    for status in before:
        new.remove(status)
    if may_fail_a_run:
        assert new in ([], ["FAILED"]), new
    else:
        assert new == [], "a bad input must be caught before a run is recorded"
    assert code == (1 if new else 2), f"exit status {code} with new runs {new}"
    return line


def run_ok(uri: str, argv: list[str]):
    """Run the CLI in-process; it must finish cleanly; returns the newest run of the store."""
    code, out, err = call(argv)
    assert code == 0, f"bayesx {' '.join(argv)} failed:\n{err}"
    assert "Traceback" not in err and "[FINISHED]" in out, err
    run = max(all_runs(uri), key=lambda r: r.info.start_time)
    assert run.info.status == "FINISHED" and run.info.run_id in out
    return run


def working_store(tmp_path_factory, name: str) -> tuple:
    """A fresh working folder with an MLflow store in it, its tables made and free of runs: (folder, URI)."""
    root = tmp_path_factory.mktemp(name)
    uri = f"sqlite:///{root}/mlflow.db"
    MlflowClient(tracking_uri=uri).search_experiments()  # creates the database
    assert statuses(uri) == []
    return root, uri


def use_store(monkeypatch, root, uri: str) -> tuple:
    """Make ``uri`` the store of in-process CLI calls, run from ``root``; returns (root, uri)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(root)
    return root, uri


def empty_store(root) -> str:
    """A second MLflow store under root, created up front and holding no runs (for bad-input tests)."""
    uri = f"sqlite:///{root}/bad.db"
    MlflowClient(tracking_uri=uri).search_experiments()  # creates the database
    assert statuses(uri) == []
    return uri


@contextlib.contextmanager
def isolated_store(tmp_path_factory, name: str, data_dir: bool = True):
    """A fresh working directory and SQLite MLflow store (and, with data_dir, a $BAYESX_DATA_DIR
    inside it) for one test module; yields (root, tracking URI)."""
    root = tmp_path_factory.mktemp(name)
    uri = f"sqlite:///{root}/mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        if data_dir:
            mp.setenv("BAYESX_DATA_DIR", str(root / "data"))
        mp.chdir(root)
        yield root, uri
