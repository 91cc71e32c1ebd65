"""Euclidean metrics (mass matrices) for Hamiltonian samplers.

The kinetic energy is K(p) = p^T M^{-1} p / 2 with momentum p ~ N(0, M). We store the *inverse*
mass matrix M^{-1}, which adaptation estimates as the posterior covariance, either as a vector
(diagonal metric) or as a full matrix (dense metric), together with its Cholesky factor
L (M^{-1} = L L^T) and L^{-1}:

- momentum:  p = L^{-T} z with z ~ N(0, I), so Cov(p) = (L L^T)^{-1} = M;
- velocity:  dq/dt = dK/dp = M^{-1} p;
- the same factor L maps white noise to proposal noise for random-walk Metropolis.

Positions and momenta are batched row vectors of shape (chains, dim), so matrix products are
written with the transposes on the right.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Metric(NamedTuple):
    inv_mass: Tensor  # (dim,) for a diagonal metric, (dim, dim) for a dense one
    chol: Tensor  # sqrt(inv_mass) or the lower Cholesky factor L of inv_mass
    chol_inv: Tensor  # 1 / sqrt(inv_mass) or L^{-1}

    @property
    def dense(self) -> bool:
        return self.inv_mass.dim() == 2


def make_metric(inv_mass: Tensor) -> Metric:
    """Build a metric from an inverse mass matrix (a variance vector or a covariance matrix)."""
    if inv_mass.dim() == 1:
        chol = inv_mass.sqrt()
        return Metric(inv_mass, chol, 1.0 / chol)
    chol = torch.linalg.cholesky(inv_mass)
    eye = torch.eye(inv_mass.shape[0], dtype=inv_mass.dtype, device=inv_mass.device)
    chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)
    return Metric(inv_mass, chol, chol_inv)


def identity_metric(dim: int, dense: bool, dtype: torch.dtype, device: torch.device) -> Metric:
    ones = torch.ones(dim, dtype=dtype, device=device)
    return make_metric(torch.diag(ones) if dense else ones)


def sample_momentum(metric: Metric, shape: tuple[int, int], gen: torch.Generator) -> Tensor:
    """p ~ N(0, M) as rows: p = z L^{-1}, the row form of L^{-T} z."""
    z = torch.randn(shape, generator=gen, dtype=metric.chol.dtype, device=metric.chol.device)
    return z @ metric.chol_inv if metric.dense else z * metric.chol_inv


def velocity(metric: Metric, p: Tensor) -> Tensor:
    """M^{-1} p for each row of p."""
    return p @ metric.inv_mass if metric.dense else p * metric.inv_mass


def kinetic_energy(metric: Metric, p: Tensor) -> Tensor:
    """K(p) = p^T M^{-1} p / 2 for each row of p."""
    return 0.5 * (p * velocity(metric, p)).sum(-1)


def scale_noise(metric: Metric, z: Tensor) -> Tensor:
    """L z for each row z: white noise with covariance M^{-1} (random-walk proposals)."""
    return z @ metric.chol.T if metric.dense else z * metric.chol
