"""Planar flow (Rezende and Mohamed 2015, sec. 4.1):

    f(z) = z + u_hat h(w^T z + b),   h = tanh,
    log |det J| = log |1 + u_hat^T psi(z)|,   psi(z) = h'(w^T z + b) w,

O(dim) per draw. f is invertible when w^T u_hat >= -1; the free parameter u is mapped to

    u_hat = u + (m(w^T u) - w^T u) w / |w|^2,   m(x) = -1 + softplus(x + log(e - 1)),

so that w^T u_hat = m(w^T u) > -1 always (their appendix A.1). The shift log(e - 1) inside the
softplus is ours: it makes m(0) = 0, so a layer with small u and w starts near the identity; with the
paper's m(x) = -1 + softplus(x), m(0) = log 2 - 1 and every fresh layer contracts space along w by a
factor 0.69 (32 of them start far from the base). There is no closed-form inverse.

A stack of K planar maps (``Planar(dim, gen, n_layers=K)``) keeps its parameters as (K, dim) tensors
and has a hand-written backward pass: with h_k = tanh(a_k), a_k = w_k^T z_{k-1} + b_k, s_k = 1 - h_k^2,
D_k = 1 + s_k m_k (m_k = w_k^T u_hat_k), g the gradient at z_k and c the gradient at sum_k log|D_k|,

    dL/da_k = (g^T u_hat_k - 2 c h_k m_k / D_k) s_k,      dL/dz_{k-1} = g + (dL/da_k) w_k,
    dL/du_hat_k = sum_rows h_k g,   dL/dw_k = sum_rows (dL/da_k) z_{k-1},   dL/db_k = sum_rows dL/da_k,
    dL/dm_k = sum_rows c s_k / D_k,

(u_hat and m from (u, w) by autograd, all layers at once). Four tensor operations per layer forward
and three backward instead of autograd's few dozen: in 2-D, where each operation is a few microseconds
of dispatch around almost no arithmetic, this is what sets the time per iteration
(results/bench_flows.md). The per-row form ``planar`` (an amortized layer) stays on autograd.
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


class _PlanarStack(torch.autograd.Function):
    """K planar maps forward, and the backward pass of the module docstring."""

    @staticmethod
    def forward(ctx, z: Tensor, u_hat: Tensor, w: Tensor, b: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
        inputs, hs = [], []
        for k in range(u_hat.shape[0]):
            inputs.append(z)
            h = torch.tanh(torch.addmv(b[k].expand(z.shape[0]), z, w[k]))
            hs.append(h)
            z = torch.addr(z, h, u_hat[k])
        h = torch.stack(hs)  # (K, n)
        s = 1.0 - h * h
        det = torch.addcmul(torch.ones_like(s), s, m[:, None])
        ctx.save_for_backward(torch.stack(inputs), h, s, det, u_hat, w, m)
        return z, torch.log(torch.abs(det)).sum(0)

    @staticmethod
    def backward(ctx, g: Tensor, g_log_det: Tensor):
        inputs, h, s, det, u_hat, w, m = ctx.saved_tensors
        through_det = (-2.0 * m[:, None]) * h / det * g_log_det  # d log|D_k| / d h_k times c, (K, n)
        outputs, g_a = [None] * len(h), [None] * len(h)
        for k in range(len(h) - 1, -1, -1):
            outputs[k] = g
            g_a[k] = (torch.mv(g, u_hat[k]) + through_det[k]) * s[k]
            g = torch.addr(g, g_a[k], w[k])
        g_a = torch.stack(g_a)
        g_u_hat = torch.einsum("kn,knd->kd", h, torch.stack(outputs))
        g_w = torch.einsum("kn,knd->kd", g_a, inputs)
        return g, g_u_hat, g_w, g_a.sum(1), (g_log_det * s / det).sum(1)


class Planar(FlowLayer):
    """``n_layers`` planar maps applied in order, parameters stacked (n_layers, dim)."""

    invertible = False

    def __init__(self, dim: int, gen: torch.Generator, n_layers: int = 1, init_scale: float = 0.01):
        super().__init__()
        self.u = nn.Parameter(init_scale * torch.randn(n_layers, dim, generator=gen))
        self.w = nn.Parameter(init_scale * torch.randn(n_layers, dim, generator=gen))
        self.b = nn.Parameter(torch.zeros(n_layers))

    def u_hat(self) -> Tensor:
        return constrained_u(self.u, self.w)[0]

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        u_hat, m = constrained_u(self.u, self.w)
        return _PlanarStack.apply(z, u_hat, self.w, self.b, m.squeeze(-1))
