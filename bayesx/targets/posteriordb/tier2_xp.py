"""The suite's second tier transcribed a second time, for one point and any array namespace ``xp`` (numpy for the
tests, jax.numpy for the reference runs and the peers, pytensor.tensor for nutpie).

Written independently of the torch densities (bayesx/targets/posteriordb/tier2_models.py), from the models'
statements: where the torch side loops over time as a user writes it, this side is vectorized (the AR(1) states
of the stochastic-volatility model by a doubling scan, the local-level model's random walk by differences), so
that XLA and pytensor see no 200- or 500-step Python loop; where the torch side calls torch.distributions and
torch.nn.functional, this side writes each log density out. The constants of the log densities are dropped.
This module imports numpy only, so experiments/make_tier2.py can load it by path in an environment without
torch (its JAX reference runs).

    log_density(xp, q, data)   q (dim,) -> the log density, up to a constant
    constrain(xp, q, data)     q (dim,) -> the constrained parameters (p,), in the reference draws' order
    unconstrain(params, data)  numpy (n, p) constrained draws -> (n, dim) unconstrained ones

Transforms: a positive x = exp(u), log J = u; phi in (-1, 1) as phi = 2 logistic(u) - 1,
log J = log 2 + log logistic(u) + log logistic(-u).

``logistic_design(seed, n, k)`` makes the 100,000-row GLM's design at load time, bit for bit the same on every
machine: integers from numpy's legacy RandomState (whose stream numpy keeps frozen), exact dyadic arithmetic and
one correctly rounded multiplication per entry, no BLAS and no libm.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LOG2 = float(np.log(2.0))


def _normal(xp, x, mu, sigma):
    """normal_lpdf without -log(2 pi) / 2."""
    z = (x - mu) / sigma
    return -0.5 * z * z - xp.log(sigma)


def _half_normal(xp, x, scale: float):
    return -0.5 * (x / scale) ** 2


def _log_logistic(xp, u):
    return -xp.logaddexp(0.0 * u, -u)


def _logistic(xp, u):
    return 1.0 / (1.0 + xp.exp(-u))


def _bernoulli_logit(xp, y, eta):
    """sum of log Bernoulli(y | logistic(eta)) = y eta - log(1 + e^eta)."""
    return xp.sum(y * eta - xp.logaddexp(0.0 * eta, eta))


# --- stochastic volatility ----------------------------------------------------------------------------------
def _ar1_states(xp, phi, c, n: int):
    """x_t = phi x_(t-1) + c_t, x_1 = c_1 (t = 1..n), by a doubling scan (after step j: x_t = sum over the last
    2^(j+1) s <= t of phi^(t-s) c_s); log2(n) vector steps, no loop over time. ``n`` is given (the data's length)
    so that a symbolic namespace (pytensor, whose shapes are symbolic) unrolls the same log2(n) steps."""
    x, power, shift = c, phi, 1
    while shift < n:
        x = x + power * xp.concatenate([xp.zeros(shift), x[:n - shift]])
        power, shift = power * power, 2 * shift
    return x


def _sv_h(xp, q, d):
    mu, phi, sigma, h_std = q[0], 2.0 * _logistic(xp, q[1]) - 1.0, xp.exp(q[2]), q[3:]
    first = xp.reshape(sigma * h_std[0] / xp.sqrt(1.0 - phi * phi), (1,))
    return mu, phi, sigma, mu + _ar1_states(xp, phi, xp.concatenate([first, sigma * h_std[1:]]), len(d["y"]))


def sv_latent(xp, q, d):
    """mu ~ cauchy(0, 10), phi ~ uniform(-1, 1), sigma ~ cauchy+(0, 5), h_std ~ N(0, 1); h_1 = mu + sigma h_std_1 /
    sqrt(1 - phi^2), h_t = mu + phi (h_(t-1) - mu) + sigma h_std_t; y_t ~ N(0, exp(h_t / 2))."""
    mu, phi, sigma, h = _sv_h(xp, q, d)
    lp = -xp.log(1.0 + (mu / 10.0) ** 2) - xp.log(1.0 + (sigma / 5.0) ** 2) + xp.sum(-0.5 * q[3:] ** 2)
    lp = lp + xp.sum(-0.5 * d["y"] ** 2 * xp.exp(-h) - 0.5 * h)
    return lp + LOG2 + _log_logistic(xp, q[1]) + _log_logistic(xp, -q[1]) + q[2]


def sv_latent_constrain(xp, q, d):
    mu, phi, sigma, h = _sv_h(xp, q, d)
    return xp.concatenate([xp.stack([mu, phi, sigma]), h])


def sv_latent_unconstrain(p, d):
    mu, phi, sigma, h = p[:, 0:1], p[:, 1:2], p[:, 2:3], p[:, 3:]
    x = h - mu
    h_std = np.concatenate([x[:, :1] * np.sqrt(1.0 - phi**2), x[:, 1:] - phi * x[:, :-1]], axis=1) / sigma
    u_phi = np.log1p(phi) - np.log1p(-phi)  # logit((phi + 1) / 2)
    return np.concatenate([mu, u_phi, np.log(sigma), h_std], axis=1)


# --- the local-level model ----------------------------------------------------------------------------------
def local_level(xp, q, d):
    """sigma_eps ~ N+(0, 2), sigma_eta ~ N+(0, 1), x_1 ~ N(0, 10), x_t ~ N(x_(t-1), sigma_eta), y_t ~ N(x_t,
    sigma_eps)."""
    s_eps, s_eta, x = xp.exp(q[0]), xp.exp(q[1]), q[2:]
    lp = _half_normal(xp, s_eps, 2.0) + _half_normal(xp, s_eta, 1.0) + _normal(xp, x[0], 0.0, 10.0)
    lp = lp + xp.sum(_normal(xp, x[1:] - x[:-1], 0.0, s_eta)) + xp.sum(_normal(xp, d["y"], x, s_eps))
    return lp + q[0] + q[1]


def _log2_constrain(xp, q, d):
    return xp.concatenate([xp.exp(q[:2]), q[2:]])


def _log2_unconstrain(p, d):
    return np.concatenate([np.log(p[:, :2]), p[:, 2:]], axis=1)


# --- hierarchical models (non-centred group effects) ---------------------------------------------------------
def hier_normal(xp, q, d):
    """mu ~ N(0, 5), beta ~ N(0, 5), tau ~ N+(0, 2), sigma ~ N+(0, 2), z_j ~ N(0, 1), alpha_j = mu + tau z_j;
    y_i ~ N(alpha_(g_i) + beta x_i, sigma)."""
    mu, beta, tau, sigma, z = q[0], q[1], xp.exp(q[2]), xp.exp(q[3]), q[4:]
    alpha = mu + tau * z
    lp = -0.5 * (mu / 5.0) ** 2 - 0.5 * (beta / 5.0) ** 2 + _half_normal(xp, tau, 2.0) + _half_normal(xp, sigma, 2.0)
    lp = lp + xp.sum(-0.5 * z * z) + xp.sum(_normal(xp, d["y"], alpha[d["g"]] + beta * d["x"], sigma))
    return lp + q[2] + q[3]


def _hier_constrain(n_scales: int):
    """[mu, beta..., log tau, (log sigma), z] -> [mu, beta..., tau, (sigma), alpha]."""

    def constrain(xp, q, d):
        k = q.shape[0] - d["n_per_group"].shape[0] - n_scales  # mu and the betas
        tau = xp.exp(q[k])
        return xp.concatenate([q[:k], xp.exp(q[k:k + n_scales]), q[0] + tau * q[k + n_scales:]])

    def unconstrain(p, d):
        k = p.shape[1] - d["n_per_group"].shape[0] - n_scales
        tau = p[:, k:k + 1]
        return np.concatenate([p[:, :k], np.log(p[:, k:k + n_scales]), (p[:, k + n_scales:] - p[:, :1]) / tau], axis=1)

    return constrain, unconstrain


def hier_logistic(xp, q, d):
    """mu ~ N(0, 2.5), beta_k ~ N(0, 2.5), tau ~ N+(0, 1), z_j ~ N(0, 1), alpha_j = mu + tau z_j;
    y_i ~ Bernoulli(logistic(alpha_(g_i) + X_i beta))."""
    k = d["X"].shape[1]
    mu, beta, tau, z = q[0], q[1:1 + k], xp.exp(q[1 + k]), q[2 + k:]
    alpha = mu + tau * z
    lp = -0.5 * (mu / 2.5) ** 2 + xp.sum(-0.5 * (beta / 2.5) ** 2) + _half_normal(xp, tau, 1.0) + xp.sum(-0.5 * z * z)
    return lp + _bernoulli_logit(xp, d["y"], alpha[d["g"]] + xp.dot(d["X"], beta)) + q[1 + k]


# --- a GLM on 100,000 rows ------------------------------------------------------------------------------------
def logistic_design(seed: int, n: int, k: int, rho: float = 0.5) -> np.ndarray:
    """(n, k) predictors, each column an AR(1) mix of the previous (correlation rho between neighbours), unit
    variance: e_ij = (sum of 4 uniform 16-bit integers / 2^16 - 2) sqrt(3) (Irwin-Hall, variance 1),
    x_i1 = e_i1, x_ij = rho x_i(j-1) + sqrt(1 - rho^2) e_ij. Bit-reproducible (module docstring)."""
    ints = np.random.RandomState(seed).randint(0, 2**16, size=(n, k, 4)).astype(np.float64)
    e = (ints.sum(-1) / 2.0**16 - 2.0) * np.sqrt(3.0)
    x = np.empty((n, k))
    x[:, 0] = e[:, 0]
    for j in range(1, k):
        x[:, j] = rho * x[:, j - 1] + np.sqrt(1.0 - rho * rho) * e[:, j]
    return x


def design_digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype="<f8").tobytes()).hexdigest()


def logistic_100k(xp, q, d):
    """alpha ~ N(0, 2.5), beta_k ~ N(0, 2.5); y_i ~ Bernoulli(logistic(alpha + X_i beta))."""
    alpha, beta = q[0], q[1:]
    lp = -0.5 * (alpha / 2.5) ** 2 + xp.sum(-0.5 * (beta / 2.5) ** 2)
    return lp + _bernoulli_logit(xp, d["y"], alpha + xp.dot(d["X"], beta))


def _identity_constrain(xp, q, d):
    return q


def _identity_unconstrain(p, d):
    return np.asarray(p, dtype=np.float64)


# --- a latent Gaussian process, Poisson counts ----------------------------------------------------------------
_CHOLESKY: dict[bytes, np.ndarray] = {}


def matern32_cholesky(x: np.ndarray, rho: float, jitter: float = 1e-8) -> np.ndarray:
    """The Cholesky factor of the Matern-3/2 correlation (1 + sqrt(3) r / rho) exp(-sqrt(3) r / rho) + jitter I on
    the inputs x, computed once per data set in numpy (a constant of the density)."""
    key = np.asarray(x, np.float64).tobytes() + np.float64(rho).tobytes()
    if key not in _CHOLESKY:
        x = np.asarray(x, np.float64)
        r = np.sqrt(3.0) * np.abs(x[:, None] - x[None, :]) / rho
        _CHOLESKY[key] = np.linalg.cholesky((1.0 + r) * np.exp(-r) + jitter * np.eye(len(x)))
    return _CHOLESKY[key]


def _gp_f(xp, q, d):
    chol = matern32_cholesky(np.asarray(d["x"]), float(np.asarray(d["rho"])))
    return q[0], xp.exp(q[1]), q[0] + xp.exp(q[1]) * xp.dot(chol, q[2:])


def gp_latent_poisson(xp, q, d):
    """mu ~ N(0, 2), alpha ~ N+(0, 1), z ~ N(0, I), f = mu + alpha L z (L L' the Matern-3/2 correlation of length
    scale rho on the inputs x); k_i ~ Poisson(exp(f_i))."""
    mu, alpha, f = _gp_f(xp, q, d)
    lp = -0.5 * (mu / 2.0) ** 2 + _half_normal(xp, alpha, 1.0) + xp.sum(-0.5 * q[2:] ** 2)
    return lp + xp.sum(d["k"] * f - xp.exp(f)) + q[1]


def gp_latent_poisson_constrain(xp, q, d):
    mu, alpha, f = _gp_f(xp, q, d)
    return xp.concatenate([xp.stack([mu, alpha]), f])


def gp_latent_poisson_unconstrain(p, d):
    chol = matern32_cholesky(np.asarray(d["x"]), float(np.asarray(d["rho"])))
    mu, alpha = p[:, 0:1], p[:, 1:2]
    z = np.linalg.solve(chol, ((p[:, 2:] - mu) / alpha).T).T
    return np.concatenate([mu, np.log(alpha), z], axis=1)


# --- the regularized horseshoe ---------------------------------------------------------------------------------
SLAB_SCALE, SLAB_DF, P0 = 2.0, 4.0, 8.0  # Piironen and Vehtari (2017): c^2 = slab_scale^2 caux, p0 relevant


def _horseshoe(xp, q, d):
    p = d["X"].shape[1]
    beta0, sigma, tau, caux = q[0], xp.exp(q[1]), xp.exp(q[2]), xp.exp(q[3])
    z, lam = q[4:4 + p], xp.exp(q[4 + p:])
    c2 = SLAB_SCALE**2 * caux
    lam_tilde = xp.sqrt(c2 * lam * lam / (c2 + tau * tau * lam * lam))
    return beta0, sigma, tau, caux, z, lam, z * lam_tilde * tau


def horseshoe(xp, q, d):
    """beta0 ~ N(0, 5), sigma ~ N+(0, 2), tau ~ cauchy+(0, tau0 sigma) with tau0 = p0 / ((p - p0) sqrt(n)),
    caux ~ inv_gamma(slab_df / 2, slab_df / 2), lambda_j ~ cauchy+(0, 1), z_j ~ N(0, 1),
    beta_j = z_j tau lambda~_j, lambda~_j^2 = c^2 lambda_j^2 / (c^2 + tau^2 lambda_j^2), c^2 = slab_scale^2 caux;
    y_i ~ N(beta0 + X_i beta, sigma)."""
    n, p = d["X"].shape
    beta0, sigma, tau, caux, z, lam, beta = _horseshoe(xp, q, d)
    scale = P0 / ((p - P0) * np.sqrt(n)) * sigma
    lp = -0.5 * (beta0 / 5.0) ** 2 + _half_normal(xp, sigma, 2.0)
    lp = lp - xp.log(scale) - xp.log(1.0 + (tau / scale) ** 2)
    lp = lp - (SLAB_DF / 2 + 1.0) * xp.log(caux) - (SLAB_DF / 2) / caux
    lp = lp + xp.sum(-xp.log(1.0 + lam * lam)) + xp.sum(-0.5 * z * z)
    lp = lp + xp.sum(_normal(xp, d["y"], beta0 + xp.dot(d["X"], beta), sigma))
    return lp + q[1] + q[2] + q[3] + xp.sum(q[4 + p:])


def horseshoe_constrain(xp, q, d):
    beta0, sigma, tau, caux, z, lam, beta = _horseshoe(xp, q, d)
    return xp.concatenate([xp.stack([beta0, sigma, tau, caux]), lam, beta])


def horseshoe_unconstrain(p, d):
    n_coef = d["X"].shape[1]
    beta0, sigma, tau, caux = (p[:, i:i + 1] for i in range(4))
    lam, beta = p[:, 4:4 + n_coef], p[:, 4 + n_coef:]
    c2 = SLAB_SCALE**2 * caux
    lam_tilde = np.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
    return np.concatenate([beta0, np.log(sigma), np.log(tau), np.log(caux), beta / (lam_tilde * tau), np.log(lam)],
                          axis=1)


# --- a two-parameter item-response model ---------------------------------------------------------------------
def irt_2pl(xp, q, d):
    """theta_i ~ N(0, 1), a_j ~ lognormal(0, 0.5), mu_b ~ N(0, 2), sigma_b ~ N+(0, 2), b_j ~ N(mu_b, sigma_b);
    Y_ij ~ Bernoulli(logistic(a_j (theta_i - b_j)))."""
    n_students, n_items = d["Y"].shape
    theta, log_a = q[:n_students], q[n_students:n_students + n_items]
    b, mu_b, sigma_b = q[n_students + n_items:n_students + 2 * n_items], q[-2], xp.exp(q[-1])
    a = xp.exp(log_a)
    lp = xp.sum(-0.5 * theta * theta) + xp.sum(-0.5 * (log_a / 0.5) ** 2)  # lognormal: the -log a cancels log J
    lp = lp - 0.5 * (mu_b / 2.0) ** 2 + _half_normal(xp, sigma_b, 2.0) + xp.sum(_normal(xp, b, mu_b, sigma_b))
    eta = a[None, :] * (theta[:, None] - b[None, :])
    return lp + _bernoulli_logit(xp, d["Y"], eta) + q[-1]


def irt_2pl_constrain(xp, q, d):
    n_students, n_items = d["Y"].shape
    k = n_students + n_items
    return xp.concatenate([q[:n_students], xp.exp(q[n_students:k]), q[k:-1], xp.exp(q[-1:])])


def irt_2pl_unconstrain(p, d):
    n_students, n_items = d["Y"].shape
    k = n_students + n_items
    return np.concatenate([p[:, :n_students], np.log(p[:, n_students:k]), p[:, k:-1], np.log(p[:, -1:])], axis=1)


@dataclass(frozen=True)
class XPModel:
    log_density: Callable  # (xp, q (dim,), data) -> scalar
    constrain: Callable  # (xp, q (dim,), data) -> (p,)
    unconstrain: Callable  # (numpy (n, p), data) -> (n, dim)


_HIER2, _UNHIER2 = _hier_constrain(2)
_HIER1, _UNHIER1 = _hier_constrain(1)

TIER2_XP: dict[str, XPModel] = {
    "sv_latent": XPModel(sv_latent, sv_latent_constrain, sv_latent_unconstrain),
    "local_level": XPModel(local_level, _log2_constrain, _log2_unconstrain),
    "hier_normal": XPModel(hier_normal, _HIER2, _UNHIER2),
    "hier_logistic": XPModel(hier_logistic, _HIER1, _UNHIER1),
    "logistic_100k": XPModel(logistic_100k, _identity_constrain, _identity_unconstrain),
    "gp_latent_poisson": XPModel(gp_latent_poisson, gp_latent_poisson_constrain, gp_latent_poisson_unconstrain),
    "horseshoe": XPModel(horseshoe, horseshoe_constrain, horseshoe_unconstrain),
    "irt_2pl": XPModel(irt_2pl, irt_2pl_constrain, irt_2pl_unconstrain),
}
