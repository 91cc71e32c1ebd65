"""The differentiable leapfrog of Hamiltonian variational inference (Salimans, Kingma and Welling
2015), shared by the VAE's HVI bound and ``method=hamiltonian_vi`` on a target.

num_steps leapfrog steps of H(z, v) = -log p(z) + |v|^2 / 2 with per-dimension step sizes eps:

    v <- v + eps/2 grad log p(z);  (z <- z + eps v;  v <- v + eps grad log p(z)) ...;  last half step

Each sub-step is a shear, so the map (z, v) -> (z', v') has unit Jacobian and the variational bound
needs no log-determinant. With ``create_graph`` the gradients stay differentiable, so the bound's
gradient reaches the step sizes and the distribution the chain started from (second derivatives
of log p by autograd: log p must be written in differentiable torch).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def leapfrog(log_density: Callable[[Tensor], Tensor], z: Tensor, v: Tensor, step: Tensor, num_steps: int,
             create_graph: bool) -> tuple[Tensor, Tensor]:
    def grad_log_density(z: Tensor) -> Tensor:
        with torch.enable_grad():
            if not z.requires_grad:
                z = z.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(log_density(z).sum(), z, create_graph=create_graph)
        return g

    v = v + 0.5 * step * grad_log_density(z)
    for i in range(num_steps):
        z = z + step * v
        g = grad_log_density(z)
        v = v + (step if i < num_steps - 1 else 0.5 * step) * g
    return z, v
