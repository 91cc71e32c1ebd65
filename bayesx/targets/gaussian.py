"""Multivariate Gaussian targets with known moments, for tests and sampler comparisons.

log pi(q) = -1/2 (q - m)^T P (q - m) + const, P = Sigma^{-1}; grad = -P (q - m).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.targets.base import Capabilities, Evaluation, TargetBase


class Gaussian(TargetBase):
    """N(mean, cov), built from a named shape or explicit arrays.

    kind: isotropic   Sigma = I
          correlated  Sigma_ij = rho^|i-j| ... here equicorrelation: 1 on the diagonal, rho off it
          scaled      Sigma = diag(scales^2), scales log-spaced over [1/condition, 1] (badly scaled)
    """

    capabilities = Capabilities(uses_data=False, exact_moments=True)
    param_name = "x"

    def __init__(self, dim: int = 10, kind: str = "isotropic", rho: float = 0.9, condition: float = 100.0,
                 mean: list[float] | None = None, cov=None, data=None,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64):
        self.device, self.dtype = torch.device(device), dtype
        if cov is None:
            if dim < 1:
                raise BayesxError(f"model.dim must be >= 1, got {dim}")
            cov = self._named_covariance(kind, dim, rho, condition)
        cov = torch.as_tensor(cov, dtype=dtype, device=self.device)
        self.dim = cov.shape[0]
        self.mean = torch.zeros(self.dim, dtype=dtype, device=self.device) if mean is None else \
            torch.as_tensor(mean, dtype=dtype, device=self.device)
        self.cov = cov
        self.precision = torch.linalg.inv(cov)
        self.kind = kind

    @staticmethod
    def _named_covariance(kind: str, dim: int, rho: float, condition: float) -> Tensor:
        if kind == "isotropic":
            return torch.eye(dim, dtype=torch.float64)
        if kind == "correlated":
            if not -1.0 / max(dim - 1, 1) < rho < 1.0:
                raise BayesxError(f"model.rho={rho} does not give a valid equicorrelation matrix; use 0 <= rho < 1")
            return (1 - rho) * torch.eye(dim, dtype=torch.float64) + rho * torch.ones(dim, dim, dtype=torch.float64)
        if kind == "scaled":
            scales = torch.logspace(-torch.log10(torch.tensor(condition)).item(), 0.0, dim, dtype=torch.float64)
            return torch.diag(scales**2)
        raise BayesxError(f"model.kind must be isotropic, correlated or scaled, got '{kind}'")

    def log_prob(self, q: Tensor) -> Tensor:
        d = q - self.mean
        return -0.5 * ((d @ self.precision) * d).sum(-1)

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        d = q - self.mean
        pd = d @ self.precision
        return -0.5 * (pd * d).sum(-1), -pd

    def evaluate(self, draws: Tensor, sample_stats=None) -> Evaluation:
        """Largest error of the posterior mean and sd, in units of the true sd."""
        flat = draws.reshape(-1, self.dim).to(self.dtype)
        sd = self.cov.diagonal().sqrt().cpu()
        mean_err = ((flat.mean(0) - self.mean.cpu()).abs() / sd).max()
        sd_err = ((flat.std(0) - sd).abs() / sd).max()
        return Evaluation({"posterior_mean_err_max": float(mean_err), "posterior_sd_err_max": float(sd_err)})

    def describe(self) -> dict[str, str]:
        return {"dim": str(self.dim), "gaussian_kind": self.kind}
