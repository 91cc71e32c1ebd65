"""The Laplace approximation: N(mode, (-Hessian of log pi at the mode)^-1).

The mode is found with L-BFGS (all chains' starting points optimized at once: the summed
objective separates over chains); the Hessian comes from ``target.hessian`` where a target has an
analytic one, else from autograd. It gives MCMC warm-up a starting point in the typical set and
a starting metric with the right scales and correlations.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.kernels.density import Density
from bayesx.methods.common import lbfgs


class LaplaceFailed(BayesxError):
    """No Laplace approximation here (no finite mode, or a Hessian that is not negative definite);
    the caller says what to do instead."""


class NoMode(BayesxError):
    """The mode search gave no Gaussian to start from: it ended in a funnel's neck (:func:`in_a_neck`), kept rising
    (a density without a maximum: a proper posterior's funnel, as a local-level model's as its state noise goes to
    0, or an improper posterior), or ended where the density or its Hessian is unusable (LaplaceFailed)."""


RUNAWAY = 1.0
"""Nats: a further round of the mode search from its end that raises log pi by less than this ended at a mode."""
NECK_SD, NECK_DRAWS = 0.1, 64
"""The Gaussian of :func:`in_a_neck`: its standard deviation in every coordinate and its draws."""


class Laplace(NamedTuple):
    mode: Tensor  # (dim,) the best of the optimized points
    cov: Tensor  # (dim, dim)
    log_prob: float
    n_grad_evals: int = 0  # gradient evaluations of the mode search, summed over the starting points
    jitter: float = 0.0  # added to the precision's diagonal to make it positive definite (0: none needed)


CLIFF = 1e6
"""Nats below a row's first finite log pi that the mode search reads where log pi or its gradient is not finite."""


def find_mode(density: Density, start: Tensor, max_iter: int = 500, tol: float = 1e-8) -> tuple[Tensor, int]:
    """Maximize log pi from each row of ``start`` (chains, dim) with L-BFGS (:func:`bayesx.methods.common.lbfgs.minimize`:
    torch's L-BFGS iteration without its optimizer class, which loads torch's dynamo); returns the optima
    (chains, dim) and the number of gradient evaluations (summed over the rows).

    Where a trial point's log pi or gradient is not finite (a Gaussian process's kernel matrix that stops being
    positive definite, an overflow), the search reads a cliff instead: log pi CLIFF nats below the row's first
    finite value, gradient zero. The strong-Wolfe line search then steps back, where a NaN or an infinity
    would have made its interpolated step NaN and every row with it (gp_pois_regr from some starting points)."""
    shape = start.shape
    floor = torch.full(shape[:1], -CLIFF, dtype=start.dtype, device=start.device)
    seen = torch.zeros(shape[:1], dtype=torch.bool, device=start.device)

    def objective(flat: Tensor) -> tuple[float, Tensor]:
        nonlocal floor, seen
        lp, grad = density.logp_and_grad(flat.view(shape))
        finite = torch.isfinite(lp) & torch.isfinite(grad).all(-1)
        first = finite & ~seen
        floor, seen = torch.where(first, lp - CLIFF, floor), seen | finite
        minus_grad = -torch.where(finite[:, None], grad, torch.zeros_like(grad))
        return float(-torch.where(finite, lp, floor).sum()), minus_grad.reshape(-1)

    found, calls = lbfgs.minimize(objective, start.reshape(-1), max_iter=max_iter, tolerance_grad=tol,
                                  tolerance_change=1e-12, history_size=20)
    return found.view(shape), calls * shape[0]


def further_rise(density: Density, point: Tensor, max_iter: int) -> tuple[Tensor, float, int]:
    """One more round of the mode search from ``point`` (1, dim): where it ended, how much it raised log pi
    there (nats; +inf where it reached +inf, -inf where it found nothing higher or left the support) and its
    gradient evaluations. A mode gives a rise near 0; an unbounded density (the centred eight schools, whose
    log pi grows like -7 log tau as tau -> 0 with the thetas equal) a rise of RUNAWAY nats or more, round
    after round."""
    with torch.no_grad():
        before = float(density.logp(point)[0])
    try:
        found, calls = find_mode(density, point, max_iter=max_iter)
    except IndexError:  # the strong-Wolfe line search fails so when the density turns NaN along it
        return point, -math.inf, 0
    with torch.no_grad():
        after = float(density.logp(found)[0])
    if math.isnan(after) or after == -math.inf:
        return point, -math.inf, calls
    return found, after - before, calls


MODE_ROUNDS = 4  # rounds of :func:`climb`; one still rising by RUNAWAY after them ran away


class Climb(NamedTuple):
    point: Tensor  # (1, dim) the highest point reached (the start itself, the same tensor, where none was higher)
    calls: int  # gradient evaluations
    ran_away: bool  # the last of MODE_ROUNDS rounds still rose by RUNAWAY nats, or log pi reached +inf
    rise: float  # the last round's rise (nats; -inf where it met a NaN or -inf density)


def climb(density: Density, point: Tensor, max_iter: int) -> Climb:
    """Rounds of the mode search (:func:`further_rise`) from ``point`` (1, dim) until one raises log pi by less than
    RUNAWAY nats: a mode, or where the search cannot go on (a NaN or -inf density ahead). Torch's L-BFGS can stop
    far short of the mode after a failed line search (arma11: after 30 gradients, 291 nats below it), so one
    round is not enough; a density without a maximum keeps rising round after round (``ran_away``)."""
    calls, rise = 0, 0.0
    for _ in range(MODE_ROUNDS):
        found, rise, more = further_rise(density, point, max_iter)
        calls += more
        if rise == math.inf:
            return Climb(found, calls, True, rise)
        if rise > 0:
            point = found
        if not rise >= RUNAWAY:
            return Climb(point, calls, False, rise)
    return Climb(point, calls, True, rise)


def fixed_normal_draws(draws: int, like: Tensor) -> Tensor:
    """``draws`` standard normal rows of like's last dimension, dtype and device, from a generator of its own (seed
    0): checks that draw points (a neck, a support) leave the run's random stream to the method."""
    gen = torch.Generator(device=like.device).manual_seed(0)
    return torch.randn(draws, like.shape[-1], generator=gen, dtype=like.dtype, device=like.device)


def smoothed_log_prob(density: Density, point: Tensor, sd: float = NECK_SD, draws: int = NECK_DRAWS) -> float:
    """The ELBO of N(point, sd^2 I) (point: (1, dim)) by ``draws`` draws of :func:`fixed_normal_draws`: log pi
    averaged over a small neighbourhood, -inf where not finite."""
    z = fixed_normal_draws(draws, point)
    with torch.no_grad():
        log_q = -0.5 * (z ** 2).sum(-1) - point.shape[-1] * (math.log(sd) + 0.5 * math.log(2 * math.pi))
        elbo = float((density.logp(point + sd * z) - log_q).mean())
    return elbo if math.isfinite(elbo) else -math.inf


def in_a_neck(density: Density, mode: Tensor, start: Tensor, sd: float = NECK_SD,
              draws: int = NECK_DRAWS) -> tuple[bool, float, float]:
    """Whether the end of a mode search (1, dim) is a funnel's neck, where log pi is high but no Gaussian of any
    width is: a small Gaussian there (:func:`smoothed_log_prob`) has a lower ELBO than the same Gaussian at ``start``
    (the initial points' mean). At a proper mode, however narrow the posterior, it has the higher ELBO (every
    posterior of the posteriordb suite); at the centred eight schools' neck (log tau = -11 to -16) it is below
    -1e9. Returns (neck, ELBO at the mode, ELBO at the start)."""
    at_mode, at_start = (smoothed_log_prob(density, point, sd, draws) for point in (mode, start))
    return not at_mode > at_start, at_mode, at_start


def hessian(target, q: Tensor) -> Tensor:
    """Hessian of log pi at one point q (dim,): the target's closed form where it declares one, autograd's where
    log_prob is differentiable torch, else central differences of the target's gradient (a PDE model's adjoint
    gradient, for instance)."""
    closed_form = target.closed_form_hessian()
    if closed_form is not None:
        return closed_form(q)
    log_prob = target.autograd_log_prob()
    if log_prob is not None:
        return autograd_hessian(log_prob, q)
    return gradient_difference_hessian(target, q)


HESSIAN_ROWS = 64
"""Rows of the Hessian per batched backward pass of :func:`autograd_hessian`: its memory is this many copies of the
gradient's graph (all ``dim`` at once held a 1,007-d hierarchical regression's 30,000-row graph 1,007 times over,
about 1 GB: the run's peak), for 1/64 of the passes."""


LOOPED_ROWS_UP_TO = 64
"""Up to this many coordinates the Hessian's rows are one plain backward pass each, of the gradient's i-th element:
``is_grads_batched`` (torch's vmap) and any tensor passed as ``grad_outputs`` load torch's symbolic shapes and sympy
on their first call, 0.3 s of every small run's Laplace start on an idle 2-core machine (1-2 s under load), where 64
backward passes of a small density take milliseconds."""


def autograd_hessian(log_prob, q: Tensor, rows: int = HESSIAN_ROWS) -> Tensor:
    """H = d/dq (grad log pi)(q) by reverse mode over the gradient's graph, ``rows`` rows per pass: the vector-Jacobian
    products e_i^T dg/dq for a block of unit vectors e_i at once (``is_grads_batched``, torch's vmap over the
    backward pass, as ``torch.autograd.functional.hessian(vectorize=True)`` does for all of them), symmetrized."""
    x = q.detach().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(log_prob(x), x, create_graph=True)
    dim = q.shape[0]
    if not grad.requires_grad:  # log pi linear in q: its Hessian is zero
        return torch.zeros(dim, dim, dtype=q.dtype, device=q.device)
    eye = torch.eye(dim, dtype=q.dtype, device=q.device)
    if dim <= LOOPED_ROWS_UP_TO:  # one backward pass a row, of a scalar: no vmap, no grad_outputs (both load sympy)
        h = torch.stack([torch.autograd.grad(grad[i], x, retain_graph=True)[0] for i in range(dim)])
    else:
        h = torch.cat([torch.autograd.grad(grad, x, grad_outputs=block, retain_graph=True, is_grads_batched=True)[0]
                       for block in eye.split(rows)])
    return 0.5 * (h + h.T)


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


def fit_laplace(target, density: Density, start: Tensor, max_iter: int = 500) -> Laplace:
    """The Laplace approximation at the highest mode reached from the rows of ``start``: L-BFGS from every row,
    then further rounds from the best end (:func:`climb`), on ``density`` (the target's prepared density; the
    target answers for its Hessian, :func:`hessian`); raises LaplaceFailed where the search ends where log pi
    is not finite, keeps rising (no maximum), or the Hessian cannot be made negative definite."""
    modes, n_grad_evals = find_mode(density, start, max_iter)
    lp = density.logp(modes)
    if not bool(torch.isfinite(lp).any()):
        raise LaplaceFailed("the mode search ended where the log density is not finite")
    best = int(torch.nan_to_num(lp, nan=-float("inf")).argmax())
    climbed = climb(density, modes[best][None], max_iter)
    n_grad_evals += climbed.calls
    if climbed.ran_away:
        raise LaplaceFailed(f"the mode search diverged: still rising by {climbed.rise:.3g} nats after {n_grad_evals} "
                            f"gradients, so log pi has no maximum (a funnel rising without bound as a scale goes to 0, "
                            f"an improper posterior, or a missing Jacobian term)")
    log_prob = float(lp[best])
    climbed_log_prob = float(density.logp(climbed.point)[0])
    if climbed_log_prob - log_prob >= RUNAWAY:  # the first search had stopped short: the climb's end is the mode
        mode, log_prob = climbed.point[0], climbed_log_prob
    else:  # it had converged; sub-nat moves along a flat direction are no better mode
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
    return Laplace(mode, 0.5 * (cov + cov.T), log_prob, n_grad_evals, jitter)


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


def laplace_start(target, density: Density, start: Tensor, gen: torch.Generator, mass: str) -> tuple[Tensor, Tensor]:
    """MCMC's ``init=laplace``: the chains start at draws from N(mode, H^-1), the metric at H^-1.

    Raises NoMode where the search ended in a funnel's neck (:func:`in_a_neck`), where a Gaussian would start every
    chain in the neck, and with fit_laplace's reason where there is no Laplace approximation (a search that keeps
    rising, which a proper posterior's funnel does as well as an improper posterior): the caller then starts from
    the initial points, and the sampler's own checks (a ridge, a +inf density) name an improper posterior."""
    try:
        laplace = fit_laplace(target, density, start)
    except LaplaceFailed as exc:
        raise NoMode(f"no Laplace start: {exc}") from None
    neck, at_mode, at_start = in_a_neck(density, laplace.mode[None], start.mean(0, keepdim=True))
    if neck:
        raise NoMode(f"the Laplace mode search ended in a funnel's neck or at the edge of the support after "
                     f"{laplace.n_grad_evals} gradients (a "
                     f"Gaussian of sd {NECK_SD:g} there has the lower ELBO, {at_mode:.4g} against {at_start:.4g} at "
                     f"the initial points' mean)")
    return gaussian_start(laplace.mode, laplace.cov, start, gen, mass)
