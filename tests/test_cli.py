"""End-to-end tests of the ``bayesx`` command: run, sweeps, compare, ui, --cfg/--help, data.

Every test records into a temporary MLflow SQLite store (``MLFLOW_TRACKING_URI``) under a temporary
working directory, and reads the store back with an MlflowClient. Runs are kept tiny (digits, two
chains, a few dozen iterations) so that the whole file takes well under a minute or two.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from cli_helpers import all_runs, call, error_line, isolated_store
from mlflow.tracking import MlflowClient

import bayesx
from bayesx.data import registry

REPO = Path(bayesx.__file__).resolve().parent.parent
METHODS = ("hmc", "nuts", "rwm")
NUM_WARMUP, NUM_DRAWS, N_CHAINS, DIGITS_DIM = 50, 40, 2, 64
# one torch thread: these problems are tiny, and with two threads on two busy cores torch can be 100x slower
ONE_THREAD = "device.num_threads=1"
TINY = ["experiment=quick", "data=digits", f"method.num_warmup={NUM_WARMUP}", f"method.num_draws={NUM_DRAWS}",
        ONE_THREAD]
REQUIRED_METRICS = ("ess_bulk_min", "ess_bulk_median", "ess_tail_min", "rhat_max", "accept_rate", "step_size",
                    "n_grad_evals", "n_divergent", "test_accuracy", "test_lpd", "wall_time_s", "sampling_time_s",
                    "ess_bulk_min_per_s")


# --- helpers ----------------------------------------------------------------------------------------






def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def short_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


# --- one run per method into a shared store ---------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A working directory and MLflow store shared by the tests that read the three method runs."""
    with isolated_store(tmp_path_factory, "cli", data_dir=False) as s:
        yield s


@pytest.fixture(scope="module")
def method_runs(store):
    root, uri = store
    printed = {}
    for method in METHODS:
        code, out, err = call(["run", f"method={method}", *TINY, f"run_name=cli-{method}"])
        assert code == 0, f"bayesx run method={method} failed:\n{err}"
        printed[method] = out
    runs = {r.data.tags["method"]: r for r in all_runs(uri)}
    assert sorted(runs) == sorted(METHODS)
    return runs, printed


@pytest.mark.parametrize("method", METHODS)
def test_run_records_a_finished_run(method, method_runs, store):
    root, uri = store
    runs, printed = method_runs
    run = runs[method]
    assert run.info.status == "FINISHED"
    assert run.info.run_name == f"cli-{method}"
    assert run.info.run_id in printed[method] and "[FINISHED]" in printed[method]

    metrics = run.data.metrics
    missing = [m for m in REQUIRED_METRICS if m not in metrics]
    assert not missing, f"{method}: metrics missing: {missing}"
    assert all(math.isfinite(metrics[m]) for m in REQUIRED_METRICS), metrics
    assert 0.0 <= metrics["accept_rate"] <= 1.0
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    assert metrics["test_lpd"] <= 0.0
    assert metrics["step_size"] > 0 and metrics["n_divergent"] >= 0
    assert metrics["n_grad_evals"] > 0 if method != "rwm" else metrics["n_grad_evals"] >= 0
    assert 0 < metrics["ess_bulk_min"] <= metrics["ess_bulk_median"]
    assert metrics["rhat_max"] >= 0.99
    assert 0 < metrics["sampling_time_s"] < metrics["wall_time_s"]
    assert metrics["ess_bulk_min_per_s"] == pytest.approx(metrics["ess_bulk_min"] / metrics["sampling_time_s"])

    params = run.data.params
    assert params["method.num_draws"] == str(NUM_DRAWS)
    assert params["method.num_warmup"] == str(NUM_WARMUP)
    assert params["n_chains"] == str(N_CHAINS)  # from experiment=quick
    assert params["method._target_"] == f"bayesx.methods.mcmc.{method}.{method.upper()}"
    assert params["data._target_"] == "bayesx.data.digits.load_digits"
    assert params["tracking.uri"] == uri

    tags = run.data.tags
    assert (tags["method"], tags["model"], tags["data"], tags["device"]) == (method, "logreg", "digits", "cpu")
    assert tags["torch_version"] == torch.__version__
    assert tags["git_commit"] == short_commit()
    import platform
    import socket

    import numpy as np

    assert tags["python_version"] == platform.python_version() and tags["numpy_version"] == np.__version__
    assert tags["bayesx_version"] != "unknown" and int(tags["torch_threads"]) >= 1
    assert tags["native_kernels"] == "enabled" and tags["kernels"] in ("native", "pytorch")
    assert tags["host"] == socket.gethostname() and tags["pid"].isdigit() and float(tags["heartbeat"]) > 0


@pytest.mark.parametrize("method", METHODS)
def test_run_logs_config_draws_and_plots(method, method_runs, store, tmp_path):
    import arviz as az

    root, uri = store
    run = method_runs[0][method]
    client = MlflowClient(tracking_uri=uri)
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "draws.nc", "plots"} <= top, top
    assert "plots/trace.png" in {a.path for a in client.list_artifacts(run.info.run_id, "plots")}

    local = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path)))
    config = yaml.safe_load((local / "config.yaml").read_text())
    assert config["method"]["num_draws"] == NUM_DRAWS and config["n_chains"] == N_CHAINS
    assert config["method"]["_target_"] == f"bayesx.methods.mcmc.{method}.{method.upper()}"

    idata = az.from_netcdf(str(local / "draws.nc"))
    (name,) = list(idata.posterior.data_vars)
    assert idata.posterior[name].shape == (N_CHAINS, NUM_DRAWS, DIGITS_DIM)
    assert bool(idata.posterior[name].notnull().all())

    png = (local / "plots" / "trace.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    # the artifacts landed in the working directory's store, not somewhere else
    assert (root / "mlartifacts").is_dir()


# --- sweeps -----------------------------------------------------------------------------------------
@pytest.fixture
def sweep_store(tmp_path, monkeypatch) -> str:
    """A fresh store for one sweep, with the working directory in tmp_path; returns its URI."""
    uri = f"sqlite:///{tmp_path}/sweep.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


def test_sweep_has_a_parent_and_one_child_per_job(sweep_store, tmp_path):
    uri = sweep_store
    code, out, err = call(["run", "-m", "seed=0,1", "experiment=quick", "data=digits", "method=rwm",
                           "method.num_warmup=30", "method.num_draws=30", ONE_THREAD])
    assert code == 0, err

    runs = all_runs(uri)
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert len(parents) == 1, [r.data.tags for r in runs]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert "seed=0,1" in parent.data.tags["sweep_overrides"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2 and len(runs) == 3
    assert sorted(c.data.tags["seed"] for c in children) == ["0", "1"]
    assert all(c.info.status == "FINISHED" for c in children)
    assert all(c.data.tags["method"] == "rwm" and "ess_bulk_min" in c.data.metrics for c in children)
    assert (tmp_path / "multirun").is_dir() and not (tmp_path / "outputs").exists()


# --- compare ----------------------------------------------------------------------------------------
def test_compare_prints_the_runs(method_runs, store):
    runs = method_runs[0]
    code, out, err = call(["compare"])
    assert code == 0, err
    header = out.splitlines()[0].split()
    for column in ("run_id", "status", "method", "ess_bulk_min", "rhat_max", "test_accuracy", "wall_time_s"):
        assert column in header, header
    for method, run in runs.items():
        row = next(ln for ln in out.splitlines() if run.info.run_id[:8] in ln)
        assert f" {method} " in row and "FINISHED" in row


def test_compare_sorts_and_writes_csv(method_runs, store, tmp_path):
    """Sorted by the metric, except that runs whose R-hat > 1.01 or bulk ESS < 100 per chain go last."""
    runs = method_runs[0]
    ess = {r.info.run_id[:8]: r.data.metrics["ess_bulk_min"] for r in runs.values()}
    unreliable = {r.info.run_id[:8]: r.data.metrics["rhat_max"] > 1.01 or r.data.metrics["ess_bulk_min"] < 100 * N_CHAINS
                  for r in runs.values()}
    csv = tmp_path / "table.csv"
    code, out, err = call(["compare", "--sort", "ess_bulk_min", "--csv", str(csv)])
    assert code == 0, err
    assert f"wrote 3 runs to {csv}" in out
    table = pd.read_csv(csv, dtype={"run_id": str}, keep_default_na=False)
    assert len(table) == 3
    assert sorted(table["method"]) == sorted(METHODS)
    assert list(table["run_id"]) == sorted(ess, key=lambda r: (unreliable[r], -ess[r]))
    assert [c != "ok" for c in table["check"]] == [unreliable[r] for r in table["run_id"]]
    if any(unreliable.values()):
        assert "have no reliable ESS or ESS/s; they are sorted last" in out

    code, out, err = call(["compare", "--sort", "ess_bulk_min", "--ascending", "--limit", "2", "--csv", str(csv)])
    assert code == 0, err
    table = pd.read_csv(csv, dtype={"run_id": str})
    assert list(table["run_id"]) == sorted(ess, key=lambda r: (unreliable[r], ess[r]))[:2]


def test_compare_flags_and_sorts_last_a_run_whose_ess_rate_is_meaningless():
    """The issue's case: a short RWM run with ESS 2.4 and R-hat 3.47 has the highest ESS/s, 62, above
    NUTS at 1.7 (R-hat 1.06): both are flagged and a healthy run leads."""
    from bayesx.reports.compare import compare_table

    df = pd.DataFrame({
        "run_id": ["rwm00000", "nuts0000", "good0000", "vi000000"], "status": ["FINISHED"] * 4,
        "tags.method": ["rwm", "nuts", "nuts", "vi"], "tags.n_chains": ["4", "4", "4", "4"],
        "metrics.ess_bulk_min_per_s": [62.0, 1.7, 0.9, float("nan")],
        "metrics.ess_bulk_min": [2.4, 300.0, 900.0, float("nan")],
        "metrics.rhat_max": [3.47, 1.06, 1.003, float("nan")],
        "metrics.elbo_final": [float("nan")] * 3 + [-10.0],
    })
    table = compare_table(df, "ess_bulk_min_per_s", ascending=False)
    assert list(table["run_id"]) == ["good0000", "vi000000", "rwm00000", "nuts0000"]
    assert list(table["check"]) == ["ok", "", "rhat 3.47>1.01,ess 2.4<400", "rhat 1.06>1.01,ess 300<400"]


def test_compare_unknown_sort_metric_is_a_one_line_error(method_runs, store):
    code, out, err = call(["compare", "--sort", "nonexistent"])
    assert code == 2
    line = error_line(err)
    assert "'nonexistent'" in line and "ess_bulk_min" in line


def test_compare_on_an_empty_store_does_not_create_it(tmp_path, monkeypatch):
    db = tmp_path / "none" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    code, out, err = call(["compare"])
    assert code == 0 and "no runs recorded" in out
    assert not db.exists() and not db.parent.exists()


# --- ui ---------------------------------------------------------------------------------------------
def _children(pid: int) -> set[int]:
    """All live descendants of ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the server's processes")
def test_ui_serves_the_store_and_stops_cleanly(method_runs, store):
    root, uri = store
    port = free_port()
    log = root / f"ui-{port}.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "bayesx", "ui", "--port", str(port)], cwd=root,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "MLFLOW_TRACKING_URI": uri})
    server_pids: set[int] = set()
    try:
        status, deadline = None, time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            server_pids |= _children(proc.pid)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    status = response.status
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        output = log.read_text(errors="replace")
        assert status == 200, f"the UI did not answer (exit {proc.poll()}):\n{output[-3000:]}"
        assert f"http://127.0.0.1:{port}" in output.splitlines()[0]
        assert uri in output.splitlines()[0]
        server_pids |= _children(proc.pid)
        assert server_pids, "the MLflow server should run as a child of bayesx ui"

        proc.send_signal(signal.SIGTERM)  # as a service manager would: only bayesx gets the signal
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_running(p) for p in server_pids):
            time.sleep(0.2)
        assert not [p for p in server_pids if _running(p)], "bayesx ui left MLflow server processes running"
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, "the UI port still accepts connections"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in server_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_ui_refuses_a_port_in_use(store):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = call(["ui", "--port", str(port)])
    assert code == 2
    assert f"port {port}" in error_line(err) and "in use" in err


def test_ui_rejects_an_invalid_port(store):
    code, out, err = call(["ui", "--port", "99999"])
    assert code == 2 and "--port" in error_line(err)


# --- --cfg job, --help ------------------------------------------------------------------------------
def test_cfg_job_prints_the_config_and_records_nothing(tmp_path, monkeypatch):
    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.chdir(tmp_path)
    code, out, err = call(["run", "--cfg", "job", "method=nuts", "experiment=quick"])
    assert code == 0, err
    config = yaml.safe_load(out)
    assert config["method"]["_target_"] == "bayesx.methods.mcmc.nuts.NUTS"
    assert "max_tree_depth" in config["method"]
    assert config["n_chains"] == 2 and config["method"]["num_draws"] == 1000  # experiment=quick applies
    # flags may come after overrides too
    code, out, err = call(["run", "method=rwm", "--cfg", "job", "n_chains=3"])
    assert code == 0, err
    config = yaml.safe_load(out)
    assert config["method"]["_target_"] == "bayesx.methods.mcmc.rwm.RWM" and config["n_chains"] == 3
    assert not db.exists() or all_runs(f"sqlite:///{db}") == []
    assert not (tmp_path / "mlartifacts").exists()


def test_a_run_id_that_looks_like_a_number_stays_text(tmp_path, monkeypatch):
    """MLflow run ids are hex: a prefix such as 508306e4 is a float to Hydra, 00001234 an int without its
    zeros. resume= and run_name= values reach the job as the text typed (a CI failure once hung on this)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    code, out, err = call(["run", "--cfg", "job", "method=nuts", "resume=508306e4", "run_name=00001234"])
    assert code == 0, err
    config = yaml.safe_load(out)
    assert config["resume"] == "508306e4" and config["run_name"] == "00001234"
    from bayesx.cli.commands import quote_text_value
    assert quote_text_value("resume='1e5'") == "resume='1e5'"  # quoted already
    assert quote_text_value("run_name=a,b") == "run_name=a,b"  # a sweep stays a sweep
    assert quote_text_value("resume=null") == "resume=null"
    assert quote_text_value("seed=1e5") == "seed=1e5"  # only text keys
    assert quote_text_value("resume=1e5") != "resume=1e5"  # negative control: the bare value is quoted


def test_help_lists_commands_groups_and_choices():
    script = Path(sys.executable).with_name("bayesx")  # the installed entry point, where there is one
    command = [str(script)] if script.exists() else [sys.executable, "-m", "bayesx"]
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for command in ("run", "ui", "compare", "data"):
        assert f"  {command} " in text
    section = text.split("config groups", 1)[1].split("examples:", 1)[0]
    groups = {ln.split()[0]: ln for ln in section.splitlines() if ln.startswith("  ")}
    expected = {"method": ["hmc", "nuts", "rwm"], "model": ["logreg"],
                "data": ["synthetic", "digits", "mnist01", "csv"],
                "device": ["cpu", "cuda"], "tracking": ["sqlite"]}
    for group, choices in expected.items():
        assert group in groups, text
        for choice in choices:
            assert choice in groups[group].replace("*", "").replace(",", " ").split(), (group, choice)
    # the marks are conf/config.yaml's defaults (issue 37: --help marked hmc while the config ran nuts)
    marked = {group: [c.strip().rstrip("*") for c in line.split(None, 1)[1].split(",") if c.strip().endswith("*")]
              for group, line in groups.items()}
    assert marked["method"] == ["nuts"] and marked["model"] == ["logreg"] and marked["data"] == ["synthetic"]


def test_unknown_command_is_a_one_line_error():
    code, out, err = call(["frobnicate"])
    assert code == 2 and "'frobnicate'" in error_line(err)


# --- data -------------------------------------------------------------------------------------------
def test_data_list_shows_every_data_set(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESX_DATA_DIR", str(tmp_path))
    code, out, err = call(["data", "list"])
    assert code == 0, err
    assert f"data cache: {tmp_path}" in out
    rows = {ln.split()[0]: ln for ln in out.splitlines()[2:] if ln.strip()}
    assert set(registry.DATASETS) <= set(rows)
    assert "built-in" in rows["digits"] and "built-in" in rows["synthetic"]
    assert "missing" in rows["mnist"] and str(tmp_path / "mnist") in rows["mnist"]


def test_data_fetch_without_network_fails_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESX_DATA_DIR", str(tmp_path))
    info = registry.DATASETS["mnist"]
    offline = tuple(dataclasses.replace(f, urls=(f"http://127.0.0.1:9/mnist/{f.filename}",)) for f in info.remote_files)
    monkeypatch.setitem(registry.DATASETS, "mnist", dataclasses.replace(info, remote_files=offline))
    code, out, err = call(["data", "fetch", "mnist"])
    assert code == 2
    line = error_line(err)
    assert "download" in line and "mnist" in line and "127.0.0.1:9" in line
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == [], f"a failed download left files behind: {leftovers}"


def test_data_fetch_of_a_built_in_set_needs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESX_DATA_DIR", str(tmp_path))
    code, out, err = call(["data", "fetch", "digits"])
    assert code == 0 and "built in" in out
    code, out, err = call(["data", "fetch", "nosuch"])
    assert code == 2 and "'nosuch'" in error_line(err)


def test_sweep_with_a_bad_job_ends_failed(sweep_store):
    uri = sweep_store
    # only the first value of a sweep is checked up front; the second job fails when it starts
    code, out, err = call(["run", "-m", "n_chains=2,0", "data=digits", "method=rwm", "method.num_warmup=20",
                           "method.num_draws=20", "plots.n_coords=0", ONE_THREAD])
    assert code != 0
    errors = [ln for ln in err.splitlines() if ln.startswith("bayesx: error:")]
    assert "Traceback" not in err and len(errors) == 2, err
    assert "n_chains" in errors[0] and "FAILED" in errors[1]
    runs = all_runs(uri)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert parent.info.status == "FAILED"
    (child,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert child.info.status == "FINISHED" and child.data.tags["n_chains"] == "2"
    # a later command in the same process is not failed by that sweep
    code, out, err = call(["run", "model=gaussian", "method=rwm", "method.num_warmup=10", "method.num_draws=10",
                           "plots.n_coords=0", "save_draws=false", ONE_THREAD])
    assert code == 0 and "[FINISHED]" in out, err
