"""The tracker stores a run's record in one call: every part lands where `bayesx compare`, resume and
the UI read it, the run ends with the record's status, and a resumed run is refused when its config
differs (the tracker compares)."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from bayesx.errors import BayesxError
from bayesx.store.record import Artifact, RunRecord, RunStart, Summary
from bayesx.store.tracking import COMPARE_TAG, NOTES_TAG, WARNINGS_TAG, Tracker


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """One store for the file: creating an SQLite store (MLflow's migrations) takes seconds."""
    root = tmp_path_factory.mktemp("records")
    return Tracker(f"sqlite:///{root}/mlflow.db", "records", str(root / "artifacts"))


def opening(name: str, **params) -> RunStart:
    return RunStart(name, {"method": "nuts"}, {"seed": 0, "progress": False, **params}, "seed: 0\n")


def test_a_record_is_stored_whole_and_the_run_ends_with_its_status(tracker, tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    record = RunRecord("KILLED", {"elbo_final": -3.0, "wall_time_s": 2.0},
                       {"elbo": [(1, -9.0), (2, -5.0), (3, -3.0)]}, {"stopped_during": "fit"},
                       (Artifact(tmp_path / "keep.txt", "files"),), (),
                       Summary(("elbo_final",), ("elbo_final", "wall_time_s"), ("a warning",), ("a remark",)),
                       logged_until=1)
    with tracker.run(opening("one")) as run:
        run.store(record)
    stored = MlflowClient(tracking_uri=tracker.uri).get_run(run.run_id)
    assert stored.info.status == "KILLED"  # the record's status, without an exception
    assert stored.data.params["seed"] == "0" and stored.data.metrics["wall_time_s"] == 2.0
    tags = stored.data.tags
    assert (tags[COMPARE_TAG], tags[WARNINGS_TAG], tags[NOTES_TAG]) == ("elbo_final,wall_time_s", "a warning",
                                                                         "a remark")
    assert tags["stopped_during"] == "fit" and tags["host"] and tags["pid"]
    steps = [m.step for m in MlflowClient(tracking_uri=tracker.uri).get_metric_history(run.run_id, "elbo")]
    assert steps == [2, 3]  # step 1 was logged live (the checkpoint's), not twice
    names = {a.path for a in MlflowClient(tracking_uri=tracker.uri).list_artifacts(run.run_id, "files")}
    assert names == {"files/keep.txt"}


def test_an_error_inside_the_block_fails_the_run_whatever_it_stored(tracker):
    """An internal error (not a user's) fails the run with one line, kept as its error, and its traceback."""
    with pytest.raises(BayesxError, match="stopped on an internal error, RuntimeError: after the record") as caught, \
            tracker.run(opening("two")) as run:
        run.store(RunRecord("FINISHED", {"x": 1.0}))
        raise RuntimeError("after the record")
    assert isinstance(caught.value.__cause__, RuntimeError)
    client = MlflowClient(tracking_uri=tracker.uri)
    stored = client.get_run(run.run_id)
    assert stored.info.status == "FAILED" and stored.data.tags["error"] == str(caught.value)
    assert "traceback.txt" in [a.path for a in client.list_artifacts(run.run_id)]


def test_resume_compares_configs_in_the_tracker(tracker, tmp_path):
    with pytest.raises(KeyboardInterrupt), tracker.run(opening("killed", **{"method.num_draws": 100})) as run:
        raise KeyboardInterrupt
    ignored = ("progress",)
    with pytest.raises(BayesxError, match="method.num_draws: 100 there, 200 here"):
        tracker.resume(run.run_id, {"seed": 0, "method.num_draws": 200}, ignored, 600.0, "checkpoint", tmp_path)
    run_id, folder = tracker.resume(run.run_id[:8], {"seed": 0, "progress": True, "method.num_draws": 100},
                                    ignored, 600.0, "checkpoint", tmp_path)
    assert run_id == run.run_id and folder is None  # it saved no checkpoint


def test_find_finished_finds_only_finished_runs_by_tag(tracker):
    with tracker.run(RunStart("ref", {"reference_key": "abc"}, {}, "")) as done:
        pass
    with pytest.raises(KeyboardInterrupt), tracker.run(RunStart("ref2", {"reference_key": "def"}, {}, "")):
        raise KeyboardInterrupt
    assert tracker.find_finished("reference_key", "abc") == done.run_id
    assert tracker.find_finished("reference_key", "def") is None
