"""A sweep on a real Slurm cluster: the `slurm` launcher preset (hydra-submitit-launcher) submits three
jobs to a one-node cluster started here (tests/slurm_cluster.py), which log to a `bayesx server`
started here. Every job is a Slurm job whose id its run records; `scancel` of the long one ends its
run KILLED and leaves the others FINISHED; resuming it (as a Slurm job too) completes it, and the
sweep's parent run, KILLED with it, ends FINISHED.

Skipped, with the reason, where the cluster cannot start (no Slurm, munge or MariaDB binaries, not
root) or PostgreSQL is missing; `.ci/run` sets BAYESX_REQUIRE_SLURM=1, which makes that a failure."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import slurm_cluster
import tracking_server
from cli_helpers import all_runs

from bayesx.store.checkpoint import FOLDER as CHECKPOINTS
from bayesx.store.tracking import SLURM_JOB_TAG, liveness_tags

JOB = ["method=hmc", "model=gaussian", "method.num_warmup=50", "method.num_steps=5", "checkpoint_every=1000",
       "tracking=server", "tracking.heartbeat_s=2", "progress=false", "plots.n_coords=0"]
SHORT, LONG = ("300", "400"), "8000"  # method.num_draws of the three jobs; the long one is cancelled
SLURM = ["hydra/launcher=slurm", f"hydra.launcher.partition={slurm_cluster.PARTITION}", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=30"]


def why_not() -> str | None:
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return "hydra-submitit-launcher is not installed (pip install 'bayesx[parallel]')"
    return slurm_cluster.why_not() or tracking_server.why_not()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = why_not()
    if reason and os.environ.get("BAYESX_REQUIRE_SLURM") == "1":
        pytest.fail(f"BAYESX_REQUIRE_SLURM=1 but {reason}")
    if reason:
        pytest.skip(reason)
    running = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield running
    running.stop()


def test_a_run_inside_a_slurm_job_records_the_job_id(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert SLURM_JOB_TAG not in liveness_tags()
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert liveness_tags()[SLURM_JOB_TAG] == "4242"


def bayesx(*args: str) -> list[str]:
    return [sys.executable, "-m", "bayesx", *args]


def long_run(url: str, sweep: subprocess.Popen, checkpoints: int, timeout: float = 300.0):
    """The long job's run once it has saved ``checkpoints`` checkpoints, while the sweep still runs."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    deadline = time.monotonic() + timeout
    while True:
        for run in all_runs(url):
            if run.data.params.get("method.num_draws") == LONG:
                saved = client.list_artifacts(run.info.run_id, CHECKPOINTS)
                if sum(a.path.endswith(".pt") for a in saved) >= checkpoints:
                    return run
        assert sweep.poll() is None, "the sweep ended before the long job saved its checkpoints"
        assert time.monotonic() < deadline, f"the long job saved no {checkpoints} checkpoints within {timeout:.0f} s"
        time.sleep(1.0)


def sweep_runs(url: str):
    """The sweep's parent run and its children, by their method.num_draws."""
    runs = all_runs(url)
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert len(parents) == 1
    children = {r.data.params["method.num_draws"]: r for r in runs if r is not parents[0]}
    assert sorted(children) == sorted([*SHORT, LONG])
    assert {r.data.tags["mlflow.parentRunId"] for r in children.values()} == {parents[0].info.run_id}
    return parents[0], children


@pytest.mark.slow
def test_a_sweep_of_slurm_jobs_logs_to_the_server_and_a_cancelled_job_resumes(cluster):
    folder = Path(tempfile.mkdtemp(prefix="bayesx-slurm-", dir="/tmp"))
    env = {k: v for k, v in cluster.env.items() if k != "MLFLOW_TRACKING_URI"}
    with tracking_server.running_server(folder) as url:
        job = [*JOB, f"tracking.uri={url}"]
        with open(folder / "sweep.out", "w") as out:
            sweep = subprocess.Popen(bayesx("run", "-m", *SLURM, *job, f"method.num_draws={','.join([*SHORT, LONG])}"),
                                     cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                cancelled = long_run(url, sweep, checkpoints=2).data.tags[SLURM_JOB_TAG]
                cluster.command("scancel", cancelled)
                sweep.wait(timeout=300)
            finally:
                if sweep.poll() is None:
                    sweep.kill()
        log = (folder / "sweep.out").read_text()
        assert sweep.returncode != 0, log[-3000:]  # the sweep reports the job it lost
        slurm_cluster.wait_for("jobs were still queued", lambda: not cluster.queue(), 120)
        accounted = dict(line.split("|") for line in
                         cluster.command("sacct", "-X", "-n", "-P", "-o", "JobIDRaw,State").splitlines())
        assert accounted[cancelled].startswith("CANCELLED"), accounted

        clean = subprocess.run(bayesx("runs", "clean", "--uri", url), env=env, capture_output=True, text=True,
                               timeout=300)
        assert clean.returncode == 0, clean.stderr[-2000:]
        parent, children = sweep_runs(url)
        assert parent.info.status == "KILLED" and children[LONG].info.status == "KILLED"
        for draws in SHORT:  # the others are unaffected
            assert children[draws].info.status == "FINISHED" and "ess_bulk_min" in children[draws].data.metrics
        job_ids = {r.data.tags[SLURM_JOB_TAG] for r in children.values()}
        assert len(job_ids) == 3 and job_ids <= set(accounted)  # each its own Slurm job

        resumed = subprocess.run(["srun", "--partition", cluster.partition, "--cpus-per-task=1",
                                  *bayesx("run", *job, f"method.num_draws={LONG}",
                                          f"resume={children[LONG].info.run_id}")],
                                 cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        again, children = sweep_runs(url)
        assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"  # the sweep is whole
        assert {r.info.status for r in children.values()} == {"FINISHED"}
        assert children[LONG].data.tags[SLURM_JOB_TAG] not in job_ids  # it finished in a Slurm job of its own
        assert children[LONG].data.metrics["n_grad_evals"] == int(LONG) * 4 * 5  # every draw: 4 chains, 5 steps
    shutil.rmtree(folder, ignore_errors=True)
