"""The suite's posteriors as batched torch densities on Stan's unconstrained space.

Each model maps q (..., dim) to its constrained parameter blocks with Stan's transforms (Stan Reference
Manual, "Constraint transforms": lower bound 0 by exp, an interval by an affine logistic, ordered and
positive-ordered vectors by cumulative sums of exponentials, a simplex by stick breaking), adds the
log absolute Jacobian determinant of each block, and evaluates the Stan program's log density on the
constrained parameters (constants dropped). The densities are vectorized over the leading batch
dimensions: the regressions through matrix products or sufficient statistics (diamonds: X'X, X'y),
the ARMA and GARCH recursions as scans of linear recurrences (log2 T vector steps). A second,
independent transcription (bayesx/targets/posteriordb/xp_models.py) follows the Stan programs line by
line; the tests compare the two.

A model's log-Jacobian terms are kept by name (``transform`` returns them), so that a test can drop one
and see the Stein identity on the reference draws fail.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


# --- Stan's transforms: (constrained value, log |Jacobian|) -------------------------------------------
def positive(u: Tensor) -> tuple[Tensor, Tensor]:
    return u.exp(), u


def unit_interval(u: Tensor, upper: Tensor | float = 1.0) -> tuple[Tensor, Tensor]:
    """x = upper * logistic(u) in (0, upper); log J = log upper + log logistic(u) + log logistic(-u), with
    log logistic(u) = -softplus(-u) (F.logsigmoid takes milliseconds on a strided view, torch 2.x)."""
    log_upper = torch.log(upper) if isinstance(upper, Tensor) else math.log(upper)
    return upper * torch.sigmoid(u), log_upper - F.softplus(-u) - F.softplus(u)


def ordered(u: Tensor, first_positive: bool = False) -> tuple[Tensor, Tensor]:
    """x_1 = u_1 (exp(u_1) when positive ordered), x_k = x_{k-1} + exp(u_k)."""
    first = u[..., :1].exp() if first_positive else u[..., :1]
    x = torch.cat([first, first + torch.cumsum(u[..., 1:].exp(), -1)], -1)
    log_jacobian = u[..., 1:].sum(-1) + (u[..., 0] if first_positive else 0.0)
    return x, log_jacobian


def simplex2(u: Tensor) -> tuple[Tensor, Tensor]:
    """A simplex of size 2 by stick breaking: (logistic(u), 1 - logistic(u))."""
    x, log_jacobian = unit_interval(u)
    return torch.stack([x, 1.0 - x], -1), log_jacobian


def normal_lpdf(x: Tensor, mu, sigma) -> Tensor:
    return -0.5 * ((x - mu) / sigma) ** 2 - torch.log(torch.as_tensor(sigma))


def cauchy_lpdf(x: Tensor, scale: float) -> Tensor:
    return -torch.log1p((x / scale) ** 2)


def student_t_lpdf(x: Tensor, nu: float, mu: float, scale: float) -> Tensor:
    return -0.5 * (nu + 1.0) * torch.log1p(((x - mu) / scale) ** 2 / nu)


def gaussian_sum(sum_sq: Tensor, n: int, sigma: Tensor) -> Tensor:
    """log prod_i N(r_i; 0, sigma) from sum_i r_i^2, without -n log(2 pi) / 2."""
    return -0.5 * sum_sq / sigma**2 - n * torch.log(sigma)


def linear_recurrence(a: Tensor, c: Tensor) -> Tensor:
    """x_t = a x_{t-1} + c_t, x_1 = c_1, along the last axis of c (..., T), a (..., 1): a Hillis-Steele
    scan, after step j x_t = sum over the last 2^(j+1) s <= t of a^(t-s) c_s; log2(T) vector steps."""
    x, power, shift = c, a, 1
    while shift < c.shape[-1]:
        x = x + power * F.pad(x[..., :-shift], (shift, 0))
        power, shift = power * power, 2 * shift
    return x


def log_matmul(a: Tensor, b: Tensor) -> Tensor:
    """The matrix product in log space: log(exp(a) @ exp(b)), batched."""
    return torch.logsumexp(a[..., :, :, None] + b[..., None, :, :], -2)


def log_matrix_chain(m: Tensor) -> Tensor:
    """log(exp(m_1) @ exp(m_2) @ ... @ exp(m_n)) for m (..., n, K, K), by pairwise products (log2 n steps)."""
    while m.shape[-3] > 1:
        odd = m.shape[-3] % 2
        pairs = log_matmul(m[..., 0:m.shape[-3] - odd:2, :, :], m[..., 1::2, :, :])
        m = torch.cat([pairs, m[..., m.shape[-3] - 1:, :, :]], -3) if odd else pairs
    return m[..., 0, :, :]


class TorchModel:
    """A posterior on Stan's unconstrained space, batched over leading dimensions of q."""

    dim: int

    def __init__(self, data: dict[str, np.ndarray], dtype: torch.dtype, device: torch.device):
        self.dtype, self.device = dtype, device
        self.prepare({k: torch.as_tensor(np.asarray(v), dtype=dtype, device=device) for k, v in data.items()})

    def prepare(self, data: dict[str, Tensor]) -> None:
        """Keep what the density needs of the data (transformed data, sufficient statistics)."""
        self.data = data

    def transform(self, q: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The constrained parameter blocks by name and the log-Jacobian of each transformed block."""
        raise NotImplementedError

    def log_density(self, p: dict[str, Tensor]) -> Tensor:
        """The Stan program's log density at the constrained parameters (constants dropped)."""
        raise NotImplementedError

    def outputs(self, p: dict[str, Tensor]) -> Tensor:
        """The constrained parameters in the reference draws' order, (..., p)."""
        raise NotImplementedError

    def log_prob(self, q: Tensor, drop: tuple[str, ...] = ()) -> Tensor:
        """log p(q) on the unconstrained space; ``drop`` leaves out the Jacobians of the named blocks
        (a deliberately wrong density, the negative control of the tests)."""
        params, jacobians = self.transform(q)
        unknown = set(drop) - set(jacobians)
        if unknown:
            raise KeyError(f"no Jacobian term {sorted(unknown)}; the terms are {sorted(jacobians)}")
        return self.log_density(params) + sum(j for name, j in jacobians.items() if name not in drop)

    def constrain(self, q: Tensor) -> Tensor:
        return self.outputs(self.transform(q)[0])


class ScaleLast(TorchModel):
    """Unconstrained coefficients ``beta``, then one positive scale ``sigma`` (the regressions and AR models)."""

    def transform(self, q):
        sigma, log_jacobian = positive(q[..., -1])
        return {"beta": q[..., :-1], "sigma": sigma}, {"sigma": log_jacobian}

    def outputs(self, p):
        return torch.cat([p["beta"], p["sigma"][..., None]], -1)


class EightSchoolsNoncentered(TorchModel):
    dim = 10

    def transform(self, q):
        tau, log_jacobian = positive(q[..., 9])
        return {"theta_trans": q[..., :8], "mu": q[..., 8], "tau": tau}, {"tau": log_jacobian}

    def log_density(self, p):
        theta = p["mu"][..., None] + p["tau"][..., None] * p["theta_trans"]
        d = self.data
        return (-0.5 * (p["theta_trans"] ** 2).sum(-1) - 0.5 * (((d["y"] - theta) / d["sigma"]) ** 2).sum(-1)
                - 0.5 * (p["mu"] / 5.0) ** 2 + cauchy_lpdf(p["tau"], 5.0))

    def outputs(self, p):
        theta = p["mu"][..., None] + p["tau"][..., None] * p["theta_trans"]
        return torch.cat([theta, p["mu"][..., None], p["tau"][..., None]], -1)


class EightSchoolsCentered(TorchModel):
    dim = 10

    def transform(self, q):
        tau, log_jacobian = positive(q[..., 9])
        return {"theta": q[..., :8], "mu": q[..., 8], "tau": tau}, {"tau": log_jacobian}

    def log_density(self, p):
        d, tau = self.data, p["tau"][..., None]
        prior = (-0.5 * ((p["theta"] - p["mu"][..., None]) / tau) ** 2 - torch.log(tau)).sum(-1)
        return (cauchy_lpdf(p["tau"], 5.0) + prior - 0.5 * (((d["y"] - p["theta"]) / d["sigma"]) ** 2).sum(-1)
                - 0.5 * (p["mu"] / 5.0) ** 2)

    def outputs(self, p):
        return torch.cat([p["theta"], p["mu"][..., None], p["tau"][..., None]], -1)


class Diamonds(ScaleLast):
    """Y ~ N(a + Xc b, sigma), Xc the centred predictors, through sufficient statistics expanded around the
    least-squares fit (b_ls, mean(Y)): |Y - a - Xc b|^2 = S_min + (b - b_ls)' Xc'Xc (b - b_ls) + n (a - mean(Y))^2
    (Xc'1 = 0), computed once in float64, so it keeps its precision in float32 too."""

    dim = 26

    def prepare(self, data):
        x, y = data["X"][:, 1:].double(), data["Y"].double()
        xc = x - x.mean(0)
        gram = xc.T @ xc
        b_ls = torch.linalg.solve(gram, xc.T @ (y - y.mean()))
        self.n = int(y.shape[0])
        self.min_sum_sq = float(((y - y.mean() - xc @ b_ls) ** 2).sum())
        self.gram, self.b_ls, self.y_mean = gram.to(self.dtype), b_ls.to(self.dtype), float(y.mean())

    def log_density(self, p):
        b, a = p["beta"][..., :24], p["beta"][..., 24]
        d = b - self.b_ls
        sum_sq = self.min_sum_sq + ((d @ self.gram) * d).sum(-1) + self.n * (a - self.y_mean) ** 2
        return (-0.5 * (b**2).sum(-1) + student_t_lpdf(a, 3.0, 8.0, 10.0) + student_t_lpdf(p["sigma"], 3.0, 0.0, 10.0)
                + gaussian_sum(sum_sq, self.n, p["sigma"]))


class LinearRegression(ScaleLast):
    """y ~ N(X beta, sigma) with the design built by ``design`` from the data, and the priors of ``prior``."""

    def prepare(self, data):
        self.x, self.y = self.design(data)
        self.dim = self.x.shape[1] + 1
        self.data = data

    def design(self, data) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def prior(self, p) -> Tensor:
        return torch.zeros_like(p["sigma"])

    def log_density(self, p):
        residual = self.y - p["beta"] @ self.x.T
        return self.prior(p) + normal_lpdf(residual, 0.0, p["sigma"][..., None]).sum(-1)


class KidscoreInteraction(LinearRegression):
    def design(self, d):
        return torch.stack([torch.ones_like(d["mom_hs"]), d["mom_hs"], d["mom_iq"], d["mom_hs"] * d["mom_iq"]], 1), d["kid_score"]

    def prior(self, p):
        return cauchy_lpdf(p["sigma"], 2.5)


class LogMesquiteLogvas(LinearRegression):
    def design(self, d):
        area = d["diam1"] * d["diam2"]
        columns = [torch.ones_like(area), torch.log(area * d["canopy_height"]), torch.log(area),
                   torch.log(d["diam1"] / d["diam2"]), torch.log(d["total_height"]), torch.log(d["density"]), d["group"]]
        return torch.stack(columns, 1), torch.log(d["weight"])


class SblriBlr(LinearRegression):
    def design(self, d):
        return d["X"], d["y"]

    def prior(self, p):
        return -0.5 * ((p["beta"] / 10.0) ** 2).sum(-1) - 0.5 * (p["sigma"] / 10.0) ** 2


class Kilpisjarvi(LinearRegression):
    def design(self, d):
        return torch.stack([torch.ones_like(d["x"]), d["x"]], 1), d["y"]

    def prior(self, p):
        d = self.data
        return (-0.5 * ((p["beta"][..., 0] - d["pmualpha"]) / d["psalpha"]) ** 2
                - 0.5 * ((p["beta"][..., 1] - d["pmubeta"]) / d["psbeta"]) ** 2)


class ArK(LinearRegression):
    """y_t ~ N(alpha + sum_k beta_k y_{t-k}, sigma), t > K: a regression on the lagged series."""

    lags = 5

    def design(self, d):
        y, k = d["y"], self.lags
        lagged = torch.stack([y[k - j:len(y) - j] for j in range(1, k + 1)], 1)
        return torch.cat([torch.ones_like(y[k:, None]), lagged], 1), y[k:]

    def prior(self, p):
        return -0.5 * ((p["beta"] / 10.0) ** 2).sum(-1) + cauchy_lpdf(p["sigma"], 2.5)


class Arma11(ScaleLast):
    """err_t = c_t - theta err_{t-1} with c_1 = y_1 - mu (1 + phi), c_t = y_t - mu - phi y_{t-1}: a linear
    recurrence, evaluated as a scan."""

    dim = 4

    def log_density(self, p):
        mu, phi, theta = (p["beta"][..., i, None] for i in range(3))
        y = self.data["y"]
        c = torch.cat([y[:1] - mu * (1.0 + phi), y[1:] - mu - phi * y[:-1]], -1)
        err = linear_recurrence(-theta, c)
        prior = -0.5 * (mu[..., 0] / 10.0) ** 2 - 0.5 * (phi[..., 0] / 2.0) ** 2 - 0.5 * (theta[..., 0] / 2.0) ** 2
        return prior + cauchy_lpdf(p["sigma"], 2.5) + gaussian_sum((err**2).sum(-1), len(y), p["sigma"])


class Garch11(TorchModel):
    """sigma_t^2 = alpha0 + alpha1 (y_{t-1} - mu)^2 + beta1 sigma_{t-1}^2 is a linear recurrence in sigma^2,
    evaluated as a scan."""

    dim = 4

    def transform(self, q):
        alpha0, j0 = positive(q[..., 1])
        alpha1, j1 = unit_interval(q[..., 2])
        beta1, j2 = unit_interval(q[..., 3], 1.0 - alpha1)
        return {"mu": q[..., 0], "alpha0": alpha0, "alpha1": alpha1, "beta1": beta1}, \
            {"alpha0": j0, "alpha1": j1, "beta1": j2}

    def log_density(self, p):
        y = self.data["y"]
        mu, alpha0, alpha1, beta1 = (p[k][..., None] for k in ("mu", "alpha0", "alpha1", "beta1"))
        shocks = alpha0 + alpha1 * (y[:-1] - mu) ** 2  # t = 2..T
        first = (self.data["sigma1"] ** 2).expand_as(mu)
        var = linear_recurrence(beta1, torch.cat([first, shocks], -1))  # sigma_t^2, t = 1..T
        return (-0.5 * (y - mu) ** 2 / var - 0.5 * torch.log(var)).sum(-1)

    def outputs(self, p):
        return torch.stack([p["mu"], p["alpha0"], p["alpha1"], p["beta1"]], -1)


class GpPoisRegr(TorchModel):
    """f = L f_tilde, L L' = alpha^2 exp(-|x_i - x_j|^2 / (2 rho^2)) + 1e-10 I; k_i ~ Poisson(exp(f_i))."""

    dim = 13

    def prepare(self, data):
        self.data = data
        self.sq_dist = (data["x"][:, None] - data["x"][None, :]) ** 2
        self.eye = torch.eye(len(data["x"]), dtype=self.dtype, device=self.device)

    def transform(self, q):
        rho, j_rho = positive(q[..., 0])
        alpha, j_alpha = positive(q[..., 1])
        cov = alpha[..., None, None] ** 2 * torch.exp(-0.5 * self.sq_dist / rho[..., None, None] ** 2) + 1e-10 * self.eye
        chol, info = torch.linalg.cholesky_ex(cov)
        f = (chol @ q[..., 2:, None])[..., 0]
        f = torch.where((info == 0)[..., None], f, torch.full_like(f, math.nan))  # Stan rejects such a point
        return {"rho": rho, "alpha": alpha, "f_tilde": q[..., 2:], "f": f}, {"rho": j_rho, "alpha": j_alpha}

    def log_density(self, p):
        gamma = 24.0 * torch.log(p["rho"]) - 4.0 * p["rho"]  # gamma(25, 4)
        poisson = (self.data["k"] * p["f"] - torch.exp(p["f"])).sum(-1)
        return gamma - 0.5 * (p["alpha"] / 2.0) ** 2 - 0.5 * (p["f_tilde"] ** 2).sum(-1) + poisson

    def outputs(self, p):
        return torch.cat([p["rho"][..., None], p["alpha"][..., None], p["f"]], -1)


class LowDimGaussMix(TorchModel):
    dim = 5

    def transform(self, q):
        mu, j_mu = ordered(q[..., :2])
        sigma, j_sigma = positive(q[..., 2:4])
        theta, j_theta = unit_interval(q[..., 4])
        return {"mu": mu, "sigma": sigma, "theta": theta}, {"mu": j_mu, "sigma": j_sigma.sum(-1), "theta": j_theta}

    def log_density(self, p):
        y = self.data["y"]
        mu, sigma, theta = p["mu"][..., None, :], p["sigma"][..., None, :], p["theta"][..., None]
        log_weights = torch.stack([torch.log(theta), torch.log1p(-theta)], -1)
        components = log_weights + normal_lpdf(y[:, None], mu, sigma)  # (..., N, 2)
        prior = (-0.5 * (p["sigma"] / 2.0) ** 2 - 0.5 * (p["mu"] / 2.0) ** 2).sum(-1)
        beta55 = 4.0 * (torch.log(p["theta"]) + torch.log1p(-p["theta"]))
        return prior + beta55 + torch.logsumexp(components, -1).sum(-1)

    def outputs(self, p):
        return torch.cat([p["mu"], p["sigma"], p["theta"][..., None]], -1)


class HmmExample(TorchModel):
    """The forward algorithm, gamma_t = logsumexp_j(gamma_{t-1, j} + log Theta[j, :]) + log N(y_t; mu, 1), as one
    chain of log-space matrix products: p(y) = e_1' M_2 ... M_N 1 with M_t[j, k] = Theta[j, k] N(y_t; mu_k, 1)."""

    dim = 4

    def transform(self, q):
        theta1, j1 = simplex2(q[..., 0])
        theta2, j2 = simplex2(q[..., 1])
        mu, j_mu = ordered(q[..., 2:4], first_positive=True)
        return {"theta1": theta1, "theta2": theta2, "mu": mu}, {"theta1": j1, "theta2": j2, "mu": j_mu}

    def log_density(self, p):
        y = self.data["y"]
        log_transition = torch.log(torch.stack([p["theta1"], p["theta2"]], -2))  # (..., from, to)
        emission = -0.5 * (y[:, None] - p["mu"][..., None, :]) ** 2  # (..., N, K)
        steps = log_transition[..., None, :, :] + emission[..., 1:, None, :]  # (..., N - 1, from, to)
        chain = log_matrix_chain(steps)
        gamma = torch.logsumexp(emission[..., 0, :, None] + chain, -2)  # gamma_N
        prior = normal_lpdf(p["mu"][..., 0], 3.0, 1.0) + normal_lpdf(p["mu"][..., 1], 10.0, 1.0)
        return prior + torch.logsumexp(gamma, -1)

    def outputs(self, p):
        return torch.cat([p["theta1"], p["theta2"], p["mu"]], -1)


TORCH_MODELS: dict[str, type[TorchModel]] = {
    "eight_schools_noncentered": EightSchoolsNoncentered,
    "eight_schools_centered": EightSchoolsCentered,
    "diamonds": Diamonds,
    "arK": ArK,
    "arma11": Arma11,
    "garch11": Garch11,
    "gp_pois_regr": GpPoisRegr,
    "low_dim_gauss_mix": LowDimGaussMix,
    "kidscore_interaction": KidscoreInteraction,
    "logmesquite_logvas": LogMesquiteLogvas,
    "sblri_blr": SblriBlr,
    "kilpisjarvi": Kilpisjarvi,
    "hmm_example": HmmExample,
}
