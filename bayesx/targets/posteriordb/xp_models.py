"""The suite's posteriors transcribed a second time, from the Stan programs, for one point and any array
namespace ``xp`` (numpy here; jax.numpy for the peers' benchmark).

This transcription is written independently of the torch densities (bayesx/targets/posteriordb/torch_models.py)
so that the tests can compare the two: it follows the Stan program line by line (its loops stay loops,
its likelihoods are summed observation by observation where the torch side uses matrix forms and
sufficient statistics). It uses only functions that numpy and jax.numpy share (``log``, ``exp``,
``logaddexp``, ``sum``, ``stack``, ``linalg.cholesky``, ...).

For each posterior, on Stan's unconstrained space (the parameters in declaration order, each mapped by
Stan's transform, the log absolute Jacobian determinant added to the log density; Stan Reference
Manual, "Constraint transforms"):

    log_density(xp, q, data)   q (dim,) -> the log density, up to a constant
    constrain(xp, q, data)     q (dim,) -> the constrained parameters (p,), in the reference draws' order
    unconstrain(params, data)  numpy (n, p) constrained draws -> (n, dim) unconstrained ones (tests)

Transforms used: lower bound 0, x = exp(u), log J = u; interval (0, 1), x = logistic(u),
log J = log x + log(1 - x); interval (0, b), x = b logistic(u), log J = log b + log x' + log(1 - x');
ordered, x1 = u1, x_k = x_{k-1} + exp(u_k), log J = sum_{k>1} u_k; positive ordered: the same with
x1 = exp(u1); simplex of size 2 by stick breaking, x = (logistic(u), 1 - logistic(u)),
log J = log x1 + log x2.

The ODE models are integrated by the classical Runge-Kutta method with a fixed number of steps per interval
between measurement times (``_rk4``, on lists of scalars), where Stan calls an adaptive solver; the tests
compare its solutions with scipy's adaptive solver at tight tolerances.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def _normal(xp, x, mu, sigma):
    """normal_lpdf without its -log(2 pi) / 2."""
    z = (x - mu) / sigma
    return -0.5 * z * z - xp.log(sigma)


def _logistic(xp, u):
    return 1.0 / (1.0 + xp.exp(-u))


def _log_logistic(xp, u):
    return -xp.logaddexp(0.0 * u, -u)


def _logit(x):
    return np.log(x) - np.log1p(-x)


def _lognormal(xp, x, mu, sigma):
    """lognormal_lpdf without its -log(2 pi) / 2."""
    return _normal(xp, xp.log(x), mu, sigma) - xp.log(x)


def _half_cauchy(xp, x, scale):
    """cauchy_lpdf(x | 0, scale) on x > 0, up to a constant."""
    return -xp.log(1.0 + (x / scale) ** 2)


def _rk4(rhs, z0: list, t0, times, steps: int) -> list[list]:
    """z(t_n) for dz/dt = rhs(t, z), z(t0) = z0, z a list of scalars: the classical Runge-Kutta method, ``steps``
    equal steps per interval between successive times."""
    z, t, out = list(z0), t0, []
    for t_next in times:
        h = (t_next - t) / steps
        for _ in range(steps):
            k1 = rhs(t, z)
            k2 = rhs(t + h / 2, [zi + h / 2 * ki for zi, ki in zip(z, k1)])
            k3 = rhs(t + h / 2, [zi + h / 2 * ki for zi, ki in zip(z, k2)])
            k4 = rhs(t + h, [zi + h * ki for zi, ki in zip(z, k3)])
            z = [zi + h / 6 * (a + 2 * b + 2 * c + e) for zi, a, b, c, e in zip(z, k1, k2, k3, k4)]
            t = t + h
        out.append(z)
        t = t_next
    return out


def _log_sum_exp(xp, values: list):
    out = values[0]
    for v in values[1:]:
        out = xp.logaddexp(out, v)
    return out


# --- eight schools --------------------------------------------------------------------------------
def eight_schools_noncentered(xp, q, d):
    theta_trans, mu, tau = q[:8], q[8], xp.exp(q[9])
    theta = theta_trans * tau + mu
    lp = xp.sum(-0.5 * theta_trans * theta_trans)
    for j in range(8):
        lp = lp + _normal(xp, d["y"][j], theta[j], d["sigma"][j])
    lp = lp - 0.5 * (mu / 5.0) ** 2
    lp = lp - xp.log(1.0 + (tau / 5.0) ** 2)
    return lp + q[9]


def eight_schools_noncentered_constrain(xp, q, d):
    tau = xp.exp(q[9])
    return xp.concatenate([q[:8] * tau + q[8], xp.stack([q[8], tau])])


def eight_schools_noncentered_unconstrain(p, d):
    theta, mu, tau = p[:, :8], p[:, 8:9], p[:, 9:10]
    return np.concatenate([(theta - mu) / tau, mu, np.log(tau)], axis=1)


def eight_schools_centered(xp, q, d):
    theta, mu, tau = q[:8], q[8], xp.exp(q[9])
    lp = -xp.log(1.0 + (tau / 5.0) ** 2)
    for j in range(8):
        lp = lp + _normal(xp, theta[j], mu, tau)
        lp = lp + _normal(xp, d["y"][j], theta[j], d["sigma"][j])
    lp = lp - 0.5 * (mu / 5.0) ** 2
    return lp + q[9]


# --- regressions ------------------------------------------------------------------------------------
def diamonds(xp, q, d):
    """brms's program: b ~ N(0, 1), Intercept ~ t_3(8, 10), sigma ~ half-t_3(0, 10), Y ~ N(Intercept + Xc b, sigma)
    with Xc the centred predictors (columns 2..K of X)."""
    x = d["X"][:, 1:]
    xc = x - xp.mean(x, axis=0)
    b, intercept, sigma = q[:24], q[24], xp.exp(q[25])
    lp = xp.sum(-0.5 * b * b)
    lp = lp - 2.0 * xp.log(1.0 + ((intercept - 8.0) / 10.0) ** 2 / 3.0)
    lp = lp - 2.0 * xp.log(1.0 + (sigma / 10.0) ** 2 / 3.0)
    lp = lp + xp.sum(_normal(xp, d["Y"], intercept + xc @ b, sigma))
    return lp + q[25]


def _scale_last_unconstrain(p, d):
    """Unconstrained parameters, then one positive scale last (the regressions, eight_schools_centered)."""
    return np.concatenate([p[:, :-1], np.log(p[:, -1:])], axis=1)


def _scale_last_constrain(xp, q, d):
    return xp.concatenate([q[:-1], xp.exp(q[-1:])])


def kidscore_interaction(xp, q, d):
    beta, sigma = q[:4], xp.exp(q[4])
    mean = beta[0] + beta[1] * d["mom_hs"] + beta[2] * d["mom_iq"] + beta[3] * (d["mom_hs"] * d["mom_iq"])
    lp = -xp.log(1.0 + (sigma / 2.5) ** 2)
    return lp + xp.sum(_normal(xp, d["kid_score"], mean, sigma)) + q[4]


def logmesquite_logvas(xp, q, d):
    beta, sigma = q[:7], xp.exp(q[7])
    log = xp.log
    mean = (beta[0] + beta[1] * log(d["diam1"] * d["diam2"] * d["canopy_height"])
            + beta[2] * log(d["diam1"] * d["diam2"]) + beta[3] * log(d["diam1"] / d["diam2"])
            + beta[4] * log(d["total_height"]) + beta[5] * log(d["density"]) + beta[6] * d["group"])
    return xp.sum(_normal(xp, log(d["weight"]), mean, sigma)) + q[7]


def sblri_blr(xp, q, d):
    beta, sigma = q[:5], xp.exp(q[5])
    lp = xp.sum(-0.5 * (beta / 10.0) ** 2) - 0.5 * (sigma / 10.0) ** 2
    return lp + xp.sum(_normal(xp, d["y"], d["X"] @ beta, sigma)) + q[5]


def kilpisjarvi(xp, q, d):
    alpha, beta, sigma = q[0], q[1], xp.exp(q[2])
    lp = _normal(xp, alpha, d["pmualpha"], d["psalpha"]) + _normal(xp, beta, d["pmubeta"], d["psbeta"])
    return lp + xp.sum(_normal(xp, d["y"], alpha + beta * d["x"], sigma)) + q[2]


# --- time series ------------------------------------------------------------------------------------
def arK(xp, q, d):
    y, k_lags = d["y"], 5
    alpha, beta, sigma = q[0], q[1:6], xp.exp(q[6])
    lp = -0.5 * (alpha / 10.0) ** 2 + xp.sum(-0.5 * (beta / 10.0) ** 2) - xp.log(1.0 + (sigma / 2.5) ** 2)
    t_all = y.shape[0]
    mu = alpha
    for k in range(k_lags):
        mu = mu + beta[k] * y[k_lags - 1 - k:t_all - 1 - k]
    return lp + xp.sum(_normal(xp, y[k_lags:], mu, sigma)) + q[6]


def arma11(xp, q, d):
    y = d["y"]
    mu, phi, theta, sigma = q[0], q[1], q[2], xp.exp(q[3])
    lp = -0.5 * (mu / 10.0) ** 2 - 0.5 * (phi / 2.0) ** 2 - 0.5 * (theta / 2.0) ** 2 - xp.log(1.0 + (sigma / 2.5) ** 2)
    err = y[0] - (mu + phi * mu)
    lp = lp + _normal(xp, err, 0.0, sigma)
    for t in range(1, y.shape[0]):
        err = y[t] - (mu + phi * y[t - 1] + theta * err)
        lp = lp + _normal(xp, err, 0.0, sigma)
    return lp + q[3]


def garch11(xp, q, d):
    y = d["y"]
    mu, alpha0 = q[0], xp.exp(q[1])
    alpha1 = _logistic(xp, q[2])
    beta_unit = _logistic(xp, q[3])
    beta1 = (1.0 - alpha1) * beta_unit
    sigma = d["sigma1"] + 0.0 * mu
    lp = _normal(xp, y[0], mu, sigma)
    for t in range(1, y.shape[0]):
        sigma = xp.sqrt(alpha0 + alpha1 * (y[t - 1] - mu) ** 2 + beta1 * sigma * sigma)
        lp = lp + _normal(xp, y[t], mu, sigma)
    log_jacobian = (q[1] + xp.log(alpha1) + xp.log(1.0 - alpha1)
                    + xp.log(1.0 - alpha1) + xp.log(beta_unit) + xp.log(1.0 - beta_unit))
    return lp + log_jacobian


def garch11_constrain(xp, q, d):
    alpha1 = _logistic(xp, q[2])
    return xp.stack([q[0], xp.exp(q[1]), alpha1, (1.0 - alpha1) * _logistic(xp, q[3])])


def garch11_unconstrain(p, d):
    alpha1 = p[:, 2]
    return np.stack([p[:, 0], np.log(p[:, 1]), _logit(alpha1), _logit(p[:, 3] / (1.0 - alpha1))], axis=1)


# --- Gaussian process ---------------------------------------------------------------------------------
def _gp_f(xp, q, d):
    rho, alpha, f_tilde = xp.exp(q[0]), xp.exp(q[1]), q[2:]
    x = d["x"]
    n = x.shape[0]
    cov = alpha ** 2 * xp.exp(-0.5 * ((x[:, None] - x[None, :]) / rho) ** 2) + 1e-10 * xp.eye(n)
    return rho, alpha, xp.linalg.cholesky(cov) @ f_tilde


def gp_pois_regr(xp, q, d):
    rho, alpha, f = _gp_f(xp, q, d)
    lp = 24.0 * xp.log(rho) - 4.0 * rho - 0.5 * (alpha / 2.0) ** 2 + xp.sum(-0.5 * q[2:] ** 2)
    lp = lp + xp.sum(d["k"] * f - xp.exp(f))
    return lp + q[0] + q[1]


def gp_pois_regr_constrain(xp, q, d):
    rho, alpha, f = _gp_f(xp, q, d)
    return xp.concatenate([xp.stack([rho, alpha]), f])


def gp_pois_regr_unconstrain(p, d):
    x = d["x"]
    out = np.empty_like(p, dtype=np.float64)
    for i, row in enumerate(p.astype(np.float64)):
        rho, alpha, f = row[0], row[1], row[2:]
        cov = alpha ** 2 * np.exp(-0.5 * ((x[:, None] - x[None, :]) / rho) ** 2) + 1e-10 * np.eye(x.shape[0])
        out[i] = np.concatenate([[np.log(rho), np.log(alpha)], np.linalg.solve(np.linalg.cholesky(cov), f)])
    return out


# --- mixtures -----------------------------------------------------------------------------------------
def low_dim_gauss_mix(xp, q, d):
    mu1 = q[0]
    mu2 = mu1 + xp.exp(q[1])
    sigma1, sigma2 = xp.exp(q[2]), xp.exp(q[3])
    theta = _logistic(xp, q[4])
    lp = -0.5 * (sigma1 / 2.0) ** 2 - 0.5 * (sigma2 / 2.0) ** 2 - 0.5 * (mu1 / 2.0) ** 2 - 0.5 * (mu2 / 2.0) ** 2
    lp = lp + 4.0 * xp.log(theta) + 4.0 * xp.log(1.0 - theta)
    y = d["y"]
    lp = lp + xp.sum(xp.logaddexp(xp.log(theta) + _normal(xp, y, mu1, sigma1),
                                  xp.log(1.0 - theta) + _normal(xp, y, mu2, sigma2)))
    return lp + q[1] + q[2] + q[3] + xp.log(theta) + xp.log(1.0 - theta)


def low_dim_gauss_mix_constrain(xp, q, d):
    return xp.stack([q[0], q[0] + xp.exp(q[1]), xp.exp(q[2]), xp.exp(q[3]), _logistic(xp, q[4])])


def low_dim_gauss_mix_unconstrain(p, d):
    return np.stack([p[:, 0], np.log(p[:, 1] - p[:, 0]), np.log(p[:, 2]), np.log(p[:, 3]), _logit(p[:, 4])], axis=1)


def hmm_example(xp, q, d):
    """Two states; theta[j, k] the probability of moving from state j to k; y_t ~ N(mu_k, 1) in state k;
    the forward algorithm in log space."""
    z1, z2 = _logistic(xp, q[0]), _logistic(xp, q[1])
    mu1 = xp.exp(q[2])
    mu2 = mu1 + xp.exp(q[3])
    log_theta = [[xp.log(z1), xp.log(1.0 - z1)], [xp.log(z2), xp.log(1.0 - z2)]]
    mus = [mu1, mu2]
    y = d["y"]
    lp = _normal(xp, mu1, 3.0, 1.0) + _normal(xp, mu2, 10.0, 1.0)
    gamma = [-0.5 * (y[0] - mus[k]) ** 2 for k in range(2)]
    for t in range(1, y.shape[0]):
        gamma = [xp.logaddexp(gamma[0] + log_theta[0][k], gamma[1] + log_theta[1][k]) - 0.5 * (y[t] - mus[k]) ** 2
                 for k in range(2)]
    lp = lp + xp.logaddexp(gamma[0], gamma[1])
    return lp + xp.log(z1) + xp.log(1.0 - z1) + xp.log(z2) + xp.log(1.0 - z2) + q[2] + q[3]


def hmm_example_constrain(xp, q, d):
    z1, z2 = _logistic(xp, q[0]), _logistic(xp, q[1])
    mu1 = xp.exp(q[2])
    return xp.stack([z1, 1.0 - z1, z2, 1.0 - z2, mu1, mu1 + xp.exp(q[3])])


def hmm_example_unconstrain(p, d):
    return np.stack([_logit(p[:, 0]), _logit(p[:, 2]), np.log(p[:, 4]), np.log(p[:, 5] - p[:, 4])], axis=1)


# --- the drive HMMs: the forward algorithm, loops over time and states as in the Stan program --------------
def _hmm_drive(emission, positive: bool):
    """The log density of hmm_drive_0 (positive-ordered phi and lambda, exponential emissions) or hmm_drive_1
    (ordered, normal): ``emission(xp, d, t, phi_k, lambda_k)`` is log p(u_t, v_t | state k)."""

    def log_density(xp, q, d):
        th1, th2 = _logistic(xp, q[0]), _logistic(xp, q[1])
        theta = [[th1, 1.0 - th1], [th2, 1.0 - th2]]
        first = xp.exp if positive else (lambda u: u)
        phi = [first(q[2])]
        phi.append(phi[0] + xp.exp(q[3]))
        lam = [first(q[4])]
        lam.append(lam[0] + xp.exp(q[5]))
        alpha, n_states = d["alpha"], 2
        lp = 0.0
        for k in range(n_states):
            for j in range(n_states):
                lp = lp + (alpha[k, j] - 1.0) * xp.log(theta[k][j])
        lp = lp + _normal(xp, phi[0], 0.0, 1.0) + _normal(xp, phi[1], 3.0, 1.0)
        lp = lp + _normal(xp, lam[0], 0.0, 1.0) + _normal(xp, lam[1], 3.0, 1.0)
        gamma = [emission(xp, d, 0, phi[k], lam[k]) for k in range(n_states)]
        for t in range(1, d["u"].shape[0]):
            gamma = [_log_sum_exp(xp, [gamma[j] + xp.log(theta[j][k]) + emission(xp, d, t, phi[k], lam[k])
                                       for j in range(n_states)]) for k in range(n_states)]
        lp = lp + _log_sum_exp(xp, gamma)
        log_jacobian = xp.log(th1) + xp.log(1.0 - th1) + xp.log(th2) + xp.log(1.0 - th2) + q[3] + q[5]
        return lp + log_jacobian + ((q[2] + q[4]) if positive else 0.0)

    return log_density


def _exponential_emission(xp, d, t, phi, lam):
    return xp.log(phi) - phi * d["u"][t] + xp.log(lam) - lam * d["v"][t]


def _normal_emission(xp, d, t, phi, lam):
    return _normal(xp, d["u"][t], phi, d["tau"]) + _normal(xp, d["v"][t], lam, d["rho"])


def _hmm_drive_constrain(positive: bool):
    def constrain(xp, q, d):
        th1, th2 = _logistic(xp, q[0]), _logistic(xp, q[1])
        phi1, lam1 = (xp.exp(q[2]), xp.exp(q[4])) if positive else (q[2], q[4])
        return xp.stack([th1, 1.0 - th1, th2, 1.0 - th2, phi1, phi1 + xp.exp(q[3]), lam1, lam1 + xp.exp(q[5])])

    return constrain


def _hmm_drive_unconstrain(positive: bool):
    """logit(theta[1]) = log theta[1] - log theta[2]: both stored, so a probability near 1 keeps its precision."""

    def unconstrain(p, d):
        first = np.log if positive else (lambda x: x)
        return np.stack([np.log(p[:, 0]) - np.log(p[:, 1]), np.log(p[:, 2]) - np.log(p[:, 3]), first(p[:, 4]),
                         np.log(p[:, 5] - p[:, 4]), first(p[:, 6]), np.log(p[:, 7] - p[:, 6])], axis=1)

    return unconstrain


# --- ODE models, by fixed-step RK4 ----------------------------------------------------------------------
ODE_STEPS = 20  # RK4 steps per interval between measurement times


def lotka_volterra_solution(xp, theta, z_init, d, steps: int = ODE_STEPS) -> list[list]:
    """[prey, predator] at each measurement time, from z_init at t = 0."""
    alpha, beta, gamma, delta = theta

    def dz_dt(t, z):
        u, v = z
        return [(alpha - beta * v) * u, (-gamma + delta * u) * v]

    return _rk4(dz_dt, z_init, 0.0, [float(t) for t in d["ts"]], steps)


def lotka_volterra(xp, q, d):
    theta = [xp.exp(q[i]) for i in range(4)]
    z_init = [xp.exp(q[4]), xp.exp(q[5])]
    sigma = [xp.exp(q[6]), xp.exp(q[7])]
    z = lotka_volterra_solution(xp, theta, z_init, d)
    lp = _normal(xp, theta[0], 1.0, 0.5) + _normal(xp, theta[2], 1.0, 0.5)
    lp = lp + _normal(xp, theta[1], 0.05, 0.05) + _normal(xp, theta[3], 0.05, 0.05)
    for k in range(2):
        lp = lp + _lognormal(xp, sigma[k], -1.0, 1.0) + _lognormal(xp, z_init[k], xp.log(10.0), 1.0)
    for k in range(2):
        lp = lp + _lognormal(xp, d["y_init"][k], xp.log(z_init[k]), sigma[k])
        for n in range(len(z)):
            lp = lp + _lognormal(xp, d["y"][n, k], xp.log(z[n][k]), sigma[k])
    return lp + xp.sum(q)


def _exp_constrain(xp, q, d):
    """Every parameter positive: x = exp(u)."""
    return xp.exp(q)


def _log_unconstrain(p, d):
    return np.log(p)


def one_comp_solution(xp, k_a, K_m, V_m, d, steps: int = ODE_STEPS) -> list[list]:
    """[C] at each measurement time, from C = 0 at t0."""
    D, V = d["D"], d["V"]

    def dc_dt(t, y):
        dose = xp.exp(-k_a * t) * D * k_a / V  # the t > 0 branch at t = 0 too (torch_models.OneCompMMElimAbs)
        elim = (V_m / V) * y[0] / (K_m + y[0])
        return [dose - elim]

    return _rk4(dc_dt, [0.0 * k_a], float(d["t0"]), [float(t) for t in d["times"]], steps)


def one_comp_mm_elim_abs(xp, q, d):
    k_a, K_m, V_m, sigma = xp.exp(q[0]), xp.exp(q[1]), xp.exp(q[2]), xp.exp(q[3])
    c = one_comp_solution(xp, k_a, K_m, V_m, d)
    lp = _half_cauchy(xp, k_a, 1.0) + _half_cauchy(xp, K_m, 1.0) + _half_cauchy(xp, V_m, 1.0) + _half_cauchy(xp, sigma, 1.0)
    for n in range(len(c)):
        lp = lp + _lognormal(xp, d["C_hat"][n], xp.log(c[n][0]), sigma)
    return lp + xp.sum(q)


# --- Gaussian-process regression -------------------------------------------------------------------------
def gp_regr(xp, q, d):
    """y ~ multi_normal(0, K), K = alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2)) + sigma I, by a log determinant and a
    linear solve (the torch side by the Cholesky factor)."""
    rho, alpha, sigma = xp.exp(q[0]), xp.exp(q[1]), xp.exp(q[2])
    x, y = d["x"], d["y"]
    cov = alpha**2 * xp.exp(-0.5 * ((x[:, None] - x[None, :]) / rho) ** 2) + sigma * xp.eye(x.shape[0])
    _, log_det = xp.linalg.slogdet(cov)
    lp = -0.5 * log_det - 0.5 * xp.sum(y * xp.linalg.solve(cov, y))
    lp = lp + 24.0 * xp.log(rho) - 4.0 * rho - 0.5 * (alpha / 2.0) ** 2 - 0.5 * sigma**2
    return lp + xp.sum(q)


# --- regressions of the ARM book (flat priors unless stated) -----------------------------------------------
def _regression(predictors, sigma_cauchy: bool = False):
    """The log density of y ~ normal(beta[1] + beta[2] x_1 + ..., sigma), ``predictors(xp, d) -> ([x_1, ...], y)``
    as the Stan program's transformed data; flat priors, or sigma ~ cauchy(0, 2.5) where ``sigma_cauchy``."""

    def log_density(xp, q, d):
        xs, y = predictors(xp, d)
        mean = q[0]
        for k, x in enumerate(xs):
            mean = mean + q[k + 1] * x
        sigma = xp.exp(q[len(xs) + 1])
        lp = xp.sum(_normal(xp, y, mean, sigma))
        if sigma_cauchy:
            lp = lp + _half_cauchy(xp, sigma, 2.5)
        return lp + q[len(xs) + 1]

    return log_density


def _z(xp, x, scale=1.0):
    return (x - xp.mean(x)) / (scale * xp.std(x, ddof=1))


def _is(x, level):
    return (x == level) * 1.0


def _logmesquite(xp, d):
    log = xp.log
    return ([log(d["diam1"]), log(d["diam2"]), log(d["canopy_height"]), log(d["total_height"]), log(d["density"]),
             d["group"]], log(d["weight"]))


def _logmesquite_logvash(xp, d):
    log = xp.log
    return ([log(d["diam1"] * d["diam2"] * d["canopy_height"]), log(d["diam1"] * d["diam2"]), log(d["diam1"] / d["diam2"]),
             log(d["total_height"]), d["group"]], log(d["weight"]))


def _nes(xp, d):
    age = d["age_discrete"]
    return ([d["real_ideo"], d["race_adj"], _is(age, 2), _is(age, 3), _is(age, 4), d["educ1"], d["gender"], d["income"]],
            d["partyid7"])


REGRESSIONS = {  # name: (predictors, sigma ~ cauchy(0, 2.5))
    "earn_height": (lambda xp, d: ([d["height"]], d["earn"]), False),
    "log10earn_height": (lambda xp, d: ([d["height"]], xp.log10(d["earn"])), False),
    "logearn_height": (lambda xp, d: ([d["height"]], xp.log(d["earn"])), False),
    "logearn_height_male": (lambda xp, d: ([d["height"], d["male"]], xp.log(d["earn"])), False),
    "logearn_logheight_male": (lambda xp, d: ([xp.log(d["height"]), d["male"]], xp.log(d["earn"])), False),
    "logearn_interaction": (lambda xp, d: ([d["height"], d["male"], d["height"] * d["male"]], xp.log(d["earn"])), False),
    "logearn_interaction_z": (lambda xp, d: ([_z(xp, d["height"]), d["male"], _z(xp, d["height"]) * d["male"]],
                                             xp.log(d["earn"])), False),
    "kidscore_momhs": (lambda xp, d: ([d["mom_hs"]], d["kid_score"]), True),
    "kidscore_momiq": (lambda xp, d: ([d["mom_iq"]], d["kid_score"]), True),
    "kidscore_momhsiq": (lambda xp, d: ([d["mom_hs"], d["mom_iq"]], d["kid_score"]), True),
    "kidscore_interaction_c": (lambda xp, d: ([d["mom_hs"] - xp.mean(d["mom_hs"]), d["mom_iq"] - xp.mean(d["mom_iq"]),
                                               (d["mom_hs"] - xp.mean(d["mom_hs"])) * (d["mom_iq"] - xp.mean(d["mom_iq"]))],
                                              d["kid_score"]), False),
    "kidscore_interaction_c2": (lambda xp, d: ([d["mom_hs"] - 0.5, d["mom_iq"] - 100.0,
                                                (d["mom_hs"] - 0.5) * (d["mom_iq"] - 100.0)], d["kid_score"]), False),
    "kidscore_interaction_z": (lambda xp, d: ([_z(xp, d["mom_hs"], 2.0), _z(xp, d["mom_iq"], 2.0),
                                               _z(xp, d["mom_hs"], 2.0) * _z(xp, d["mom_iq"], 2.0)], d["kid_score"]), False),
    "kidscore_mom_work": (lambda xp, d: ([_is(d["mom_work"], 2), _is(d["mom_work"], 3), _is(d["mom_work"], 4)],
                                         d["kid_score"]), False),
    "mesquite": (lambda xp, d: ([d["diam1"], d["diam2"], d["canopy_height"], d["total_height"], d["density"], d["group"]],
                                d["weight"]), False),
    "logmesquite": (_logmesquite, False),
    "logmesquite_logva": (lambda xp, d: ([xp.log(d["diam1"] * d["diam2"] * d["canopy_height"]),
                                          xp.log(d["diam1"] * d["diam2"]), d["group"]], xp.log(d["weight"])), False),
    "logmesquite_logvash": (_logmesquite_logvash, False),
    "logmesquite_logvolume": (lambda xp, d: ([xp.log(d["diam1"] * d["diam2"] * d["canopy_height"])], xp.log(d["weight"])),
                              False),
    **{f"nes{year}": (_nes, False) for year in range(1972, 2001, 4)},
}


@dataclass(frozen=True)
class XPModel:
    log_density: Callable  # (xp, q (dim,), data) -> scalar
    constrain: Callable  # (xp, q (dim,), data) -> (p,)
    unconstrain: Callable  # (numpy (n, p), data) -> (n, dim)


XP_MODELS: dict[str, XPModel] = {
    "eight_schools_noncentered": XPModel(eight_schools_noncentered, eight_schools_noncentered_constrain,
                                         eight_schools_noncentered_unconstrain),
    "eight_schools_centered": XPModel(eight_schools_centered, _scale_last_constrain, _scale_last_unconstrain),
    "diamonds": XPModel(diamonds, _scale_last_constrain, _scale_last_unconstrain),
    "arK": XPModel(arK, _scale_last_constrain, _scale_last_unconstrain),
    "arma11": XPModel(arma11, _scale_last_constrain, _scale_last_unconstrain),
    "garch11": XPModel(garch11, garch11_constrain, garch11_unconstrain),
    "gp_pois_regr": XPModel(gp_pois_regr, gp_pois_regr_constrain, gp_pois_regr_unconstrain),
    "low_dim_gauss_mix": XPModel(low_dim_gauss_mix, low_dim_gauss_mix_constrain, low_dim_gauss_mix_unconstrain),
    "kidscore_interaction": XPModel(kidscore_interaction, _scale_last_constrain, _scale_last_unconstrain),
    "logmesquite_logvas": XPModel(logmesquite_logvas, _scale_last_constrain, _scale_last_unconstrain),
    "sblri_blr": XPModel(sblri_blr, _scale_last_constrain, _scale_last_unconstrain),
    "kilpisjarvi": XPModel(kilpisjarvi, _scale_last_constrain, _scale_last_unconstrain),
    "hmm_example": XPModel(hmm_example, hmm_example_constrain, hmm_example_unconstrain),
    "hmm_drive_0": XPModel(_hmm_drive(_exponential_emission, True), _hmm_drive_constrain(True), _hmm_drive_unconstrain(True)),
    "hmm_drive_1": XPModel(_hmm_drive(_normal_emission, False), _hmm_drive_constrain(False),
                           _hmm_drive_unconstrain(False)),
    "lotka_volterra": XPModel(lotka_volterra, _exp_constrain, _log_unconstrain),
    "one_comp_mm_elim_abs": XPModel(one_comp_mm_elim_abs, _exp_constrain, _log_unconstrain),
    "gp_regr": XPModel(gp_regr, _exp_constrain, _log_unconstrain),
    "sblrc_blr": XPModel(sblri_blr, _scale_last_constrain, _scale_last_unconstrain),  # the same program, blr
    **{name: XPModel(_regression(predictors, cauchy), _scale_last_constrain, _scale_last_unconstrain)
       for name, (predictors, cauchy) in REGRESSIONS.items()},
}
