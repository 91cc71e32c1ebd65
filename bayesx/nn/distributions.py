"""Gaussian distributions shared by the variational methods, their tempered paths and the flows' base.

GaussianQ is N(mean, L L^T) given by its scale factor L: a vector (diagonal) or a lower-triangular
matrix (dense). Draws are mean + L eps with eps ~ N(0, I), and log q at such a draw needs no solve:
-|eps|^2 / 2 - log det L - dim/2 log 2 pi.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

LOG_2PI = math.log(2.0 * math.pi)


class GaussianQ:
    """N(mean, L L^T) with L = diag(scale) for a vector ``scale`` or L = ``scale`` (lower triangular)."""

    def __init__(self, mean: Tensor, scale: Tensor):
        self.mean, self.scale = mean, scale
        self.dense = scale.dim() == 2

    def transform(self, eps: Tensor) -> Tensor:
        """z = mean + L eps for rows eps (n, dim)."""
        return self.mean + (eps @ self.scale.T if self.dense else eps * self.scale)

    def sample(self, n: int, gen: torch.Generator) -> Tensor:
        return self.sample_and_log_prob(n, gen)[0]

    def sample_and_log_prob(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        eps = torch.randn((n, self.mean.shape[-1]), generator=gen, dtype=self.mean.dtype, device=gen.device)
        eps = eps.to(self.mean.device)
        return self.transform(eps), self.log_prob_of_noise(eps)

    def log_det_scale(self) -> Tensor:
        diag = self.scale.diagonal() if self.dense else self.scale
        return torch.log(diag).sum(-1)

    def log_prob_of_noise(self, eps: Tensor) -> Tensor:
        """log q(mean + L eps), without solving for eps."""
        return -0.5 * (eps * eps).sum(-1) - self.log_det_scale() - 0.5 * self.mean.shape[-1] * LOG_2PI

    def log_prob(self, z: Tensor) -> Tensor:
        d = z - self.mean
        if self.dense:
            white = torch.linalg.solve_triangular(self.scale, d.reshape(-1, d.shape[-1]).T, upper=False).T
            white = white.reshape(d.shape)
        else:
            white = d / self.scale
        return self.log_prob_of_noise(white)

    def grad_log_prob(self, z: Tensor) -> Tensor:
        """-S^-1 (z - mean) for rows z."""
        d = z - self.mean
        if not self.dense:
            return -d / self.scale**2
        white = torch.linalg.solve_triangular(self.scale, d.T, upper=False)
        return -torch.linalg.solve_triangular(self.scale.T, white, upper=True).T

    def entropy(self) -> Tensor:
        return self.log_det_scale() + 0.5 * self.mean.shape[-1] * (1.0 + LOG_2PI)

    def covariance(self) -> Tensor:
        return self.scale @ self.scale.T if self.dense else torch.diag(self.scale**2)
