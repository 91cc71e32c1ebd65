"""Runs that die without a word (SIGKILL): they keep the draws they checkpointed, and `bayesx runs
clean` / `bayesx compare` end them KILLED, never a live run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import all_runs, call
from mlflow.tracking import MlflowClient

from bayesx.store import checkpoint
from bayesx.store.tracking import HEARTBEAT_TAG, HOST_TAG, PID_TAG, dead_reason

pytestmark = pytest.mark.slow

LONG_RUN = ["method=hmc", "data=digits", "method.num_warmup=50", "method.num_draws=1000000", "method.num_steps=5",
            "checkpoint_every=40", "tracking.heartbeat_s=1", "progress=false", "plots.n_coords=0"]


def start(tmp_path: Path, seed: int, argv: list[str] | None = None) -> subprocess.Popen:
    """``bayesx run`` in a child working in tmp_path (store: tmp_path/mlflow.db); its standard error goes to
    tmp_path/stderr-<seed>.txt, which a failed wait quotes. Without ``argv``: the long run, on one thread; with it,
    on this process's threads (a resumed run's draws are compared with an in-process run's)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}
    if argv is None:
        argv, env["OMP_NUM_THREADS"] = [*LONG_RUN, f"seed={seed}"], "1"
    with open(tmp_path / f"stderr-{seed}.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "bayesx", "run", *argv], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    proc.stderr_file = tmp_path / f"stderr-{seed}.txt"
    return proc


def why_it_ended(proc: subprocess.Popen) -> str:
    """The exit status and the last lines of a child's standard error."""
    tail = proc.stderr_file.read_text(errors="replace").strip().splitlines()[-15:]
    return f"exit status {proc.returncode}; its standard error ends:\n" + "\n".join(tail)


def wait_for_checkpoints(client: MlflowClient, seed: int, n: int, proc: subprocess.Popen, timeout: float = 180.0):
    """The run with this seed once it has saved ``n`` complete checkpoints (a state file each), while
    ``proc`` still runs."""
    deadline = time.monotonic() + timeout
    while True:
        for run in client.search_runs([e.experiment_id for e in client.search_experiments()]):
            if run.data.tags.get("seed") == str(seed):
                saved = client.list_artifacts(run.info.run_id, checkpoint.FOLDER)
                if sum(a.path.endswith(".pt") for a in saved) >= n:
                    return run
        assert proc.poll() is None, f"the run with seed {seed} ended before {n} checkpoints: {why_it_ended(proc)}"
        assert time.monotonic() < deadline, f"no run with seed {seed} saved {n} checkpoints within {timeout} s"
        time.sleep(0.2)


def new_store(tmp_path: Path) -> tuple[str, MlflowClient]:
    """tmp_path/mlflow.db created now, before any child opens it, and a client of it: a client that creates the
    tables while a child's bayesx does the same (under its own lock, which MLflow's client does not take) lost that
    race in CI once, and the child exited 1."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    client.search_experiments()
    return uri, client


def test_sigkilled_run_keeps_its_draws_and_is_marked_killed(tmp_path, monkeypatch):
    uri, client = new_store(tmp_path)
    victim, survivor = start(tmp_path, 0), start(tmp_path, 1)
    try:
        killed = wait_for_checkpoints(client, 0, 2, victim)
        alive = wait_for_checkpoints(client, 1, 1, survivor)
        assert killed.data.tags[PID_TAG] == str(victim.pid) and killed.data.tags[HOST_TAG]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        assert client.get_run(killed.info.run_id).info.status == "RUNNING"  # nobody closed it

        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        code, out, err = call(["runs", "clean", "--dry-run"])
        assert code == 0 and f"would mark run {killed.info.run_id[:8]}" in out
        assert client.get_run(killed.info.run_id).info.status == "RUNNING"
        code, out, err = call(["runs", "clean"])
        assert code == 0, err
        assert f"marked run {killed.info.run_id[:8]}" in out and f"process {victim.pid}" in out
        assert alive.info.run_id[:8] not in out
        after = client.get_run(killed.info.run_id)
        assert after.info.status == "KILLED" and "is gone" in after.data.tags["killed_reason"]
        assert client.get_run(alive.info.run_id).info.status == "RUNNING"  # a live run is never touched

        folder = Path(client.download_artifacts(killed.info.run_id, checkpoint.FOLDER, str(tmp_path / "dl")))
        draws = checkpoint.load_draws(folder)
        assert draws.shape[0] == 4 and draws.shape[1] >= 80 and draws.shape[2] == 64
        assert draws.std(axis=1).min() > 0  # real, moving chains

        beat = float(client.get_run(alive.info.run_id).data.tags[HEARTBEAT_TAG])
        assert time.time() - beat < 30  # the survivor's heartbeat is fresh
    finally:
        for proc in (victim, survivor):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
    statuses = {r.info.run_id: r.info.status for r in all_runs(uri)}
    assert statuses[alive.info.run_id] == "KILLED"  # SIGTERM: closed by the run itself


def test_compare_marks_dead_runs_and_says_so(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("bayesx")
    dead = client.create_run(exp, run_name="ghost", tags={HOST_TAG: "elsewhere", PID_TAG: "1",
                                                          HEARTBEAT_TAG: f"{time.time() - 3600:.0f}"})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    code, out, err = call(["compare"])
    assert code == 0, err
    assert f"marked run {dead.info.run_id[:8]} (ghost) KILLED: no heartbeat from elsewhere" in out
    assert client.get_run(dead.info.run_id).info.status == "KILLED"


def test_dead_reason():
    now = 10_000.0
    here = {HOST_TAG: "me", PID_TAG: "42", HEARTBEAT_TAG: "0"}
    # on this host the pid decides, however old the heartbeat: a live process is never dead
    assert dead_reason(here, 0, now, 60, host="me", alive=lambda pid: True) is None
    assert "process 42 on me is gone" in dead_reason(here, 0, now, 60, host="me", alive=lambda pid: False)
    # elsewhere, the heartbeat's age decides
    there = {HOST_TAG: "node7", PID_TAG: "42", HEARTBEAT_TAG: f"{now - 30}"}
    assert dead_reason(there, 0, now, 60, host="me") is None
    assert "no heartbeat from node7 for 90 s" in dead_reason({**there, HEARTBEAT_TAG: f"{now - 90}"}, 0, now, 60,
                                                              host="me")
    # a run from before heartbeats: its start time stands in
    assert dead_reason({}, int((now - 30) * 1000), now, 60, host="me") is None
    assert "unknown host" in dead_reason({}, int((now - 900) * 1000), now, 60, host="me")


def test_checkpoint_chunks_join_in_order_and_stop_at_a_gap(tmp_path):
    import numpy as np
    import torch

    saved = []
    ckpt = checkpoint.RunCheckpoint(every=3, save=lambda p: saved.append(p.read_bytes()) or
                                     (tmp_path / "run" / p.name).write_bytes(saved[-1]), scratch=tmp_path)
    (tmp_path / "run").mkdir()
    kept = []
    for i in range(8):
        kept.append(torch.full((2, 1), float(i)))
        ckpt.update(torch.stack(kept, dim=1))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["draws_0000000-0000003.npy",
                                                                    "draws_0000003-0000006.npy"]
    kept.append(torch.full((2, 1), 8.0))
    ckpt.update(torch.stack(kept, dim=1))
    draws = checkpoint.load_draws(tmp_path / "run")
    assert np.array_equal(draws[0, :, 0], np.arange(9.0))
    (tmp_path / "run" / "draws_0000003-0000006.npy").unlink()
    assert checkpoint.load_draws(tmp_path / "run").shape[1] == 3  # up to the gap


RESUMABLE = ["method=hmc", "method.num_warmup=100", "method.num_draws=1500", "method.num_steps=10",
             "checkpoint_every=200", "seed=3", "progress=false", "plots.n_coords=0"]


def killed_after_checkpoints(argv: list[str], tmp_path: Path, monkeypatch, seed: int, checkpoints: int = 2):
    """``bayesx run ARGV`` in a child (store: tmp_path/mlflow.db), SIGKILLed once ``checkpoints`` checkpoints of its
    draws are stored; then this process works in tmp_path on that store. Returns (the killed run's id, the store's
    client)."""
    uri, client = new_store(tmp_path)
    victim = start(tmp_path, seed, argv)
    try:
        run_id = wait_for_checkpoints(client, seed, checkpoints, victim).info.run_id
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return run_id, client


def test_a_killed_run_resumes_into_the_same_run_with_the_same_draws(tmp_path, monkeypatch):
    """SIGKILL after two checkpoints, then resume=<id>: the run ends FINISHED under its own id, and its
    draws equal those of the same command run without interruption (same seed stream)."""
    run_id, client = killed_after_checkpoints(RESUMABLE, tmp_path, monkeypatch, seed=3)

    code, _, err = call(["run", *RESUMABLE, "method.num_steps=11", f"resume={run_id}"])
    assert code == 2 and "this command's config differs from the run's (method.num_steps: 10 there, 11 here)" in err
    code, _, err = call(["run", *RESUMABLE, "resume=ffffffffffff"])
    assert code == 2 and "resume=ffffffffffff: no run with that id" in err
    code, _, err = call(["run", "method=vi", "progress=false", f"resume={run_id}"])
    assert code == 2 and "method=vi cannot resume" in err

    code, out, err = call(["run", *RESUMABLE, f"resume={run_id[:8]}"])
    assert code == 0, err
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED" and int(resumed.data.tags["resumed_at_draw"]) >= 400
    assert client.list_artifacts(run_id, checkpoint.FOLDER) == []  # folded into draws.nc
    code, out, err = call(["run", *RESUMABLE, "run_name=uninterrupted"])
    assert code == 0, err
    reference = next(r for r in client.search_runs([resumed.info.experiment_id])
                     if r.data.tags.get("mlflow.runName") == "uninterrupted")
    import arviz as az

    def draws(rid):
        return az.from_netcdf(client.download_artifacts(rid, "draws.nc", str(tmp_path / rid))).posterior["beta"].values

    np.testing.assert_allclose(draws(run_id), draws(reference.info.run_id), rtol=1e-12, atol=1e-12)
    assert resumed.data.metrics["ess_bulk_min"] == pytest.approx(reference.data.metrics["ess_bulk_min"])

    code, _, err = call(["run", *RESUMABLE, f"resume={run_id}"])
    assert code == 2 and "that run FINISHED, so there is nothing to resume" in err


DIES_AT_EPOCH_2 = """
import os, signal, sys
from bayesx.store import checkpoint
saved_epoch = checkpoint.RunCheckpoint.epoch
def epoch_then_die(self, epoch, state, metrics):
    saved_epoch(self, epoch, state, metrics)
    if epoch == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # killed right after epoch 2 is saved: no clean-up runs
checkpoint.RunCheckpoint.epoch = epoch_then_die
from bayesx.cli.commands import main
sys.exit(main(sys.argv[1:]))
"""
VAE = ["model=vae", "method=vae", "method.epochs=4", "data.n_train=256", "data.n_test=32", "method.eval.k=3",
       "device.num_threads=1", "progress=false"]


def test_a_vae_killed_after_epoch_two_resumes_with_its_metric_history(tmp_path, monkeypatch):
    """The process is SIGKILLed right after saving epoch 2 (by itself, so the moment is exact): the run keeps train_elbo at
    steps 1-2; resume=<id> trains epochs 3-4 into the same run, and its history and result equal an
    uninterrupted run's."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}
    died = subprocess.run([sys.executable, "-c", DIES_AT_EPOCH_2, "run", *VAE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    run_id = run.info.run_id
    assert run.info.status == "RUNNING"
    assert [m.step for m in client.get_metric_history(run_id, "train_elbo")] == [1, 2]  # logged as it came

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    code, out, err = call(["run", *VAE, f"resume={run_id}"])
    assert code == 0, err
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED" and resumed.data.tags["resumed_at_epoch"] == "2"
    history = client.get_metric_history(run_id, "train_elbo")
    assert [m.step for m in history] == [1, 2, 3, 4]  # continued at the right step, no duplicates

    code, out, err = call(["run", *VAE, "run_name=uninterrupted"])
    assert code == 0, err
    reference = next(r for r in client.search_runs([resumed.info.experiment_id])
                     if r.data.tags.get("mlflow.runName") == "uninterrupted")
    expected = [m.value for m in client.get_metric_history(reference.info.run_id, "train_elbo")]
    assert [m.value for m in history] == pytest.approx(expected, rel=1e-6)
    assert resumed.data.metrics["test_nll"] == pytest.approx(reference.data.metrics["test_nll"], rel=1e-6)
