"""The Laplace approximation: N(mode, (-Hessian of log pi at the mode)^-1).

The mode is found with L-BFGS (all chains' starting points optimized at once: the summed
objective separates over chains); the Hessian comes from ``target.hessian`` where a target has an
analytic one, else from autograd. It gives MCMC warm-up a starting point in the typical set and
a starting metric with the right scales and correlations.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.kernels import backend


class LaplaceFailed(BayesxError):
    """No Laplace approximation here (no finite mode, or a Hessian that is not negative definite);
    the caller says what to do instead."""


class Laplace(NamedTuple):
    mode: Tensor  # (dim,) the best of the optimized points
    cov: Tensor  # (dim, dim)
    log_prob: float
    n_grad_evals: int = 0  # gradient evaluations of the mode search, summed over the starting points
    jitter: float = 0.0  # added to the precision's diagonal to make it positive definite (0: none needed)


def find_mode(target, start: Tensor, max_iter: int = 500, tol: float = 1e-8) -> tuple[Tensor, int]:
    """Maximize log pi from each row of ``start`` (chains, dim) with L-BFGS; returns the optima
    (chains, dim) and the number of gradient evaluations (summed over the rows)."""
    q = start.detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS([q], lr=1.0, max_iter=max_iter, tolerance_grad=tol, tolerance_change=1e-12,
                            history_size=20, line_search_fn="strong_wolfe")
    calls = 0

    def closure():
        nonlocal calls
        calls += 1
        opt.zero_grad()
        lp, grad = backend.density_and_grad(target, q.detach())
        q.grad = -grad
        return -lp.sum()

    opt.step(closure)
    return q.detach(), calls * start.shape[0]


def hessian(target, q: Tensor) -> Tensor:
    """Hessian of log pi at one point q (dim,): the target's closed form where it declares one, autograd's where
    log_prob is differentiable torch, else central differences of the target's gradient (a PDE model's adjoint
    gradient, for instance)."""
    closed_form = target.closed_form_hessian()
    if closed_form is not None:
        return closed_form(q)
    log_prob = target.autograd_log_prob()
    if log_prob is not None:
        return torch.autograd.functional.hessian(log_prob, q, vectorize=True)
    return gradient_difference_hessian(target, q)


def gradient_difference_hessian(target, q: Tensor, rel_step: float = 1e-5, rows: int = 256) -> Tensor:
    """H_ij ~ (g_j(q + e_i h_i) - g_j(q - e_i h_i)) / (2 h_i), g = grad log pi, h_i = rel_step max(1, |q_i|),
    symmetrized; the 2 dim shifted points are evaluated ``rows`` at a time (second-order accurate in h)."""
    dim = q.shape[0]
    steps = rel_step * q.abs().clamp(min=1.0)
    shifts = torch.diag(steps)
    points = torch.cat([q + shifts, q - shifts])
    grads = torch.cat([target.log_prob_and_grad(chunk)[1] for chunk in points.split(rows)])
    h = (grads[:dim] - grads[dim:]) / (2.0 * steps[:, None])
    return 0.5 * (h + h.T)


def fit_laplace(target, start: Tensor, max_iter: int = 500) -> Laplace:
    modes, n_grad_evals = find_mode(target, start, max_iter)
    lp = target.log_prob(modes)
    if not bool(torch.isfinite(lp).any()):
        raise LaplaceFailed("the mode search ended where the log density is not finite")
    best = int(torch.nan_to_num(lp, nan=-float("inf")).argmax())
    mode = modes[best]
    precision = -hessian(target, mode)
    precision = 0.5 * (precision + precision.T)
    eye = torch.eye(precision.shape[0], dtype=precision.dtype, device=precision.device)
    jitter = 0.0
    for _ in range(8):  # make the precision positive definite if the mode is a saddle or flat
        chol, info = torch.linalg.cholesky_ex(precision + jitter * eye)
        if int(info) == 0:
            break
        jitter = max(1e-6, 10 * jitter) * float(precision.diagonal().abs().mean().clamp(min=1.0))
    else:
        raise LaplaceFailed("the Hessian at the mode is not negative definite")
    cov = torch.cholesky_inverse(chol)
    return Laplace(mode, 0.5 * (cov + cov.T), float(lp[best]), n_grad_evals, jitter)


def gaussian_start(mean: Tensor, cov: Tensor, start: Tensor, gen: torch.Generator,
                   mass: str) -> tuple[Tensor, Tensor]:
    """Starting points drawn from N(mean, cov), one per row of ``start``, and the starting inverse mass:
    cov (mass=dense or lowrank), its diagonal (diag, diag_grad) or ones (identity). Shared by the Laplace and Pathfinder starts."""
    if mass in ("dense", "lowrank"):
        inv_mass = cov
    elif mass in ("diag", "diag_grad"):
        inv_mass = cov.diagonal().clone()
    else:
        inv_mass = torch.ones_like(mean)
    chol = torch.linalg.cholesky(cov)
    z = torch.randn(start.shape, generator=gen, dtype=chol.dtype, device=gen.device).to(chol.device)
    return mean + z @ chol.T, inv_mass


def laplace_start(target, start: Tensor, gen: torch.Generator, mass: str) -> tuple[Tensor, Tensor]:
    """MCMC's ``init=laplace``: the chains start at draws from N(mode, H^-1), the metric at H^-1."""
    try:
        laplace = fit_laplace(target, start)
    except LaplaceFailed as exc:
        raise BayesxError(f"{exc}; use method.init=prior") from None
    return gaussian_start(laplace.mode, laplace.cov, start, gen, mass)
