"""The Gaussian prior u ~ N(0, C) on the field's values at the degrees of freedom.

    C_ij = sigma_u^2 exp(-|s_i - s_j| / (2 s0))      (the exponential kernel of Deep MCMC sec. 4.2)

C = L L^T is factorized once per (mesh, sigma_u, s0) and the factor cached on disk, so a run
never factorizes more than once (6561 x 6561 on the 40 x 40 mesh: a few seconds, 344 MB).

    sample      u = L z, z ~ N(0, I)
    log density -1/2 |L^-1 u|^2 (without the constant -1/2 log det(2 pi C))
    gradient    -C^-1 u = -L^-T L^-1 u   (two triangular solves)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from scipy.spatial.distance import cdist
from torch import Tensor

from bayesx.errors import BayesxError

JITTER = 1e-10  # relative diagonal nugget; the exponential kernel is positive definite on distinct points


def exponential_kernel(coords: np.ndarray, sigma: float, length: float) -> np.ndarray:
    return sigma**2 * np.exp(-cdist(coords, coords) / (2.0 * length))


def cholesky_factor(coords: np.ndarray, sigma: float, length: float, cache_dir: Path | None) -> np.ndarray:
    """L with L L^T = C (+ jitter), from the cache when present."""
    key = hashlib.sha1(np.ascontiguousarray(coords).tobytes() + f"{sigma!r}:{length!r}:{JITTER!r}".encode()).hexdigest()[:16]
    path = None if cache_dir is None else Path(cache_dir) / f"prior-chol-{coords.shape[0]}-{key}.npy"
    if path is not None and path.exists():
        try:
            return np.load(path, mmap_mode=None)
        except (OSError, ValueError):
            path.unlink(missing_ok=True)  # a truncated cache file: factorize again
    cov = exponential_kernel(coords, sigma, length)
    cov[np.diag_indices_from(cov)] += JITTER * sigma**2
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise BayesxError("the prior covariance is not positive definite; check model.prior_length and "
                          "model.prior_sd (both must be positive)") from None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, chol)
        tmp.replace(path)
    return chol


class GaussianFieldPrior:
    """N(0, L L^T) on the dofs, as torch operations on the target's device and dtype."""

    def __init__(self, chol: np.ndarray, device: torch.device, dtype: torch.dtype):
        self.chol = torch.as_tensor(chol, device=device, dtype=dtype)
        self.dim = self.chol.shape[0]

    def sample(self, n: int, gen: torch.Generator) -> Tensor:
        z = torch.randn((n, self.dim), generator=gen, device=self.chol.device, dtype=self.chol.dtype)
        return self.color(z)

    def color(self, z: Tensor) -> Tensor:
        """L z for rows z (..., dim)."""
        return z @ self.chol.T

    def whiten(self, u: Tensor) -> Tensor:
        """L^-1 u for rows u (..., dim)."""
        flat = u.reshape(-1, self.dim)
        return torch.linalg.solve_triangular(self.chol, flat.T, upper=False).T.reshape(u.shape)

    def log_prob_and_grad(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """-1/2 |L^-1 u|^2 and -C^-1 u."""
        w = self.whiten(u)
        grad = -torch.linalg.solve_triangular(self.chol.T, w.reshape(-1, self.dim).T, upper=True).T.reshape(u.shape)
        return -0.5 * (w * w).sum(-1), grad
