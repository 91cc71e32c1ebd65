"""Every experiment script imports (its main is behind a __main__ guard), so a moved module is caught here
rather than when someone runs a benchmark; the peers harness logs a peer's run beside bayesx's sweep."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import all_runs, call, error_line

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "experiments").glob("*.py"))


def load(stem: str):
    script = next(s for s in SCRIPTS if s.stem == stem)
    spec = importlib.util.spec_from_file_location(f"experiment_{stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stem", [s.stem for s in SCRIPTS if s.stem != "densities"])
def test_experiment_script_imports(stem):
    assert callable(getattr(load(stem), "main", None))


def test_peers_reject_a_posterior_they_do_not_write(capsys):
    assert load("peers").main(["--posterior", "model=betabinomial", "--bayesx", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model=logreg" in err and "funnel" in err


def test_a_peer_run_sits_beside_bayesx_runs_in_the_report(tmp_path):
    """A peer's draws (here iid normal draws standing in for a sampler's output) are summarized by bayesx's
    ESS code and logged as a child of the sweep, tagged peer=<name>; `bayesx report` shows it as a row."""
    from bayesx.tracking import Tracker

    peers = load("peers")
    uri = f"sqlite:///{tmp_path}/peers.db"
    tracker = Tracker(uri, "bench")
    parent = tracker.start_parent("peers", {"sweep": "parent", "sweep_overrides": "model=logreg data=digits"})
    post = peers.posterior_from(["model=logreg", "data=digits"])
    draws = np.random.default_rng(0).normal(size=(2, 400, post.dim))
    run_id = peers.log_peer(tracker, parent, "numpyro-nuts", post, peers.PeerRun(2.0, draws, 8000.0, 3.0, 0.0),
                            {"chains": 2, "warmup": 400, "draws": 400, "seed": 0})
    tracker.terminate(parent, "FINISHED")
    run = next(r for r in all_runs(uri) if r.info.run_id == run_id)
    assert run.data.tags["peer"] == "numpyro-nuts" and run.data.tags["mlflow.parentRunId"] == parent
    ess = run.data.metrics["ess_bulk_min"]
    assert 500 < ess < 1000 and run.data.metrics["ess_bulk_min_per_s"] == pytest.approx(ess / 2.0)
    assert 0.0 <= run.data.metrics["test_accuracy"] <= 1.0
    code, out, err = call(["report", "--uri", uri])
    assert code == 0, err
    assert "| numpyro-nuts | logreg | digits | 0 |" in out and "ess_bulk_min_per_s" in out
    code, _, err = call(["report", "--uri", uri, "--experiment", "nope"])
    assert code == 2 and "no experiment named 'nope'" in error_line(err)
