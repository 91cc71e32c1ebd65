"""Pathfinder (method=pathfinder, and MCMC's init=pathfinder) against known answers and the paper
(Zhang, Carpenter, Gelman and Vehtari 2022).

- The diagonal update of the initial inverse Hessian equals the diagonal of the dense (scaled) BFGS
  update, computed directly; the compact diagonal-plus-low-rank estimate equals the BFGS recursion
  from diag(alpha) and meets the secant equation of its newest pair; pairs that break the curvature
  condition are skipped.
- The stopping rule: with the defaults L-BFGS reaches the mode of a badly conditioned 26-dimensional
  Gaussian; a relative tolerance that stops too early does not (negative control), and max_iter bounds it.
- On Gaussian targets the best Gaussian of one path is close to the target in KL; on a badly scaled one
  the paper's diagonal initial matrix is what makes it so (the scalar one, the negative control, is far).
- Multi-path: the PSIS-resampled draws of deliberately wrong path Gaussians recover a known target's
  mean and covariance (the raw pooled draws do not), the defaults recover a correlated Gaussian, and the
  importance-resampled draws give the evidence within its standard error.
- PSIS k-hat flags a non-Gaussian posterior (banana) and not a Gaussian one: the negative control of
  the diagnostic that tells a user when not to trust a Pathfinder fit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits
from cli_helpers import isolated_store, run_ok

from bayesx.diagnostics.importance import pareto_smoothed
from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.vi.pathfinder import Pathfinder
from bayesx.result import Result
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.vi.pathfinder import pooled_particles
from bayesx.methods.common.pathfinder import (PathSettings, diagonal_update, inverse_hessian, lbfgs_iterates, local_gaussians,
                               meets_curvature, single_path)
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.toy import Density
from method_helpers import prepared


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def gaussian():
    return Gaussian(dim=5, kind="correlated", rho=0.8, mean=[1.0, 2.0, 3.0, 4.0, 5.0])


def random_pairs(dim: int, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Update pairs (s, y = A s) of a random positive definite Hessian A."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    hessian = a @ a.T + np.eye(dim)
    return [(s, hessian @ s) for s in rng.normal(size=(n, dim))]


def bfgs_recursion(h0: np.ndarray, pairs) -> np.ndarray:
    """The BFGS inverse updates H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T, pair by pair."""
    h = h0
    for s, y in pairs:
        rho = 1.0 / (y @ s)
        v = np.eye(len(s)) - rho * np.outer(s, y)
        h = v @ h @ v.T + rho * np.outer(s, s)
    return h


def test_inverse_hessian_meets_the_secant_equation():
    pairs = random_pairs(4, 3, 0)
    h = inverse_hessian(np.array([0.5, 1.0, 2.0, 0.3]), pairs)
    s, y = pairs[-1]
    assert np.allclose(h @ y, s)
    assert np.all(np.linalg.eigvalsh(h) > 0)


def test_compact_form_equals_the_bfgs_recursion_from_the_diagonal():
    pairs = random_pairs(7, 5, 1)
    alpha = np.random.default_rng(2).uniform(0.1, 3.0, size=7)
    compact = inverse_hessian(alpha, pairs)
    assert np.allclose(compact, bfgs_recursion(np.diag(alpha), pairs), rtol=1e-9, atol=1e-12)
    # negative control: the same pairs from another initial matrix give another estimate
    assert not np.allclose(compact, bfgs_recursion(np.eye(7), pairs), rtol=1e-3)


def test_diagonal_update_equals_a_direct_computation():
    rng = np.random.default_rng(3)
    (s, y), = random_pairs(6, 1, 4)
    alpha = rng.uniform(0.2, 2.0, size=6)
    # direct: B = c diag(alpha)^-1 with c = y^T A y / y^T s, its dense BFGS update, inverse of the diagonal
    b = (y @ (alpha * y)) / (y @ s) * np.diag(1.0 / alpha)
    b_next = b - np.outer(b @ s, b @ s) / (s @ b @ s) + np.outer(y, y) / (y @ s)
    updated = diagonal_update(alpha, s, y)
    assert np.allclose(updated, 1.0 / np.diag(b_next), rtol=1e-12)
    assert np.all(updated > 0)
    # negative control: without the scaling c the diagonal differs
    b1 = np.diag(1.0 / alpha)
    unscaled = b1 - np.outer(b1 @ s, b1 @ s) / (s @ b1 @ s) + np.outer(y, y) / (y @ s)
    assert not np.allclose(updated, 1.0 / np.diag(unscaled), rtol=1e-3)
    # on a diagonal Hessian the exact inverse diagonal is a fixed point
    h = np.array([4.0, 0.5, 9.0])
    s3 = np.array([0.3, -1.0, 0.2])
    assert np.allclose(diagonal_update(1.0 / h, s3, h * s3), 1.0 / h)


def test_pairs_that_break_the_curvature_condition_are_skipped():
    s = np.array([1.0, 0.0])
    assert meets_curvature(s, np.array([2.0, 1.0]))
    assert not meets_curvature(s, np.array([-2.0, 1.0]))  # s^T y < 0: negative curvature along s
    assert not meets_curvature(s, np.array([0.0, 1.0]))  # s^T y = 0
    # a path whose second pair breaks the condition: that pair changes neither alpha nor the history
    x = [np.zeros(2), np.array([1.0, 0.0]), np.array([2.0, 0.0])]
    g = [np.zeros(2), np.array([-2.0, 0.0]), np.array([-1.0, 0.0])]  # y_1 = (2, 0), y_2 = (-1, 0)
    points = [(xi, 0.0, gi) for xi, gi in zip(x, g)]
    (_, _, first), (_, _, second) = list(local_gaussians(points, history=6))
    assert np.allclose(first, second)


@pytest.fixture(scope="module")
def badly_conditioned():
    """26 coordinates (the issue's regression), sds log-spaced over [0.01, 1], rotated: condition 10^4."""
    return Gaussian(dim=26, kind="rotated", condition=100)


def whitened_distance_to_mode(target, settings: PathSettings) -> tuple[float, int]:
    start = target.initial_point(1, gen(0))[0]
    with threadpool_limits(1):  # as single_path: small linear algebra
        points, _, _ = lbfgs_iterates(prepared(target), start, settings)
    d = points[-1][0] - target.mean.numpy()
    return float(np.sqrt(d @ np.linalg.solve(target.cov.numpy(), d))), len(points) - 1


def test_stopping_rule_reaches_the_mode_and_an_early_stop_does_not(badly_conditioned):
    distance, iterations = whitened_distance_to_mode(badly_conditioned, PathSettings())
    assert distance < 1e-3 and iterations <= 1000
    early, early_iterations = whitened_distance_to_mode(badly_conditioned, PathSettings(tol_rel_obj=1e-3))
    assert early > 1e-2 and early_iterations < iterations  # negative control: the same check fails
    _, capped = whitened_distance_to_mode(badly_conditioned, PathSettings(max_iter=20))
    assert capped == 20


def gaussian_kl(mean: np.ndarray, cov: np.ndarray, target) -> float:
    """KL(N(mean, cov) || target) for a Gaussian target."""
    c = target.cov.numpy()
    d = mean - target.mean.numpy()
    c_inv_cov = np.linalg.solve(c, cov)
    return 0.5 * float(np.trace(c_inv_cov) + d @ np.linalg.solve(c, d) - len(d) - np.linalg.slogdet(c_inv_cov)[1])


def test_one_path_finds_the_gaussian(gaussian):
    path = single_path(prepared(gaussian), torch.zeros(5, dtype=torch.float64), gen(0))
    assert torch.allclose(path.mean, gaussian.mean, atol=0.05)
    assert gaussian_kl(path.mean.numpy(), path.cov.numpy(), gaussian) < 0.25
    assert path.n_iterations >= 1 and path.elbo == pytest.approx(gaussian.log_normalizer(), abs=0.3)


def best_kl_along_the_path(target, diagonal: bool) -> float:
    with threadpool_limits(1):  # as single_path: small linear algebra
        points, _, _ = lbfgs_iterates(prepared(target), target.initial_point(1, gen(0))[0], PathSettings())
        return min(gaussian_kl(mean, cov, target) for _, mean, cov in local_gaussians(points, 6, diagonal))


def test_the_diagonal_initial_matrix_fits_a_badly_scaled_gaussian():
    target = Gaussian(dim=10, kind="scaled", condition=100)  # 10 coordinates, sds over [0.01, 1]; history 6
    assert best_kl_along_the_path(target, diagonal=True) < 0.05
    assert best_kl_along_the_path(target, diagonal=False) > 1.0  # negative control: the scalar initial matrix


def test_psis_resampling_corrects_wrong_path_gaussians():
    target = Gaussian(dim=3, kind="correlated", rho=0.5)
    wide = 1.4 * torch.linalg.cholesky(target.cov)
    paths = [GaussianQ(target.mean + shift, wide) for shift in (0.4, -0.2)]
    method = Pathfinder(num_draws=4000)
    result = Result()
    method._weigh_particles(pooled_particles(target, paths, 4000, gen(5)), gen(6), result)
    resampled = result.draws[0].double()
    raw = pooled_particles(target, paths, 4000, gen(5)).draws.double()
    assert result.metrics["psis_khat"] < 0.7
    assert torch.allclose(resampled.mean(0), target.mean, atol=0.1)
    assert torch.allclose(torch.cov(resampled.T), target.cov, atol=0.15)
    assert not torch.allclose(torch.cov(raw.T), target.cov, atol=0.15)  # negative control: no resampling


def test_pareto_smoothing_shrinks_only_the_largest_weights():
    log_weights = np.random.default_rng(10).standard_t(2, size=2000)  # heavy right tail
    log_weights[5] = np.nan  # a failed density: stays a zero weight
    smoothed = pareto_smoothed(log_weights)
    assert smoothed[5] == -np.inf
    finite = np.isfinite(log_weights)
    shift = smoothed[finite] - log_weights[finite]  # psislw normalizes: a constant shift below the tail
    body = log_weights[finite] < np.quantile(log_weights[finite], 0.8)
    assert np.allclose(shift[body], shift[body][0])
    top = np.argmax(log_weights[finite])
    assert shift[top] < shift[body][0] - 0.1  # the largest weight is shrunk


def test_default_multi_path_recovers_a_correlated_gaussian(gaussian):
    method = Pathfinder()
    g = gen(7)
    result = method.infer(gaussian, RunInputs(method.initial_points(gaussian, 4, g), g, progress=False))
    assert result.metrics["psis_khat"] < 0.7
    draws = result.draws[0].double()
    assert torch.allclose(draws.mean(0), gaussian.mean, atol=0.15)
    assert torch.allclose(torch.cov(draws.T), gaussian.cov, atol=0.15)


def test_multi_path_evidence(gaussian):
    method = Pathfinder(n_paths=4, draws_per_path=500)
    g = gen(1)
    result = method.infer(gaussian, RunInputs(method.initial_points(gaussian, 4, g), g, progress=False))
    m = result.metrics
    assert abs(m["log_evidence"] - gaussian.log_normalizer()) < 4 * m["log_evidence_se"] + 0.02
    assert m["weights_ess"] > 500 and result.draws.shape == (1, 1000, 5)


def test_khat_flags_a_banana_and_not_a_gaussian(gaussian):
    def khat(target):
        method = Pathfinder(num_draws=2000)
        g = gen(2)
        return method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False)).metrics[
            "psis_khat"]

    assert khat(gaussian) < 0.5
    assert khat(Density(name="banana")) > 0.7


def test_nuts_starts_from_pathfinder(gaussian):
    g = gen(3)
    result = NUTS(num_warmup=200, num_draws=400, init="pathfinder").sample(
        gaussian, RunInputs(gaussian.initial_point(4, g), g, progress=False))
    assert "pathfinder_time_s" in result.timings
    ev = gaussian.evaluate(result.draws).metrics
    assert ev["posterior_mean_err_max"] < 0.2 and ev["posterior_sd_err_max"] < 0.2


def test_bad_options_are_one_line():
    with pytest.raises(BayesxError, match=r"^method\.n_paths must be an integer >= 1, got 0"):
        Pathfinder(n_paths=0)
    with pytest.raises(BayesxError, match=r"^method\.init must be one of prior, laplace, pathfinder"):
        NUTS(init="vi")


def test_cli_records_a_pathfinder_run(tmp_path_factory):
    with isolated_store(tmp_path_factory, "pathfinder") as (_, uri):
        run = run_ok(uri, ["run", "method=pathfinder", "model=gaussian", "model.dim=4", "method.n_paths=2",
                           "method.draws_per_path=300", "progress=false", "plots.n_coords=0"])
    metrics = run.data.metrics
    assert run.data.tags["family"] == "approximation"
    for key in ("log_evidence", "psis_khat", "lbfgs_iterations", "n_grad_evals", "log_evidence_err"):
        assert key in metrics and math.isfinite(metrics[key]), key


class WallGaussian(Gaussian):
    """A Gaussian whose density is zero beyond x_0 = 5: a path that starts there has no usable iterate."""

    def log_prob(self, q):
        return torch.where(q[..., 0] > 5.0, torch.full_like(q[..., 0], -math.inf), super().log_prob(q))

    def log_prob_and_grad(self, q):
        return self.log_prob(q), super().log_prob_and_grad(q)[1]

    def density_form(self):
        return None  # not the Gaussian's native form: this log_prob


def test_a_failed_path_is_dropped_and_all_failed_is_one_line():
    target = WallGaussian(dim=3, kind="correlated", rho=0.5)
    starts = target.initial_point(4, gen(8))  # uniform on [-2, 2]^3, inside the wall
    starts[1, 0] = 10.0
    method = Pathfinder()
    result = method.infer(target, RunInputs(starts, gen(8), progress=False))
    assert result.metrics["paths_failed"] == 1.0 and result.draws.shape == (1, 1000, 3)
    with pytest.raises(BayesxError, match=r"^every one of the 4 Pathfinder paths failed: Pathfinder found no usable"):
        method.approximate(target, RunInputs(torch.full((4, 3), 10.0, dtype=torch.float64), gen(9), progress=False,
                                             density=prepared(target)))
