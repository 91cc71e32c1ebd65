"""The posteriordb suite's PyMC models (experiments/pymc_models.py), which nutpie samples in the benchmark, on both
tiers: each model's log density equals the suite's numpy transcription at random unconstrained points (so nutpie,
NumPyro and bayesx sample one density on one space), and changes when a data value does (negative control).
The recursions' scan forms are checked in JAX too (NumPyro samples them). Skipped where PyMC (JAX) is not
installed: the optional ``bench`` extra, which CI does not install."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest

from bayesx.targets.posteriordb import ALL_NAMES, load

MODE = "NUMBA"  # the backend nutpie compiles with (its stabilizing rewrites: logaddexp as log-sum-exp)
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture
def experiments(monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))  # pymc_models imports bench_posteriordb's scan forms


@pytest.fixture
def pymc_models(experiments):
    pytest.importorskip("pymc")
    return importlib.import_module("pymc_models")


def model_log_density(pymc_models, post):
    """The PyMC model's log density as a function of the unconstrained theta (dim,), compiled by pytensor."""
    logp = pymc_models.posteriordb_model(post).compile_logp(mode=MODE)
    return lambda q: float(logp({"theta": q}))


def points(post, n: int = 3) -> np.ndarray:
    return np.random.default_rng(1).normal(0.0, 0.5, (n, post.dim))


def perturbed(post):
    """The posterior with one observation changed: the largest data array's second entry, moved by 0.5 + |x|/2."""
    key = max((k for k, v in post.data.items() if np.ndim(v) >= 1), key=lambda k: np.size(post.data[k]))
    values = np.array(post.data[key], dtype=np.float64)
    values.flat[1] += 0.5 + 0.5 * abs(values.flat[1])
    return dataclasses.replace(post, data={**post.data, key: values})


def agrees(a: float, b: float) -> bool:
    """Equal to the suite's transcription: 1e-8 relative (round-off of sums of up to 5,000 terms)."""
    return a == pytest.approx(b, rel=1e-8, abs=1e-8)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_pymc_model_is_the_suite_density(pymc_models, name):
    post = load(name)
    log_density = model_log_density(pymc_models, post)
    for q in points(post):
        assert agrees(log_density(q), float(post.log_density(np, q, post.data)))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_pymc_model_sees_a_perturbed_observation(pymc_models, name):
    """Negative control: with one observation changed the model no longer agrees with the suite's density on
    the original data (but does on the changed data), so the check above can fail."""
    post, changed = load(name), perturbed(load(name))
    log_density = model_log_density(pymc_models, changed)
    q = points(post, 1)[0]
    assert not agrees(log_density(q), float(post.log_density(np, q, post.data)))
    assert agrees(log_density(q), float(post.log_density(np, q, changed.data)))


@pytest.mark.parametrize("name", ["arma11", "garch11", "hmm_example"])
def test_jax_scan_forms_are_the_suite_density(experiments, name):
    """The lax.scan forms NumPyro samples (bench_posteriordb.scan_densities, shared with pytensor.scan)."""
    jax = pytest.importorskip("jax")
    import jax.experimental  # noqa: F401  (jax < 0.7: enable_x64 lives there)
    enable_x64 = jax.enable_x64 if hasattr(jax, "enable_x64") else jax.experimental.enable_x64
    post = load(name)
    with enable_x64(True):  # as the benchmark runs NumPyro, without changing JAX's default for other tests
        log_density = importlib.import_module("bench_posteriordb").jax_log_density(name)
        for q in points(post):
            assert agrees(float(log_density(jax.numpy.asarray(q))), float(post.log_density(np, q, post.data)))


@pytest.mark.slow
def test_nutpie_on_eight_schools_matches_the_reference(pymc_models):
    """nutpie's draws of the non-centred eight schools, scored against posteriordb's gold standard."""
    pytest.importorskip("nutpie")
    from bayesx.targets.posteriordb.target import reference_errors

    post = load("eight_schools_noncentered")
    out = pymc_models.nutpie_run(pymc_models.posteriordb_model(post), ["theta"], chains=4, seed=0)
    assert out.draws.shape == (4, 1000, post.dim) and out.grads_warmup > 0 and out.grads_sampling > 0
    params = np.array([post.constrain(np, q, post.data) for q in out.draws.reshape(-1, post.dim)])
    assert reference_errors(params, post.reference.astype(np.float64))["ref_mean_err_max"] < 0.15
