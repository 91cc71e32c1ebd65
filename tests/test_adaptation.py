"""Warm-up machinery: window schedule, dual averaging, covariance estimates, Laplace start."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesx.methods.base import RunInputs
from bayesx.adaptation.window import (
    DualAveraging,
    WarmupSchedule,
    ledoit_wolf_intensity,
    regularized_variance,
    shrunk_covariance,
)
from bayesx.errors import BayesxError
from bayesx.kernels.metric import identity_metric, make_metric
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.common.optimize import fit_laplace
from bayesx.targets.gaussian import Gaussian


def test_stan_window_schedule_for_1000_warmup():
    s = WarmupSchedule.build(1000)
    assert s.windows == ((75, 100), (100, 150), (150, 250), (250, 450), (450, 950))
    assert s.window_at(74) is None and s.window_at(75) == (75, 100) and s.window_at(960) is None


def test_short_warmup_uses_proportional_buffers_and_tiny_warmup_none():
    s = WarmupSchedule.build(100)
    assert s.windows[0][0] == 15 and s.windows[-1][1] == 90
    assert WarmupSchedule.build(10).windows == ()
    assert WarmupSchedule.build(1000, adapt_metric=False).windows == ()


def test_dual_averaging_finds_the_step_size_of_a_known_acceptance_curve():
    """If acceptance is exp(-step), the target 0.65 is reached at step = -log(0.65)."""
    da = DualAveraging(step_size=1.0, target_accept=0.65)
    step = 1.0
    for _ in range(3000):
        step = da.update(math.exp(-step))
    assert da.final_step_size == pytest.approx(-math.log(0.65), rel=0.05)


def test_dense_estimate_approaches_sample_covariance_with_many_draws():
    gen = torch.Generator().manual_seed(0)
    cov = torch.tensor([[2.0, 0.9, 0.0], [0.9, 1.0, -0.3], [0.0, -0.3, 0.5]], dtype=torch.float64)
    chol = torch.linalg.cholesky(cov)
    draws = (torch.randn(4, 20000, 3, generator=gen, dtype=torch.float64) @ chol.T)
    est = shrunk_covariance(draws, identity_metric(3, True, torch.float64, torch.device("cpu")))
    torch.testing.assert_close(est, cov, atol=0.05, rtol=0.05)
    var = regularized_variance(draws)
    torch.testing.assert_close(var, cov.diagonal(), atol=0.05, rtol=0.05)


def test_dense_estimate_with_fewer_draws_than_dimensions_stays_positive_definite():
    gen = torch.Generator().manual_seed(1)
    draws = torch.randn(2, 10, 50, generator=gen, dtype=torch.float64) * 3.0
    current = identity_metric(50, True, torch.float64, torch.device("cpu"))
    est = shrunk_covariance(draws, current)
    assert torch.linalg.eigvalsh(est).min() > 0
    make_metric(est)  # Cholesky succeeds


def test_ledoit_wolf_intensity_extremes():
    gen = torch.Generator().manual_seed(2)
    corr = torch.full((5, 5), 0.7, dtype=torch.float64) + 0.3 * torch.eye(5, dtype=torch.float64)
    many = torch.randn(20000, 5, generator=gen, dtype=torch.float64) @ torch.linalg.cholesky(corr).T
    assert ledoit_wolf_intensity(many - many.mean(0)) < 0.05  # plenty of data, far from I: trust the data
    few = torch.randn(5, 200, generator=gen, dtype=torch.float64)
    assert ledoit_wolf_intensity(few - few.mean(0)) > 0.5  # 5 draws in 200 dimensions: shrink hard


@pytest.mark.parametrize("n,dim", [(30, 10), (10, 40), (500, 5)])
def test_ledoit_wolf_intensity_matches_scikit_learn(n, dim):
    from sklearn.covariance import ledoit_wolf_shrinkage

    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64) * torch.linspace(0.5, 2.0, dim, dtype=torch.float64)
    x = x - x.mean(0)
    assert ledoit_wolf_intensity(x) == pytest.approx(ledoit_wolf_shrinkage(x.numpy(), assume_centered=True), rel=1e-8)


def test_laplace_is_exact_for_a_gaussian():
    target = Gaussian(dim=4, kind="correlated", rho=0.6, mean=[1.0, -2.0, 0.5, 3.0])
    gen = torch.Generator().manual_seed(0)
    lap = fit_laplace(target, target.initial_point(3, gen))
    torch.testing.assert_close(lap.mode, target.mean, atol=1e-6, rtol=0)
    torch.testing.assert_close(lap.cov, target.cov, atol=1e-6, rtol=1e-6)


def test_adapted_dense_metric_matches_target_covariance():
    target = Gaussian(dim=4, kind="correlated", rho=0.8)
    gen = torch.Generator().manual_seed(0)
    result = NUTS(num_warmup=600, num_draws=10, mass="dense", init="prior").sample(
        target, RunInputs(target.initial_point(4, gen), gen, progress=False))
    np.testing.assert_allclose(result.fitted["inverse_mass"].numpy(), target.cov.numpy(), atol=0.25)


@pytest.mark.parametrize("kwargs,word", [
    (dict(step_size=0.0), "step_size"), (dict(step_size=-1.0), "step_size"), (dict(num_draws=0), "num_draws"),
    (dict(target_accept=1.5), "target_accept"), (dict(mass="full"), "mass"), (dict(num_steps=0), "num_steps"),
    (dict(init="map"), "init"),
])
def test_bad_method_settings_raise_one_line_errors(kwargs, word):
    with pytest.raises(BayesxError, match=word) as info:
        HMC(**kwargs)
    assert "\n" not in str(info.value)


def test_warmup_tree_depth_caps_only_the_warm_up():
    """warmup_max_tree_depth=2: warm-up transitions take at most 3 leapfrog steps each, sampling keeps
    max_tree_depth; without the cap the same warm-up builds deeper trees (the control)."""
    target = Gaussian(dim=5, kind="scaled", condition=30.0)
    runs = {}
    for cap in (None, 2):
        gen = torch.Generator().manual_seed(3)
        runs[cap] = NUTS(num_warmup=150, num_draws=100, init="prior", warmup_max_tree_depth=cap).sample(
            target, RunInputs(target.initial_point(4, gen), gen, progress=False))
    assert runs[2].metrics["n_grad_evals_warmup"] <= 150 * 4 * 3
    assert runs[None].metrics["n_grad_evals_warmup"] > 150 * 4 * 3
    assert runs[2].sample_stats["tree_depth"].max() > 2  # sampling is not capped


def test_warmup_tree_depth_deeper_than_the_cap_is_refused():
    with pytest.raises(BayesxError, match="warmup_max_tree_depth") as info:
        NUTS(max_tree_depth=8, warmup_max_tree_depth=9)
    assert "\n" not in str(info.value)
