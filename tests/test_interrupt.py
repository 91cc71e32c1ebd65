"""Interrupting ``bayesx run`` (SIGTERM, Ctrl-C): exit status 130, the run is KILLED, never FINISHED
(nor left RUNNING), and it keeps what it had: the warm-up time, and the draws made so far.

The runs are long on purpose (20,000 iterations); each test stops its run after a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from bayesx.errors import RunInterrupted
from bayesx.runner import killed_before_a_record

N_CHAINS, DIGITS_DIM, LONG = 2, 64, 20000


def runs_of(uri: str):
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids) if ids else []


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background shell may have left SIGINT ignored


class LongRun:
    """``python -m bayesx run ...`` in its own session, with output to files and a temporary store."""

    def __init__(self, root: Path, *overrides: str):
        self.root, self.uri = root, f"sqlite:///{root}/mlflow.db"
        self.out, self.err = root / "stdout.txt", root / "stderr.txt"
        MlflowClient(tracking_uri=self.uri).search_experiments()  # create the store now: no race with bayesx
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bayesx", "run", "method=nuts", "data=digits", f"n_chains={N_CHAINS}",
                 f"method.num_draws={LONG}", "device.num_threads=1", *overrides],
                cwd=root, stdout=out, stderr=err, start_new_session=True, preexec_fn=_default_sigint,
                env={**os.environ, "MLFLOW_TRACKING_URI": self.uri})

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"bayesx ended (status {self.proc.returncode}) before {what}:\n{self.stderr()[-3000:]}")
            if ready():
                return
            time.sleep(0.5)
        pytest.fail(f"no {what} after {timeout} s:\n{self.stderr()[-3000:]}")

    def running_run(self):
        runs = runs_of(self.uri)
        return runs[0] if runs and runs[0].info.status == "RUNNING" else None

    def interrupt(self, sig: int) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"bayesx did not stop within 120 s of signal {sig}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def long_run(tmp_path):
    started = []

    def start(*overrides):
        started.append(LongRun(tmp_path, *overrides))
        return started[-1]

    yield start
    for run in started:
        run.kill()


def only_run(uri: str):
    runs = runs_of(uri)
    assert len(runs) == 1, [r.info for r in runs]
    return runs[0]


def check_killed_output(job: LongRun, code: int) -> None:
    stderr = job.stderr()
    assert code == 130, f"exit status {code}:\n{stderr[-3000:]}"
    assert "Traceback" not in stderr and "Traceback" not in job.stdout(), stderr[-3000:]
    assert "bayesx: interrupted" in stderr
    assert "[KILLED]" in job.stdout() and "[FINISHED]" not in job.stdout()


@pytest.mark.slow
def test_sigterm_during_warmup_marks_the_run_killed(long_run):
    job = long_run(f"method.num_warmup={LONG}")
    job.wait_for("RUNNING run in the store", lambda: job.running_run() is not None, timeout=120)
    time.sleep(2.0)
    code = job.interrupt(signal.SIGTERM)
    check_killed_output(job, code)

    run = only_run(job.uri)
    assert run.info.status == "KILLED"
    assert run.info.end_time is not None
    assert run.data.tags["stopped_during"] == "warmup"
    assert run.data.metrics["warmup_time_s"] > 0
    assert run.data.metrics["sampling_time_s"] == 0
    assert run.data.params["method.num_warmup"] == str(LONG)
    artifacts = {a.path for a in MlflowClient(tracking_uri=job.uri).list_artifacts(run.info.run_id)}
    assert "config.yaml" in artifacts and "draws.nc" not in artifacts


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupt_during_sampling_keeps_the_draws(long_run, sig, tmp_path):
    import arviz as az

    job = long_run("method.num_warmup=30", "progress=true")
    job.wait_for("sampling", lambda: "nuts sampling" in job.stderr(), timeout=180)
    time.sleep(2.0)
    code = job.interrupt(sig)
    check_killed_output(job, code)

    run = only_run(job.uri)
    assert run.info.status == "KILLED"
    assert run.data.tags["stopped_during"] == "sampling"
    metrics = run.data.metrics
    assert metrics["warmup_time_s"] > 0 and metrics["sampling_time_s"] > 0
    assert "ess_bulk_min" in metrics and "test_accuracy" in metrics

    client = MlflowClient(tracking_uri=job.uri)
    path = client.download_artifacts(run.info.run_id, "draws.nc", str(tmp_path / "download"))
    idata = az.from_netcdf(path)
    (name,) = list(idata.posterior.data_vars)
    chains, draws, dim = idata.posterior[name].shape
    assert (chains, dim) == (N_CHAINS, DIGITS_DIM)
    assert 0 < draws < LONG, f"kept {draws} draws"
    assert bool(idata.posterior[name].notnull().all())
    assert "plots/trace.png" in {a.path for a in client.list_artifacts(run.info.run_id, "plots")}


@pytest.mark.slow
def test_sigterm_during_a_sweep_kills_the_job_and_the_parent(long_run):
    job = long_run("-m", "seed=0,1", f"method.num_warmup={LONG}", "progress=true")
    job.wait_for("RUNNING job in the store",
                 lambda: any(r.info.status == "RUNNING" and "mlflow.parentRunId" in r.data.tags
                             for r in runs_of(job.uri)), timeout=120)
    # its warm-up under way (a RUNNING run may still be logging its params or compiling its density: see
    # test_an_interrupt_before_the_method_made_anything_still_prints_the_killed_line for that case)
    job.wait_for("warm-up", lambda: "nuts warmup" in job.stderr(), timeout=180)
    time.sleep(2.0)
    code = job.interrupt(signal.SIGTERM)
    check_killed_output(job, code)
    assert "#1 : seed=1" not in job.stdout() + job.stderr(), "the sweep went on after the interrupt"

    runs = runs_of(job.uri)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 2 and len(children) == 1
    assert parent.info.status == "KILLED" and children[0].info.status == "KILLED"
    assert children[0].data.tags["seed"] == "0" and "warmup_time_s" in children[0].data.metrics


class _Run:
    run_id = "0123456789abcdef"

    def __init__(self, store_gone: bool = False):
        self.tags, self.store_gone = {}, store_gone

    def set_tags(self, tags):
        if self.store_gone:
            raise OSError("database is locked")
        self.tags.update(tags)


@pytest.mark.parametrize("store_gone", [False, True], ids=["store", "store-gone"])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RunInterrupted], ids=["Ctrl-C", "SIGTERM"])
def test_an_interrupt_before_the_method_made_anything_still_prints_the_killed_line(capsys, interrupt, store_gone):
    run = _Run(store_gone)
    with pytest.raises(interrupt), killed_before_a_record(run, "nuts-logreg-digits-seed0"):
        raise interrupt()
    out = capsys.readouterr().out
    assert "nuts-logreg-digits-seed0 (run 0123456789abcdef)  [KILLED]" in out
    assert run.tags == ({} if store_gone else {"stopped_during": "setup"})


def test_a_method_that_ends_normally_prints_nothing_from_the_guard(capsys):
    run = _Run()
    with killed_before_a_record(run, "nuts-logreg-digits-seed0"):
        pass
    assert capsys.readouterr().out == "" and run.tags == {}


@pytest.mark.parametrize("uncount", [True, False])
def test_a_stop_lost_in_a_finalizer_is_not_printed_and_its_signal_comes_again(monkeypatch, uncount):
    """A handler's exception raised while a weakref callback ran is 'ignored' by Python (a traceback on standard
    error, CI stop 61, and the stop lost): within the interrupt blocks it is not printed and the same signal is
    sent again (patient_interrupts takes it off its count first, so the handler acts as on the first delivery);
    any other unraisable exception is reported as Python reports it (the control)."""
    import types

    from bayesx.store import checkpoint

    sent, reported = [], []
    monkeypatch.setattr(checkpoint.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: reported.append(unraisable.exc_value))
    seen = checkpoint.Interrupts(count=3, last_signal=signal.SIGTERM)
    with checkpoint.redelivered_when_lost(seen, uncount=uncount):
        sys.unraisablehook(types.SimpleNamespace(exc_value=checkpoint.RecordingStopped("stop"), exc_type=None,
                                                 exc_traceback=None, err_msg=None, object=None))
        time.sleep(20 * checkpoint.REDELIVERY_S)
        assert sent == [(os.getpid(), signal.SIGTERM)] and seen.count == (2 if uncount else 3)
        sys.unraisablehook(types.SimpleNamespace(exc_value=ValueError("other"), exc_type=ValueError,
                                                 exc_traceback=None, err_msg="Exception ignored in", object=None))
    assert [str(e) for e in reported] == ["other"] and len(sent) == 1  # reported as before, not sent again
    assert sys.unraisablehook is not None and sys.unraisablehook(types.SimpleNamespace(exc_value=KeyError())) is None
    assert isinstance(reported[-1], KeyError)  # the previous hook is back after the block
