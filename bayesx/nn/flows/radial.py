"""Radial flow (Rezende and Mohamed 2015, sec. 4.1): contractions and expansions around a point z0,

    f(z) = z + beta h(alpha, r) (z - z0),   r = |z - z0|,   h = 1 / (alpha + r),
    log |det J| = (dim - 1) log(1 + beta h) + log(1 + beta h + beta h'(r) r),   h' = -1 / (alpha + r)^2.

Invertible when beta >= -alpha (their appendix A.2): alpha = softplus(a) > 0 and
beta = -alpha + softplus(b'). There is no closed-form inverse.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.nn.flows.base import FlowLayer


class Radial(FlowLayer):
    invertible = False

    def __init__(self, dim: int, gen: torch.Generator, init_scale: float = 0.01):
        super().__init__()
        self.dim = dim
        self.z0 = nn.Parameter(init_scale * torch.randn(dim, generator=gen))
        self.alpha_raw = nn.Parameter(init_scale * torch.randn((), generator=gen))
        self.beta_raw = nn.Parameter(init_scale * torch.randn((), generator=gen))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        alpha = F.softplus(self.alpha_raw)
        beta = -alpha + F.softplus(self.beta_raw)
        d = z - self.z0
        r = torch.linalg.vector_norm(d, dim=-1)
        h = 1.0 / (alpha + r)
        bh = beta * h
        log_det = (self.dim - 1) * torch.log1p(bh) + torch.log1p(bh - beta * r * h * h)
        return z + bh[:, None] * d, log_det
