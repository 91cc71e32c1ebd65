"""Planar flow (Rezende and Mohamed 2015, sec. 4.1):

    f(z) = z + u_hat h(w^T z + b),   h = tanh,
    log |det J| = log |1 + u_hat^T psi(z)|,   psi(z) = h'(w^T z + b) w,

O(dim) per draw. f is invertible when w^T u_hat >= -1; the free parameter u is mapped to

    u_hat = u + (m(w^T u) - w^T u) w / |w|^2,   m(x) = -1 + softplus(x + log(e - 1)),

so that w^T u_hat = m(w^T u) > -1 always (their appendix A.1). The shift log(e - 1) inside the
softplus is ours: it makes m(0) = 0, so a layer with small u and w starts near the identity; with the
paper's m(x) = -1 + softplus(x), m(0) = log 2 - 1 and every fresh layer contracts space along w by a
factor 0.69 (32 of them start far from the base). There is no closed-form inverse.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.nn.flows.base import FlowLayer

SHIFT = math.log(math.e - 1.0)  # m(0) = 0


def constrained_u(u: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """(u_hat, w^T u_hat) with w^T u_hat = m(w^T u) > -1, over the last dimension (kept, size 1)."""
    wu = (w * u).sum(-1, keepdim=True)
    w_u_hat = F.softplus(wu + SHIFT) - 1.0
    return u + (w_u_hat - wu) * w / (w * w).sum(-1, keepdim=True), w_u_hat


def planar(z: Tensor, u: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """f(z) and log|det J| for parameters that broadcast against z: u, w (..., dim), b (...). One set of
    parameters for every row (a flow fitted to one target), or one per row (amortized: an inference network
    gives each image its own layer, as in Rezende and Mohamed's VAE)."""
    u_hat, w_u_hat = constrained_u(u, w)
    h = torch.tanh((z * w).sum(-1) + b)
    psi_u = (1.0 - h * h) * w_u_hat.squeeze(-1)  # psi(z)^T u_hat
    return z + h.unsqueeze(-1) * u_hat, torch.log(torch.abs(1.0 + psi_u))


class Planar(FlowLayer):
    invertible = False

    def __init__(self, dim: int, gen: torch.Generator, init_scale: float = 0.01):
        super().__init__()
        self.u = nn.Parameter(init_scale * torch.randn(dim, generator=gen))
        self.w = nn.Parameter(init_scale * torch.randn(dim, generator=gen))
        self.b = nn.Parameter(torch.zeros(()))

    def u_hat(self) -> Tensor:
        return constrained_u(self.u, self.w)[0]

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        return planar(z, self.u, self.w, self.b)
