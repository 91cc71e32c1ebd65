"""Pathfinder (Zhang, Carpenter, Gelman and Vehtari 2022, "Pathfinder: parallel quasi-Newton
variational inference", JMLR 23(306)): one path, the paper's Algorithm 1.

1. L-BFGS climbs log p from a starting point theta_0 (SciPy's L-BFGS-B without bounds, keeping
   ``history`` = J update pairs). It stops at the first of (the paper's Algorithm 1 inputs, Stan's
   ``pathfinder`` arguments):
     - the relative change of the objective f = -log p between iterates,
       (f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1) <= tol_rel_obj (the paper's tau_rel; SciPy's ``ftol``
       is exactly this rule),
     - the largest gradient component |d f / d theta_i| <= tol_grad,
     - ``max_iter`` iterations (the paper's L).
2. Along the iterates theta_0 .. theta_L with gradients g_l = grad log p(theta_l), the update pairs
   s_l = theta_l - theta_{l-1} and y_l = g_{l-1} - g_l (the gradient change of f) enter the history only
   if they meet the curvature condition s^T y > eps |y|^2 (eps = 2.2e-16, the paper's check); a pair
   that fails is skipped. Each accepted pair first updates the diagonal initial inverse Hessian alpha
   (ones at the start) by :func:`diagonal_update` (the paper's Algorithm 3, after Gilbert and
   Lemarechal 1989), then the inverse-Hessian estimate at theta_l is the L-BFGS matrix built from the
   last J accepted pairs on top of diag(alpha), in the diagonal-plus-low-rank compact form
   Sigma_l = diag(alpha) + beta gamma beta^T (Byrd, Nocedal and Schnabel 1994; :func:`inverse_hessian`).
3. Each iterate defines q_l = N(theta_l + Sigma_l g_l, Sigma_l) (a Newton step to the local mode); its
   ELBO is estimated with ``elbo_draws`` (the paper's K) draws and the q_l with the largest ELBO is the
   path's approximation.

Sigma_l is formed densely from its factors (O(dim^2) memory, a Cholesky per iterate): right for the
hundreds of coordinates of posteriordb; the paper samples through a thin QR of the factors instead,
which matters above a few thousand coordinates.

Several paths (bayesx.methods.vi.pathfinder, ``n_paths``) pool draws from every path's best q with
their importance weights p/q, Pareto-smoothed and resampled (multi-path Pathfinder, the paper's
Algorithm 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import solve_triangular
from threadpoolctl import threadpool_limits
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.kernels import backend
from bayesx.methods.common.optimize import gaussian_start

LOG_2PI = math.log(2.0 * math.pi)
CURVATURE_EPS = 2.2e-16  # the paper's curvature check s^T y > eps |y|^2


class PathFailed(BayesxError):
    """A path with no usable iterate (multi-path Pathfinder drops it, as Stan does)."""


@dataclass(frozen=True)
class PathSettings:
    """One path's settings; the defaults and their sources are in conf/method/pathfinder.yaml."""

    history: int = 6  # J: update pairs kept (the paper's experiments and Pathfinder.jl; Stan's default is 5)
    max_iter: int = 1000  # L: L-BFGS iterations (the paper and Stan)
    tol_rel_obj: float = 1e-13  # tau_rel: relative objective change that stops L-BFGS (the paper)
    tol_grad: float = 1e-8  # largest gradient component that stops L-BFGS (Stan's tol_grad)
    elbo_draws: int = 25  # K: draws per iterate for its ELBO (Stan's default; the paper's experiments used 5)


@dataclass
class PathResult:
    """The best Gaussian along one L-BFGS path."""

    mean: Tensor  # (dim,)
    cov: Tensor  # (dim, dim)
    elbo: float
    best_iteration: int
    n_iterations: int
    n_grad_evals: int
    elbos: list[tuple[int, float]]
    stop_reason: str = ""

    def chol(self) -> Tensor:
        return torch.linalg.cholesky(self.cov)


def meets_curvature(s: np.ndarray, y: np.ndarray) -> bool:
    """The curvature condition s^T y > eps |y|^2 that keeps an update pair (f = -log p, y its gradient change)."""
    return float(s @ y) > CURVATURE_EPS * float(y @ y)


def diagonal_update(alpha: np.ndarray, s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The diagonal initial inverse Hessian after one accepted pair (s, y) (Pathfinder's Algorithm 3, after
    Gilbert and Lemarechal 1989): scale the Hessian estimate B = diag(alpha)^-1 by c = y^T A y / y^T s
    (A = diag(alpha)), apply the BFGS Hessian update B+ = cB - cB s s^T B / s^T B s + y y^T / y^T s, keep
    its diagonal and invert it:

        alpha+_n = y^T s / (a / alpha_n + y_n^2 - (a / b) (s_n / alpha_n)^2),  a = y^T A y,  b = s^T A^-1 s.
    """
    a = float(y @ (alpha * y))
    b = float(s @ (s / alpha))
    return float(s @ y) / (a / alpha + y * y - (a / b) * (s / alpha) ** 2)


def inverse_hessian(alpha: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The L-BFGS inverse-Hessian estimate of f = -log p from the pairs (oldest first) on top of diag(alpha),
    in the compact form of Byrd, Nocedal and Schnabel (1994, Theorem 2.2) that Pathfinder uses:

        Sigma = A + beta gamma beta^T,  A = diag(alpha),  beta = [S, A Y],
        gamma = [[R^-T (D + Y^T A Y) R^-1, -R^-T], [-R^-1, 0]],
        R = upper triangle of S^T Y,  D = its diagonal.

    Equal to the BFGS inverse updates of A by the pairs in order (the recursion of L-BFGS's two-loop)."""
    s_mat = np.stack([s for s, _ in pairs], axis=1)
    y_mat = np.stack([y for _, y in pairs], axis=1)
    sy = s_mat.T @ y_mat
    r_inv = solve_triangular(np.triu(sy), np.eye(len(pairs)))
    ay = alpha[:, None] * y_mat
    corner = r_inv.T @ (np.diag(np.diag(sy)) + y_mat.T @ ay) @ r_inv
    gamma = np.block([[corner, -r_inv.T], [-r_inv, np.zeros_like(r_inv)]])
    beta = np.hstack([s_mat, ay])
    sigma = np.diag(alpha) + beta @ gamma @ beta.T
    return 0.5 * (sigma + sigma.T)


def lbfgs_iterates(target, start: Tensor, settings: PathSettings) -> tuple[list[tuple], int, str]:
    """Run L-BFGS on f = -log p from ``start``: the iterates as (theta, log p, grad log p) (theta_0 first),
    the number of density-and-gradient evaluations and SciPy's stop message."""
    from scipy.optimize import minimize

    dtype, device = start.dtype, start.device
    evaluations = {}

    def value_and_grad(x: np.ndarray):
        q = torch.as_tensor(x, dtype=dtype, device=device)[None]
        lp, grad = backend.density_and_grad(target, q)
        lp, grad = float(lp[0]), grad[0].cpu().numpy().astype(np.float64)
        evaluations[x.tobytes()] = (lp, grad)
        if not math.isfinite(lp):
            return 1e300, np.zeros_like(x)
        return -lp, -grad

    iterates = [start.detach().cpu().numpy().astype(np.float64)]
    value_and_grad(iterates[0])
    fit = minimize(value_and_grad, iterates[0], jac=True, method="L-BFGS-B",
                   callback=lambda intermediate_result: iterates.append(np.array(intermediate_result.x)),
                   options={"maxiter": settings.max_iter, "maxcor": settings.history,
                            "ftol": settings.tol_rel_obj, "gtol": settings.tol_grad,
                            "maxfun": 20 * settings.max_iter})

    def evaluated(x: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        if x.tobytes() not in evaluations:  # SciPy reports iterates it has evaluated; compute any it has not
            value_and_grad(x)
        return (x, *evaluations[x.tobytes()])

    points = [evaluated(x) for x in iterates]
    return points, len(evaluations), str(fit.message)


def local_gaussians(points: list[tuple], history: int, diagonal: bool = True):
    """The Gaussians along the iterates ``points`` ((theta, log p, grad log p), theta_0 first): yields
    (l, mean, Sigma) for every iterate l >= 1 with an accepted pair and a finite log p. ``diagonal``: the
    paper's diagonal initial matrix (:func:`diagonal_update`); False: the scalar s^T y / y^T y of the newest
    pair times I (Nocedal and Wright eq. 7.20; what this module did before, kept as the comparison)."""
    alpha = np.ones(points[0][0].shape[0])
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for it in range(1, len(points)):
        s = points[it][0] - points[it - 1][0]
        y = points[it - 1][2] - points[it][2]  # gradient change of f = -log p
        if meets_curvature(s, y):
            alpha = diagonal_update(alpha, s, y) if diagonal else np.full_like(alpha, (s @ y) / (y @ y))
            pairs = (pairs + [(s, y)])[-history:]
        if pairs and math.isfinite(points[it][1]):
            sigma = inverse_hessian(alpha, pairs)
            yield it, points[it][0] + sigma @ points[it][2], sigma


def single_path(target, start: Tensor, gen: torch.Generator, settings: PathSettings = PathSettings()) -> PathResult:
    """Run one Pathfinder path from ``start`` (dim,).

    BLAS and OpenMP run on one thread meanwhile: a path's linear algebra is small (one point, J pairs) and
    on a loaded machine their worker threads made a 6 x 6 triangular solve or a 26 x 26 Cholesky about 1000
    times slower (16 ms against 0.015 ms, measured at load 19 on 2 cores)."""
    with threadpool_limits(1):
        points, n_evals, stop_reason = lbfgs_iterates(target, start, settings)
        best, elbos = best_local_gaussian(target, points, gen, settings, start)
    n_grads = n_evals + len(elbos) * settings.elbo_draws
    return PathResult(best[2], best[3], best[0], best[1], len(points) - 1, n_grads, elbos, stop_reason)


def best_local_gaussian(target, points: list[tuple], gen: torch.Generator, settings: PathSettings, like: Tensor):
    """The Gaussian with the largest estimated ELBO along the iterates, as (elbo, iterate, mean, cov), and
    every iterate's (l, ELBO); tensors with the dtype and device of ``like``."""
    dtype, device = like.dtype, like.device
    best: tuple[float, int, Tensor, Tensor] | None = None
    elbos = []
    for it, mean, sigma in local_gaussians(points, settings.history):
        cov = torch.as_tensor(sigma, dtype=dtype, device=device)
        chol, info = torch.linalg.cholesky_ex(cov)
        if int(info) != 0:
            continue
        mean = torch.as_tensor(mean, dtype=dtype, device=device)
        elbo = estimate_elbo(target, mean, chol, settings.elbo_draws, gen)
        elbos.append((it, elbo))
        if best is None or elbo > best[0]:
            best = (elbo, it, mean, cov)
    if best is None:
        raise PathFailed("Pathfinder found no usable L-BFGS iterate (no pair met the curvature condition, or "
                          "every estimate was singular); try another start or method=laplace")
    return best, elbos


def estimate_elbo(target, mean: Tensor, chol: Tensor, n_draws: int, gen: torch.Generator) -> float:
    """Monte Carlo ELBO of N(mean, chol chol^T): mean of log p - log q over ``n_draws`` draws (a draw where
    log p is NaN counts as -inf, as in the paper's Algorithm 1)."""
    dim = mean.shape[0]
    eps = torch.randn((n_draws, dim), generator=gen, dtype=mean.dtype, device=gen.device).to(mean.device)
    z = mean + eps @ chol.T
    log_q = -0.5 * (eps * eps).sum(-1) - torch.log(chol.diagonal()).sum() - 0.5 * dim * LOG_2PI
    with torch.no_grad():
        return float(torch.nan_to_num(target.log_prob(z) - log_q, nan=-math.inf).mean())


def pathfinder_start(target, start: Tensor, gen: torch.Generator, mass: str) -> tuple[Tensor, Tensor]:
    """MCMC's ``init=pathfinder``: one path (default settings) from the first starting point where a path
    succeeds; the chains start at draws from its Gaussian and the metric at its covariance
    (bayesx.methods.common.optimize.gaussian_start)."""
    for row, point in enumerate(start):
        try:
            path = single_path(target, point, gen)
        except PathFailed:
            if row == len(start) - 1:
                raise
            continue
        return gaussian_start(path.mean, path.cov, start, gen, mass)
