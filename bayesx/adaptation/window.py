"""Warm-up adaptation: step size by dual averaging, metric from windowed covariance estimates.

Step size (Hoffman and Gelman 2014, sec. 3.2.1): with a_t the mean acceptance statistic of
iteration t and delta the target,
    h_t   = (1 - 1/(t + t0)) h_{t-1} + (delta - a_t) / (t + t0)
    x_t   = mu - sqrt(t) / gamma * h_t,            (x = log step size, mu = log(10 eps_0))
    xbar_t = t^-kappa x_t + (1 - t^-kappa) xbar_{t-1},
and exp(xbar) is used after warm-up. gamma = 0.05, t0 = 10, kappa = 0.75 as in Stan.

Metric (Stan's windowed scheme): a fast initial buffer (step size only), then slow windows of
doubling length whose draws estimate the posterior covariance, then a fast terminal buffer.
Draws are pooled over chains after centring each chain on its own mean (within-chain
covariance), so chains still far apart do not inflate the estimate. At the end of each slow
window the step size search restarts and the inverse mass matrix becomes
- diagonal: Stan's regularized variances (n / (n + 5)) var_hat + 1e-3 (5 / (n + 5));
- dense: a shrinkage estimate that stays well conditioned when a window holds fewer draws than
  dimensions. The draws are whitened with the current metric (z = L^{-1} (x - mean)), the
  whitened coordinates are standardized, their correlation matrix R is shrunk towards I with
  the Ledoit-Wolf (2004) intensity lambda, and the result is mapped back:
      Sigma = L S^{1/2} ((1 - lambda) R + lambda I) S^{1/2} L^T,   S = diag(var(z)).
  With few draws the update keeps the current metric's shape and corrects its scales; with
  many it approaches the sample covariance.
- diag_grad: the diagonal from draws *and gradients* (Seyboldt, Carlson and Kumar, the adaptation
  of nutpie): M^-1_i = sqrt(var(q_i) / var(d log p / dq_i)). For a Gaussian posterior with
  covariance S both variances are known (var q_i = S_ii, var grad_i = (S^-1)_ii), and the ratio is
  exact for independent coordinates; it uses the gradients the sampler computed anyway, so one short
  window already gives the scales. (nutpie also starts from M^-1_i = 1 / |grad_i| at the initial
  points; inside Stan's windows, where the first 75 iterations keep the starting metric, that start
  doubled the warm-up's gradient count on digits, so the warm-up starts from the identity as for diag.)
- lowrank: diag_grad's diagonal D times a correction of rank at most ``rank`` found from the same
  draws and gradients. In the coordinates scaled by D^(-1/2), the draws' covariance P and the
  gradients' covariance C are restricted to the span of the window's scaled draws and gradients; the
  covariance that fits both, the S with S C S = P (the geometric mean of P and C^-1, exact for a
  Gaussian), is diagonalized there, and its eigenvalues furthest from 1 (outside [1/2, 2], the
  ``rank`` largest in |log|) replace 1 in their directions:
      M^-1 = D^(1/2) (I + W (Lambda - I) W^T) D^(1/2),
  stored dense. It pays where a few directions are strongly correlated in many dimensions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from bayesx.errors import DensityError
from bayesx.kernels.common import energy_error
from bayesx.kernels.integrators import PhaseState, leapfrog
from bayesx.kernels.metric import Metric, kinetic_energy, make_metric, sample_momentum


class DualAveraging:
    """Scalar dual-averaging controller for log step size, shared by all chains."""

    def __init__(self, step_size: float, target_accept: float, gamma=0.05, t0=10.0, kappa=0.75):
        self.target_accept, self.gamma, self.t0, self.kappa = target_accept, gamma, t0, kappa
        self.restart(step_size)

    def restart(self, step_size: float) -> None:
        self.mu = math.log(10.0 * step_size)
        self.t = 0
        self.h_bar = 0.0
        self.log_step = math.log(step_size)
        self.log_step_avg = 0.0

    def update(self, accept_prob: float) -> float:
        """Feed one iteration's mean acceptance statistic; return the next step size."""
        accept_prob = 0.0 if math.isnan(accept_prob) else min(1.0, accept_prob)
        self.t += 1
        eta = 1.0 / (self.t + self.t0)
        self.h_bar = (1.0 - eta) * self.h_bar + eta * (self.target_accept - accept_prob)
        self.log_step = self.mu - math.sqrt(self.t) / self.gamma * self.h_bar
        weight = self.t ** (-self.kappa)
        self.log_step_avg = weight * self.log_step + (1.0 - weight) * self.log_step_avg
        return math.exp(self.log_step)

    @property
    def final_step_size(self) -> float:
        return math.exp(self.log_step_avg)


@dataclass(frozen=True)
class WarmupSchedule:
    """Which warm-up iterations collect draws for the metric, and where each window ends."""

    num_warmup: int
    windows: tuple[tuple[int, int], ...]  # half-open [start, end) slow windows

    @classmethod
    def build(cls, num_warmup: int, init_buffer=75, term_buffer=50, base_window=25, adapt_metric=True):
        if not adapt_metric or num_warmup < 20:
            return cls(num_warmup, ())
        if init_buffer + base_window + term_buffer > num_warmup:  # Stan's fallback proportions
            init_buffer = int(0.15 * num_warmup)
            term_buffer = int(0.1 * num_warmup)
            base_window = num_warmup - init_buffer - term_buffer
        windows = []
        start, size = init_buffer, base_window
        last = num_warmup - term_buffer
        while start < last:
            end = start + size
            if end + 2 * size > last:  # the next window would not fit: stretch this one
                end = last
            windows.append((start, end))
            start, size = end, 2 * size
        return cls(num_warmup, tuple(windows))

    def window_at(self, iteration: int) -> tuple[int, int] | None:
        for window in self.windows:
            if window[0] <= iteration < window[1]:
                return window
        return None


def _centred(draws: Tensor) -> tuple[Tensor, int]:
    """Draws (chains, n, dim) centred per chain and flattened, with the degrees of freedom."""
    flat = (draws - draws.mean(dim=1, keepdim=True)).reshape(-1, draws.shape[-1])
    return flat, max(flat.shape[0] - draws.shape[0], 1)


def regularized_variance(draws: Tensor) -> Tensor:
    """Within-chain variances of draws (chains, n, dim), regularized as in Stan."""
    flat, dof = _centred(draws)
    n = flat.shape[0]
    return n / (n + 5.0) * (flat * flat).sum(0) / dof + 1e-3 * 5.0 / (n + 5.0)


def ledoit_wolf_intensity(u: Tensor) -> float:
    """Ledoit-Wolf shrinkage intensity of the covariance of centred rows u towards mu I."""
    n, dim = u.shape
    cov = u.T @ u / n
    mu = torch.trace(cov) / dim
    delta = ((cov - mu * torch.eye(dim, dtype=u.dtype, device=u.device)) ** 2).sum() / dim
    beta_bar = ((u * u).sum(1) ** 2).sum() - n * (cov**2).sum()
    beta = torch.clamp(beta_bar / (n * n * dim), min=0.0)
    return float(torch.clamp(beta / delta, max=1.0)) if float(delta) > 0 else 1.0


def shrunk_covariance(draws: Tensor, current: Metric) -> Tensor:
    """Dense inverse mass matrix from draws, shrunk in the current metric's whitened frame."""
    flat, dof = _centred(draws)
    z = flat @ current.chol_inv.T if current.dense else flat * current.chol_inv
    scale = ((z * z).sum(0) / dof).clamp(min=1e-12).sqrt()
    u = z / scale
    lam = ledoit_wolf_intensity(u)
    corr = (1.0 - lam) * (u.T @ u / dof) + lam * torch.eye(u.shape[1], dtype=u.dtype, device=u.device)
    cov_z = scale[:, None] * corr * scale[None, :]
    chol = current.chol if current.dense else torch.diag(current.chol)
    cov = chol @ cov_z @ chol.T
    return 0.5 * (cov + cov.T)


MASS_FORMS = ("diag", "dense", "identity", "diag_grad", "lowrank")
DENSE_FORMS = ("dense", "lowrank")  # stored as a full matrix
GRADIENT_FORMS = ("diag_grad", "lowrank")  # estimated from the draws and their gradients


def gradient_scaled_variance(draws: Tensor, grads: Tensor) -> Tensor:
    """sqrt(var(q) / var(grad)) per coordinate, within-chain, for draws and grads (chains, n, dim)."""
    flat_q, dof = _centred(draws)
    return _variance_ratio(flat_q, _centred(grads)[0], dof)


def _variance_ratio(flat_q: Tensor, flat_g: Tensor, dof: int) -> Tensor:
    """sqrt(var(q) / var(grad)) from centred rows."""
    var_q = (flat_q * flat_q).sum(0) / dof
    var_g = (flat_g * flat_g).sum(0) / dof
    tiny = torch.finfo(flat_q.dtype).tiny ** 0.5
    return torch.sqrt(var_q.clamp(min=tiny) / var_g.clamp(min=tiny))


def low_rank_inverse_mass(draws: Tensor, grads: Tensor, rank: int, cutoff: float = 2.0) -> Tensor:
    """diag_grad's diagonal with a rank <= ``rank`` correction (the module docstring), as a dense matrix."""
    flat_q, dof = _centred(draws)
    flat_g, _ = _centred(grads)
    diag = _variance_ratio(flat_q, flat_g, dof)
    root = diag.sqrt()
    x, g = flat_q / root, flat_g * root  # the scaled coordinates: draws' and gradients' covariances ~ S, S^-1
    basis, _ = torch.linalg.qr(torch.cat([x, g], 0).T)  # (dim, r0): their span
    p = basis.T @ (x.T @ x) @ basis / dof
    c = basis.T @ (g.T @ g) @ basis / dof
    eye = torch.eye(p.shape[0], dtype=p.dtype, device=p.device)
    ridge = 1e-10 * eye
    c_val, c_vec = torch.linalg.eigh(c + ridge)
    c_half = c_vec @ torch.diag(c_val.clamp(min=1e-12).sqrt()) @ c_vec.T
    c_half_inv = c_vec @ torch.diag(c_val.clamp(min=1e-12).rsqrt()) @ c_vec.T
    m_val, m_vec = torch.linalg.eigh(c_half @ (p + ridge) @ c_half)
    middle = m_vec @ torch.diag(m_val.clamp(min=1e-24).sqrt()) @ m_vec.T
    fit = c_half_inv @ middle @ c_half_inv  # S with S C S = P
    values, vectors = torch.linalg.eigh(0.5 * (fit + fit.T))
    values = values.clamp(min=1e-12)
    keep = torch.argsort(values.log().abs(), descending=True)[:rank]
    keep = keep[values[keep].log().abs() > math.log(cutoff)]
    w = basis @ vectors[:, keep]  # (dim, kept), orthonormal columns
    scaled = torch.eye(len(diag), dtype=diag.dtype, device=diag.device) + (w * (values[keep] - 1.0)) @ w.T
    inv_mass = root[:, None] * scaled * root[None, :]
    return 0.5 * (inv_mass + inv_mass.T)


def update_inverse_mass(draws: Tensor, current: Metric, mass: str, grads: Tensor | None = None,
                        rank: int = 10) -> Tensor:
    """The inverse mass matrix at the end of a slow window (see the module docstring)."""
    if mass == "diag_grad":
        return gradient_scaled_variance(draws, grads)
    if mass == "lowrank":
        return low_rank_inverse_mass(draws, grads, rank)
    return shrunk_covariance(draws, current) if mass == "dense" else regularized_variance(draws)


def adapted_metric(inv_mass: Tensor) -> Metric:
    """The metric of a slow window's estimate, which must be a finite, positive definite covariance (or positive
    variances). One that is not means the window's draws spread without bound along some direction: a ridge or a
    half-line where the density does not decay (an improper posterior, a redundant parameter), not a fault of the
    sampler; the run stops there in one line (DensityError) instead of a linear-algebra traceback."""
    usable = bool(torch.isfinite(inv_mass).all())
    if usable and inv_mass.dim() == 2:
        usable = int(torch.linalg.cholesky_ex(inv_mass)[1]) == 0
    elif usable:
        usable = bool((inv_mass > 0).all())
    if not usable:
        hint = " (or its scales differ beyond float32's precision: try device.dtype=float64)" \
            if inv_mass.dtype == torch.float32 else ""
        raise DensityError("improper posterior likely: the warm-up's estimate of the posterior covariance is not "
                           "positive definite, as the draws spread without bound along some direction (a ridge or a "
                           f"flat direction){hint}; give every parameter a proper prior, or check the density for a "
                           "forgotten Jacobian or a redundant parameter")
    return make_metric(inv_mass)


def find_initial_step_size(state, density, metric, gen, step_size: float = 1.0, threshold: float = 0.8) -> float:
    """Hoffman and Gelman's (2014, Alg. 4) heuristic: double or halve the step size until the
    mean one-step acceptance across chains crosses ``threshold``."""

    def one_step_accept(eps: float) -> float:
        p0 = sample_momentum(metric, state.position.shape, gen)
        start = PhaseState(state.position, p0, state.log_prob, state.grad)
        end = leapfrog(start, eps, metric, density)
        h0 = -state.log_prob + kinetic_energy(metric, p0)
        h1 = -end.log_prob + kinetic_energy(metric, end.momentum)
        return float(torch.exp(torch.clamp(-energy_error(h1, h0), max=0.0)).mean())

    return bracket_step_size(one_step_accept, step_size, threshold)


def bracket_step_size(one_step_accept, step_size: float, threshold: float = 0.8) -> float:
    """Double or halve ``step_size`` until ``one_step_accept(step_size)`` (a mean acceptance
    probability) crosses ``threshold``; the core of Hoffman and Gelman's Alg. 4, for any kernel."""
    accept = one_step_accept(step_size)
    direction = 1.0 if accept > threshold else -1.0
    for _ in range(60):
        step_size *= 2.0**direction
        accept = one_step_accept(step_size)
        if (direction > 0 and accept <= threshold) or (direction < 0 and accept > threshold):
            break
    if direction > 0:  # we overshot by one doubling
        step_size /= 2.0
    return step_size


@dataclass
class WarmupProgress:
    """Where a warm-up stands: the chain's state, the step size, the metric and the gradient
    evaluations so far (read by the caller also after an interrupt), and what a sampler's own warm-up tuned
    beyond the step size and the metric (``tuned``, e.g. a trajectory length: the kernel's ``parameters`` take it
    as keywords, and a checkpoint stores it)."""

    state: object
    step_size: float
    metric: Metric
    grad_evals: int = 0
    tuned: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowAdaptation:
    """Stan's warm-up wrapped around any kernel, in the shape of BlackJAX's window adaptation: the
    kernel's ``step``, how its parameters are made from a step size and a metric, and how a starting
    step size is searched are handed in; nothing is subclassed.

    Every iteration feeds the mean acceptance statistic to dual averaging (if ``adapt_step_size``);
    at the end of each slow window of ``schedule`` the metric is re-estimated from the window's
    draws (``update_inverse_mass``), the step size searched again and dual averaging restarted.
    After the last iteration the step size is dual averaging's averaged iterate.
    """

    step: object  # (state, density, params, gen) -> (state, info)
    make_params: object  # (step_size, metric) -> params
    search_step_size: object  # (state, metric, guess) -> step size
    schedule: WarmupSchedule
    target_accept: float
    adapt_step_size: bool = True
    mass: str = "diag"  # one of MASS_FORMS
    rank: int = 10  # of the lowrank correction

    def run(self, progress: WarmupProgress, density, gen, on_step=None) -> WarmupProgress:
        """Run the schedule's iterations, updating ``progress`` as it goes; ``on_step(info, step_size,
        iteration)`` after each (a progress bar)."""
        controller = DualAveraging(progress.step_size, self.target_accept)
        params = self.make_params(progress.step_size, progress.metric)
        window_draws: list[Tensor] = []
        window_grads: list[Tensor] = []
        with_grads = self.mass in GRADIENT_FORMS
        for it in range(self.schedule.num_warmup):
            progress.state, info = self.step(progress.state, density, params, gen)
            progress.grad_evals += int(info.n_grad_evals.sum())
            if self.adapt_step_size:
                progress.step_size = controller.update(float(info.accept_prob.mean()))
            window = self.schedule.window_at(it)
            if window is not None:
                window_draws.append(progress.state.position)
                if with_grads:
                    window_grads.append(progress.state.grad)
                if it == window[1] - 1:
                    grads = torch.stack(window_grads, 1) if with_grads else None
                    progress.metric = adapted_metric(update_inverse_mass(torch.stack(window_draws, 1), progress.metric,
                                                                         self.mass, grads, self.rank))
                    window_draws, window_grads = [], []
                    if self.adapt_step_size:
                        progress.step_size = self.search_step_size(progress.state, progress.metric, progress.step_size)
                        controller.restart(progress.step_size)
            params = self.make_params(progress.step_size, progress.metric)
            if on_step is not None:
                on_step(info, progress.step_size, it)
        if self.adapt_step_size and self.schedule.num_warmup > 0:
            progress.step_size = controller.final_step_size
        return progress
