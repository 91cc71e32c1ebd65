"""Hydra callback: a multirun sweep is one parent MLflow run with its jobs as child runs.

The parent is opened in ``on_multirun_start`` and its id passed to the jobs through the
environment (so launchers that start new processes see it too). ``on_multirun_end`` closes it
FAILED if any child failed or a job was refused before it recorded a run (each job leaves its outcome
in its output folder, bayesx.run_output), KILLED if one was interrupted, else FINISHED.
"""

from __future__ import annotations

import os

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bayesx.run_output import REJECTED, sweep_objects

PARENT_ENV = "BAYESX_PARENT_RUN_ID"
outcome: dict[str, str] = {}


def _tracker(config: DictConfig):
    from bayesx.tracking import Tracker

    return Tracker(str(config.tracking.uri), str(config.experiment_name), config.tracking.get("artifact_root"))


class SweepParentRun(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        overrides = " ".join(config.hydra.overrides.task)
        tracker = _tracker(config)
        run_id = tracker.start_parent(f"sweep {overrides}"[:250], {"sweep_overrides": overrides, "sweep": "parent",
                                                                  "sweep_dir": str(config.hydra.sweep.dir)})
        os.environ[PARENT_ENV] = run_id
        outcome.clear()
        outcome["parent_run_id"] = run_id
        outcome["sweep_dir"] = str(config.hydra.sweep.dir)  # where the jobs leave their --json objects

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        run_id = os.environ.pop(PARENT_ENV, None)
        if run_id:
            tracker = _tracker(config)
            rejected = [job for job in sweep_objects(config.hydra.sweep.dir, run_id) if job["status"] == REJECTED]
            if outcome.get("failed") or rejected:  # a job failed before it recorded a run (in this process or
                # another, which left its outcome in its folder): the sweep still failed
                from bayesx.sweep_summary import record_sweep_comparison  # the runs that were recorded
                record_sweep_comparison(tracker.client, tracker.uri, run_id, "FAILED")
                tracker.terminate(run_id, "FAILED")
                outcome["status"] = "FAILED"
            else:
                outcome["status"] = tracker.end_parent(run_id)


def objective_value(metrics: dict[str, float], objective: str) -> float:
    """The run's value of ``sweep.objective``, returned to a tuning sweeper; an unknown name is a user error."""
    from bayesx.errors import BayesxError

    if objective not in metrics:
        known = ", ".join(sorted(metrics))
        raise BayesxError(f"sweep.objective={objective} is not a metric of this run; choose one of: {known}")
    return float(metrics[objective])


def abort_parent(config: DictConfig | None, status: str) -> None:
    """Close a still-open parent run (the sweep was interrupted or a job stopped it)."""
    run_id = os.environ.pop(PARENT_ENV, None)
    if run_id and config is not None:
        _tracker(config).terminate(run_id, status)
        outcome["status"] = status
