"""Tuning with Optuna (hydra/sweeper=optuna): each job returns sweep.objective, every trial is a child
run of the sweep, and the sweeper reports the best trial."""

from __future__ import annotations

import importlib.util
import math

import pytest
from cli_helpers import all_runs, call, error_line, isolated_store

from bayesx.cli.sweep import objective_value

pytestmark = pytest.mark.slow
SMALL = ["method.presample.num_warmup=200", "method.presample.num_draws=400", "method.num_warmup=100",
         "method.num_draws=200", "progress=false", "plots.n_coords=0"]


def test_tune_aehmc_with_three_trials(tmp_path_factory):
    with isolated_store(tmp_path_factory, "tune") as (root, uri):
        code, out, err = call(["run", "experiment=tune_aehmc", "hydra.sweeper.n_trials=3", *SMALL])
        assert code == 0, err
        runs = all_runs(uri)
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    references = [r for r in runs if r.data.tags.get("role") == "reference"]  # AE-HMC's NUTS reference, made once
    trials = [r for r in runs if r not in parents and r not in references]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED" and len(references) == 1
    assert len(trials) == 3 and all(r.info.status == "FINISHED" for r in trials)
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in trials)
    assert all(r.data.tags["method"] == "aehmc" and r.data.tags["data"] == "digits" for r in trials)
    values = {r.data.params["method.latent_dim"] + "/" + r.data.params["method.num_steps"] for r in trials}
    assert len(values) >= 2  # the sweeper chose the settings
    best = max(r.data.metrics["ess_bulk_min_per_s"] for r in trials)
    reported = float(out.split("Best value:")[-1].split()[0]) if "Best value:" in out else None
    if reported is None:  # Hydra logs to stderr in some setups
        reported = float(err.split("Best value:")[-1].split()[0])
    assert math.isclose(reported, best, rel_tol=1e-9)


def test_objective_value_names_the_choices():
    assert objective_value({"a": 1.0, "b": 2.0}, "b") == 2.0
    from bayesx.errors import BayesxError

    with pytest.raises(BayesxError, match=r"sweep.objective=c is not a metric of this run; choose one of: a, b"):
        objective_value({"a": 1.0, "b": 2.0}, "c")


def test_a_preset_whose_sweeper_is_missing_names_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_optuna") else real(name, *a))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    code, out, err = call(["run", "experiment=tune_aehmc", *SMALL])
    assert code == 2
    line = error_line(err)
    assert "hydra-optuna-sweeper" in line and "pip install 'bayesx[parallel]'" in line


def test_the_readme_recipe_tunes_a_learning_rate_on_an_interval(tmp_path_factory):
    """An interval search space on the command line (only a tuner can sample it) passes bayesx's own
    override check and reaches the sweeper: 2 trials with different learning rates in the interval."""
    with isolated_store(tmp_path_factory, "tune_interval") as (root, uri):
        code, out, err = call(["run", "-m", "hydra/sweeper=optuna", "sweep.objective=elbo_final",
                               "hydra.sweeper.direction=maximize", "hydra.sweeper.n_trials=2",
                               "method.lr=tag(log,interval(0.001,0.3))", "method=vi", "data=digits",
                               "method.num_steps=200", "progress=false"])
        assert code == 0, err
        trials = [r for r in all_runs(uri) if r.data.tags.get("sweep") != "parent"
                  and r.data.tags.get("role") != "reference"]
    rates = {float(r.data.params["method.lr"]) for r in trials}
    assert len(trials) == 2 and len(rates) == 2 and all(0.001 <= lr <= 0.3 for lr in rates)
