"""Multivariate Gaussian targets with known moments, for tests and sampler comparisons.

log pi(q) = -1/2 (q - m)^T P (q - m) + const, P = Sigma^{-1}; grad = -P (q - m).

It is the logistic form (bayesx.targets.forms) with no rows (P the precision, b = -P m and the
constant -m^T P m / 2), so where the native backend runs it (bayesx.kernels.backend: CPU chains) the
samplers move on it in C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import Tensor

from bayesx.settings import AtLeast, InvalidSetting, Positive, Settings
from bayesx.targets.base import Capabilities, Evaluation, TargetBase, moment_errors
from bayesx.targets.forms import LogisticForm


@dataclass(frozen=True)
class GaussianSettings(Settings):
    dim: Annotated[int, AtLeast(1)] = 10
    kind: Literal["isotropic", "correlated", "scaled", "rotated"] = "isotropic"
    rho: float = 0.9  # the equicorrelation of kind=correlated
    condition: Annotated[float, Positive()] = 100.0  # scaled, rotated: sds log-spaced over [1/condition, 1]
    mean: tuple[float, ...] | None = None  # null: zeros
    cov: tuple[tuple[float, ...], ...] | None = None  # an explicit covariance overrides kind and dim

    def check(self):
        if self.cov is None and self.kind == "correlated" and not -1.0 / max(self.dim - 1, 1) < self.rho < 1.0:
            raise InvalidSetting("rho", f"= {self.rho} does not give a valid equicorrelation matrix; use 0 <= rho < 1")


class Gaussian(TargetBase):
    """N(mean, cov), built from a named shape or explicit arrays.

    kind: isotropic   Sigma = I
          correlated  Sigma_ij = rho^|i-j| ... here equicorrelation: 1 on the diagonal, rho off it
          scaled      Sigma = diag(scales^2), scales log-spaced over [1/condition, 1] (badly scaled)
          rotated     Sigma = Q diag(scales^2) Q^T with the same scales and a fixed random rotation Q
                      (badly scaled and correlated: no diagonal metric fixes it; the condition number of
                      Sigma is condition^2)
    """

    Settings = GaussianSettings
    capabilities = Capabilities(uses_data=False, exact_moments=True, exact_log_normalizer=True)
    param_name = "x"

    def __init__(self, settings: GaussianSettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        """``cov`` and ``mean`` may also be arrays or tensors (Python use)."""
        arrays = {k: options.pop(k) for k in ("cov", "mean") if k in options and not _plain(options[k])}
        cfg = self.configure(settings, options)
        self.device, self.dtype = torch.device(device), dtype
        cov = arrays.get("cov", cfg.cov)
        cov = self._named_covariance(cfg.kind, cfg.dim, cfg.rho, cfg.condition) if cov is None else cov
        cov = torch.as_tensor(cov, dtype=dtype, device=self.device)
        self.dim = cov.shape[0]
        mean = arrays.get("mean", cfg.mean)
        self.mean = torch.zeros(self.dim, dtype=dtype, device=self.device) if mean is None else \
            torch.as_tensor(mean, dtype=dtype, device=self.device)
        self.cov = cov
        self.precision = torch.linalg.inv(cov)
        self.kind = cfg.kind
        self._form: LogisticForm | None = None

    @staticmethod
    def _named_covariance(kind: str, dim: int, rho: float, condition: float) -> Tensor:
        if kind == "isotropic":
            return torch.eye(dim, dtype=torch.float64)
        if kind == "correlated":
            return (1 - rho) * torch.eye(dim, dtype=torch.float64) + rho * torch.ones(dim, dim, dtype=torch.float64)
        scales = torch.logspace(-torch.log10(torch.tensor(condition)).item(), 0.0, dim, dtype=torch.float64)
        if kind == "scaled":
            return torch.diag(scales**2)
        rotation, _ = torch.linalg.qr(torch.randn(dim, dim, generator=torch.Generator().manual_seed(0),
                                                  dtype=torch.float64))
        cov = (rotation * scales**2) @ rotation.T
        return 0.5 * (cov + cov.T)

    def log_normalizer(self) -> float:
        """log of the integral of exp(-1/2 (q - m)^T P (q - m)): dim/2 log 2 pi + 1/2 log det Sigma."""
        return 0.5 * self.dim * math.log(2.0 * math.pi) + 0.5 * float(torch.logdet(self.cov))

    def log_prob(self, q: Tensor) -> Tensor:
        d = q - self.mean
        return -0.5 * ((d @ self.precision) * d).sum(-1)

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        d = q - self.mean
        pd = d @ self.precision
        return -0.5 * (pd * d).sum(-1), -pd

    def density_form(self) -> LogisticForm:
        """No rows; the precision as its diagonal where it is diagonal (an O(dim) product per gradient)."""
        if self._form is None:
            p = self.precision
            diagonal = bool(torch.count_nonzero(p - torch.diag(p.diagonal())) == 0)
            shift = -(p @ self.mean)
            self._form = LogisticForm.build(torch.empty(self.dim, 0, dtype=self.dtype, device=self.device), None,
                                            torch.empty(0, dtype=self.dtype, device=self.device),
                                            p.diagonal() if diagonal else p, shift, 0.5 * float(self.mean @ shift))
        return self._form

    def evaluate(self, draws: Tensor, sample_stats=None) -> Evaluation:
        """Largest error of the posterior mean and sd, in units of the true sd."""
        return moment_errors(draws, self.mean.cpu().double().numpy(), self.cov.diagonal().sqrt().cpu().double().numpy())

    def describe(self) -> dict[str, str]:
        return {"dim": str(self.dim), "gaussian_kind": self.kind}


def _plain(value) -> bool:
    """Config-style values (None, numbers, nested lists); arrays and tensors are passed as they are."""
    return value is None or isinstance(value, (int, float, list, tuple))
