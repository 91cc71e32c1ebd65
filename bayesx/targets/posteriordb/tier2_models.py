"""The suite's second tier as batched torch densities on the unconstrained space: posteriors where one run takes
minutes (bayesx/targets/posteriordb/suite.py, ``TIER2``).

Written as a user writes them in PyTorch: the stochastic-volatility states and the local-level random walk by a
Python loop over time, the likelihoods and priors by ``torch.distributions`` (``Normal``, ``HalfCauchy``,
``HalfNormal``, ``InverseGamma``, ``LogNormal``, ``Poisson``, ``Bernoulli``), the 100,000-row GLM by
``F.binary_cross_entropy_with_logits``. Each maps q (..., dim) to its constrained blocks, with each block's
log-Jacobian kept by name as in the first tier (torch_models.py), so a test can drop one. The independent
transcription is tier2_xp.py; the tests compare the two.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from torch import distributions

from bayesx.targets.posteriordb.torch_models import TorchModel, positive
from bayesx.targets.posteriordb.tier2_xp import P0, SLAB_DF, SLAB_SCALE


def _c(model: TorchModel, value: float) -> Tensor:
    """A constant parameter as a tensor of the model's dtype and device: torch's HalfNormal and HalfCauchy cast
    the value to their parameter's dtype, so ``HalfCauchy(5.0).log_prob(x)`` is float32 for a float64 x."""
    return torch.tensor(value, dtype=model.dtype, device=model.device)


def _unchecked(cls):
    """A torch distribution without its argument checks (``validate_args=False``), as a user sampling with it
    writes it: a check that raises on a scale that under- or overflowed mid-integration would end a run that
    should record a divergence."""
    return partial(cls, validate_args=False)


Bernoulli, Cauchy, HalfCauchy, HalfNormal, InverseGamma, LogNormal, Normal, Poisson = (
    _unchecked(getattr(distributions, name)) for name in
    ("Bernoulli", "Cauchy", "HalfCauchy", "HalfNormal", "InverseGamma", "LogNormal", "Normal", "Poisson"))


class SVLatent(TorchModel):
    """Stochastic volatility with its latent log-volatilities (the Stan User's Guide's non-centred program):
    mu ~ Cauchy(0, 10), phi ~ U(-1, 1), sigma ~ Cauchy+(0, 5), h_std ~ N(0, 1); h_1 = mu + sigma h_std_1 /
    sqrt(1 - phi^2), h_t = mu + phi (h_(t-1) - mu) + sigma h_std_t (a Python loop over t); y_t ~ N(0, exp(h_t / 2))."""

    def prepare(self, data):
        self.data = data
        self.dim = 3 + data["y"].shape[0]

    def transform(self, q):
        unit = torch.sigmoid(q[..., 1])
        phi = 2.0 * unit - 1.0
        j_phi = math.log(2.0) - F.softplus(-q[..., 1]) - F.softplus(q[..., 1])
        sigma, j_sigma = positive(q[..., 2])
        return {"mu": q[..., 0], "phi": phi, "sigma": sigma, "h_std": q[..., 3:]}, {"phi": j_phi, "sigma": j_sigma}

    def states(self, p) -> Tensor:
        mu, phi, sigma = p["mu"], p["phi"], p["sigma"]
        h_std = p["h_std"].unbind(-1)  # one tensor per time step (indexing h_std[..., t] in the loop would cost
        # a full-size gradient per step in the backward pass)
        h = [mu + sigma * h_std[0] / torch.sqrt(1.0 - phi**2)]
        for t in range(1, len(h_std)):
            h.append(mu + phi * (h[t - 1] - mu) + sigma * h_std[t])
        return torch.stack(h, -1)

    def log_density(self, p):
        h = self.states(p)
        lp = Cauchy(_c(self, 0.0), _c(self, 10.0)).log_prob(p["mu"]) + HalfCauchy(_c(self, 5.0)).log_prob(p["sigma"])
        lp = lp + Normal(0.0, 1.0).log_prob(p["h_std"]).sum(-1)
        return lp + Normal(torch.zeros_like(h), torch.exp(h / 2)).log_prob(self.data["y"]).sum(-1)

    def outputs(self, p):
        return torch.cat([torch.stack([p["mu"], p["phi"], p["sigma"]], -1), self.states(p)], -1)


class LocalLevel(TorchModel):
    """The local-level model: x_1 ~ N(0, 10), x_t ~ N(x_(t-1), sigma_eta) (a Python loop over t), y_t ~ N(x_t,
    sigma_eps); sigma_eps ~ N+(0, 2), sigma_eta ~ N+(0, 1)."""

    def prepare(self, data):
        self.data = data
        self.dim = 2 + data["y"].shape[0]

    def transform(self, q):
        s_eps, j_eps = positive(q[..., 0])
        s_eta, j_eta = positive(q[..., 1])
        return {"sigma_eps": s_eps, "sigma_eta": s_eta, "x": q[..., 2:]}, {"sigma_eps": j_eps, "sigma_eta": j_eta}

    def log_density(self, p):
        x, s_eta = p["x"].unbind(-1), p["sigma_eta"]
        lp = HalfNormal(_c(self, 2.0)).log_prob(p["sigma_eps"]) + HalfNormal(_c(self, 1.0)).log_prob(s_eta)
        lp = lp + Normal(0.0, 10.0).log_prob(x[0])
        for t in range(1, len(x)):
            lp = lp + Normal(x[t - 1], s_eta).log_prob(x[t])
        return lp + Normal(p["x"], p["sigma_eps"][..., None]).log_prob(self.data["y"]).sum(-1)

    def outputs(self, p):
        return torch.cat([torch.stack([p["sigma_eps"], p["sigma_eta"]], -1), p["x"]], -1)


class _Hierarchical(TorchModel):
    """Group effects alpha_j = mu + tau z_j, z_j ~ N(0, 1) (non-centred), J = len(data["n_per_group"]);
    q = [mu, beta (k), log tau, (log sigma), z (J)]."""

    n_beta: int
    scales: tuple[str, ...]

    def prepare(self, data):
        self.data = data
        self.groups = data["g"].long()
        self.n_groups = data["n_per_group"].shape[0]
        self.dim = 1 + self.n_beta + len(self.scales) + self.n_groups

    def transform(self, q):
        k = 1 + self.n_beta
        params = {"mu": q[..., 0], "beta": q[..., 1:k], "z": q[..., k + len(self.scales):]}
        jacobians = {}
        for i, name in enumerate(self.scales):
            params[name], jacobians[name] = positive(q[..., k + i])
        params["alpha"] = params["mu"][..., None] + params["tau"][..., None] * params["z"]
        return params, jacobians

    def outputs(self, p):
        scales = torch.stack([p[name] for name in self.scales], -1)
        return torch.cat([p["mu"][..., None], p["beta"], scales, p["alpha"]], -1)


class HierNormal(_Hierarchical):
    """mu ~ N(0, 5), beta ~ N(0, 5), tau ~ N+(0, 2), sigma ~ N+(0, 2); y_i ~ N(alpha_(g_i) + beta x_i, sigma)."""

    n_beta, scales = 1, ("tau", "sigma")

    def log_density(self, p):
        d, beta = self.data, p["beta"][..., 0]
        lp = Normal(0.0, 5.0).log_prob(p["mu"]) + Normal(0.0, 5.0).log_prob(beta)
        lp = lp + HalfNormal(_c(self, 2.0)).log_prob(p["tau"]) + HalfNormal(_c(self, 2.0)).log_prob(p["sigma"])
        lp = lp + Normal(0.0, 1.0).log_prob(p["z"]).sum(-1)
        mean = p["alpha"][..., self.groups] + beta[..., None] * d["x"]
        return lp + Normal(mean, p["sigma"][..., None]).log_prob(d["y"]).sum(-1)


class HierLogistic(_Hierarchical):
    """mu ~ N(0, 2.5), beta_k ~ N(0, 2.5), tau ~ N+(0, 1); y_i ~ Bernoulli(logits = alpha_(g_i) + X_i beta)."""

    n_beta, scales = 3, ("tau",)

    def log_density(self, p):
        d = self.data
        lp = Normal(0.0, 2.5).log_prob(p["mu"]) + Normal(0.0, 2.5).log_prob(p["beta"]).sum(-1)
        lp = lp + HalfNormal(_c(self, 1.0)).log_prob(p["tau"]) + Normal(0.0, 1.0).log_prob(p["z"]).sum(-1)
        logits = p["alpha"][..., self.groups] + p["beta"] @ d["X"].T
        return lp + Bernoulli(logits=logits).log_prob(d["y"]).sum(-1)


class Logistic100k(TorchModel):
    """alpha ~ N(0, 2.5), beta_k ~ N(0, 2.5); y ~ Bernoulli(logistic(alpha + X beta)) on 100,000 rows, by
    F.binary_cross_entropy_with_logits."""

    def prepare(self, data):
        self.data = data
        self.dim = 1 + data["X"].shape[1]

    def transform(self, q):
        return {"alpha": q[..., 0], "beta": q[..., 1:]}, {}

    def log_density(self, p):
        logits = p["alpha"][..., None] + p["beta"] @ self.data["X"].T
        y = self.data["y"].expand_as(logits)
        prior = Normal(0.0, 2.5).log_prob(p["alpha"]) + Normal(0.0, 2.5).log_prob(p["beta"]).sum(-1)
        return prior - F.binary_cross_entropy_with_logits(logits, y, reduction="none").sum(-1)

    def outputs(self, p):
        return torch.cat([p["alpha"][..., None], p["beta"]], -1)


class GPLatentPoisson(TorchModel):
    """A latent Gaussian process: f = mu + alpha L z, L L' the Matern-3/2 correlation (length scale rho, fixed) on
    the inputs x; mu ~ N(0, 2), alpha ~ N+(0, 1), z ~ N(0, I); k_i ~ Poisson(exp(f_i))."""

    def prepare(self, data):
        self.data = data
        x = data["x"].double()
        r = math.sqrt(3.0) * (x[:, None] - x[None, :]).abs() / float(data["rho"])
        corr = (1.0 + r) * torch.exp(-r) + 1e-8 * torch.eye(len(x), dtype=torch.float64, device=x.device)
        self.chol = torch.linalg.cholesky(corr).to(self.dtype)
        self.dim = 2 + len(x)

    def transform(self, q):
        alpha, j_alpha = positive(q[..., 1])
        f = q[..., 0, None] + alpha[..., None] * (q[..., 2:] @ self.chol.T)
        return {"mu": q[..., 0], "alpha": alpha, "z": q[..., 2:], "f": f}, {"alpha": j_alpha}

    def log_density(self, p):
        lp = Normal(0.0, 2.0).log_prob(p["mu"]) + HalfNormal(_c(self, 1.0)).log_prob(p["alpha"])
        lp = lp + Normal(0.0, 1.0).log_prob(p["z"]).sum(-1)
        return lp + Poisson(torch.exp(p["f"])).log_prob(self.data["k"]).sum(-1)

    def outputs(self, p):
        return torch.cat([torch.stack([p["mu"], p["alpha"]], -1), p["f"]], -1)


class Horseshoe(TorchModel):
    """The regularized horseshoe (Piironen and Vehtari 2017) on a linear regression with p > n:
    beta_j = z_j tau lambda~_j, lambda~_j^2 = c^2 lambda_j^2 / (c^2 + tau^2 lambda_j^2), c^2 = slab_scale^2 caux;
    z ~ N(0, 1), lambda ~ Cauchy+(0, 1), tau ~ Cauchy+(0, tau0 sigma), caux ~ InvGamma(slab_df / 2, slab_df / 2),
    beta0 ~ N(0, 5), sigma ~ N+(0, 2); y ~ N(beta0 + X beta, sigma)."""

    def prepare(self, data):
        self.data = data
        self.n, self.p = data["X"].shape
        self.tau0 = P0 / ((self.p - P0) * math.sqrt(self.n))
        self.dim = 4 + 2 * self.p

    def transform(self, q):
        names = ("sigma", "tau", "caux")
        blocks = {n: positive(q[..., 1 + i]) for i, n in enumerate(names)}
        lam, j_lam = positive(q[..., 4 + self.p:])
        params = {n: value for n, (value, _) in blocks.items()}
        params.update(beta0=q[..., 0], z=q[..., 4:4 + self.p], lam=lam)
        c2 = SLAB_SCALE**2 * params["caux"][..., None]
        tau = params["tau"][..., None]
        lam_tilde = torch.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
        params["beta"] = params["z"] * lam_tilde * tau
        return params, {**{n: j for n, (_, j) in blocks.items()}, "lam": j_lam.sum(-1)}

    def log_density(self, p):
        lp = Normal(0.0, 5.0).log_prob(p["beta0"]) + HalfNormal(_c(self, 2.0)).log_prob(p["sigma"])
        lp = lp + HalfCauchy(self.tau0 * p["sigma"]).log_prob(p["tau"])
        lp = lp + InverseGamma(_c(self, SLAB_DF / 2), _c(self, SLAB_DF / 2)).log_prob(p["caux"])
        lp = lp + HalfCauchy(_c(self, 1.0)).log_prob(p["lam"]).sum(-1) + Normal(0.0, 1.0).log_prob(p["z"]).sum(-1)
        mean = p["beta0"][..., None] + p["beta"] @ self.data["X"].T
        return lp + Normal(mean, p["sigma"][..., None]).log_prob(self.data["y"]).sum(-1)

    def outputs(self, p):
        return torch.cat([torch.stack([p["beta0"], p["sigma"], p["tau"], p["caux"]], -1), p["lam"], p["beta"]], -1)


class IRT2PL(TorchModel):
    """The two-parameter logistic item-response model: Y_ij ~ Bernoulli(logits = a_j (theta_i - b_j)),
    theta_i ~ N(0, 1), a_j ~ LogNormal(0, 0.5), b_j ~ N(mu_b, sigma_b), mu_b ~ N(0, 2), sigma_b ~ N+(0, 2)."""

    def prepare(self, data):
        self.data = data
        self.n_students, self.n_items = data["Y"].shape
        self.dim = self.n_students + 2 * self.n_items + 2

    def transform(self, q):
        s, j = self.n_students, self.n_items
        a, j_a = positive(q[..., s:s + j])
        sigma_b, j_sigma = positive(q[..., -1])
        return ({"theta": q[..., :s], "a": a, "b": q[..., s + j:s + 2 * j], "mu_b": q[..., -2], "sigma_b": sigma_b},
                {"a": j_a.sum(-1), "sigma_b": j_sigma})

    def log_density(self, p):
        lp = Normal(0.0, 1.0).log_prob(p["theta"]).sum(-1) + LogNormal(0.0, 0.5).log_prob(p["a"]).sum(-1)
        lp = lp + Normal(0.0, 2.0).log_prob(p["mu_b"]) + HalfNormal(_c(self, 2.0)).log_prob(p["sigma_b"])
        lp = lp + Normal(p["mu_b"][..., None], p["sigma_b"][..., None]).log_prob(p["b"]).sum(-1)
        logits = p["a"][..., None, :] * (p["theta"][..., :, None] - p["b"][..., None, :])
        return lp + Bernoulli(logits=logits).log_prob(self.data["Y"]).sum((-2, -1))

    def outputs(self, p):
        return torch.cat([p["theta"], p["a"], p["b"], p["mu_b"][..., None], p["sigma_b"][..., None]], -1)


TIER2_TORCH: dict[str, Callable[..., TorchModel]] = {
    "sv_latent": SVLatent,
    "local_level": LocalLevel,
    "hier_normal": HierNormal,
    "hier_logistic": HierLogistic,
    "logistic_100k": Logistic100k,
    "gp_latent_poisson": GPLatentPoisson,
    "horseshoe": Horseshoe,
    "irt_2pl": IRT2PL,
}
