"""Bayesian logistic regression.

    y_i ~ Bernoulli(sigmoid(x_i^T beta)),  beta ~ N(0, s^2 I)
    log pi(beta) = sum_i [y_i x_i^T beta - log(1 + exp(x_i^T beta))] - |beta|^2 / (2 s^2) - dim/2 log(2 pi s^2)
    grad         = X^T (y - sigmoid(X beta)) - beta / s^2

The density is the joint p(y, beta) with the prior normalized, so its normalizer is the marginal
likelihood p(y) itself: an evidence estimate (``log_evidence``) is log p(y), comparable with other
tools' numbers without correction.

Both are evaluated for a batch of chains with two matrix products (chains x n) and (chains x dim),
so a gradient costs O(chains n dim) with no Python loop. The density is a logistic form
(bayesx.targets.forms), so where the native backend runs it (bayesx.kernels.backend: CPU chains) the
kernels and methods evaluate both in one C call instead, with the same arithmetic up to rounding;
``log_prob_and_grad`` here is the PyTorch formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesx.data.classification import ClassificationData
from bayesx.settings import Positive, Settings
from bayesx.targets.base import AffineRestriction, Capabilities, Evaluation, LogisticDesign, TargetBase
from bayesx.targets.forms import LogisticForm


@dataclass(frozen=True)
class LogisticSettings(Settings):
    prior_scale: Annotated[float, Positive()] = 10.0  # prior sd of each coefficient (the source's N(0, 10^2))
    intercept: bool = False  # add a constant feature
    init_scale: Annotated[float, Positive()] = 0.1  # chains start uniformly in [-init_scale, init_scale]^dim


class LogisticRegression(TargetBase):
    Settings = LogisticSettings
    capabilities = Capabilities(cpu_dtype="float32")  # the native kernel reads half the bytes, same answers
    param_name = "beta"

    def __init__(self, data: ClassificationData, settings: LogisticSettings | None = None,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64, **options):
        cfg = self.configure(settings, options)
        self.prior_scale, self.init_scale, self.intercept = cfg.prior_scale, cfg.init_scale, cfg.intercept
        self.device, self.dtype = torch.device(device), dtype
        self.data = data
        self.x_train = self._design(data.x_train)
        self.y_train = torch.as_tensor(data.y_train, dtype=dtype, device=self.device)
        self.x_test = self._design(data.x_test)
        self.y_test = torch.as_tensor(data.y_test, dtype=dtype, device=self.device)
        self.dim = self.x_train.shape[1]
        self._inv_var = 1.0 / self.prior_scale**2
        self.log_prior_constant = -0.5 * self.dim * math.log(2.0 * math.pi * self.prior_scale**2)
        self._form: LogisticForm | None = None

    def _design(self, x) -> Tensor:
        x = torch.as_tensor(x, dtype=self.dtype, device=self.device)
        if self.intercept:
            x = torch.cat([torch.ones(x.shape[0], 1, dtype=self.dtype, device=self.device), x], dim=1)
        return x

    def logistic_design(self) -> LogisticDesign:
        """X (n, dim) with the intercept column where there is one, y (n,) in {0, 1}, the prior variance."""
        return LogisticDesign(self.x_train, self.y_train, self.prior_scale**2)

    def log_prob(self, q: Tensor) -> Tensor:
        logits = q @ self.x_train.T
        log_lik = (self.y_train * logits - F.softplus(logits)).sum(-1)
        return log_lik - 0.5 * self._inv_var * (q * q).sum(-1) + self.log_prior_constant

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        logits = q @ self.x_train.T
        log_lik = (self.y_train * logits - F.softplus(logits)).sum(-1)
        lp = log_lik - 0.5 * self._inv_var * (q * q).sum(-1) + self.log_prior_constant
        grad = torch.addmm(q, self.y_train - torch.sigmoid(logits), self.x_train, beta=-self._inv_var)
        return lp, grad

    def density_form(self) -> LogisticForm:
        """A = X, P = I / s^2 (its diagonal), the prior's normalizing constant as the constant."""
        if self._form is None:
            precision = torch.full((self.dim,), self._inv_var, dtype=self.dtype, device=self.device)
            self._form = LogisticForm.build(self.x_train.T, None, self.y_train, precision, None,
                                            self.log_prior_constant)
        return self._form

    def restrict(self, offset: Tensor, basis: Tensor) -> "RestrictedLogisticRegression":
        return RestrictedLogisticRegression(self, offset, basis)

    def closed_form_hessian(self) -> Callable[[Tensor], Tensor]:
        return self.hessian

    def hessian(self, q: Tensor) -> Tensor:
        """-X^T diag(s (1 - s)) X - I / s0^2 at one point q (dim,), s = sigmoid(X q)."""
        s = torch.sigmoid(self.x_train @ q)
        weights = s * (1.0 - s)
        eye = torch.eye(self.dim, dtype=self.dtype, device=self.device)
        return -(self.x_train.T * weights) @ self.x_train - self._inv_var * eye

    def evaluate(self, draws: Tensor, sample_stats=None) -> Evaluation:
        """test_accuracy: thresholded posterior predictive; test_lpd: mean_i log mean_s p(y_i | beta_s)."""
        flat = draws.reshape(-1, self.dim).to(device=self.device, dtype=self.dtype)
        if self.y_test.numel() == 0:
            return Evaluation(remarks=["no test rows (data.test_fraction=0): the posterior uses every row, "
                                       "and test_accuracy and test_lpd are absent"])
        if flat.shape[0] == 0:
            return Evaluation()
        logits = flat @ self.x_test.T  # (draws, n_test)
        log_p = -F.softplus(torch.where(self.y_test > 0.5, -logits, logits))  # log p(y_i | beta_s)
        lpd = torch.logsumexp(log_p, dim=0) - math.log(flat.shape[0])
        prob = torch.sigmoid(logits).mean(0)
        accuracy = ((prob > 0.5).to(self.dtype) == self.y_test).to(self.dtype).mean()
        return Evaluation({"test_accuracy": float(accuracy), "test_lpd": float(lpd.mean())})

    def describe(self) -> dict[str, str]:
        return {"dim": str(self.dim), "n_train": str(self.x_train.shape[0]), "n_test": str(self.x_test.shape[0]),
                "data_description": self.data.description, "data_source": self.data.source}


class RestrictedLogisticRegression(AffineRestriction):
    """The posterior on q = a + B u, with the products precomputed (Deep MCMC eq. 7, appendix A):

        logits = X a + (X B) u
        |q|^2  = |a|^2 + 2 (B^T a)^T u + u^T (B^T B) u
        grad_u = (X B)^T (y - sigmoid(logits)) - (B^T a + B^T B u) / s^2

    so log density and gradient cost O(n h) per chain instead of O(n D).
    """

    def __init__(self, model: LogisticRegression, offset: Tensor, basis: Tensor):
        super().__init__(model, offset, basis)
        self.model = model
        self.x_basis = model.x_train @ basis  # (n, h)
        self.x_offset = model.x_train @ offset  # (n,)
        self.gram = basis.T @ basis  # (h, h)
        self.basis_offset = basis.T @ offset  # (h,)
        self.offset_sq = float(offset @ offset)
        self.y = model.y_train
        self.prior_gram = model._inv_var * self.gram  # for potential_grad
        self.prior_shift = model._inv_var * self.basis_offset
        self._form: LogisticForm | None = None

    def density_form(self) -> LogisticForm:
        """A = X B, c = X a, P = B^T B / s^2, b = B^T a / s^2, constant -|a|^2 / (2 s^2) plus the
        prior's normalizing constant."""
        if self._form is None:
            constant = -0.5 * self.model._inv_var * self.offset_sq + self.model.log_prior_constant
            self._form = LogisticForm.build(self.x_basis.T, self.x_offset, self.y, self.prior_gram,
                                            self.prior_shift, constant)
        return self._form

    def log_prob_and_grad(self, u: Tensor) -> tuple[Tensor, Tensor]:
        m = self.model
        logits = self.x_offset + u @ self.x_basis.T
        log_lik = (m.y_train * logits - F.softplus(logits)).sum(-1)
        gram_u = u @ self.gram
        sq_norm = self.offset_sq + 2.0 * (u @ self.basis_offset) + (u * gram_u).sum(-1)
        grad = (m.y_train - torch.sigmoid(logits)) @ self.x_basis - m._inv_var * (self.basis_offset + gram_u)
        return log_lik - 0.5 * m._inv_var * sq_norm + m.log_prior_constant, grad

    def log_prob(self, u: Tensor) -> Tensor:
        return self.log_prob_and_grad(u)[0]

    def potential_grad(self, u: Tensor) -> Tensor:
        """-grad_u log pi alone (what a caller that needs no density value asks for): three fused
        PyTorch operations (addmm), since at small sizes the cost is the number of tensor operations, not
        their flops."""
        residual = self.y - torch.sigmoid(torch.addmm(self.x_offset, u, self.x_basis.T))
        return torch.addmm(torch.addmm(self.prior_shift, u, self.prior_gram), residual, self.x_basis, alpha=-1.0)
