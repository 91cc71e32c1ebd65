"""Hydra's launcher and sweeper plugins as bayesx uses them.

A sweep (``bayesx run -m ...``) runs its jobs through a Hydra launcher: the basic one (one after
another, in-process), ``joblib`` (parallel processes on this machine), ``submitit_local`` /
``submitit_slurm`` (one process per job, locally or on a Slurm cluster) or ``ray`` (tasks on a Ray
cluster, local or remote); ``hydra/sweeper=optuna`` picks the values itself (bayesx.cli.sweep returns
each job's objective). Each plugin is a separate package, in the project's optional extras.

Parallel jobs on one machine must not each start one BLAS/OpenMP thread per core: unless
``device.num_threads`` is set, a job gets ``cores // parallel jobs`` threads (at least one).
"""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig, OmegaConf

from bayesx.memory import usable_cores

JOBLIB = ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher", "parallel")
SUBMITIT = ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher", "parallel")
RAY = ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher", "ray")
OPTUNA = ("hydra_plugins.hydra_optuna_sweeper", "hydra-optuna-sweeper", "parallel")
# (group, choice) -> (the plugin's module, its pip package, the extra of bayesx that holds it); the
# plugins' own choices and bayesx's presets on them (conf/hydra/launcher)
PLUGINS = {
    ("hydra/launcher", "joblib"): JOBLIB, ("hydra/launcher", "local_parallel"): JOBLIB,
    ("hydra/launcher", "submitit_local"): SUBMITIT, ("hydra/launcher", "submitit_slurm"): SUBMITIT,
    ("hydra/launcher", "slurm"): SUBMITIT,
    ("hydra/launcher", "ray"): RAY, ("hydra/launcher", "ray_local"): RAY,
    ("hydra/sweeper", "optuna"): OPTUNA,
}


def missing_plugin(group: str, choice: str) -> str | None:
    """A one-line install hint when ``group=choice`` names a plugin that is not installed, else None."""
    plugin = PLUGINS.get((group, choice))
    if plugin is None:
        return None
    module, package, extra = plugin
    if importlib.util.find_spec(module) is not None:
        return None
    return (f"{group}={choice} needs the Hydra plugin {package}, which is not installed; "
            f"pip install 'bayesx[{extra}]' (or pip install {package})")


def threads_per_job(launcher: DictConfig) -> int | None:
    """Torch threads for one job of a sweep: the CPUs a cluster launcher reserves for it (submitit's
    cpus_per_task, Ray's num_cpus, which defaults to one), else an equal share of this machine's
    cores among the jobs that run at once (joblib's n_jobs; submitit's local executor starts every
    job at once); None for the basic launcher (one job at a time: torch's default)."""
    target = str(launcher.get("_target_", ""))
    reserved = OmegaConf.select(launcher, "cpus_per_task", default=None)
    if reserved:
        return int(reserved)
    if "hydra_ray_launcher" in target:
        return int(OmegaConf.select(launcher, "ray.remote.num_cpus", default=None) or 1)
    cores = usable_cores()
    if target.endswith("JoblibLauncher"):
        n_jobs = launcher.get("n_jobs")
        if n_jobs is None or n_jobs == -1:
            return 1
        parallel = max(1, cores + 1 + n_jobs) if n_jobs < 0 else int(n_jobs)  # joblib: -2 is all cores but one
        return max(1, cores // parallel)
    if "hydra_submitit_launcher" in target:
        return 1
    return None
