"""Issue 37, cases 2 and 3: every failure is one line and recorded honestly.

Case 2: a sweep whose job stops on an internal error (a RuntimeError inside a method, mid-sampling; not a
bayesx user error) ends its parent FAILED with the failed jobs named in the parent's description, under the
basic launcher and a process launcher; the job's run is FAILED with one line naming the method and the
exception, its traceback saved with the run; ``bayesx runs clean`` ends a dead sweep whose job failed
FAILED, not KILLED.

Case 3: store faults are one line: a SQLite store or artifact folder on a read-only file system, an unknown
URI scheme; ``bayesx compare`` and ``bayesx ui`` read a read-only store; a reference posterior that cannot
be saved is a warning, and the run that asked for it ends FINISHED.

A read-only file system is made for real: as root (which ignores file modes), the folder is bind-mounted
read-only in a private mount namespace (``unshare -m``) around the command; otherwise its modes are taken
away (``chmod``), which refuses any other user just as a read-only mount does.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import all_runs, call, error_line, isolated_store
from mlflow.tracking import MlflowClient

from bayesx.store.record import RunStart
from bayesx.store.tracking import DESCRIPTION_TAG, FAULT_FILE, TrackedRun, Tracker

ROOT = Path(__file__).resolve().parents[1]
SMALL_RWM = ["method=rwm", "model=gaussian", "method.num_warmup=20", "method.num_draws=40", "method.init=prior",
             "progress=false", "plots.n_coords=0", "device.compile=never"]
FAULTY_METHOD = '''
"""Random-walk Metropolis with internal faults (RuntimeError): its kernel's after 30 steps on 3-d targets, its
check's before the run on 4-d ones."""
from bayesx.kernels import rwm
from bayesx.methods.mcmc.rwm import RWM


class FaultyKernel:
    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(rwm, name)

    def step(self, state, target, params, gen):
        self.calls += 1
        if state.position.shape[-1] == 3 and self.calls > 30:
            raise RuntimeError(f"index 7 is out of bounds at step {self.calls}")
        return rwm.step(state, target, params, gen)


class FaultyRWM(RWM):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.kernel = FaultyKernel()

    def check(self, target, n_chains):
        if target.dim == 4:
            raise RuntimeError("a fault before the run")
        super().check(target, n_chains)
'''


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "failures") as (root, uri):
        yield root, uri


@pytest.fixture
def faulty_method(tmp_path, monkeypatch):
    """The module ``faulty_method`` (FaultyRWM) importable here and in the processes a sweep starts."""
    (tmp_path / "faulty_method.py").write_text(FAULTY_METHOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return "method._target_=faulty_method.FaultyRWM"


def newest_parent(uri: str):
    parents = [r for r in all_runs(uri) if r.data.tags.get("sweep") == "parent"]
    return max(parents, key=lambda r: r.info.start_time)


def check_failed_sweep(uri: str, parent, before_the_run: str = ""):
    """The parent FAILED, naming its job that failed mid-sampling (the 3-d one), and first the one that failed
    ``before_the_run`` where there was one, and not the one that finished."""
    client = MlflowClient(tracking_uri=uri)
    children = [r for r in all_runs(uri) if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    failed = [r for r in children if r.info.status == "FAILED"]
    finished = [r for r in children if r.info.status == "FINISHED"]
    assert parent.info.status == "FAILED" and len(failed) == 1 and len(finished) == 1, (
        parent.info.status, [r.info.status for r in children])
    bad = failed[0]
    assert bad.data.params["model.dim"] == "3" and finished[0].data.params["model.dim"] == "2"
    error = bad.data.tags["error"]
    assert error.startswith("method=rwm stopped on an internal error, RuntimeError: index 7 is out of bounds"), error
    assert FAULT_FILE in [a.path for a in client.list_artifacts(bad.info.run_id)]
    trace = Path(client.download_artifacts(bad.info.run_id, FAULT_FILE)).read_text()
    assert "Traceback" in trace and "faulty_method.py" in trace and "RuntimeError" in trace
    note = parent.data.tags[DESCRIPTION_TAG]
    unrecorded = f"{before_the_run} (REJECTED): method=rwm stopped on an internal error, RuntimeError: a fault " \
                 "before the run; its traceback is " if before_the_run else ""
    assert note.startswith(f"Failed jobs ({2 if before_the_run else 1}): {unrecorded}"), note
    assert f"{bad.info.run_name} (FAILED, run {bad.info.run_id[:8]}): " in note, note
    assert "RuntimeError: index 7 is out of bounds" in note and finished[0].info.run_id[:8] not in note


# --- case 2: the sweep's parent --------------------------------------------------------------------
def test_a_run_stopped_by_an_internal_error_is_one_line_and_failed_with_its_traceback(store, faulty_method,
                                                                                       monkeypatch):
    """One line naming the method and the exception, exit 1, the run FAILED with the line as its error and
    the traceback as its file; BAYESX_DEBUG=1 prints the traceback too. Control: the same method on a 2-d
    target finishes."""
    _, uri = store
    code, out, err = call(["run", *SMALL_RWM, faulty_method, "model.dim=3"])
    line = error_line(err)
    assert code == 1 and "Traceback" not in out
    assert "method=rwm stopped on an internal error, RuntimeError: index 7 is out of bounds at step 31" in line
    assert f"the run's file {FAULT_FILE}" in line
    run = max(all_runs(uri), key=lambda r: r.info.start_time)
    assert run.info.status == "FAILED" and run.data.tags["error"] == line[len("bayesx: error: "):]
    assert FAULT_FILE in [a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)]

    monkeypatch.setenv("BAYESX_DEBUG", "1")
    code, _, err = call(["run", *SMALL_RWM, faulty_method, "model.dim=3"])
    assert code == 1 and "Traceback" in err and err.rstrip().splitlines()[-1].startswith("bayesx: error: method=rwm")

    monkeypatch.delenv("BAYESX_DEBUG")
    code, out, err = call(["run", *SMALL_RWM, faulty_method, "model.dim=2"])
    assert code == 0 and "[FINISHED]" in out, err


def test_a_sweep_whose_job_fails_mid_sampling_ends_its_parent_failed_naming_the_job(store, faulty_method):
    """The basic launcher (jobs in this process): one job fails mid-sampling, one before its run was recorded
    (its traceback is kept in its output folder); the sweep goes on to the job that finishes; the parent ends
    FAILED (it had stayed RUNNING), both failed jobs named in its description; one line each, exit 1."""
    _, uri = store
    code, out, err = call(["run", "-m", *SMALL_RWM, faulty_method, "model.dim=2,3,4"])
    assert code == 1 and "Traceback" not in err + out, err
    errors = [ln for ln in err.splitlines() if ln.startswith("bayesx: error: ")]
    assert len(errors) == 3 and "RuntimeError: index 7 is out of bounds" in errors[0], errors
    assert "RuntimeError: a fault before the run; its traceback is " in errors[1], errors
    kept = Path(errors[1].split("its traceback is ")[1].split(" (a fault")[0])
    assert kept.name == "traceback.txt" and "a fault before the run" in kept.read_text()
    assert errors[2].startswith("bayesx: error: the sweep ended FAILED")
    check_failed_sweep(uri, newest_parent(uri), before_the_run="model.dim=4")


@pytest.mark.slow
def test_a_sweep_of_parallel_processes_whose_job_fails_ends_its_parent_failed(tmp_path, faulty_method):
    """The same under joblib (each job in a worker process): the parent FAILED, the job named."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "BAYESX_COMPILE": "never"}
    proc = subprocess.run([sys.executable, "-m", "bayesx", "run", "-m", "hydra/launcher=local_parallel",
                           "hydra.launcher.n_jobs=2", *SMALL_RWM, faulty_method, "model.dim=2,3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "bayesx: error: the sweep ended FAILED" in proc.stderr
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = newest_parent(uri)
    check_failed_sweep(uri, parent)
    pids = {r.data.tags["pid"] for r in all_runs(uri) if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert parent.data.tags["pid"] not in pids  # the jobs ran in worker processes, not the sweeping one


def dead_pid() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return str(child.pid)


def test_runs_clean_ends_a_dead_sweep_whose_job_failed_failed_and_one_whose_job_was_killed_killed(tmp_path,
                                                                                                 monkeypatch):
    """Two sweeps whose sweeping process died: one with a failed job (FAILED, the job named in the parent's
    description, after what a user wrote there) and the control with a killed job only (KILLED)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracker = Tracker(uri, "sweeps", str(tmp_path / "artifacts"))
    client = MlflowClient(tracking_uri=uri)
    parents = {}
    for name, fault in (("failed", RuntimeError("index 7 is out of bounds")), ("killed", KeyboardInterrupt())):
        parent = tracker.start_parent(f"sweep {name}", {"sweep": "parent"})
        client.set_tag(parent, "pid", dead_pid())
        client.set_tag(parent, DESCRIPTION_TAG, "my notes on this sweep")
        with tracker.run(RunStart(f"job-{name}", {"method": "rwm"}, {"seed": 0}, "seed: 0\n", parent)):
            pass
        with pytest.raises(Exception if name == "failed" else KeyboardInterrupt):
            with tracker.run(RunStart(f"job-{name}-2", {"method": "rwm"}, {"seed": 1}, "seed: 1\n", parent)):
                raise fault
        parents[name] = parent
    code, out, err = call(["runs", "clean"])
    assert code == 0, err
    assert f"marked run {parents['failed'][:8]} (sweep failed) FAILED" in out, out
    assert f"marked run {parents['killed'][:8]} (sweep killed) KILLED" in out, out
    failed, killed = client.get_run(parents["failed"]), client.get_run(parents["killed"])
    assert failed.info.status == "FAILED" and killed.info.status == "KILLED"
    note = failed.data.tags[DESCRIPTION_TAG]
    first, second = note.split("\n\n")
    assert first == "my notes on this sweep" and second.startswith("Failed jobs (1): job-failed-2 (FAILED, run ")
    assert "RuntimeError: index 7 is out of bounds" in second
    assert killed.data.tags[DESCRIPTION_TAG] == "my notes on this sweep"


# --- case 3: store and cache faults ------------------------------------------------------------------
def test_an_unknown_uri_scheme_is_one_line_naming_the_schemes(tmp_path, monkeypatch):
    """`MLFLOW_TRACKING_URI=foo://bar`: one line, exit 2, for a run, a sweep (no job is launched), compare and
    runs clean; nothing is written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "foo://bar")
    for argv in (["run", *SMALL_RWM], ["run", "-m", *SMALL_RWM, "seed=0,1"], ["compare"], ["runs", "clean"]):
        code, out, err = call(argv)
        line = error_line(err)
        assert code == 2 and "'foo://bar'" in line and "scheme 'foo'" in line, line
        for scheme in ("sqlite:///", "http(s)://", "postgresql://"):
            assert scheme in line, line
    assert not (tmp_path / "mlflow.db").exists()


def can_mount_privately() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind / / 2>/dev/null || mount -t tmpfs none /mnt"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def read_only(folders: list[Path], argv: list[str]) -> list[str]:
    """``argv`` as a command that finds ``folders`` read-only: as root, inside a private mount namespace where
    they are bound read-only (root ignores file modes, not a read-only mount); as another user, the folders'
    write permissions are removed here (restore them with :func:`writable_again`)."""
    if os.geteuid() != 0:
        for folder in folders:
            folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
        return argv
    if not can_mount_privately():
        pytest.skip("running as root without the right to mount (unshare -m): a read-only file system cannot "
                    "be made here, and root ignores file modes")
    binds = " && ".join(f"mount --bind '{f}' '{f}' && mount -o remount,bind,ro '{f}'" for f in folders)
    return ["unshare", "-m", "sh", "-c", f'{binds} && cd "$PWD" && exec "$@"', "sh", *argv]


def writable_again(folders: list[Path]) -> None:
    for folder in folders:
        folder.chmod(stat.S_IRWXU)


def bayesx(*args: str) -> list[str]:
    return [sys.executable, "-m", "bayesx", *args]


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr and len(lines) == 1 and lines[0].startswith("bayesx: error: "), proc.stderr
    return lines[0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ui_lists_runs(argv: list[str], port: int, env: dict, cwd: Path) -> list[dict]:
    """Start ``argv`` (bayesx ui), ask its REST API for the runs of experiment 1, stop it."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
                                                 data=json.dumps({"experiment_ids": ["1"]}).encode(),
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return json.load(answer).get("runs", [])
            except OSError:
                time.sleep(1)
        raise AssertionError("the UI did not answer in 240 s")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def laplace_job(database: Path, artifacts: Path) -> tuple[str, dict[str, str], list[str]]:
    """A quick run's tracking URI, environment and overrides, with its store and artifact folder given."""
    uri = f"sqlite:///{database}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "BAYESX_COMPILE": "never", "PYTHONPATH": str(ROOT)}
    job = ["method=laplace", "model=gaussian", "model.dim=2", "progress=false", "plots.n_coords=0",
           f"tracking.artifact_root={artifacts}"]
    return uri, env, job


def test_a_read_only_store_refuses_runs_in_one_line_and_compare_and_ui_read_it(tmp_path, monkeypatch):
    """The store's folder read-only (a read-only file system for root): `bayesx run` is one line, exit 2,
    and records nothing; `bayesx compare` and `bayesx ui` show the run the store holds. Control: the run
    that made the store finished while its folder was writable."""
    folder, work = tmp_path / "store", tmp_path / "work"
    folder.mkdir(), work.mkdir()
    uri, env, job = laplace_job(folder / "mlflow.db", folder / "artifacts")
    monkeypatch.chdir(work)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    code, _, err = call(["run", *job])
    assert code == 0, err
    (finished,) = all_runs(uri)
    before = sorted(p.name for p in folder.iterdir())
    try:
        refused = subprocess.run(read_only([folder], bayesx("run", *job)), cwd=work, env=env, capture_output=True,
                                 text=True, timeout=600)
        line = one_line(refused)
        assert refused.returncode == 2 and f"cannot record runs in the MLflow store '{folder / 'mlflow.db'}'" in line
        assert "read-only file system" in line or "not writable" in line, line

        shown = subprocess.run(read_only([folder], bayesx("compare", "--format", "json")), cwd=work, env=env,
                               capture_output=True, text=True, timeout=600)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-3000:]
        assert [(r["run_id"], r["status"]) for r in json.loads(shown.stdout)] == [(finished.info.run_id, "FINISHED")]

        port = free_port()
        served = ui_lists_runs(read_only([folder], bayesx("ui", "--port", str(port))), port, env, work)
        assert [r["info"]["run_id"] for r in served] == [finished.info.run_id]
    finally:
        writable_again([folder])
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written there (no lock, no journal)
    assert [r.info.status for r in all_runs(uri)] == ["FINISHED"]


def test_a_read_only_artifact_folder_refuses_the_run_in_one_line(tmp_path):
    """The store writable, its experiment's artifact folder read-only: one line before the run, exit 2, and
    no run left RUNNING or FAILED."""
    artifacts, work = tmp_path / "artifacts", tmp_path / "work"
    artifacts.mkdir(), work.mkdir()
    uri, env, job = laplace_job(work / "mlflow.db", artifacts)
    try:
        refused = subprocess.run(read_only([artifacts], bayesx("run", *job)), cwd=work, env=env,
                                 capture_output=True, text=True, timeout=600)
    finally:
        writable_again([artifacts])
    line = one_line(refused)
    assert refused.returncode == 2 and f"cannot store the runs' files in '{artifacts / 'bayesx'}'" in line, line
    assert all_runs(uri) == []


SHIFTED_GAUSSIAN = """
def log_density(theta):
    return -0.5 * ((theta - 1.0) ** 2).sum(-1)
"""


def test_a_reference_that_cannot_be_saved_is_a_warning_and_the_run_finishes(store, tmp_path, monkeypatch):
    """The reference posterior's moments cannot be written to the store (the file system refuses): a warning,
    the reference run FAILED (never taken for a cached one), and the approximate run FINISHED with its error
    against the reference it computed. Control: the next run saves the reference, and the one after reuses it."""
    _, uri = store
    density = tmp_path / "shifted.py"
    density.write_text(SHIFTED_GAUSSIAN)
    argv = ["run", "model=custom", f"model.log_density={density}:log_density", "model.dim=2", "method=pathfinder",
            "reference.num_warmup=60", "reference.num_draws=60", "reference.n_chains=2", "progress=false",
            "plots.n_coords=0", "device.compile=never"]
    real = TrackedRun.log_artifact

    def read_only_reference(self, path, folder=None):
        if folder == "reference":
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(self, path, folder)

    monkeypatch.setattr(TrackedRun, "log_artifact", read_only_reference)
    code, out, err = call(argv)
    assert code == 0 and "Traceback" not in err, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("bayesx: warning: the reference posterior could not")]
    assert len(warnings) == 1 and "Read-only file system" in warnings[0], err
    runs = sorted(all_runs(uri), key=lambda r: r.info.start_time)
    reference, run = runs[-2], runs[-1]
    assert reference.data.tags["role"] == "reference" and reference.info.status == "FAILED"
    assert run.info.status == "FINISHED" and "posterior_mean_err" in run.data.metrics
    assert "not saved in the store" in run.data.tags["evaluation_notes"]
    assert run.data.tags["reference_run_id"] == reference.info.run_id

    monkeypatch.setattr(TrackedRun, "log_artifact", real)
    for computed in (True, False):
        code, out, err = call(argv)
        assert code == 0 and "warning: the reference" not in err, err
        assert ("computed now" in out) == computed and ("reused from the store" in out) != computed, out


def test_running_out_of_memory_mid_run_is_named_as_such_not_as_a_bug():
    """Out of memory once a run is under way (the estimate before it erred low, or another process took the
    memory): the one line says so and how to need less; control: another exception is an internal error."""
    from bayesx.store.tracking import fault_line

    for exc in (MemoryError(), RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                                            "memory: you tried to allocate 80000000000 bytes"),
                RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")):
        line = fault_line(exc, "nuts", "its traceback is traceback.txt")
        assert "ran out of memory" in line and "fewer n_chains" in line and "please report" not in line, line
    assert "internal error" in fault_line(RuntimeError("index out of range"), "nuts", "x")
