"""End-to-end tests of ``bayesx run method=aehmc`` (and ``pcahmc``): HMC pre-sampling -> auto-encoder
training -> HMC in the latent space, recorded in MLflow with the error against a cached NUTS reference.

Every test records into a temporary MLflow SQLite store (``MLFLOW_TRACKING_URI``) under a temporary
working directory, with the reference cache in a temporary ``$BAYESX_DATA_DIR``. Runs are kept tiny
(digits, two chains, a few hundred pre-samples, ten leapfrog steps) so that the file takes well under
a minute on two cores.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from cli_helpers import all_runs, assert_rejected, call, isolated_store
from mlflow.tracking import MlflowClient

from bayesx.kernels import backend

DIGITS_DIM, N_CHAINS, NUM_DRAWS = 64, 2, 100
# one torch thread: these problems are tiny, and with two threads on two busy cores torch can be 100x slower
ONE_THREAD = "device.num_threads=1"
SMALL = [ONE_THREAD, "progress=false", f"n_chains={N_CHAINS}", "method.presample.num_warmup=100",
         "method.presample.num_draws=200", "method.num_warmup=50", f"method.num_draws={NUM_DRAWS}",
         "method.num_steps=10", "reference.num_warmup=100", "reference.num_draws=100", "reference.n_chains=2"]
AEHMC = ["run", "method=aehmc", "data=digits", *SMALL]
REQUIRED_METRICS = ("presample_time_s", "train_time_s", "sampling_time_s", "warmup_time_s", "latent_dim", "recon_err",
                    "accept_rate", "ess_bulk_min", "test_accuracy", "posterior_mean_err", "posterior_sd_err")
REQUIRED_TAGS = ("ae", "volume_correction", "latent_dim_choice", "reference_run_id")


# --- helpers ----------------------------------------------------------------------------------------
def finished(uri: str, code: int, out: str, err: str, argv: list[str]):
    """The one run a successful ``bayesx run`` just recorded (the newest), checked to be FINISHED."""
    assert code == 0, f"bayesx {' '.join(argv)} failed:\n{err}"
    assert "Traceback" not in err and "[FINISHED]" in out, err
    run = max(all_runs(uri), key=lambda r: r.info.start_time)
    assert run.info.status == "FINISHED" and run.info.run_id in out
    return run


def run_ok(uri: str, argv: list[str]):
    return finished(uri, *call(argv), argv)


def artifact_paths(uri: str, run, folder: str | None = None) -> set[str]:
    return {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id, folder)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A working directory, an MLflow store and a reference cache ($BAYESX_DATA_DIR), for this file only."""
    with isolated_store(tmp_path_factory, "aehmc") as s:
        yield s


# --- the default AE-HMC run, twice: the second reads the reference from the cache ---------------------
@pytest.fixture(scope="module")
def aehmc_runs(store):
    root, uri = store
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BAYESX_DATA_DIR", str(root / "data-default"))  # its own cache: the first run must compute it
        first = run_ok(uri, [*AEHMC, "run_name=aehmc-first"])
        second = run_ok(uri, [*AEHMC, "run_name=aehmc-second"])
    return first, second


native_available = backend.native_available()


def test_aehmc_records_stages_latent_size_and_reference_error(aehmc_runs, store):
    root, uri = store
    run = aehmc_runs[0]
    metrics = run.data.metrics
    missing = [m for m in REQUIRED_METRICS if m not in metrics]
    assert not missing, f"metrics missing: {missing}"
    assert all(math.isfinite(metrics[m]) for m in REQUIRED_METRICS), metrics
    assert metrics["latent_dim"] == 6  # null: about dim/10 of digits' 64
    assert 0.0 <= metrics["recon_err"] <= 0.98  # below method.train.max_recon_err, else the run would have failed
    assert 0.0 <= metrics["accept_rate"] <= 1.0 and 0.0 <= metrics["test_accuracy"] <= 1.0
    assert metrics["ess_bulk_min"] > 0 and metrics["posterior_mean_err"] >= 0 and metrics["posterior_sd_err"] >= 0
    assert metrics["presample_time_s"] > 0 and metrics["train_time_s"] > 0 and metrics["sampling_time_s"] > 0
    assert metrics["warmup_time_s"] >= metrics["presample_warmup_time_s"] > 0
    assert "reference_time_s" not in metrics  # the reference's time is its own run's

    tags = run.data.tags
    missing = [t for t in REQUIRED_TAGS if t not in tags]
    assert not missing, f"tags missing: {missing}"
    assert (tags["method"], tags["model"], tags["data"]) == ("aehmc", "logreg", "digits")
    assert (tags["ae"], tags["volume_correction"], tags["energy_at_start"]) == ("linear", "true", "reconstructed")
    assert tags["latent_dim_choice"] == "default (dim/10)"
    assert tags["kernels"] == ("native" if native_available else "pytorch")
    # the reference is its own FINISHED run, computed (and closed) before this run opened
    reference = MlflowClient(tracking_uri=uri).get_run(tags["reference_run_id"])
    assert reference.info.status == "FINISHED" and reference.data.tags["role"] == "reference"
    assert reference.data.tags["reference_for"] == "aehmc" and reference.data.metrics["wall_time_s"] > 0
    assert reference.info.end_time <= run.info.start_time
    assert "reference/moments.npz" in artifact_paths(uri, reference, "reference")
    assert run.data.params["method._target_"] == "bayesx.methods.mcmc.aehmc.AEHMC"


def test_aehmc_logs_the_autoencoder_and_draws(aehmc_runs, store, tmp_path):
    import arviz as az

    root, uri = store
    run = aehmc_runs[0]
    assert {"config.yaml", "draws.nc", "autoencoder", "plots"} <= artifact_paths(uri, run)
    assert artifact_paths(uri, run, "autoencoder") == {"autoencoder/autoencoder.pt"}
    assert "plots/trajectory.png" not in artifact_paths(uri, run, "plots")  # only for latent 2 of at most 3 dims

    local = Path(MlflowClient(tracking_uri=uri).download_artifacts(run.info.run_id, "", str(tmp_path)))
    saved = torch.load(local / "autoencoder" / "autoencoder.pt", weights_only=False)
    assert (saved["arch"], saved["latent_dim"]) == ("linear", 6)
    assert saved["mean"].shape == saved["scale"].shape == (DIGITS_DIM,)
    idata = az.from_netcdf(str(local / "draws.nc"))
    (name,) = list(idata.posterior.data_vars)
    assert idata.posterior[name].shape == (N_CHAINS, NUM_DRAWS, DIGITS_DIM)


def test_second_identical_run_reuses_the_reference(aehmc_runs, store):
    first, second = aehmc_runs
    assert second.data.tags["reference_run_id"] == first.data.tags["reference_run_id"]
    references = [r for r in all_runs(store[1]) if r.data.tags.get("reference_key")
                  == MlflowClient(tracking_uri=store[1]).get_run(first.data.tags["reference_run_id"]).data.tags[
                      "reference_key"]]
    assert len(references) == 1  # reused from the store, not computed again
    # the same seed gives the same draws, and the cached reference the same error
    assert second.data.metrics["posterior_mean_err"] == pytest.approx(first.data.metrics["posterior_mean_err"])
    assert second.data.metrics["posterior_sd_err"] == pytest.approx(first.data.metrics["posterior_sd_err"])


# --- options ----------------------------------------------------------------------------------------
def test_latent_dim_auto(store):
    root, uri = store
    run = run_ok(uri, [*AEHMC, "method.latent_dim=auto", "method.recon_tol=0.9"])
    assert run.data.tags["latent_dim_choice"].startswith("auto"), run.data.tags["latent_dim_choice"]
    assert 1 <= run.data.metrics["latent_dim"] <= DIGITS_DIM
    assert run.data.params["method.latent_dim"] == "auto"


def test_without_volume_correction(store):
    root, uri = store
    run = run_ok(uri, [*AEHMC, "method.volume_correction=false"])
    assert run.data.tags["volume_correction"] == "false"
    assert run.data.metrics.get("log_volume_mean", 0.0) == 0.0  # the volume term is left out: V = 1
    assert "posterior_mean_err" in run.data.metrics


def test_sweep_over_autoencoders(store):
    root, uri = store
    before = {r.info.run_id for r in all_runs(uri)}
    code, out, err = call([*AEHMC[:1], "-m", "method.ae=tanh,pca", *AEHMC[1:]])
    assert code == 0, err
    assert "Traceback" not in err
    runs = [r for r in all_runs(uri) if r.info.run_id not in before]
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert parent.info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2 and len(runs) == 3
    assert sorted(c.data.tags["ae"] for c in children) == ["pca", "tanh"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.metrics["latent_dim"] == 6
        assert all(m in child.data.metrics for m in REQUIRED_METRICS), sorted(child.data.metrics)
        assert "autoencoder/autoencoder.pt" in artifact_paths(uri, child, "autoencoder")
    # the kernels tag names each stage truthfully: a tanh latent chain runs in PyTorch whatever HMC used
    kernels = {c.data.tags["ae"]: c.data.tags["kernels"] for c in children}
    stage = "native" if native_available else "pytorch"
    assert kernels["pca"] == stage
    assert kernels["tanh"] == ("presample=native,sampling=pytorch" if native_available else "pytorch")


def test_deep_mcmc_fig2_preset(store):
    root, uri = store
    run = run_ok(uri, ["run", "experiment=deep_mcmc_fig2", "data=digits", *SMALL])
    metrics, tags = run.data.metrics, run.data.tags
    assert (tags["method"], tags["model"], tags["ae"]) == ("pcahmc", "gaussian", "pca")
    assert metrics["latent_dim"] == 2
    assert "plots/trajectory.png" in artifact_paths(uri, run, "plots")
    # the Gaussian reports its exact errors; no NUTS reference is computed
    assert "posterior_mean_err_max" in metrics and "posterior_sd_err_max" in metrics
    assert "posterior_mean_err" not in metrics and "reference_run_id" not in tags
    exp = MlflowClient(tracking_uri=uri).get_experiment(run.info.experiment_id)
    assert exp.name == "deep_mcmc_fig2"


# --- bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize("override, needles", [
    (["method.latent_dim=0"], ["method.latent_dim", "0"]),
    (["method.latent_dim=1000"], ["method.latent_dim", "1000", "dimension 64"]),
    (["method.latent_dim=30", "method.presample.num_draws=100"], ["too few pre-samples", "method.presample.num_draws"]),
    (["method.ae=conv"], ["method.ae", "'conv'"]),
    (["method.energy_at_start=foo"], ["method.energy_at_start", "'foo'"]),
    (["method.recon_tol=1.5"], ["method.recon_tol", "1.5"]),
    (["method.train.lr=-1"], ["method.train.lr", "-1"]),
    (["+method.presample.foo=1"], ["method.presample", "'foo'"]),
    (["method.presample.mass=foo"], ["method.presample.mass", "'foo'"]),
    (["method.latent_dim=true"], ["method.latent_dim", "True"]),
    (["method.volume_correction=maybe"], ["method.volume_correction", "'maybe'"]),
    (["method.ae=tanh", "method.hidden=-3"], ["method.hidden", "-3"]),
    (["+method.train.foo=1"], ["method.train", "'foo'"]),
    (["reference.n_chains=0"], ["reference.n_chains", "0"]),
    (["reference.enabled=maybe"], ["reference.enabled", "'maybe'"]),
], ids=["latent_dim_0", "latent_dim_above_dim", "too_few_presamples", "unknown_ae", "unknown_energy_at_start",
        "recon_tol_above_1", "negative_lr", "presample_unknown_option", "presample_bad_mass", "latent_dim_bool",
        "volume_correction_text", "negative_hidden", "train_unknown_option", "reference_no_chains",
        "reference_enabled_text"])
def test_bad_option_is_rejected_before_a_run(bad_env, override, needles):
    assert_rejected([*AEHMC, *override], bad_env, *needles)


def test_autoencoder_that_fails_to_train(bad_env):
    # found only after pre-sampling, so the run may be recorded, but as FAILED
    assert_rejected([*AEHMC, "method.train.max_recon_err=0.01"], bad_env, "failed to train",
                    "method.train.max_recon_err", may_fail_a_run=True)
