"""The mean preconditioner of mean-field Gaussian VI: a window's least-squares secant estimate of the
target's average Hessian.

A mean-field q's mean follows E_q grad log p, whose Jacobian in the mean is the average Hessian
E_q[Hess log p]; on a correlated posterior its condition number is that of the precision in units of
q's sds (about 3e4 on posteriordb's diamonds), and a first-order method crawls along the ridge. The
gradients a_i taken at the window's draws x_i already hold that Hessian: the least-squares slope of
the gradients on the points,

    H = C_ax C_xx^-1,   C_ax = mean (a_i - a)(x_i - x)^T,   C_xx = mean (x_i - x)(x_i - x)^T,

is exact for a Gaussian target (its gradient is linear in x) with any dim + 1 points in general
position, and an average Hessian over the window's points elsewhere (the secant idea of quasi-Newton
methods, fitted to many points at once). The mean is then moved in coordinates u with x = B u,
B = |P|^-1/2 for P = -(H + H^T) / 2 (absolute eigenvalues where P is indefinite, as saddle-free
Newton does, Dauphin et al. 2014), in which the mean's objective has about unit curvature in every
direction: Adam's steps of about lr per coordinate are then steps of lr posterior sds along each
principal axis.
"""

from __future__ import annotations

import torch
from torch import Tensor

EIGEN_FLOOR = 1e-10  # smallest |eigenvalue| of P kept, relative to the largest
RIDGE = 1e-10  # added to C_xx's diagonal, relative to its mean variance (fewer draws than dim + 1)


class SecantCurvature:
    """Sums of a window's points x (n, dim) and the target's gradients a at them, in one coordinate frame."""

    def __init__(self, dim: int, dtype: torch.dtype, device: torch.device):
        self.n = 0
        self.sum_x = torch.zeros(dim, dtype=dtype, device=device)
        self.sum_a = torch.zeros_like(self.sum_x)
        self.sum_xx = torch.zeros((dim, dim), dtype=dtype, device=device)
        self.sum_ax = torch.zeros_like(self.sum_xx)

    def add(self, x: Tensor, a: Tensor) -> None:
        self.n += x.shape[0]
        self.sum_x += x.sum(0)
        self.sum_a += a.sum(0)
        self.sum_xx += x.T @ x
        self.sum_ax += a.T @ x

    def mean_preconditioner(self, rescale: Tensor) -> Tensor:
        """B = |P|^-1/2 (module docstring) in the coordinates y = x / rescale (a vector: the next frame's
        sds over this one's), where the precision is rescale P rescale."""
        mean_x, mean_a = self.sum_x / self.n, self.sum_a / self.n
        c_xx = self.sum_xx / self.n - torch.outer(mean_x, mean_x)
        c_ax = self.sum_ax / self.n - torch.outer(mean_a, mean_x)
        dim = c_xx.shape[0]
        c_xx = c_xx + RIDGE * float(c_xx.diagonal().mean()) * torch.eye(dim, dtype=c_xx.dtype, device=c_xx.device)
        hessian = torch.linalg.solve(c_xx, c_ax.T).T  # C_ax C_xx^-1 (C_xx symmetric)
        precision = -0.5 * (hessian + hessian.T) * torch.outer(rescale, rescale)
        eigenvalues, vectors = torch.linalg.eigh(precision)
        largest = float(eigenvalues.abs().max())
        if not largest > 0 or not torch.isfinite(eigenvalues).all():  # no curvature seen: leave the mean as it is
            return torch.eye(dim, dtype=c_xx.dtype, device=c_xx.device)
        size = eigenvalues.abs().clamp_min(EIGEN_FLOOR * largest)
        return (vectors * size.rsqrt()) @ vectors.T
