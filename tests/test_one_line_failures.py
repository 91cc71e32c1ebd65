"""Failures that must end in one line with the right exit status (issue 48): an unwritable home, tracking stores
that are not stores or have no room, a seed out of range, a damaged checkpoint, resuming a changed posterior, a
run stopped after its last draw, and a resumed run's wall time."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from cli_helpers import assert_rejected, call, error_line, statuses

QUICK = ["experiment=quick", "model=gaussian", "method.num_warmup=20", "method.num_draws=20", "plots.n_coords=0",
         "device.num_threads=1", "progress=false"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with its tables made, free of runs, and a working folder beside it."""
    root = tmp_path_factory.mktemp("one_line")
    uri = f"sqlite:///{root}/mlflow.db"
    MlflowClient(tracking_uri=uri).search_experiments()
    return root, uri


@pytest.fixture
def env(store, monkeypatch):
    root, uri = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(root)
    return root, uri


def bayesx(args: list[str], cwd: Path, unset: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
    """``python -m bayesx ARGS`` in a process of its own, with ``env`` added to our environment and ``unset`` taken
    out of it."""
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run([sys.executable, "-m", "bayesx", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**environ, **env})


# --- 1. a home that cannot be written ---------------------------------------------------------------
UNWRITABLE_HOME_UNSET = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR", "TORCH_HOME", "BAYESX_CACHE_DIR")


def unwritable_home(tmp_path: Path) -> str:
    """A home that cannot be made: a folder under a file, which stops root too (chmod would not)."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    return str(blocker / "home")


def test_the_libraries_load_silently_where_the_home_cannot_be_written(tmp_path):
    """ArviZ makes ~/.cache/arviz when it is imported (a traceback where it cannot) and matplotlib warns about
    ~/.config/matplotlib: importing bayesx first moves their caches to a temporary folder."""
    home = unwritable_home(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k not in UNWRITABLE_HOME_UNSET}
    result = subprocess.run([sys.executable, "-c", "import bayesx, arviz, matplotlib.pyplot, torch"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, env={**environ, "HOME": home})
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]


@pytest.mark.slow
def test_a_run_works_where_the_home_cannot_be_written(store, tmp_path):
    root, uri = store
    result = bayesx(["run", *QUICK, "experiment_name=home"], root, HOME=unwritable_home(tmp_path),
                    MLFLOW_TRACKING_URI=uri, unset=UNWRITABLE_HOME_UNSET)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "NativeKernelWarning" not in result.stderr, result.stderr[-3000:]
    assert "[FINISHED]" in result.stdout


# --- 6. a seed out of range ---------------------------------------------------------------------------
def test_a_seed_beyond_64_bits_is_refused_naming_its_range(env):
    line = assert_rejected(["run", *QUICK, "seed=99999999999999999999"], env[1], "seed", "99999999999999999999")
    assert "between 0 and 9223372036854775807" in line


# --- 10. a byte-order mark before a CSV's header ------------------------------------------------------
@pytest.mark.parametrize("sep", [",", ";"])
def test_a_byte_order_mark_is_not_part_of_the_first_column_name(tmp_path, sep):
    """A spreadsheet's UTF-8 export starts with a byte-order mark: the label column named first is still 'y'."""
    from bayesx.data.csv import load_csv

    rows = [sep.join(["y", "a", "b"])] + [sep.join([str(i % 2), f"{0.1 * i:.1f}", f"{(-1) ** i * 0.3 * i:.1f}"])
                                          for i in range(1, 21)]
    path = tmp_path / "exported.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(rows).encode() + b"\n")
    data = load_csv(path=str(path), target="y", test_fraction=0.25, seed=0)
    assert data.x_train.shape[1] == 2 and set(data.y_train.tolist()) == {0.0, 1.0}
    assert "target 'y'" in data.description


# --- 2, 3. a tracking URI that names no store -----------------------------------------------------------
def test_an_sqlite_uri_naming_a_folder_is_refused_at_once(env, tmp_path):
    """MLflow retried a folder for about 100 s with 36 warnings, then bayesx called it an internal error."""
    start = time.monotonic()
    line = assert_rejected(["run", *QUICK, f"tracking.uri=sqlite:///{tmp_path}"], env[1], str(tmp_path),
                           "names the folder", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert time.monotonic() - start < 30, line


@pytest.mark.parametrize("what", ["text", "other_database"])
def test_an_sqlite_uri_naming_a_file_that_is_no_store_is_refused(env, tmp_path, what):
    path = tmp_path / "data.db"
    if what == "text":
        path.write_text("x,y\n1,2\n")
        needle = "is not an SQLite database"
    else:
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("CREATE TABLE people (name TEXT)")
            db.commit()
        needle = "not an MLflow store"
    before = path.read_bytes()
    assert_rejected(["run", *QUICK, f"tracking.uri=sqlite:///{path}"], env[1], needle, "sqlite:///mlflow.db")
    assert path.read_bytes() == before  # nothing was added to somebody else's database


@pytest.mark.parametrize("form", ["file:///{}", "{}"])
def test_a_folder_store_is_refused_naming_the_stores_there_are(env, tmp_path, form):
    uri = form.format(tmp_path / "mlruns")
    line = assert_rejected(["run", *QUICK, f"tracking.uri={uri}"], env[1], "folder store", "sqlite:///mlflow.db")
    assert not (tmp_path / "mlruns").exists(), line
