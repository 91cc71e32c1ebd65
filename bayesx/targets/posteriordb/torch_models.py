"""The suite's posteriors as batched torch densities on Stan's unconstrained space.

Each model maps q (..., dim) to its constrained parameter blocks with Stan's transforms (Stan Reference
Manual, "Constraint transforms": lower bound 0 by exp, an interval by an affine logistic, ordered and
positive-ordered vectors by cumulative sums of exponentials, a simplex by stick breaking), adds the
log absolute Jacobian determinant of each block, and evaluates the Stan program's log density on the
constrained parameters (constants dropped). The densities are vectorized over the leading batch
dimensions: the regressions through matrix products or sufficient statistics (diamonds: X'X, X'y),
the ARMA and GARCH recursions as scans of linear recurrences (log2 T vector steps). The later models
are written as a user writes them from the Stan program, its loops kept as Python loops over time:
the drive HMMs' forward algorithm (416 steps of a logsumexp), and the two ODE models integrated by
fixed-step RK4 (``rk4``, 20 steps per observation interval, 400 in all) where Stan calls an adaptive
solver. A second, independent transcription (bayesx/targets/posteriordb/xp_models.py) follows the Stan
programs line by line; the tests compare the two, and the RK4 solutions with an adaptive solver.

A model's log-Jacobian terms are kept by name (``transform`` returns them), so that a test can drop one
and see the Stein identity on the reference draws fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

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


def lognormal_lpdf(x: Tensor, mu, sigma) -> Tensor:
    """Stan's lognormal_lpdf without -log(2 pi) / 2: -log x - log sigma - (log x - mu)^2 / (2 sigma^2)."""
    return normal_lpdf(torch.log(x), mu, sigma) - torch.log(x)


def rk4(rhs, z0: Tensor, t0: float, times, steps: int) -> Tensor:
    """z(t) at each of ``times`` for dz/dt = rhs(t, z), z(t0) = z0 (..., n), by the classical Runge-Kutta method
    with ``steps`` equal steps per interval between successive times: (..., len(times), n)."""
    z, t, out = z0, float(t0), []
    for t_next in times:
        h = (float(t_next) - t) / steps
        for _ in range(steps):
            k1 = rhs(t, z)
            k2 = rhs(t + h / 2, z + h / 2 * k1)
            k3 = rhs(t + h / 2, z + h / 2 * k2)
            k4 = rhs(t + h, z + h * k3)
            z, t = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h
        out.append(z)
        t = float(t_next)
    return torch.stack(out, -2)


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
        return self.prior(p) + gaussian_sum((residual**2).sum(-1), self.y.shape[0], p["sigma"])


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


class Regression(LinearRegression):
    """y ~ normal(beta_1 + beta_2 x_1 + ... + beta_K x_(K-1), sigma), flat priors on beta and sigma (the ARM book's
    programs: earnings, kidiq, mesquite, nes), or sigma ~ cauchy(0, 2.5) where ``sigma_cauchy``; ``columns(data)``
    returns the predictors x_k and the response y as the Stan program's transformed data computes them."""

    def __init__(self, columns, data, dtype, device, sigma_cauchy: bool = False):
        self.columns, self.sigma_cauchy = columns, sigma_cauchy
        super().__init__(data, dtype, device)

    def design(self, d):
        xs, y = self.columns(d)
        return torch.stack([torch.ones_like(y), *xs], 1), y

    def prior(self, p):
        return cauchy_lpdf(p["sigma"], 2.5) if self.sigma_cauchy else torch.zeros_like(p["sigma"])


def _standardized(x: Tensor, scale: float = 1.0) -> Tensor:
    """(x - mean(x)) / (scale sd(x)), Stan's sd with the n - 1 divisor."""
    return (x - x.mean()) / (scale * x.std(correction=1))


def _indicators(x: Tensor, levels) -> list[Tensor]:
    return [(x == level).to(x.dtype) for level in levels]


def _mesquite_logs(d) -> dict[str, Tensor]:
    return {"weight": torch.log(d["weight"]), "volume": torch.log(d["diam1"] * d["diam2"] * d["canopy_height"]),
            "area": torch.log(d["diam1"] * d["diam2"]), "shape": torch.log(d["diam1"] / d["diam2"]),
            "total_height": torch.log(d["total_height"])}


def _nes(d):
    return [d["real_ideo"], d["race_adj"], *_indicators(d["age_discrete"], (2, 3, 4)), d["educ1"], d["gender"],
            d["income"]], d["partyid7"]


REGRESSION_COLUMNS = {  # the predictors and response of each regression, as its Stan program's transformed data
    "earn_height": lambda d: ([d["height"]], d["earn"]),
    "log10earn_height": lambda d: ([d["height"]], torch.log10(d["earn"])),
    "logearn_height": lambda d: ([d["height"]], torch.log(d["earn"])),
    "logearn_height_male": lambda d: ([d["height"], d["male"]], torch.log(d["earn"])),
    "logearn_logheight_male": lambda d: ([torch.log(d["height"]), d["male"]], torch.log(d["earn"])),
    "logearn_interaction": lambda d: ([d["height"], d["male"], d["height"] * d["male"]], torch.log(d["earn"])),
    "logearn_interaction_z": lambda d: ([_standardized(d["height"]), d["male"], _standardized(d["height"]) * d["male"]],
                                        torch.log(d["earn"])),
    "kidscore_momhs": lambda d: ([d["mom_hs"]], d["kid_score"]),
    "kidscore_momiq": lambda d: ([d["mom_iq"]], d["kid_score"]),
    "kidscore_momhsiq": lambda d: ([d["mom_hs"], d["mom_iq"]], d["kid_score"]),
    "kidscore_interaction_c": lambda d: ([d["mom_hs"] - d["mom_hs"].mean(), d["mom_iq"] - d["mom_iq"].mean(),
                                          (d["mom_hs"] - d["mom_hs"].mean()) * (d["mom_iq"] - d["mom_iq"].mean())],
                                         d["kid_score"]),
    "kidscore_interaction_c2": lambda d: ([d["mom_hs"] - 0.5, d["mom_iq"] - 100.0, (d["mom_hs"] - 0.5) * (d["mom_iq"] - 100.0)],
                                          d["kid_score"]),
    "kidscore_interaction_z": lambda d: ([_standardized(d["mom_hs"], 2.0), _standardized(d["mom_iq"], 2.0),
                                          _standardized(d["mom_hs"], 2.0) * _standardized(d["mom_iq"], 2.0)],
                                         d["kid_score"]),
    "kidscore_mom_work": lambda d: (_indicators(d["mom_work"], (2, 3, 4)), d["kid_score"]),
    "mesquite": lambda d: ([d[k] for k in ("diam1", "diam2", "canopy_height", "total_height", "density", "group")],
                           d["weight"]),
    "logmesquite": lambda d: ([*(torch.log(d[k]) for k in ("diam1", "diam2", "canopy_height", "total_height", "density")),
                               d["group"]], torch.log(d["weight"])),
    "logmesquite_logva": lambda d: ([_mesquite_logs(d)["volume"], _mesquite_logs(d)["area"], d["group"]],
                                    _mesquite_logs(d)["weight"]),
    "logmesquite_logvash": lambda d: ([*(_mesquite_logs(d)[k] for k in ("volume", "area", "shape", "total_height")),
                                       d["group"]], _mesquite_logs(d)["weight"]),
    "logmesquite_logvolume": lambda d: ([_mesquite_logs(d)["volume"]], _mesquite_logs(d)["weight"]),
    **{f"nes{year}": _nes for year in range(1972, 2001, 4)},
}
SIGMA_CAUCHY = {"kidscore_momhs", "kidscore_momiq", "kidscore_momhsiq"}  # sigma ~ cauchy(0, 2.5); the others flat


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


class _ExpQuadProcess(TorchModel):
    """A Gaussian process on the 1-d inputs data["x"] with Stan's cov_exp_quad kernel."""

    def prepare(self, data):
        self.data = data
        self.sq_dist = (data["x"][:, None] - data["x"][None, :]) ** 2
        self.eye = torch.eye(len(data["x"]), dtype=self.dtype, device=self.device)

    def cov_exp_quad(self, alpha: Tensor, rho: Tensor) -> Tensor:
        """K_ij = alpha^2 exp(-|x_i - x_j|^2 / (2 rho^2)), alpha and rho shaped (..., 1, 1)."""
        return alpha**2 * torch.exp(-0.5 * self.sq_dist / rho**2)


class GpPoisRegr(_ExpQuadProcess):
    """f = L f_tilde, L L' = alpha^2 exp(-|x_i - x_j|^2 / (2 rho^2)) + 1e-10 I; k_i ~ Poisson(exp(f_i))."""

    dim = 13

    def transform(self, q):
        rho, j_rho = positive(q[..., 0])
        alpha, j_alpha = positive(q[..., 1])
        cov = self.cov_exp_quad(alpha[..., None, None], rho[..., None, None]) + 1e-10 * self.eye
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


class HmmDrive(TorchModel):
    """Two-state HMM of a basketball player's drives (posteriordb's hmm_drive_0/1): transition rows theta1, theta2
    (simplexes, Dirichlet(alpha) priors), emissions of 1/speed u_t and hoop distance v_t with state parameters
    phi and lambda (ordered; positive-ordered rates for the exponential model). The forward algorithm as Stan
    writes it, a Python loop over the N = 416 time steps: gamma_t = logsumexp_j(gamma_(t-1),j + log theta[j, :])
    + log p(u_t, v_t | state)."""

    dim = 6
    positive = False  # phi and lambda positive_ordered (else ordered)

    def transform(self, q):
        theta1, j1 = simplex2(q[..., 0])
        theta2, j2 = simplex2(q[..., 1])
        phi, j_phi = ordered(q[..., 2:4], first_positive=self.positive)
        lam, j_lambda = ordered(q[..., 4:6], first_positive=self.positive)
        return ({"theta1": theta1, "theta2": theta2, "phi": phi, "lambda": lam},
                {"theta1": j1, "theta2": j2, "phi": j_phi, "lambda": j_lambda})

    def emission(self, p, t: int) -> Tensor:
        """log p(u_t, v_t | state k), (..., K)."""
        raise NotImplementedError

    def log_density(self, p):
        log_theta = torch.log(torch.stack([p["theta1"], p["theta2"]], -2))  # (..., from, to)
        prior = ((self.data["alpha"] - 1.0) * log_theta).sum((-2, -1))  # dirichlet_lpdf of each row
        for x in (p["phi"], p["lambda"]):
            prior = prior + normal_lpdf(x[..., 0], 0.0, 1.0) + normal_lpdf(x[..., 1], 3.0, 1.0)
        gamma = self.emission(p, 0)
        for t in range(1, self.data["u"].shape[0]):
            gamma = torch.logsumexp(gamma[..., :, None] + log_theta, -2) + self.emission(p, t)
        return prior + torch.logsumexp(gamma, -1)

    def outputs(self, p):
        return torch.cat([p["theta1"], p["theta2"], p["phi"], p["lambda"]], -1)


class HmmDrive0(HmmDrive):
    """Exponential emissions: u_t ~ exponential(phi_k), v_t ~ exponential(lambda_k)."""

    positive = True

    def emission(self, p, t):
        d, phi, lam = self.data, p["phi"], p["lambda"]
        return torch.log(phi) - phi * d["u"][t] + torch.log(lam) - lam * d["v"][t]


class HmmDrive1(HmmDrive):
    """Normal emissions: u_t ~ normal(phi_k, tau), v_t ~ normal(lambda_k, rho)."""

    def emission(self, p, t):
        d = self.data
        return normal_lpdf(d["u"][t], p["phi"], d["tau"]) + normal_lpdf(d["v"][t], p["lambda"], d["rho"])


class LotkaVolterra(TorchModel):
    """Lynx and hare pelts (Hudson's Bay Company, 1900-1920): du/dt = (alpha - beta v) u, dv/dt = (-gamma + delta u) v
    from z_init at t = 0, observed with lognormal errors at t = 1..20 (and y_init at 0). Stan integrates by
    RK45 (relative tolerance 1e-5); here fixed-step RK4, 20 steps a year, a Python loop of 400 steps."""

    dim = 8
    steps = 20

    def transform(self, q):
        theta, j_theta = positive(q[..., 0:4])
        z_init, j_z = positive(q[..., 4:6])
        sigma, j_sigma = positive(q[..., 6:8])
        return ({"theta": theta, "z_init": z_init, "sigma": sigma},
                {"theta": j_theta.sum(-1), "z_init": j_z.sum(-1), "sigma": j_sigma.sum(-1)})

    def solve(self, p) -> Tensor:
        """z(t) at the measurement times, (..., N, 2)."""
        alpha, beta, gamma, delta = (p["theta"][..., i] for i in range(4))

        def dz_dt(t, z):
            u, v = z[..., 0], z[..., 1]
            return torch.stack([(alpha - beta * v) * u, (-gamma + delta * u) * v], -1)

        return rk4(dz_dt, p["z_init"], 0.0, self.data["ts"].tolist(), self.steps)

    def log_density(self, p):
        d, theta, sigma = self.data, p["theta"], p["sigma"]
        z = self.solve(p)
        lp = (normal_lpdf(theta[..., 0], 1.0, 0.5) + normal_lpdf(theta[..., 2], 1.0, 0.5)
              + normal_lpdf(theta[..., 1], 0.05, 0.05) + normal_lpdf(theta[..., 3], 0.05, 0.05)
              + lognormal_lpdf(sigma, -1.0, 1.0).sum(-1) + lognormal_lpdf(p["z_init"], math.log(10.0), 1.0).sum(-1))
        lp = lp + lognormal_lpdf(d["y_init"], torch.log(p["z_init"]), sigma).sum(-1)
        return lp + lognormal_lpdf(d["y"], torch.log(z), sigma[..., None, :]).sum((-2, -1))

    def outputs(self, p):
        return torch.cat([p["theta"], p["z_init"], p["sigma"]], -1)


class OneCompMMElimAbs(TorchModel):
    """One-compartment pharmacokinetics with first-order absorption and Michaelis-Menten elimination:
    dC/dt = exp(-k_a t) D k_a / V - (V_m / V) C / (K_m + C), C(0) = 0, C_hat_n ~ lognormal(log C(t_n), sigma),
    half-Cauchy(0, 1) priors. Stan integrates by BDF; here fixed-step RK4, 20 steps per half day, a Python loop of
    400 steps. The program's ``if (t > 0)`` zeroes the dose term at the single point t = 0, which the solution does
    not see; the RK4 stages use the t > 0 branch throughout (the solution the adaptive solver converges to)."""

    dim = 4
    steps = 20

    def transform(self, q):
        x, j = positive(q)
        names = ("k_a", "K_m", "V_m", "sigma")
        return {n: x[..., i] for i, n in enumerate(names)}, {n: j[..., i] for i, n in enumerate(names)}

    def log_density(self, p):
        d = self.data
        k_a, K_m, V_m, sigma = (p[k][..., None] for k in ("k_a", "K_m", "V_m", "sigma"))

        def dc_dt(t, c):
            return torch.exp(-k_a * t) * d["D"] * k_a / d["V"] - (V_m / d["V"]) * c / (K_m + c)

        c = rk4(dc_dt, torch.zeros_like(k_a), float(d["t0"]), d["times"].tolist(), self.steps)[..., 0]
        prior = sum(cauchy_lpdf(p[k], 1.0) for k in ("k_a", "K_m", "V_m", "sigma"))
        return prior + lognormal_lpdf(d["C_hat"], torch.log(c), sigma).sum(-1)

    def outputs(self, p):
        return torch.stack([p["k_a"], p["K_m"], p["V_m"], p["sigma"]], -1)


class GpRegr(_ExpQuadProcess):
    """y ~ multi_normal(0, K + sigma I), K_ij = alpha^2 exp(-|x_i - x_j|^2 / (2 rho^2)) (note: sigma, not sigma^2,
    on the diagonal, as the Stan program has it); rho ~ gamma(25, 4), alpha ~ normal(0, 2), sigma ~ normal(0, 1).
    The marginal likelihood through the Cholesky factor L: -sum log L_ii - |L^-1 y|^2 / 2."""

    dim = 3

    def transform(self, q):
        x, j = positive(q)
        names = ("rho", "alpha", "sigma")
        return {n: x[..., i] for i, n in enumerate(names)}, {n: j[..., i] for i, n in enumerate(names)}

    def log_density(self, p):
        rho, alpha, sigma = (p[k][..., None, None] for k in ("rho", "alpha", "sigma"))
        cov = self.cov_exp_quad(alpha, rho) + sigma * self.eye
        chol, info = torch.linalg.cholesky_ex(cov)
        y = self.data["y"].expand(*chol.shape[:-1])[..., None]
        z = torch.linalg.solve_triangular(chol, y, upper=False)[..., 0]
        likelihood = -torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1) - 0.5 * (z**2).sum(-1)
        likelihood = torch.where(info == 0, likelihood, torch.full_like(likelihood, -math.inf))  # Stan rejects
        prior = 24.0 * torch.log(p["rho"]) - 4.0 * p["rho"] - 0.5 * (p["alpha"] / 2.0) ** 2 - 0.5 * p["sigma"] ** 2
        return prior + likelihood

    def outputs(self, p):
        return torch.stack([p["rho"], p["alpha"], p["sigma"]], -1)


TORCH_MODELS: dict[str, Callable[..., TorchModel]] = {
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
    "hmm_drive_0": HmmDrive0,
    "hmm_drive_1": HmmDrive1,
    "lotka_volterra": LotkaVolterra,
    "one_comp_mm_elim_abs": OneCompMMElimAbs,
    "gp_regr": GpRegr,
    "sblrc_blr": SblriBlr,  # the same program, blr, on other data
    **{name: partial(Regression, columns, sigma_cauchy=name in SIGMA_CAUCHY)
       for name, columns in REGRESSION_COLUMNS.items()},
}
