"""Output a script can read: ``bayesx run --json`` (one JSON object per run on standard output, JSON
Lines for a sweep, everything human on standard error), ``bayesx compare --format json|csv|markdown``,
and the exit statuses (0 finished, 1 a run failed, 2 bad input).

Standard output is parsed strictly: the whole of it must be JSON (one object, or one per line), so a
stray print from Hydra, MLflow, a progress bar or a child process fails the test. The tests that start
``bayesx`` as a process check this at the level of the file descriptor as well.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from cli_helpers import all_runs, call, error_line, isolated_store
from mlflow.tracking import MlflowClient

from bayesx.store import outputs as run_output

ONE_THREAD = "device.num_threads=1"
# the quick experiment, cut down as tests/test_cli.py does; progress=true: the bars must not reach stdout
QUICK = ["experiment=quick", "data=digits", "method.num_warmup=50", "method.num_draws=40", "progress=true",
         ONE_THREAD]
TINY_SWEEP = ["model=gaussian", "method=rwm", "method.num_warmup=20", "method.num_draws=20", "plots.n_coords=0",
              "save_draws=false", ONE_THREAD]
# SVGD with a step of 1e300 throws the particles to infinity: the run is recorded, then FAILED
FAILING = ["model=gaussian", "method=svgd", "method.lr=1e300", "method.num_steps=50", "method.n_particles=10",
           "reference.enabled=false", "plots.n_coords=0", ONE_THREAD]
RUN_KEYS = {"run_id", "status", "run_name", "experiment_name", "experiment_id", "parent_run_id", "metrics", "tags",
            "error", "artifact_uri", "tracking_uri", "job", "overrides"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "cli_json", data_dir=False) as s:
        yield s


def bayesx(args: list[str], cwd, uri: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``bayesx`` as its own process: its standard output is a real file descriptor (a pipe)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    return subprocess.run([sys.executable, "-m", "bayesx", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def json_lines(out: str) -> list[dict]:
    """Every line of standard output is one JSON object (strict: no NaN, no other text)."""
    assert out.endswith("\n"), repr(out[-200:])
    return [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
            for line in out.splitlines()]


def stored(uri: str, run_id: str):
    return MlflowClient(tracking_uri=uri).get_run(run_id)


# --- bayesx run --json --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_run(store):
    root, uri = store
    proc = bayesx(["run", *QUICK, "--json"], root, uri)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_quick_run_prints_one_object_whose_run_finished_in_the_store(quick_run, store):
    root, uri = store
    (obj,) = json_lines(quick_run.stdout)  # the whole of stdout: one object on one line
    assert set(obj) == RUN_KEYS
    run = stored(uri, obj["run_id"])
    assert obj["status"] == run.info.status == "FINISHED"
    assert obj["run_name"] == run.info.run_name and obj["experiment_id"] == run.info.experiment_id
    assert obj["experiment_name"] == "bayesx" and obj["parent_run_id"] is None and obj["job"] is None
    assert obj["artifact_uri"] == run.info.artifact_uri
    assert obj["tracking_uri"] == f"sqlite:///{root / 'mlflow.db'}"  # absolute: usable from any folder
    assert obj["overrides"] == QUICK
    assert obj["tags"]["method"] == "nuts" and obj["tags"]["data"] == "digits" and obj["tags"]["n_chains"] == "2"
    for name in ("ess_bulk_min", "rhat_max", "test_accuracy", "wall_time_s"):
        assert obj["metrics"][name] == pytest.approx(run.data.metrics[name], rel=1e-12)
    assert obj["error"] is None


def test_the_human_output_goes_to_stderr(quick_run):
    err = quick_run.stderr
    assert "[FINISHED]" in err and "test_accuracy" in err  # the summary
    assert "warmup" in err  # the progress bar (progress=true)
    assert "[FINISHED]" not in quick_run.stdout


def test_a_failed_run_exits_1_with_its_object(store):
    root, uri = store
    code, out, err = call(["run", *FAILING, "--json"])
    assert code == 1, err
    (obj,) = json_lines(out)
    assert obj["status"] == "FAILED" == stored(uri, obj["run_id"]).info.status
    assert "not finite" in obj["error"] and "method.lr" in obj["error"]
    assert obj["metrics"]["n_steps"] < 50  # what the run had when it stopped
    assert "bayesx: error: a gradient of log p is not finite" in err and "[FAILED]" in err


def test_a_failed_run_exits_1_without_json_too(store):
    code, out, err = call(["run", *FAILING])
    assert code == 1
    assert "[FAILED]" in out and "not finite" in error_line(err)


def test_an_inherited_json_variable_does_not_reach_a_run_without_json(store, monkeypatch):
    """$BAYESX_JSON is a sweeping command's word to its own jobs: a `bayesx run` without --json started where it is
    set (a shell that exported it, a job that starts a command) runs and prints its human summary."""
    monkeypatch.setenv(run_output.ENV, "1")
    code, out, err = call(["run", *TINY_SWEEP])
    assert code == 0 and "[FINISHED]" in out, err


@pytest.mark.parametrize("argv, needle", [
    (["method=nosuch"], "unknown method 'nosuch'"),  # refused before Hydra runs
    (["model=gaussian", "method=rwm", "n_chains=0"], "n_chains"),  # refused by the runner, before a run opens
    (["--cfg", "job"], "drop --json"),  # prints a config and runs nothing
], ids=["unknown_method", "bad_value", "with_cfg"])
def test_bad_input_exits_2_with_nothing_on_stdout(store, argv, needle):
    root, uri = store
    before = len(all_runs(uri))
    code, out, err = call(["run", *argv, "--json"])
    assert code == 2 and out == ""
    assert needle in error_line(err)
    assert len(all_runs(uri)) == before


def test_a_sweep_prints_one_line_per_job(store):
    root, uri = store
    code, out, err = call(["run", "-m", "seed=0,1,2", *TINY_SWEEP, "--json"])
    assert code == 0, err
    jobs = json_lines(out)
    assert [j["job"] for j in jobs] == [0, 1, 2]
    assert [j["tags"]["seed"] for j in jobs] == ["0", "1", "2"]
    assert [j["overrides"][0] for j in jobs] == ["seed=0", "seed=1", "seed=2"]
    (parent,) = {j["parent_run_id"] for j in jobs}
    for job in jobs:
        run = stored(uri, job["run_id"])
        assert job["status"] == run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parent
    assert stored(uri, parent).data.tags["sweep"] == "parent"


def test_a_sweep_with_a_rejected_job_exits_1_and_still_has_a_line_per_job(store):
    code, out, err = call(["run", "-m", "n_chains=2,0", *TINY_SWEEP, "--json"])
    assert code == 1
    finished, rejected = json_lines(out)
    assert finished["status"] == "FINISHED" and finished["tags"]["n_chains"] == "2"
    assert rejected["status"] == "REJECTED" and rejected["run_id"] is None and rejected["job"] == 1
    assert "n_chains" in rejected["error"] and rejected["parent_run_id"] == finished["parent_run_id"]


def test_help_documents_json_lines_and_the_exit_statuses(store):
    code, out, err = call(["run", "--help"])
    assert code == 0
    assert "--json" in out and "JSON Lines" in out and "REJECTED" in out and "exit status" in out
    code, out, err = call(["--help"])
    assert code == 0 and "bayesx run --json" in out and "--format json|csv|markdown" in out
    assert "1 a run failed" in out and "2 bad input" in out


# --- the stream: only the objects on standard output ---------------------------------------------------
def test_json_stdout_keeps_the_descriptor_for_the_objects(tmp_path):
    """Python prints, writes to descriptor 1 and child processes all land on stderr; emit on stdout."""
    script = textwrap.dedent("""
        import os, subprocess, sys
        from bayesx.store import outputs as run_output
        with run_output.json_stdout():
            print("a human line")
            os.write(1, b"straight to the descriptor\\n")
            subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
            run_output.emit({"run_id": "abc", "value": 1.5})
        print("after")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"run_id": "abc", "value": 1.5}\nafter\n'
    for line in ("a human line", "straight to the descriptor", "from a child"):
        assert line in proc.stderr


def test_non_finite_metrics_are_null_and_the_line_is_strict_json():
    description = {"run_id": "r", "status": "FINISHED", "parent_run_id": None, "error": None,
                   "metrics": {"a": 1.0, "nan": float("nan"), "inf": float("inf"), "mlflow_inf": -sys.float_info.max}}
    obj = run_output.run_object(description, ["seed=0"], None, None, None)
    assert obj["metrics"] == {"a": 1.0, "nan": None, "inf": None, "mlflow_inf": None}
    assert json.loads(run_output.to_line(obj)) == obj
    with pytest.raises(ValueError):  # the guard: a NaN that slipped through is an error, not the token NaN
        run_output.to_line({"x": float("nan")})
    rejected = run_output.run_object(None, ["n_chains=0"], 1, "parent", "n_chains must be >= 1")
    assert rejected["status"] == "REJECTED" and rejected["run_id"] is None and rejected["parent_run_id"] == "parent"


def test_sweep_objects_are_in_job_order_and_of_this_sweep_only(tmp_path):
    for job, parent in ((10, "p"), (2, "p"), (0, "old")):
        (tmp_path / str(job)).mkdir()
        run_output.save_job({"job": job, "parent_run_id": parent}, tmp_path / str(job))
    assert [o["job"] for o in run_output.sweep_objects(tmp_path, "p")] == [2, 10]


# --- bayesx compare --format -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compared(store, quick_run):
    """The store holds the quick run, the failed runs and the sweeps of the tests above (or some of them)."""
    root, uri = store
    return {r.info.run_id: r for r in all_runs(uri)}


def test_compare_as_json(compared):
    code, out, err = call(["compare", "--format", "json"])
    assert code == 0, err
    rows = json.loads(out)
    assert {row["run_id"] for row in rows} == set(compared)  # whole ids
    for row in rows:
        assert row["status"] == compared[row["run_id"]].info.status
    nuts = [row for row in rows if row["method"] == "nuts"]
    assert nuts and all(row["ess_bulk_min"] == pytest.approx(compared[row["run_id"]].data.metrics["ess_bulk_min"])
                        for row in nuts)


def test_compare_as_csv(compared):
    code, out, err = call(["compare", "--format", "csv", "--sort", "wall_time_s"])
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out), dtype={"run_id": str, "parent": str})
    assert set(table["run_id"]) == set(compared) and len(table) == len(compared)
    assert {"status", "method", "check", "wall_time_s"} <= set(table.columns)


def test_compare_as_markdown(compared):
    code, out, err = call(["compare", "--format", "markdown"])
    assert code == 0, err
    lines = out.splitlines()
    assert all(ln.startswith("|") and ln.endswith("|") for ln in lines), out
    assert lines[0].startswith("| run_id | status |") and set(lines[1]) <= set("|-")
    assert len(lines) == 2 + len(compared)
    assert {ln.split("|")[1].strip() for ln in lines[2:]} == {run_id[:8] for run_id in compared}


def test_compare_default_output_is_unchanged(compared):
    code, out, err = call(["compare"])
    assert code == 0 and out.splitlines()[0].split()[:2] == ["run_id", "status"]
    assert not out.lstrip().startswith(("[", "|"))


def test_compare_formats_on_an_empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/none.db")
    code, out, err = call(["compare", "--format", "json"])
    assert code == 0 and json.loads(out) == [] and "no runs recorded" in err
    code, out, err = call(["compare", "--format", "csv"])
    assert code == 0 and list(pd.read_csv(io.StringIO(out)).columns)[:2] == ["run_id", "status"]


def test_compare_bad_format_and_bad_sort_exit_2(compared):
    code, out, err = call(["compare", "--format", "yaml"])
    assert code == 2 and "invalid choice" in err and out == ""
    code, out, err = call(["compare", "--format", "json", "--sort", "nonexistent"])
    assert code == 2 and out == "" and "'nonexistent'" in error_line(err)
    # issue 37, point 7: a csv into a folder that does not exist, and a limit below 1, were a pandas traceback
    # and a silently shortened table
    code, out, err = call(["compare", "--csv", "/nonexistent/x.csv"])
    assert code == 2 and out == "" and "the folder /nonexistent does not exist" in error_line(err)
    code, out, err = call(["compare", "--limit", "-3"])
    assert code == 2 and out == "" and "--limit must be at least 1, got -3" in error_line(err)


# --- the issue's command, as written ---------------------------------------------------------------------
@pytest.mark.slow
def test_the_issue_pipeline_prints_a_run_id(tmp_path):
    """`bayesx run experiment=quick --json | python -c "...json.load(sys.stdin)['run_id']"` prints a run id."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    reader = "import json,sys; print(json.load(sys.stdin)['run_id'])"
    command = f"{sys.executable} -m bayesx run experiment=quick --json | {sys.executable} -c \"{reader}\""
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "MLFLOW_TRACKING_URI": uri}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = proc.stdout.strip()
    assert len(run_id) == 32 and stored(uri, run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_a_sweep_in_parallel_processes_prints_one_line_per_job(tmp_path):
    """Jobs in joblib's worker processes: their lines come from their files, their prints go to stderr."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = bayesx(["run", "-m", "hydra/launcher=local_parallel", "seed=0,1,2,3", *TINY_SWEEP, "--json"], tmp_path, uri)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = json_lines(proc.stdout)
    assert [j["job"] for j in jobs] == [0, 1, 2, 3]
    assert all(stored(uri, j["run_id"]).info.status == "FINISHED" for j in jobs)
    assert len({stored(uri, j["run_id"]).data.tags["pid"] for j in jobs}) >= 2  # other processes did run them


@pytest.mark.slow
def test_an_interrupted_run_exits_130_with_its_killed_object(tmp_path):
    import signal
    import time

    from test_interrupt import LONG, LongRun

    job = LongRun(tmp_path, f"method.num_warmup={LONG}", "--json")
    try:
        job.wait_for("RUNNING run in the store", lambda: job.running_run() is not None, timeout=120)
        time.sleep(2.0)
        code = job.interrupt(signal.SIGTERM)
    finally:
        job.kill()
    assert code == 130, job.stderr()[-3000:]
    (obj,) = json_lines(job.stdout())
    assert obj["status"] == "KILLED" == stored(job.uri, obj["run_id"]).info.status
    assert "[KILLED]" in job.stderr()


@pytest.mark.slow
def test_a_job_refused_in_another_process_fails_the_sweep_without_json_too(tmp_path):
    """The job's outcome file carries its refusal to the sweeping process: exit 1, the parent FAILED."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = bayesx(["run", "-m", "hydra/launcher=local_parallel", "n_chains=2,0", *TINY_SWEEP], tmp_path, uri)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "n_chains must be an integer >= 1" in proc.stderr and "the sweep ended FAILED" in proc.stderr
    runs = all_runs(uri)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    (child,) = [r for r in runs if r is not parent]
    assert parent.info.status == "FAILED" and child.info.status == "FINISHED"
