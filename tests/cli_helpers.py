"""Helpers shared by the end-to-end tests: call the CLI in-process, read the MLflow store back."""

from __future__ import annotations

import contextlib
import io
import sys

import torch
from mlflow.tracking import MlflowClient

from bayesx.cli import main


def all_runs(uri: str):
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids) if ids else []


def statuses(uri: str) -> list[str]:
    return [r.info.status for r in all_runs(uri)]


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
