"""AIS, SMC and SVGD (the particle methods of the approximation family) against known answers.

- AIS: E[w] = Z exactly, so log mean w must be within a few reported standard errors of log Z on
  the lecture notes' example (prior N(0, 1), target exp(-(x + 5)^2 / 4), Z = sqrt(4 pi)) and on a
  correlated Gaussian; the negative control drops the first factor of the weight (the erratum of
  the printed Algorithm 2) and is caught by the same tolerance.
- SMC: its estimate of Z is unbiased but has no simple standard error: eight seeds, the mean of
  log Z within 4 empirical standard errors (plus the small bias of a log) of the truth; its draws
  have the right moments.
- SVGD: particle mean and sd on a Gaussian within 10% of an sd; without the repulsive term the
  particles collapse (the negative control).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cli_helpers import isolated_store, run_ok
from method_helpers import gen, infer, logistic_2d

from bayesx.errors import BayesxError
from bayesx.methods.vi import ais as ais_module
from bayesx.methods.vi.ais import AIS
from bayesx.methods.vi.smc import SMC, next_beta
from bayesx.methods.vi.svgd import SVGD, stein_direction
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.toy import Density


@pytest.fixture(scope="module")
def gaussian():
    return Gaussian(dim=3, kind="correlated", rho=0.5, mean=[1.0, 0.0, -1.0])


# --- AIS ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ais_toy", "gaussian"])
def test_ais_evidence_within_its_standard_error(name, gaussian):
    target = Density(name="ais_toy") if name == "ais_toy" else gaussian
    m = infer(AIS(n_samples=1000, n_temps=100), target, seed=1).metrics
    assert abs(m["log_evidence"] - target.log_normalizer()) < 4 * m["log_evidence_se"]
    assert m["elbo_final"] < target.log_normalizer()  # E log w <= log Z
    assert m["weights_ess"] > 300 and m["psis_khat"] < 0.7


def test_ais_without_the_first_factor_is_caught(monkeypatch):
    """The printed Algorithm 2 starts the weight at the second temperature; the bias is caught."""
    original = ais_module.log_ratio
    calls = {"n": 0}

    def skip_first(target, base, z):
        calls["n"] += 1
        out = original(target, base, z)
        return torch.zeros_like(out) if calls["n"] == 1 else out

    target = Density(name="ais_toy")
    monkeypatch.setattr(ais_module, "log_ratio", skip_first)
    m = infer(AIS(n_samples=1000, n_temps=10), target, seed=1).metrics
    assert abs(m["log_evidence"] - target.log_normalizer()) > 4 * m["log_evidence_se"]


def test_ais_hmc_kernel_and_draws(gaussian):
    result = infer(AIS(n_samples=400, n_temps=30, kernel="hmc", n_steps=2, step_size=0.3), gaussian, seed=2)
    m = result.metrics
    assert abs(m["log_evidence"] - gaussian.log_normalizer()) < 4 * m["log_evidence_se"]
    assert m["n_grad_evals"] > 0 and result.draws.shape == (1, 1000, 3)
    ev = gaussian.evaluate(result.draws).metrics
    assert ev["posterior_mean_err_max"] < 0.2 and ev["posterior_sd_err_max"] < 0.2


@pytest.mark.parametrize("method", ["ais", "smc"])
def test_laplace_base_is_unbiased_and_shortens_the_path(method):
    """base=laplace: q0 = N(mode, H^-1) and moves in that metric. On a logistic regression (skewed,
    log Z by quadrature) the evidence stays within its error, and for AIS the weights are more even
    than from the prior-scale Gaussian base at the same cost (the point of it)."""
    target, truth = logistic_2d()
    log_z = truth.log_z
    if method == "smc":
        estimates = [infer(SMC(n_particles=300, base="laplace", n_steps=5, step_size=0.5), target,
                           seed=s).metrics["log_evidence"] for s in range(6)]
        assert abs(np.mean(estimates) - log_z) < 4 * np.std(estimates, ddof=1) / math.sqrt(6) + 0.02
        return
    options = dict(n_samples=1000, n_temps=20, kernel="hmc", n_steps=1, n_leapfrog=5, step_size=0.5)
    laplace = infer(AIS(base="laplace", **options), target, seed=3).metrics
    prior = infer(AIS(base="gaussian", **options), target, seed=3).metrics
    assert abs(laplace["log_evidence"] - log_z) < 4 * laplace["log_evidence_se"]
    assert laplace["n_grad_evals"] > prior["n_grad_evals"]  # the mode search is counted
    assert laplace["weights_ess"] > 2 * prior["weights_ess"]


# --- SMC ----------------------------------------------------------------------------------------------
def test_next_beta_keeps_the_target_ess():
    inc = torch.linspace(-30.0, 0.0, 1000, dtype=torch.float64)
    beta = next_beta(inc, 0.0, 0.5)
    w = torch.exp(beta * inc - (beta * inc).max())
    assert float(w.sum() ** 2 / (w * w).sum()) == pytest.approx(500, rel=1e-3)
    assert next_beta(torch.zeros(10, dtype=torch.float64), 0.3, 0.5) == 1.0  # flat: straight to 1


@pytest.mark.parametrize("kernel", ["hmc", "mh"])
def test_smc_evidence_and_moments(gaussian, kernel):
    runs = [infer(SMC(n_particles=400, kernel=kernel), gaussian, seed=s) for s in range(8)]
    log_z = np.array([r.metrics["log_evidence"] for r in runs])
    se = log_z.std(ddof=1) / math.sqrt(len(log_z))
    assert abs(log_z.mean() - gaussian.log_normalizer()) < 4 * se + 0.02
    ev = gaussian.evaluate(torch.cat([r.draws for r in runs], 1)).metrics
    assert ev["posterior_mean_err_max"] < 0.1 and ev["posterior_sd_err_max"] < 0.1
    assert all(r.metrics["n_stages"] >= 1 for r in runs)


def test_smc_stage_limit_is_one_line(gaussian):
    with pytest.raises(BayesxError, match="method.max_stages=1"):
        infer(SMC(n_particles=200, max_stages=1, base_scale=0.05, base_mean=5.0), gaussian)


# --- SVGD ---------------------------------------------------------------------------------------------
def test_svgd_moments_and_the_collapse_without_repulsion(gaussian):
    fit = infer(SVGD(n_particles=150, num_steps=800), gaussian)
    with_repulsion = gaussian.evaluate(fit.draws).metrics
    assert with_repulsion["posterior_mean_err_max"] < 0.1 and with_repulsion["posterior_sd_err_max"] < 0.1
    assert SVGD().warnings(fit.metrics) == [] and fit.metrics["stein_spread_flagged"] == 0  # Stein's check is quiet
    collapsed = gaussian.evaluate(infer(SVGD(n_particles=150, num_steps=800, repulsive=False), gaussian).draws)
    assert collapsed.metrics["posterior_sd_err_max"] > 0.5


def test_stein_direction_matches_its_definition():
    """phi against a direct double loop with autograd for grad_x k."""
    x = torch.randn(5, 2, generator=gen(3), dtype=torch.float64)
    grad = torch.randn(5, 2, generator=gen(4), dtype=torch.float64)
    h = 0.7
    expected = torch.zeros_like(x)
    for i in range(5):
        for j in range(5):
            xj = x[j].clone().requires_grad_(True)
            k = torch.exp(-((xj - x[i]) ** 2).sum() / h)
            (dk,) = torch.autograd.grad(k, xj)
            expected[i] += k.detach() * grad[j] + dk
    assert torch.allclose(stein_direction(x, grad, h), expected / 5)


# --- bad input and the CLI ------------------------------------------------------------------------------
@pytest.mark.parametrize("method,options,key", [(AIS, {"n_temps": 0}, "method.n_temps"),
                                                (AIS, {"n_samples": 1}, "method.n_samples"),
                                                (SMC, {"target_ess": 1.5}, "method.target_ess"),
                                                (SVGD, {"n_particles": 0}, "method.n_particles"),
                                                (AIS, {"kernel": "nuts"}, "method.kernel")])
def test_bad_options_are_one_line(method, options, key):
    with pytest.raises(BayesxError, match=rf"^{key.replace('.', '[.]')} must be"):
        method(**options)


@pytest.mark.parametrize("method", ["smc", "svgd"])
def test_cli_records_particle_runs(tmp_path_factory, method):
    extra = ["method.n_particles=200"] + (["method.num_steps=200"] if method == "svgd" else [])
    with isolated_store(tmp_path_factory, method) as (_, uri):
        run = run_ok(uri, ["run", f"method={method}", "model=gaussian", "model.dim=3", *extra, "progress=false",
                           "plots.n_coords=0"])
    metrics, tags = run.data.metrics, run.data.tags
    assert tags["family"] == "approximation" and "equally weighted particles" in tags["draws_are"]
    assert math.isfinite(metrics["posterior_mean_err_max"]) and "ess_bulk_min" not in metrics
    assert ("log_evidence_err" in metrics) == (method == "smc")
