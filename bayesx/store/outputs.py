"""``bayesx run --json``: one JSON object per run on standard output, everything else on standard error.

A script reads a run from the command's standard output instead of parsing its summary. While the
command runs, standard output is taken from everyone (``json_stdout``): Python's prints (the summary,
Hydra's own lines, MLflow's), progress bars and logging, and at the level of the file descriptor the
processes it starts and native code, all write to standard error; only the run objects reach standard
output, each one line of strict JSON (metrics that are not finite, NaN or infinite, are null).

A single run's object is printed when the run has ended, from the store (``Tracker.describe``): its
status is the store's. A sweep's jobs may run in other processes (joblib, submitit, Ray) whose standard
output is not the command's, so each job writes its object to ``bayesx_run.json`` in its own Hydra
output folder (with or without --json: the sweeping process reads them for the sweep's status and exit
status too) and the sweeping process prints them when the sweep ends, one line per job in job order
(JSON Lines). A job that ended before it recorded a run (a bad value of the sweep) has the status
``REJECTED``, a null ``run_id`` and its ``error``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

ENV = "BAYESX_JSON"  # "1" while `bayesx run --json` runs: read by its jobs, in whatever process they run
JOB_FILE = "bayesx_run.json"
REJECTED = "REJECTED"

_stream: TextIO | None = None  # this process's standard output while json_stdout is active


def requested() -> bool:
    """Whether the running command (or the sweep this job belongs to) was asked for JSON."""
    return os.environ.get(ENV) == "1"


def run_object(description: dict[str, object] | None, overrides: list[str], job: int | None,
               parent_run_id: str | None, error: str | None) -> dict[str, object]:
    """One run as a script reads it: the store's ``description`` of it (None: no run was recorded) with
    the command-line overrides that made it, its job number in a sweep and the error that ended it."""
    run = dict(description or {"run_id": None, "status": REJECTED, "parent_run_id": parent_run_id})
    run["metrics"] = {k: v if finite(v) else None for k, v in run.get("metrics", {}).items()}
    run["error"] = run.get("error") or error
    return {**run, "job": job, "overrides": list(overrides)}


def finite(value: float) -> bool:
    """Finite, and not MLflow's stand-in for infinity: its SQL stores keep +-inf as +-sys.float_info.max."""
    return math.isfinite(value) and abs(value) < sys.float_info.max


def to_line(obj: dict[str, object]) -> str:
    """Strict JSON on one line (a NaN would be an error here, not the non-standard ``NaN``)."""
    return json.dumps(obj, allow_nan=False, default=str)


def emit(obj: dict[str, object]) -> None:
    """Print one run's object on the command's standard output."""
    if _stream is None:
        raise RuntimeError("run_output.emit outside json_stdout")
    _stream.write(to_line(obj) + "\n")
    _stream.flush()


def save_job(obj: dict[str, object], folder: str | Path) -> None:
    """A sweep's job leaves its object in its Hydra output folder, for the sweeping process to print."""
    path = Path(folder) / JOB_FILE
    partial = path.with_suffix(".tmp")
    partial.write_text(to_line(obj) + "\n")
    os.replace(partial, path)  # the sweeping process never reads half a file


def sweep_objects(sweep_dir: str | Path, parent_run_id: str) -> list[dict[str, object]]:
    """The objects the jobs of the sweep ``parent_run_id`` left under ``sweep_dir``, in job order (an
    earlier sweep that shared the folder is left out by its parent run id)."""
    found = []
    for path in Path(sweep_dir).rglob(JOB_FILE):
        with contextlib.suppress(OSError, ValueError):  # a job killed while writing leaves no line, not a crash
            found.append(json.loads(path.read_text()))
    mine = [obj for obj in found if obj.get("parent_run_id") == parent_run_id]
    return sorted(mine, key=lambda obj: (obj.get("job") is None, obj.get("job") or 0))


def _fd_of(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both an OSError and a ValueError
        return None


@contextlib.contextmanager
def json_stdout() -> Iterator[None]:
    """Within the block, standard output holds only what ``emit`` writes: ``sys.stdout`` is standard error,
    and where standard output is a file descriptor (a terminal, a pipe) that descriptor is pointed at
    standard error too, so that child processes and native code cannot write to it either. Jobs see
    ``$BAYESX_JSON`` set."""
    global _stream
    out, err = sys.stdout, sys.stderr
    out.flush()
    fd, err_fd = _fd_of(out), _fd_of(err)
    saved = os.dup(fd) if fd is not None and err_fd is not None else None
    previous_env = os.environ.get(ENV)
    os.environ[ENV] = "1"
    try:
        if saved is None:  # standard output is a Python object (captured in-process): redirect it in Python
            _stream = out
        else:
            os.dup2(err_fd, fd)
            _stream = open(saved, "w", closefd=False, encoding="utf-8")
        with contextlib.redirect_stdout(err):
            yield
    finally:
        for stream in (out, sys.__stdout__, err):  # what was written to the descriptor goes out before it is restored
            if stream is not None:
                stream.flush()
        if saved is not None:
            _stream.close()
            os.dup2(saved, fd)
            os.close(saved)
        _stream = None
        if previous_env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous_env
