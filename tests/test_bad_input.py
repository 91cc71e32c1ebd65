"""Bad input to ``bayesx run`` (and friends): a one-line ``bayesx: error: ...``, a non-zero exit
status, and no run recorded as FINISHED (or left RUNNING) in the MLflow store.

Each bad run also carries tiny settings (digits, a few iterations), so that a check that failed to
fire would end quickly in a FINISHED run, which these tests then report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
from mlflow.tracking import MlflowClient

from cli_helpers import assert_rejected, call, error_line, statuses, use_store, working_store

TINY = ["experiment=quick", "method.num_warmup=10", "method.num_draws=10", "plots.n_coords=0", "device.num_threads=1"]


# --- helpers ----------------------------------------------------------------------------------------






@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """An existing MLflow store free of runs (so a run could be recorded in it) and a working folder."""
    return working_store(tmp_path_factory, "bad")


@pytest.fixture
def env(store, monkeypatch):
    return use_store(monkeypatch, *store)


def write(path, text: str):
    path.write_text(text)
    return path


ROWS = [(0.1 * i, (-1) ** i * 0.3 * i, i % 2) for i in range(1, 21)]  # 20 rows: a, b and the label y


def csv_text(rows=ROWS, header="a,b,y") -> str:
    return header + "\n" + "\n".join(",".join(str(v) for v in row) for row in rows) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """CSV files, each with one thing wrong (and one good file, to check the others fail for their flaw)."""
    d = tmp_path_factory.mktemp("csv")
    out = {
        "good": write(d / "good.csv", csv_text()),
        "no_target": write(d / "no_target.csv", csv_text(header="a,b,label")),
        "labels_012": write(d / "labels.csv", csv_text([(a, b, y + (i % 3 == 0)) for i, (a, b, y) in enumerate(ROWS)])),
        "labels_pm1": write(d / "labels_pm1.csv", csv_text([(a, b, 2 * y - 1) for a, b, y in ROWS])),
        "nan": write(d / "nan.csv", csv_text([(a, "nan" if i == 4 else b, y) for i, (a, b, y) in enumerate(ROWS)])),
        "empty_cell": write(d / "empty_cell.csv",
                            csv_text([(a, "" if i == 7 else b, y) for i, (a, b, y) in enumerate(ROWS)])),
        "inf": write(d / "inf.csv", csv_text([("inf" if i == 3 else a, b, y) for i, (a, b, y) in enumerate(ROWS)])),
        "directory": d / "a_directory.csv",
        "binary": d / "junk.csv",
    }
    out["directory"].mkdir()
    out["binary"].write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16)
    return out




# --- the good file runs (so the failures below are about the flaws) -------------------------------------
def test_good_csv_runs(env, files):
    root, uri = env
    code, out, err = call(["run", "data=csv", f"data.path={files['good']}", "data.target=y", "method=rwm",
                           *TINY, "experiment_name=good"])
    assert code == 0, err
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("good").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["data"] == "csv"
    client.delete_experiment(run.info.experiment_id)  # keep the store free of FINISHED runs for the rest


# --- configuration ------------------------------------------------------------------------------------
def test_unknown_choice(env):
    line = assert_rejected(["run", "method=foo", "data=digits", *TINY], env[1], "method", "'foo'")
    assert "hmc" in line and "nuts" in line and "rwm" in line


def test_unknown_choice_in_a_sweep(env):
    assert_rejected(["run", "-m", "method=hmc,foo", "data=digits", *TINY], env[1], "method", "'foo'")


def test_unknown_key(env):
    assert_rejected(["run", "method.foo=1", "data=digits", *TINY], env[1], "method.foo")


def test_zero_chains(env):
    assert_rejected(["run", "n_chains=0", "data=digits", *TINY], env[1], "n_chains", "0")


def test_negative_step_size(env):
    assert_rejected(["run", "method.step_size=-1", "data=digits", *TINY], env[1], "step_size", "-1")


@pytest.mark.parametrize("method", ["nuts", "rwm"])
def test_zero_step_size(env, method):
    assert_rejected(["run", f"method={method}", "method.step_size=0", "data=digits", *TINY], env[1], "step_size")


@pytest.mark.parametrize("value", ["0", "-1"])
def test_non_positive_prior_scale(env, value):
    assert_rejected(["run", f"model.prior_scale={value}", "data=digits", *TINY], env[1], "prior_scale", value)


@pytest.mark.parametrize("key,value", [("model.prior_scale", "abc"), ("method.num_warmup", "many"),
                                       ("plots.n_coords", "abc")])
def test_text_where_a_number_is_expected(env, key, value):
    assert_rejected(["run", "data=digits", *TINY, f"{key}={value}"], env[1], key, value)  # after TINY: last wins


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu(env):
    assert_rejected(["run", "device=cuda", "data=digits", *TINY], env[1], "cuda", "device=cpu")


def test_unreachable_tracking_server(env):
    # MLflow itself would retry for minutes; bayesx says so at once
    start = time.monotonic()
    line = assert_rejected(["run", "tracking.uri=http://127.0.0.1:9", "data=digits", *TINY], env[1], "127.0.0.1:9")
    assert "reach" in line and time.monotonic() - start < 30


# --- data files ---------------------------------------------------------------------------------------
def run_csv(path, target="y") -> list[str]:
    return ["run", "data=csv", f"data.path={path}", f"data.target={target}", "method=rwm", *TINY]


def test_missing_data_file(env):
    assert_rejected(run_csv("/nonexistent.csv"), env[1], "/nonexistent.csv", "not found")


def test_data_path_not_set(env):
    assert_rejected(["run", "data=csv", "data.target=y", "method=rwm", *TINY], env[1], "data.path")


def test_data_file_is_a_directory(env, files):
    assert_rejected(run_csv(files["directory"]), env[1], "a_directory.csv", "not a file")


def test_data_file_is_binary_junk(env, files):
    assert_rejected(run_csv(files["binary"]), env[1], "junk.csv", "CSV")


def test_target_column_missing(env, files):
    line = assert_rejected(run_csv(files["no_target"], "y"), env[1], "'y'", "no_target.csv")
    assert "label" in line  # lists the columns there are


@pytest.mark.parametrize("name", ["labels_012", "labels_pm1"])
def test_labels_not_0_1(env, files, name):
    assert_rejected(run_csv(files[name]), env[1], "'y'", "0/1")


@pytest.mark.parametrize("name,column", [("nan", "b"), ("empty_cell", "b"), ("inf", "a")])
def test_nan_or_inf_values(env, files, name, column):
    line = assert_rejected(run_csv(files[name]), env[1], files[name].name)
    assert ("NaN" in line or "infinite" in line) and f"columns: {column}" in line


# --- in a real process --------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needle", [(["method=foo"], "method"),
                                         (["n_chains=0", "data=digits"], "n_chains")])
def test_real_process_exit_status_and_stderr(env, argv, needle):
    root, uri = env
    result = subprocess.run([sys.executable, "-m", "bayesx", "run", *argv, *TINY], cwd=root, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "MLFLOW_TRACKING_URI": uri})
    assert result.returncode == 2, result.stderr
    assert needle in error_line(result.stderr)
    assert "Traceback" not in result.stdout
    assert "FINISHED" not in statuses(uri)


def test_added_option_the_method_does_not_take(env):
    line = assert_rejected(["run", "+method.foo=1", "data=digits", *TINY], env[1], "method", "'foo'")
    assert "does not take" in line
