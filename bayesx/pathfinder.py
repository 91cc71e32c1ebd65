"""Pathfinder (Zhang, Carpenter, Gelman and Vehtari 2022, "Pathfinder: parallel quasi-Newton
variational inference", JMLR 23(306)).

One path: L-BFGS (SciPy's L-BFGS-B, no bounds) climbs log p from a starting point; at every
iterate x_l with gradient g_l = grad log p(x_l) the L-BFGS inverse-Hessian estimate Sigma_l, built
from the last ``history`` curvature pairs (s, y) with s^T y > 1e-12 |y|^2 (pairs that break the
curvature condition are skipped, as in the paper), defines a Gaussian

    q_l = N(x_l + Sigma_l g_l, Sigma_l)

(a Newton step to the local mode). Each q_l's ELBO is estimated with ``elbo_draws`` draws and the
best q_l is the path's approximation. Sigma_l is formed densely by the BFGS inverse update from the
scalar initial matrix (s^T y / y^T y) I of the newest pair (Nocedal and Wright, eq. 7.20); the paper
uses a diagonal initial matrix and a low-rank factorization instead, which matter above a few
thousand dimensions, where this dense form (O(dim^2) memory, a Cholesky per iterate) does not fit.

Several paths (bayesx.methods.vi.pathfinder, ``n_paths``) give draws from every path's best q with
their importance weights p/q, resampled together (multi-path Pathfinder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.kernels import backend
from bayesx.optimize import gaussian_start

LOG_2PI = math.log(2.0 * math.pi)


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

    def chol(self) -> Tensor:
        return torch.linalg.cholesky(self.cov)


def inverse_hessian(pairs: list[tuple[np.ndarray, np.ndarray]], dim: int) -> np.ndarray:
    """The L-BFGS inverse-Hessian estimate of f = -log p from curvature pairs (oldest first)."""
    s_last, y_last = pairs[-1]
    h = (s_last @ y_last) / (y_last @ y_last) * np.eye(dim)
    for s, y in pairs:
        rho = 1.0 / (y @ s)
        v = np.eye(dim) - rho * np.outer(s, y)
        h = v @ h @ v.T + rho * np.outer(s, s)
    return 0.5 * (h + h.T)


def single_path(target, start: Tensor, gen: torch.Generator, history: int = 6, max_iter: int = 1000,
                elbo_draws: int = 5, tol: float = 1e-8) -> PathResult:
    """Run one Pathfinder path from ``start`` (dim,)."""
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
    minimize(value_and_grad, iterates[0], jac=True, method="L-BFGS-B",
             callback=lambda intermediate_result: iterates.append(np.array(intermediate_result.x)),
             options={"maxiter": max_iter, "maxcor": history, "gtol": tol, "ftol": 1e-14})
    def evaluated(x: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        if x.tobytes() not in evaluations:  # SciPy reports iterates it has evaluated; compute any it has not
            value_and_grad(x)
        return (x, *evaluations[x.tobytes()])

    points = [evaluated(x) for x in iterates]
    dim = start.shape[0]
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    best: tuple[float, int, Tensor, Tensor] | None = None
    elbos = []
    for it in range(1, len(points)):
        s = points[it][0] - points[it - 1][0]
        y = -(points[it][2] - points[it - 1][2])  # gradient of f = -log p
        if s @ y > 1e-12 * (y @ y):
            pairs = (pairs + [(s, y)])[-history:]
        if not pairs or not math.isfinite(points[it][1]):
            continue
        cov = torch.as_tensor(inverse_hessian(pairs, dim), dtype=dtype, device=device)
        mean = torch.as_tensor(points[it][0], dtype=dtype, device=device) + cov @ torch.as_tensor(
            points[it][2], dtype=dtype, device=device)
        chol, info = torch.linalg.cholesky_ex(cov)
        if int(info) != 0:
            continue
        eps = torch.randn((elbo_draws, dim), generator=gen, dtype=dtype, device=gen.device).to(device)
        z = mean + eps @ chol.T
        log_q = -0.5 * (eps * eps).sum(-1) - torch.log(chol.diagonal()).sum() - 0.5 * dim * LOG_2PI
        with torch.no_grad():
            elbo = float(torch.nan_to_num(target.log_prob(z) - log_q, nan=-math.inf).mean())
        elbos.append((it, elbo))
        if best is None or elbo > best[0]:
            best = (elbo, it, mean, cov)
    if best is None:
        raise BayesxError("Pathfinder found no usable L-BFGS iterate (no pair met the curvature condition, or "
                          "every estimate was singular); try another start or method=laplace")
    n_grads = len(evaluations) + len(elbos) * elbo_draws
    return PathResult(best[2], best[3], best[0], best[1], len(points) - 1, n_grads, elbos)


def pathfinder_start(target, start: Tensor, gen: torch.Generator, mass: str) -> tuple[Tensor, Tensor]:
    """MCMC's ``init=pathfinder``: one path from the first starting point; the chains start at draws
    from its Gaussian and the metric at its covariance (bayesx.optimize.gaussian_start)."""
    path = single_path(target, start[0], gen)
    return gaussian_start(path.mean, path.cov, start, gen, mass)
