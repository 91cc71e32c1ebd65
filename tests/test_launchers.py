"""Sweeps through Hydra's launcher plugins: parallel processes (joblib), submitit's local executor and
a local Ray instance. Each sweep is one parent run with its jobs as children, every job FINISHED."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from cli_helpers import call, error_line
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from bayesx.cli.launchers import threads_per_job

pytestmark = pytest.mark.slow
JOB = ["method=laplace", "model=gaussian", "progress=false", "plots.n_coords=0"]


def sweep(tmp_path, launcher: list[str], seeds: str):
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}
    proc = subprocess.run([sys.executable, "-m", "bayesx", "run", "-m", *launcher, *JOB, f"seed={seeds}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if r not in parents]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.data.tags["seed"] for r in children) == sorted(seeds.split(","))
    for run in children:
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert "log_evidence" in run.data.metrics
    return children


def test_joblib_runs_jobs_in_parallel_processes_with_a_share_of_the_cores(tmp_path):
    children = sweep(tmp_path, ["hydra/launcher=local_parallel"], "0,1,2,3")
    assert len({r.data.tags["pid"] for r in children}) >= 2  # two worker processes
    expected = str(max(1, (os.cpu_count() or 1) // 2))
    assert {r.data.params["device.num_threads"] for r in children} == {expected}


def test_submitit_local_runs_each_job_in_its_own_process(tmp_path):
    children = sweep(tmp_path, ["hydra/launcher=submitit_local"], "0,1")
    assert len({r.data.tags["pid"] for r in children}) == 2
    assert {r.data.params["device.num_threads"] for r in children} == {"1"}


@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None,
                    reason="hydra-ray-launcher is not installed (pip install 'bayesx[ray]')")
def test_ray_runs_jobs_as_tasks_of_a_local_ray_instance(tmp_path):
    children = sweep(tmp_path, ["hydra/launcher=ray_local"], "0,1")
    assert {r.data.params["device.num_threads"] for r in children} == {"1"}


@pytest.mark.parametrize("preset, module", [("slurm", "hydra_submitit_launcher"), ("ray_local", "hydra_ray_launcher")])
def test_the_cluster_presets_compose_with_their_settings(preset, module):
    """The README's Slurm and Ray recipes: the presets name their plugin and set the CPUs a job gets."""
    from bayesx.cli.config import compose

    if importlib.util.find_spec(f"hydra_plugins.{module}") is None:
        pytest.skip(f"{module} is not installed")
    launcher = compose([f"hydra/launcher={preset}", "hydra.launcher.partition=cpu"] if preset == "slurm"
                       else [f"hydra/launcher={preset}"], with_hydra=True).hydra.launcher
    assert module in launcher._target_
    assert threads_per_job(launcher) == (4 if preset == "slurm" else 1)
    if preset == "slurm":
        assert launcher.partition == "cpu" and launcher.timeout_min == 120


def test_a_launcher_whose_plugin_is_missing_names_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_joblib") else real(name, *a))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    code, out, err = call(["run", "-m", "hydra/launcher=local_parallel", *JOB, "seed=0,1"])
    assert code == 2
    line = error_line(err)
    assert "hydra/launcher=local_parallel needs the Hydra plugin hydra-joblib-launcher" in line
    assert "pip install 'bayesx[parallel]'" in line
    assert not (tmp_path / "mlflow.db").exists()  # nothing recorded


def test_a_plugin_config_hydra_cannot_find_is_explained_with_the_install_command(monkeypatch):
    from bayesx.cli.config import _explain

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_submitit") else real(name, *a))
    message = _explain("In 'hydra/launcher/slurm': Could not find 'hydra/launcher/submitit_slurm'\n\nAvailable ...")
    assert message.startswith("hydra/launcher=submitit_slurm needs the Hydra plugin hydra-submitit-launcher")


@pytest.mark.parametrize("launcher, expected", [
    ({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, None),
    ({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": 2}, "half"),
    ({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": -1}, 1),
    ({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "cpus_per_task": 8}, 8),
    ({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"}, 1),
    ({"_target_": "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher", "ray": {"remote": {}}}, 1),
    ({"_target_": "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher",
      "ray": {"remote": {"num_cpus": 3}}}, 3),
])
def test_threads_per_job(launcher, expected):
    if expected == "half":
        expected = max(1, (os.cpu_count() or 1) // 2)
    assert threads_per_job(OmegaConf.create(launcher)) == expected
