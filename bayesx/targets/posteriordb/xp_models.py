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
}
