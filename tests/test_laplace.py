"""The Laplace approximation as a method (``method=laplace``) against known answers.

On a Gaussian target N(m, Sigma) with the unnormalized density exp(-1/2 (z - m)^T P (z - m)) the
Laplace approximation is exact: mode m, covariance Sigma (not its diagonal: the negative control),
and log Z = dim/2 log 2 pi + 1/2 log det Sigma both from the Laplace formula and from importance
sampling with q as proposal (constant weights: zero standard error). On a skewed posterior
(logistic regression with few data) the two evidence estimates differ, and the importance-sampled
one lies within its standard error of a long-run estimate.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from cli_helpers import all_runs, call, isolated_store, run_ok
from method_helpers import infer, prepared

from bayesx.errors import BayesxError
from bayesx.methods.vi.laplace import Laplace
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.logreg import LogisticRegression


@pytest.fixture(scope="module")
def gaussian():
    return Gaussian(dim=4, kind="correlated", rho=0.7, mean=[1.0, -2.0, 0.5, 3.0])


def test_exact_on_a_gaussian(gaussian):
    result = infer(Laplace(num_draws=500), gaussian)
    mean, cov = result.fitted["q_mean"], result.fitted["q_cov"]
    assert torch.allclose(mean, gaussian.mean, atol=1e-6)
    assert torch.allclose(cov, gaussian.cov, atol=1e-6)
    assert not torch.allclose(cov, torch.diag(gaussian.cov.diagonal()), atol=0.1)  # the correlations are there
    log_z = 0.5 * gaussian.dim * math.log(2 * math.pi) + 0.5 * float(torch.logdet(gaussian.cov))
    metrics = result.metrics
    assert metrics["log_evidence_laplace"] == pytest.approx(log_z, abs=1e-6)
    assert metrics["log_evidence"] == pytest.approx(log_z, abs=1e-6)  # q = p / Z: every weight is Z
    assert metrics["log_evidence_se"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["n_grad_evals"] > 0
    assert result.draws.shape == (1, 500, gaussian.dim)


def test_skewed_posterior_laplace_evidence_is_only_approximate(small_logreg):
    """Few data: the posterior is skewed, so the Laplace evidence misses what importance sampling
    with the Laplace q finds; the latter agrees with a 20x longer importance-sampling run."""
    short = infer(Laplace(num_draws=2000), small_logreg, seed=1).metrics
    long = infer(Laplace(num_draws=40000), small_logreg, seed=2).metrics
    assert abs(short["log_evidence"] - long["log_evidence"]) < 4 * short["log_evidence_se"] + 1e-3
    assert abs(short["log_evidence_laplace"] - long["log_evidence"]) > 4 * long["log_evidence_se"]


@pytest.fixture(scope="module")
def small_logreg():
    from bayesx.data.classification import ClassificationData

    g = torch.Generator().manual_seed(3)
    x = torch.randn(12, 2, generator=g, dtype=torch.float64)
    y = (x[:, 0] - 0.5 * x[:, 1] + 0.3 * torch.randn(12, generator=g, dtype=torch.float64) > 0).double()
    data = ClassificationData(name="tiny", x_train=x.numpy(), y_train=y.numpy(), x_test=x.numpy(), y_test=y.numpy(),
                              description="12 rows", source="generated")
    return LogisticRegression(data, prior_scale=3.0)


def test_no_mode_is_one_line():
    class Flat(Gaussian):
        def density_form(self):  # its own density, not the Gaussian's form (which the C kernels run)
            return None

        def log_prob(self, q):  # flat in the second coordinate: no Gaussian around any mode
            return -0.5 * q[..., 0] ** 2

        def log_prob_and_grad(self, q):
            return self.log_prob(q), torch.stack([-q[..., 0], torch.zeros_like(q[..., 1])], -1)

    with pytest.raises(BayesxError, match="no Laplace approximation; use method=vi or an MCMC method"):
        infer(Laplace(max_iter=20), Flat(dim=2))
    with pytest.raises(BayesxError, match=r"^method\.max_iter must be an integer >= 1, got 0"):
        Laplace(max_iter=0)


def test_cli_records_a_laplace_run(tmp_path_factory):
    with isolated_store(tmp_path_factory, "laplace") as (_, uri):
        run = run_ok(uri, ["run", "method=laplace", "data=digits", "method.num_draws=300", "progress=false",
                           "plots.n_coords=0"])
    metrics, tags = run.data.metrics, run.data.tags
    assert tags["family"] == "approximation" and tags["q_family"] == "laplace"
    for key in ("log_evidence_laplace", "log_evidence", "psis_khat", "test_accuracy", "n_grad_evals"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["test_accuracy"] > 0.95
    assert "ess_bulk_min" not in metrics


def test_cli_fits_on_every_row_with_test_fraction_zero(tmp_path_factory):
    """data.test_fraction=0: the posterior sees all rows; test metrics are absent (not zero), and the
    summary and a tag say why."""
    with isolated_store(tmp_path_factory, "laplace_all_rows") as (_, uri):
        code, out, err = call(["run", "method=laplace", "data=digits", "data.test_fraction=0", "progress=false",
                               "plots.n_coords=0", "method.num_draws=100"])
        assert code == 0, err
        run = run_ok(uri, ["run", "method=laplace", "data=digits", "data.test_fraction=0.2", "progress=false",
                           "plots.n_coords=0", "method.num_draws=100"])
        all_rows = [r for r in all_runs(uri) if r.info.run_id != run.info.run_id
                    and r.data.tags.get("role") != "reference"][0]  # not the NUTS reference, a run of its own
    assert "note: no test rows (data.test_fraction=0)" in out
    assert "test_accuracy" not in all_rows.data.metrics and "test_lpd" not in all_rows.data.metrics
    assert "test_fraction=0" in all_rows.data.tags["evaluation_notes"]
    assert int(all_rows.data.tags["target.n_train"]) == 360 and all_rows.data.tags["target.n_test"] == "0"
    assert int(run.data.tags["target.n_train"]) + int(run.data.tags["target.n_test"]) == 360
    assert "test_accuracy" in run.data.metrics


def test_gradient_difference_hessian_matches_autograd(small_logreg):
    """The Hessian for targets autograd cannot differentiate: central differences of the gradient, checked
    against autograd's on a non-quadratic density (logistic regression)."""
    from bayesx.methods.common.optimize import gradient_difference_hessian

    q = 0.3 * torch.randn(small_logreg.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exact = torch.autograd.functional.hessian(lambda x: small_logreg.log_prob(x), q)
    approx = gradient_difference_hessian(small_logreg, q, rows=3)  # several chunks
    torch.testing.assert_close(approx, exact, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(gradient_difference_hessian(small_logreg, q + 1.0), exact, atol=1e-3)  # it depends on q


def test_pde_model_hessian_includes_the_likelihood():
    """The elliptic model's log_prob leaves torch for the PDE solve: its Hessian comes from the adjoint gradient, so
    it holds the likelihood's curvature, not only the prior's (what autograd would see)."""
    from bayesx.methods.common.optimize import hessian
    from bayesx.targets.elliptic import EllipticInverse

    for solver in ("sparse", "dense"):
        model = EllipticInverse(mesh=3, solver=solver)
        q = model.sample_prior(1, torch.Generator().manual_seed(0))[0]
        h = hessian(model, q)
        prior_only = -torch.cholesky_inverse(model.prior_factor())
        assert torch.allclose(h, h.T)
        assert float((h - prior_only).abs().max()) > 1e-2 * float(prior_only.abs().max())


def test_hessian_asks_the_typed_question(small_logreg, monkeypatch):
    """optimize.hessian asks the target for its closed-form Hessian, never probes for methods: a target answering
    with one gets it called; one answering None is differentiated by autograd even if it has a method named hessian."""
    from bayesx.methods.common import optimize

    q = torch.zeros(small_logreg.dim, dtype=torch.float64)
    assert small_logreg.closed_form_hessian() is not None
    calls = []
    monkeypatch.setattr(small_logreg, "hessian", lambda x: calls.append(x) or torch.eye(small_logreg.dim))
    assert torch.equal(optimize.hessian(small_logreg, q), torch.eye(small_logreg.dim)) and len(calls) == 1
    monkeypatch.setattr(small_logreg, "closed_form_hessian", lambda: None)
    auto = optimize.hessian(small_logreg, q)
    assert len(calls) == 1 and not torch.equal(auto, torch.eye(small_logreg.dim))


def test_hessian_without_an_autograd_density_takes_differences_of_the_gradient(small_logreg, monkeypatch):
    """A target answering None to autograd_log_prob (its density is outside torch's graph) gets central differences
    of its gradient, which agree with autograd's Hessian to second order in the step; a target answering with a
    function gets that function differentiated (negative control: a different function gives a different Hessian)."""
    from bayesx.methods.common import optimize

    q = 0.1 * torch.ones(small_logreg.dim, dtype=torch.float64)
    monkeypatch.setattr(small_logreg, "closed_form_hessian", lambda: None)
    auto = optimize.hessian(small_logreg, q)
    monkeypatch.setattr(small_logreg, "autograd_log_prob", lambda: None)
    differences = optimize.hessian(small_logreg, q)
    assert float((differences - auto).abs().max()) < 1e-6 * float(auto.abs().max())
    monkeypatch.setattr(small_logreg, "autograd_log_prob", lambda: lambda x: 2.0 * small_logreg.log_prob(x))
    assert torch.allclose(optimize.hessian(small_logreg, q), 2.0 * auto)


def test_views_of_a_target_answer_as_the_target_does(small_logreg, monkeypatch):
    """A restriction is autograd-differentiable exactly when the target it views is."""
    dim = small_logreg.dim
    view = small_logreg.restrict(torch.zeros(dim, dtype=torch.float64), torch.eye(dim, 2, dtype=torch.float64))
    assert view.autograd_log_prob() is not None
    monkeypatch.setattr(small_logreg, "autograd_log_prob", lambda: None)
    assert view.autograd_log_prob() is None


@pytest.mark.parametrize("cliff, reaches_the_mode", [(None, True), (math.nan, False)])
def test_the_mode_search_steps_back_from_a_nan(cliff, reaches_the_mode, monkeypatch):
    """gp_pois_regr's kernel matrix stops being positive definite along some of L-BFGS's trial steps: the density
    and its gradient are NaN there. The search reads a cliff instead (optimize.CLIFF nats down, no gradient) and
    every starting point of this seed reaches the mode (log pi 976.40). Negative control: a NaN cliff, which is
    what torch's line search saw before, makes every row NaN and the Laplace fit fail."""
    from bayesx.methods.common import optimize
    from bayesx.targets.posteriordb.target import PosteriorDB

    if cliff is not None:
        monkeypatch.setattr(optimize, "CLIFF", cliff)
    target = PosteriorDB(name="gp_pois_regr")
    start = target.initial_point(4, torch.Generator().manual_seed(2))
    density = prepared(target, start)
    ends, _ = optimize.find_mode(density, start)
    assert bool(torch.isfinite(target.log_prob(ends)).all()) == reaches_the_mode
    if reaches_the_mode:
        assert optimize.fit_laplace(target, density, start).log_prob == pytest.approx(976.3999, abs=1e-3)
    else:
        with pytest.raises(optimize.LaplaceFailed, match="not finite"):
            optimize.fit_laplace(target, density, start)


@pytest.mark.parametrize("rows, dim", [(1, 130), (7, 130), (64, 130), (500, 130), (64, 20)])
def test_the_hessian_in_blocks_of_rows_equals_autograds_in_one_pass(rows, dim):
    """optimize.autograd_hessian (HESSIAN_ROWS rows per batched backward pass, to bound its memory) against
    torch.autograd.functional.hessian over all rows at once, on a logistic-regression-like density with a
    dense Gaussian prior and a sine term (no structure to hide a wrong block); at 20 coordinates the rows are
    plain backward passes (LOOPED_ROWS_UP_TO). Control: a block offset by one row."""
    from bayesx.methods.common.optimize import autograd_hessian

    gen = torch.Generator().manual_seed(3)
    a = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    x = torch.randn(50, dim, generator=gen, dtype=torch.float64)

    def log_prob(q):
        return -torch.nn.functional.softplus(x @ q).sum() - 0.5 * q @ (a @ a.T) @ q + torch.sin(q).sum()

    q = torch.randn(dim, generator=gen, dtype=torch.float64)
    expected = torch.autograd.functional.hessian(log_prob, q, vectorize=True)
    found = autograd_hessian(log_prob, q, rows)
    scale = float(expected.abs().max())
    assert float((found - expected).abs().max()) < 1e-12 * scale
    assert float((found.roll(1, 0) - expected).abs().max()) > 1e-3 * scale


def test_a_mode_search_that_keeps_rising_in_a_proper_funnel_starts_nuts_from_the_initial_points(tmp_path_factory):
    """tests/models/random_walk_funnel.py, a local-level model (500 states) whose log pi on the unconstrained coordinates rises
    without bound as sigma -> 0 though its posterior is proper (posteriordb's second-tier local_level is one):
    NUTS's Laplace start finds no mode, and the run starts from the initial points with a warning instead of
    stopping. The control: the mode search itself does run away on it (the Laplace method's fit fails)."""
    from cli_helpers import run_ok

    from bayesx.methods.common.optimize import LaplaceFailed, fit_laplace
    from bayesx.targets.custom import CustomModel

    spec = f"{Path(__file__).parent / 'models' / 'random_walk_funnel.py'}:density"
    target = CustomModel(log_density=spec, dim=502)
    start = target.initial_point(2, torch.Generator().manual_seed(0))
    with pytest.raises(LaplaceFailed, match="still rising"):
        fit_laplace(target, prepared(target, start), start)
    with isolated_store(tmp_path_factory, "laplace_funnel") as (_, uri):
        run = run_ok(uri, ["run", "model=custom", f"model.log_density={spec}", "model.dim=502", "method=nuts",
                           "method.num_warmup=30", "method.num_draws=20", "method.max_draws=null",
                           "method.raise_target_accept=[]", "n_chains=2", "progress=false", "plots.n_coords=0"])
    assert run.data.tags["init"] == "prior (no mode)", run.data.tags
    assert "no Laplace start: the mode search diverged" in run.data.tags["health_warnings"], run.data.tags
