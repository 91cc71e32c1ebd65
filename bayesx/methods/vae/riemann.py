"""The generalized (Riemannian) leapfrog of RMHMC (Girolami and Calderhead 2011) with a diagonal
metric, as RMHVI uses it (Zhang (2018) alg. 4-5).

With a position-dependent metric G(z) = diag(g(z)) the Hamiltonian is

    H(z, p) = -log p(x, z) + 1/2 sum_d log(2 pi g_d(z)) + 1/2 sum_d p_d^2 / g_d(z)

and one generalized leapfrog step of size eps is

    p_half = p - eps/2 grad_z H(z, p_half)                        (implicit: fixed-point iterations)
    z_new  = z + eps/2 [G^-1(z) + G^-1(z_new)] p_half               (implicit: fixed-point iterations)
    p_new  = p_half - eps/2 grad_z H(z_new, p_half)                 (explicit)

The map is symplectic, hence volume preserving, so HVI's bound keeps its form. With a constant
metric, grad_z H = -grad log p(x, z) and both implicit equations are solved exactly by one
iteration: the step is the ordinary leapfrog with mass matrix G.

The metric is the diagonal Fisher information of the decoder plus the prior's (the identity),
estimated by Monte Carlo from ``n`` decoder samples x_s ~ p(x | z) (Zhang (2018): n = 5):

    g_d(z) = 1 + (1/n) sum_s (d/dz_d log p(x_s | z))^2
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

MetricFn = Callable[[Tensor], Tensor]  # z (..., d) -> g(z) (..., d), positive


def _grad(fn, z: Tensor, create_graph: bool) -> Tensor:
    """The partial derivative d fn / d z. z enters fn as a fresh node (a clone), so that quantities computed
    from z before (the momentum of the implicit half-step, p_half(z)) are held fixed: differentiating z
    itself would add their paths, giving the wrong gradient and a graph that doubles with every iteration."""
    with torch.enable_grad():
        w = z.clone() if z.requires_grad else z.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(w).sum(), w, create_graph=create_graph)
    return g


def hamiltonian(log_joint: Callable[[Tensor], Tensor], metric: MetricFn, z: Tensor, p: Tensor) -> Tensor:
    g = metric(z)
    return -log_joint(z) + 0.5 * torch.log(2 * torch.pi * g).sum(-1) + 0.5 * (p * p / g).sum(-1)


def generalized_leapfrog(log_joint: Callable[[Tensor], Tensor], metric: MetricFn, z: Tensor, p: Tensor, step: Tensor,
                         num_steps: int, momentum_iters: int = 5, position_iters: int = 1,
                         create_graph: bool = False) -> tuple[Tensor, Tensor]:
    """``num_steps`` generalized leapfrog steps from (z, p); see the module docstring."""

    def grad_h(z_: Tensor, p_: Tensor) -> Tensor:
        return _grad(lambda w: hamiltonian(log_joint, metric, w, p_), z_, create_graph)

    for _ in range(num_steps):
        p_half = p
        for _ in range(momentum_iters):
            p_half = p - 0.5 * step * grad_h(z, p_half)
        inv_start = 1.0 / metric(z)
        z_new = z
        for _ in range(position_iters):
            z_new = z + 0.5 * step * (inv_start + 1.0 / metric(z_new)) * p_half
        p = p_half - 0.5 * step * grad_h(z_new, p_half)
        z = z_new
    return z, p


def fisher_metric(model, uniforms: Tensor) -> MetricFn:
    """g(z) = 1 + mean_s (grad_z log p(x_s | z))^2 with x_s = 1[u_s < sigmoid(decoder(z))].

    The uniforms u_s (n, B, C, H, W) are drawn once per transition, so within it g is a fixed
    function of z (x_s ~ p(x | z) for each z, and the leapfrog stays symplectic); the samples are
    piecewise constant in z and not differentiated through.
    """

    def metric(z: Tensor) -> Tensor:
        with torch.enable_grad():
            zz = z if z.requires_grad else z.detach().requires_grad_(True)
            logits = model.decoder(zz)
            total = torch.zeros_like(zz)
            for u in uniforms:
                x_s = (u < torch.sigmoid(logits.detach())).to(logits.dtype)
                log_lik = -torch.nn.functional.binary_cross_entropy_with_logits(logits, x_s, reduction="none")
                (score,) = torch.autograd.grad(log_lik.flatten(1).sum(), zz, create_graph=True)
                total = total + score * score
            g = 1.0 + total / uniforms.shape[0]
        return g if z.requires_grad else g.detach()

    return metric
