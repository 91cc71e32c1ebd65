"""Hydra callback: a multirun sweep is one parent MLflow run with its jobs as child runs.

The parent is opened in ``on_multirun_start`` and its id passed to the jobs through the
environment (so launchers that start new processes see it too). ``on_multirun_end`` closes it
FAILED if any child failed or a job failed before it recorded a run (each job leaves its outcome
in its output folder, bayesx.store.outputs), KILLED if one was interrupted, else FINISHED; the failed
jobs are named in the parent's description (bayesx.store.tracking.failed_jobs_note), and the sweep's answer (a table
of the runs' errors, costs and reliability, and where the comparison plot is) is printed. A sweep stopped by an
error that escaped its jobs (the launcher's, or an internal one before a job recorded its run) is
closed FAILED by :func:`close_open_parent`, so that no parent is left RUNNING.
"""

from __future__ import annotations

import os

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bayesx.store.outputs import REJECTED, sweep_objects

PARENT_ENV = "BAYESX_PARENT_RUN_ID"
outcome: dict[str, str] = {}
_open: dict[str, DictConfig] = {}  # the config of the sweep whose parent is open in this process


def _tracker(config: DictConfig):
    from bayesx.store.tracking import Tracker

    return Tracker(str(config.tracking.uri), str(config.experiment_name), config.tracking.get("artifact_root"))


class SweepParentRun(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from bayesx.errors import BayesxError

        overrides = " ".join(config.hydra.overrides.task)
        try:
            tracker = _tracker(config)
            run_id = tracker.start_parent(f"sweep {overrides}"[:250], {"sweep_overrides": overrides,
                                                                      "sweep": "parent",
                                                                      "sweep_dir": str(config.hydra.sweep.dir)})
        except BayesxError as exc:  # a store that cannot record the sweep: no job runs (Hydra would only warn
            from bayesx.errors import fail  # of an Exception here and launch every job into the same error)

            fail(str(exc))
        os.environ[PARENT_ENV] = run_id
        outcome.clear()
        outcome["parent_run_id"] = run_id
        outcome["sweep_dir"] = str(config.hydra.sweep.dir)  # where the jobs leave their --json objects
        _open["config"] = config

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        _end_parent(config, failed=bool(outcome.get("failed")))


def _end_parent(config: DictConfig, failed: bool) -> None:
    """End the open parent with its jobs' outcomes (``failed``: the sweep failed whatever they say), then record
    the sweep's comparison on it."""
    from bayesx.reports.sweep_summary import end_sweep
    from bayesx.store.tracking import FailedJob

    run_id = os.environ.pop(PARENT_ENV, None)
    _open.pop("config", None)
    if not run_id:
        return
    jobs = sweep_objects(config.hydra.sweep.dir, run_id)
    shared = set.intersection(*(set(job.get("overrides") or []) for job in jobs)) if len(jobs) > 1 else set()
    unrecorded = [FailedJob(" ".join(o for o in job.get("overrides") or [] if o not in shared)
                            or f"job {job.get('job')}", REJECTED, str(job.get("error") or "no error recorded"))
                  for job in jobs if job["status"] == REJECTED]
    tracker = _tracker(config)
    outcome["status"] = end_sweep(tracker, run_id, unrecorded, failed)
    print_answer(tracker.uri, run_id)


def print_answer(uri: str, run_id: str) -> None:
    """The sweep's answer on the terminal (bayesx.reports.sweep_summary.sweep_answer; standard error under --json, whose
    standard output holds only the runs); a store that fails here is a warning, the sweep's runs are recorded."""
    import sys

    from bayesx.reports.sweep_summary import sweep_answer

    try:
        text = sweep_answer(uri, run_id)
    except Exception as exc:  # noqa: BLE001 - a courtesy, never the sweep's outcome
        print(f"bayesx: warning: the sweep's comparison table was not printed ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return
    if text:
        print("\n" + text, flush=True)


def close_open_parent(interrupted: bool = False) -> None:
    """After a sweep stopped on an error that escaped its jobs (Hydra then skips ``on_multirun_end``): its
    parent, if still open, ends FAILED with the failed jobs it knows of named (KILLED if ``interrupted``)."""
    config = _open.get("config")
    if config is None or not os.environ.get(PARENT_ENV):
        return
    if interrupted:
        abort_parent(config, "KILLED")
    else:
        outcome["failed"] = "yes"
        _end_parent(config, failed=True)


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
    _open.pop("config", None)
    if run_id and config is not None:
        _tracker(config).terminate(run_id, status)
        outcome["status"] = status
