"""Gaussian VI (``method=vi``), the first approximation method, against known answers.

On a Gaussian target N(m, Sigma) with precision P = Sigma^-1:
- full-rank VI is exact: q = N(m, Sigma);
- mean-field VI has the exact mean and the variances 1 / P_jj (Bishop 2006, sec. 10.1.2), smaller
  than Sigma_jj where the target is correlated (the negative control: they are not the marginals);
- the unnormalized log density -1/2 (z - m)^T P (z - m) has log Z = dim/2 log 2 pi + 1/2 log det Sigma,
  which the importance-sampled evidence must recover within its standard error, and which the ELBO
  must not exceed.
The tolerances come from the optimizer's noise at the end of the fit (Adam on a Monte Carlo
objective), checked at 5% of an sd, and from the reported standard error for the evidence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cli_helpers import isolated_store, run_ok

from bayesx.diagnostics.importance import weight_summary
from bayesx.methods.base import RunInputs
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.vi.gaussian import GaussianVI
from bayesx.targets.gaussian import Gaussian
from method_helpers import prepared


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fit(target, family: str, seed: int = 0, **options):
    method = GaussianVI(family=family, **{"num_steps": 4000, "num_mc": 32, "lr": 0.02, "tol": 0.0, **options})
    g = gen(seed)
    result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
    return result


def log_normalizer(target: Gaussian) -> float:
    return 0.5 * target.dim * math.log(2 * math.pi) + 0.5 * float(torch.logdet(target.cov))


@pytest.fixture(scope="module")
def correlated():
    return Gaussian(dim=5, kind="correlated", rho=0.8)


@pytest.fixture(scope="module")
def meanfield_fit(correlated):
    return fit(correlated, "meanfield")


@pytest.fixture(scope="module")
def fullrank_fit(correlated):
    return fit(correlated, "fullrank")


def test_meanfield_has_the_exact_mean_and_the_conditional_variances(correlated, meanfield_fit):
    mean, sd = meanfield_fit.fitted["q_mean"], meanfield_fit.fitted["q_scale"]
    conditional_sd = 1.0 / correlated.precision.diagonal().sqrt()
    assert (mean.abs() / conditional_sd).max() < 0.05
    assert ((sd - conditional_sd).abs() / conditional_sd).max() < 0.05
    # negative control: the mean-field sds are not the marginal sds (1 here), by far
    assert ((sd - 1.0).abs()).min() > 0.3


def test_fullrank_recovers_the_covariance(correlated, fullrank_fit):
    q = GaussianQ(fullrank_fit.fitted["q_mean"], fullrank_fit.fitted["q_scale"])
    sd = correlated.cov.diagonal().sqrt()
    assert (q.mean.abs() / sd).max() < 0.05
    err = (q.covariance() - correlated.cov).abs() / torch.outer(sd, sd)
    assert err.max() < 0.05


def test_evidence_elbo_and_khat_against_the_known_normalizer(correlated, meanfield_fit, fullrank_fit):
    log_z = log_normalizer(correlated)
    for result in (meanfield_fit, fullrank_fit):
        m = result.metrics
        assert m["elbo_final"] <= log_z + 0.01  # Jensen: the ELBO is a lower bound (up to its MC error)
        assert abs(m["log_evidence"] - log_z) < 4 * m["log_evidence_se"] + 0.01
    # the full-rank q is (nearly) the target: weights nearly constant, k-hat small, ELBO ~ log Z
    assert fullrank_fit.metrics["psis_khat"] < 0.5
    assert fullrank_fit.metrics["elbo_final"] == pytest.approx(log_z, abs=0.02)
    # the mean-field q misses mass: the ELBO falls short by KL(q || p) > 0.5 nats here
    assert meanfield_fit.metrics["elbo_final"] < log_z - 0.5


def test_khat_flags_a_bad_approximation():
    """Negative control for k-hat: mean-field q on a strongly correlated target (rho = 0.95, dim 10)
    is far too narrow, so the importance weights are heavy-tailed."""
    target = Gaussian(dim=10, kind="correlated", rho=0.95)
    result = fit(target, "meanfield", num_steps=2000)
    assert result.metrics["psis_khat"] > 0.7
    assert GaussianVI().warnings(result.metrics)  # and the family says so


def test_draws_are_iid_from_q_and_evaluated_as_one_chain(correlated, fullrank_fit):
    draws = fullrank_fit.draws
    assert draws.shape == (1, 1000, correlated.dim)
    metrics = correlated.evaluate(draws).metrics
    assert metrics["posterior_mean_err_max"] < 0.2 and metrics["posterior_sd_err_max"] < 0.15
    assert fullrank_fit.traces["elbo"] and fullrank_fit.metrics["n_grad_evals"] == (
        4000 * 32 + fullrank_fit.metrics["mode_search_grad_evals"])  # the fit's steps and its mode search (init=mode)


def test_defaults_halve_the_step_at_plateaus_and_stop(correlated):
    """With the defaults (lr 0.1, halved at each plateau up to 5 times, the next plateau stops) the fit
    stops on its own before num_steps, its step sizes fall by halves, and q is mean-field's answer."""
    method = GaussianVI(family="meanfield", num_mc=16)
    g = gen(11)
    result = method.infer(correlated, RunInputs(method.initial_points(correlated, 4, g), g, progress=False))
    rates = [lr for _, lr in result.traces["lr"]]
    assert rates[0] == 0.1 and rates[-1] == 0.1 / 32 and len(rates) < 50
    assert all(b in (a, a / 2) for a, b in zip(rates, rates[1:]))
    sd = correlated.cov.diagonal().sqrt()
    conditional = 1.0 / torch.linalg.inv(correlated.cov).diagonal()
    assert ((result.fitted["q_mean"] - correlated.mean).abs() / sd).max() < 0.05
    assert ((result.fitted["q_scale"] ** 2 - conditional).abs() / conditional).max() < 0.1


def kl_pq_value(method, target, mean, raw, eps):
    """sum_i w_i log q(z_i) as a function of q's parameters, with the draws and weights of (mean, raw) fixed."""
    q0 = method._q(mean, raw)
    z_fixed = q0.transform(eps)
    w = torch.softmax(target.log_prob(z_fixed) - q0.log_prob(z_fixed), 0)
    return lambda m, r: float((w * method._q(m, r).log_prob(z_fixed)).sum())


@pytest.mark.parametrize("family", ["meanfield", "fullrank"])
@pytest.mark.parametrize("divergence", ["kl_qp", "alpha", "kl_pq"])
def test_ascent_gradient_matches_finite_differences(correlated, family, divergence):
    """The closed-form gradient of each objective equals the central-difference derivative of its
    Monte Carlo estimate with the same eps (for kl_pq: of sum_i w_i log q(z_i) with the draws and
    weights held fixed, the score-function gradient). Negative control: without the log-det term
    s diag(1 / L_jj) the check fails."""
    eps = torch.randn(6, correlated.dim, generator=gen(3), dtype=torch.float64)
    method = GaussianVI(family=family, divergence=divergence, alpha=0.3)
    mean, raw = method._parameters(0.3 * torch.randn(2, correlated.dim, generator=gen(4), dtype=torch.float64))
    noise = 0.1 * torch.randn(raw.shape, generator=gen(5), dtype=torch.float64)
    raw = raw + (noise.tril() if raw.dim() == 2 else noise)
    step = method.ascent(prepared(correlated), mean, raw, eps)
    if divergence == "kl_pq":
        value = kl_pq_value(method, correlated, mean, raw, eps)
        assert value(mean, raw) == pytest.approx(float(step.objective))
    else:
        def value(m, r):
            return float(method.ascent(prepared(correlated), m, r, eps).objective)
    assert_central_differences((mean, raw), (step.mean, step.raw), value)
    sign = -1.0 if divergence == "kl_pq" else 1.0
    without_log_det = step.raw - sign * (torch.eye(raw.shape[0], dtype=raw.dtype) if raw.dim() == 2 else 1.0)
    with pytest.raises(AssertionError):
        assert_central_differences((mean, raw), (step.mean, without_log_det), value)


def assert_central_differences(params, grads, value, h: float = 1e-6) -> None:
    """Every third entry of each gradient against (value(.. + h ..) - value(.. - h ..)) / 2h."""
    base = [p.detach() for p in params]
    for index, (param, grad) in enumerate(zip(params, grads)):
        flat = param.detach().reshape(-1)
        for i in range(0, flat.numel(), 3):
            up, down = flat.clone(), flat.clone()
            up[i] += h
            down[i] -= h
            f_up = value(*[up.reshape(param.shape) if k == index else b for k, b in enumerate(base)])
            f_down = value(*[down.reshape(param.shape) if k == index else b for k, b in enumerate(base)])
            assert grad.reshape(-1)[i].item() == pytest.approx((f_up - f_down) / (2 * h), rel=1e-5, abs=1e-6)


def test_weight_summary_on_exact_weights():
    """Constant log weights c: ELBO = evidence = c, zero standard error."""
    out = weight_summary(np.full(100, -3.5))
    assert out["elbo_final"] == pytest.approx(-3.5) and out["log_evidence"] == pytest.approx(-3.5)
    assert out["log_evidence_se"] == pytest.approx(0.0, abs=1e-12)
    nan = weight_summary(np.array([0.0, np.nan] * 20))
    assert math.isnan(nan["elbo_final"]) and nan["log_evidence"] == pytest.approx(math.log(0.5))


def test_bad_family_is_one_line():
    from bayesx.errors import BayesxError

    with pytest.raises(BayesxError, match="method.family must be one of meanfield, fullrank"):
        GaussianVI(family="full")


# --- the runner: the approximation family's metrics, never MCMC's ---------------------------------------
def test_cli_records_an_approximation_run(tmp_path_factory):
    with isolated_store(tmp_path_factory, "vi") as (_, uri):
        run = run_ok(uri, ["run", "method=vi", "model=gaussian", "model.dim=4", "method.num_steps=600",
                           "method.num_draws=400", "progress=false"])
    metrics, tags = run.data.metrics, run.data.tags
    assert tags["family"] == "approximation" and tags["q_family"] == "meanfield"
    for key in ("elbo_final", "log_evidence", "log_evidence_se", "psis_khat", "fit_time_s",
                "posterior_mean_err_max", "wall_time_s"):
        assert key in metrics and math.isfinite(metrics[key]), key
    for key in ("ess_bulk_min", "ess_bulk_min_per_s", "rhat_max", "accept_rate"):
        assert key not in metrics, key  # iid draws from q: no MCMC diagnostics
    assert "elbo_final" in tags["compare_metrics"] and "ess_bulk_min" not in tags["compare_metrics"]
    from mlflow.tracking import MlflowClient

    history = MlflowClient(uri).get_metric_history(run.info.run_id, "elbo")
    assert len(history) >= 2 and history[-1].step > history[0].step


# --- other divergences: alpha (Renyi), hellinger (alpha = 1/2), kl_pq (inclusive KL by self-normalized IS) ---------
def test_every_divergence_is_exact_with_a_full_rank_q(correlated):
    """A Gaussian target is in the family: every divergence's optimum is the target itself."""
    for divergence in ("alpha", "hellinger", "kl_pq"):
        result = fit(correlated, "fullrank", seed=1, divergence=divergence, num_mc=64, num_steps=3000)
        scale = result.fitted["q_scale"]
        cov = scale @ scale.T
        sd = correlated.cov.diagonal().sqrt()
        assert ((result.fitted["q_mean"] - correlated.mean).abs() / sd).max() < 0.08, divergence
        assert ((cov.diagonal() - correlated.cov.diagonal()).abs() / correlated.cov.diagonal()).max() < 0.1, divergence
        assert result.traces["objective"] and result.traces["elbo"]


def test_mean_field_variances_order_by_divergence(correlated):
    """Mean-field on a correlated Gaussian: KL(q||p) gives the conditional variances 1/P_jj, KL(p||q)
    moves towards the marginal variances, the Hellinger (alpha = 1/2) optimum lies between."""
    conditional = float(1.0 / torch.linalg.inv(correlated.cov).diagonal()[0])
    variances = {}
    for divergence in ("kl_qp", "hellinger", "kl_pq"):
        result = fit(correlated, "meanfield", seed=2, divergence=divergence, num_mc=64, num_steps=3000)
        variances[divergence] = float((result.fitted["q_scale"] ** 2).mean())
    assert variances["kl_qp"] == pytest.approx(conditional, rel=0.08)
    assert variances["kl_qp"] < variances["hellinger"] < variances["kl_pq"] < 1.05
    assert variances["kl_pq"] > 1.5 * conditional  # the negative control: not the exclusive-KL answer


def test_alpha_outside_its_range_is_one_line():
    from bayesx.errors import BayesxError

    with pytest.raises(BayesxError, match=r"^method\.alpha must be a number in \(0, 1\), got 1\.0"):
        GaussianVI(divergence="alpha", alpha=1.0)


# --- the Jaakkola-Jordan bound (family=jj): the thesis' VFE for logistic regression -----------------------------
@pytest.fixture(scope="module")
def small_logreg():
    from bayesx.data.synthetic import load_synthetic
    from bayesx.targets.logreg import LogisticRegression

    return LogisticRegression(load_synthetic(seed=0, n_features=20, n_correlated=5, n_train=300), prior_scale=3.0)


def test_jj_bound_rises_and_stays_below_the_evidence(small_logreg):
    """Its updates are coordinate ascent on a lower bound of log p(y): the trace never falls, and it ends
    below the evidence (importance sampling with the full-rank Gaussian VI q, k-hat < 0.7)."""
    jj = GaussianVI(family="jj", tol=0.0, num_steps=60)
    g = gen(0)
    result = jj.infer(small_logreg, RunInputs(jj.initial_points(small_logreg, 4, g), g, progress=False))
    bound = [v for _, v in result.traces["elbo"]]
    assert all(b2 >= b1 - 1e-9 for b1, b2 in zip(bound, bound[1:]))
    reference = fit(small_logreg, "fullrank", seed=1, num_steps=1500).metrics
    assert reference["psis_khat"] < 0.7
    assert bound[-1] < reference["log_evidence"] - 4 * reference["log_evidence_se"]
    assert bound[0] < bound[-1] - 1.0  # the first xi = 1 is far from the optimum: the control
    # the local bound's q is more compact than the full-rank ELBO's (the thesis' observation)
    jj_var = result.fitted["q_scale"].pow(2).sum(1).mean()
    vi_scale = fit(small_logreg, "fullrank", seed=1, num_steps=1500).fitted["q_scale"]
    assert jj_var < vi_scale.pow(2).sum(1).mean()


def test_jj_lambda_limit_and_a_target_that_is_not_logistic(correlated):
    from bayesx.methods.vi.gaussian import jj_lambda
    from bayesx.settings import InvalidSetting

    xi = torch.tensor([0.0, 1e-8, 1.0, 30.0], dtype=torch.float64)
    assert jj_lambda(xi)[0] == 0.125 and jj_lambda(xi)[1] == pytest.approx(0.125)
    assert jj_lambda(xi)[2] == pytest.approx(math.tanh(0.5) / 4)
    with pytest.raises(InvalidSetting, match="family=jj is the Jaakkola-Jordan bound"):
        GaussianVI(family="jj").check(correlated, 4)


def test_an_interrupted_fit_keeps_its_q(correlated):
    """Ctrl-C at the 30th step: the run is marked interrupted at that step and keeps the q it had."""

    class Interrupting(Gaussian):
        def density_form(self):  # its own density, not the Gaussian's form (which the C kernels run)
            return None

        calls = 0

        def log_prob_and_grad(self, q):
            Interrupting.calls += 1
            if Interrupting.calls == 30:
                raise KeyboardInterrupt
            return super().log_prob_and_grad(q)

    target = Interrupting(dim=3)
    result = fit(target, "meanfield", num_steps=100, init="points")  # the 30th gradient falls in Adam's loop
    assert result.interrupted and result.tags["stopped_during"] == "fit (step 30)"
    assert result.metrics["n_steps"] == 30 and "q_mean" in result.fitted
