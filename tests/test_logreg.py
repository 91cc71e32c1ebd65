"""Logistic regression: gradients and Hessian against autograd and finite differences; the
three samplers agree within Monte Carlo error on a small, non-separable data set."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesx.methods.base import RunInputs
from bayesx.data.classification import ClassificationData
from bayesx.data.synthetic import load_synthetic
from bayesx.diagnostics.convergence import ess_per_coordinate
from bayesx.errors import BayesxError
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.mcmc.rwm import RWM
from bayesx.targets.logreg import LogisticRegression


def small_data(seed=0, n=120, p=3) -> ClassificationData:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 40, p))
    beta = np.array([1.0, -0.5, 0.25])[:p]
    y = (rng.random(n + 40) < 1 / (1 + np.exp(-x @ beta))).astype(float)
    return ClassificationData("small", x[:n], y[:n], x[n:], y[n:], "small test set", "generated")


@pytest.fixture(scope="module")
def target():
    return LogisticRegression(small_data(), prior_scale=2.0, intercept=True)


def test_analytic_gradient_matches_autograd(target):
    q = torch.randn(5, target.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    lp, grad = target.log_prob_and_grad(q)
    qa = q.clone().requires_grad_(True)
    lp_auto = target.log_prob(qa)
    (grad_auto,) = torch.autograd.grad(lp_auto.sum(), qa)
    torch.testing.assert_close(lp, lp_auto.detach())
    torch.testing.assert_close(grad, grad_auto)


def test_gradient_matches_central_finite_differences(target):
    q = torch.randn(target.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    _, grad = target.log_prob_and_grad(q[None])
    h = 1e-6
    eye = torch.eye(target.dim, dtype=torch.float64)
    fd = (target.log_prob(q + h * eye) - target.log_prob(q - h * eye)) / (2 * h)
    torch.testing.assert_close(grad[0], fd, atol=1e-6, rtol=1e-6)


def test_density_is_normalized_so_its_integral_is_the_marginal_likelihood():
    """p(y) = int prod_i p(y_i | beta) N(beta; 0, s^2) d beta by quadrature (one coefficient) equals the
    integral of exp(log_prob): the prior's constant is in the density. Negative control: without it
    the integral is off by sqrt(2 pi) s."""
    data = small_data(p=1, n=30)
    target = LogisticRegression(data, prior_scale=2.0)
    grid = torch.linspace(-12.0, 12.0, 20001, dtype=torch.float64)
    x, y = torch.as_tensor(data.x_train[:, 0]), torch.as_tensor(data.y_train)
    logits = grid[:, None] * x[None]
    log_lik = (y * logits - torch.nn.functional.softplus(logits)).sum(-1)
    prior = torch.distributions.Normal(0.0, 2.0).log_prob(grid)
    evidence = torch.trapezoid(torch.exp(log_lik + prior), grid)
    assert float(torch.trapezoid(torch.exp(target.log_prob(grid[:, None])), grid)) == pytest.approx(float(evidence), rel=1e-8)
    native_lp, _ = target.log_prob_and_grad(grid[::100, None].contiguous())
    torch.testing.assert_close(native_lp, target.log_prob(grid[::100, None]))
    unnormalized = torch.trapezoid(torch.exp(log_lik - grid**2 / 8.0), grid)
    assert float(unnormalized) != pytest.approx(float(evidence), rel=0.1)


def test_analytic_hessian_matches_autograd(target):
    q = torch.randn(target.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    auto = torch.autograd.functional.hessian(target.log_prob, q)
    torch.testing.assert_close(target.hessian(q), auto)


def test_evaluate_on_known_draws():
    data = ClassificationData("t", np.eye(2), np.array([1.0, 0.0]), np.array([[1.0, 0.0], [0.0, 1.0]]),
                              np.array([1.0, 0.0]), "toy", "generated")
    target = LogisticRegression(data, prior_scale=1.0)
    draws = torch.tensor([[[10.0, -10.0]]], dtype=torch.float64)  # confident and right on both points
    out = target.evaluate(draws).metrics
    assert out["test_accuracy"] == 1.0
    assert out["test_lpd"] == pytest.approx(-np.log1p(np.exp(-10.0)), rel=1e-9)


def test_prior_scale_must_be_positive():
    with pytest.raises(BayesxError, match="prior_scale"):
        LogisticRegression(small_data(), prior_scale=0.0)


def test_synthetic_target_has_the_published_shape():
    target = LogisticRegression(load_synthetic())
    assert target.dim == 500 and target.x_train.shape == (550, 500) and target.x_test.shape == (150, 500)


def _posterior(method, target, seed):
    gen = torch.Generator().manual_seed(seed)
    draws = method.sample(target, RunInputs(target.initial_point(4, gen), gen, progress=False)).draws.numpy()
    flat = draws.reshape(-1, draws.shape[-1])
    mcse = flat.std(0) / np.sqrt(ess_per_coordinate(draws))
    return flat.mean(0), mcse


def test_hmc_nuts_and_rwm_agree_within_monte_carlo_error(target):
    results = {
        "hmc": _posterior(HMC(num_warmup=300, num_draws=1000, num_steps=8), target, 0),
        "nuts": _posterior(NUTS(num_warmup=300, num_draws=1000), target, 1),
        "rwm": _posterior(RWM(num_warmup=1000, num_draws=5000, mass="dense"), target, 2),
    }
    names = list(results)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (ma, sa), (mb, sb) = results[a], results[b]
            z = (ma - mb) / np.sqrt(sa**2 + sb**2)
            assert np.all(np.abs(z) < 4.5), (a, b, z)


def test_health_warnings_name_the_problem_and_stay_quiet_when_healthy():
    health_warnings = NUTS().warnings  # the sampler family's warnings
    assert health_warnings({"rhat_max": 1.003, "n_divergent": 0.0, "n_max_tree_depth": 0.0}) == []
    found = health_warnings({"rhat_max": 1.2, "n_divergent": 3.0, "n_max_tree_depth": 5.0})
    assert len(found) == 3
    assert "rhat_max" in found[0] and "divergent" in found[1] and "max_tree_depth" in found[2]


def test_fast_preset_composes_the_benchmarked_setting():
    from bayesx.cli.config import compose

    cfg = compose(["experiment=logreg_fast"])
    assert cfg.n_chains == 16 and cfg.method.mass == "diag" and cfg.device.dtype == "float32"
    assert cfg.method._target_.endswith("NUTS")
