"""A sweep's parent run after one of its killed jobs is resumed: it ends again with its children's
statuses (FINISHED once every job finished), and a parent whose sweep still runs is left alone."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from bayesx.errors import BayesxError
from bayesx.store.record import RunStart
from bayesx.store.tracking import Tracker


def test_a_sweep_whose_killed_job_is_resumed_to_the_end_ends_finished(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ended = []  # what the runner's hook (the sweep's comparison, in bayesx.reports) is handed
    tracker = Tracker(uri, "sweep", str(tmp_path / "artifacts"), parent_ended=lambda t, *args: ended.append(args))
    status = lambda run_id: MlflowClient(tracking_uri=uri).get_run(run_id).info.status  # noqa: E731
    parent = tracker.start_parent("sweep seed=0,1", {"sweep": "parent"})
    job = RunStart("job", {}, {"seed": 0}, "seed: 0\n", parent_run_id=parent)
    with tracker.run(job):
        pass
    with pytest.raises(KeyboardInterrupt), tracker.run(job) as killed:
        raise KeyboardInterrupt
    assert tracker.end_parent(parent) == "KILLED"

    resume = RunStart("job", {}, {}, "", resume_run_id=killed.run_id)
    with pytest.raises(KeyboardInterrupt), tracker.run(resume):  # killed again: the sweep stays KILLED
        raise KeyboardInterrupt
    assert status(parent) == "KILLED" and ended == [(parent, "KILLED")]  # settled again, still KILLED
    with tracker.run(resume):
        pass
    assert status(killed.run_id) == "FINISHED" and status(parent) == "FINISHED"
    assert ended == [(parent, "KILLED"), (parent, "FINISHED")]  # after the parent ended, with its status


def test_a_resumed_job_leaves_a_running_sweep_to_close_itself(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "sweep", str(tmp_path / "artifacts"))
    parent = tracker.start_parent("sweep seed=0,1", {"sweep": "parent"})
    job = RunStart("job", {}, {"seed": 0}, "seed: 0\n", parent_run_id=parent)
    with pytest.raises(KeyboardInterrupt), tracker.run(job) as killed:
        raise KeyboardInterrupt
    with tracker.run(RunStart("job", {}, {}, "", resume_run_id=killed.run_id)):
        pass
    assert MlflowClient(tracking_uri=uri).get_run(parent).info.status == "RUNNING"


def test_a_job_still_running_when_its_sweep_fails_ends_the_sweep_killed(tmp_path):
    """Slurm's scancel: SIGTERM, then SIGKILL after KillWait, which can come before the job's run has recorded
    itself KILLED. The sweep stopped on that job's error (``failed``) with the run still RUNNING: the sweep is
    KILLED, as with a recorded KILLED child (CI stop 62 saw FAILED). Controls: the same still-running child
    when the sweep itself did not fail leaves the status to the others, and a FAILED child still fails it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "sweep", str(tmp_path / "artifacts"))
    client = MlflowClient(tracking_uri=uri)

    def sweep_with(still_running: bool, failed_child: bool) -> str:
        parent = tracker.start_parent("sweep seed=0,1", {"sweep": "parent"})
        with tracker.run(RunStart("job", {}, {"seed": 0}, "seed: 0\n", parent_run_id=parent)):
            pass
        if failed_child:
            with pytest.raises(BayesxError), tracker.run(RunStart("job", {}, {"seed": 2}, "", parent_run_id=parent)):
                raise RuntimeError("the method stopped")
        if still_running:  # a run the SIGKILL left open: no exit of its context, so it stays RUNNING
            run = client.create_run(tracker.experiment_id, tags={"mlflow.parentRunId": parent})
            assert client.get_run(run.info.run_id).info.status == "RUNNING"
        return parent

    assert tracker.end_parent(sweep_with(True, False), failed=True) == "KILLED"
    assert tracker.end_parent(sweep_with(False, False), failed=True) == "FAILED"  # control: nothing stopped
    assert tracker.end_parent(sweep_with(True, True), failed=True) == "FAILED"  # control: a job failed
