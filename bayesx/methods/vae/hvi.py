"""Hamiltonian VI and Riemannian HVI trainers (the VAE thesis, alg. 3-5)."""

from __future__ import annotations

import torch

from bayesx.methods.vae.trainer import VariationalMethod
from bayesx.vae import bounds
from bayesx.vae.model import VAEModel


class HVI(VariationalMethod):
    """Hamiltonian variational inference: ``transitions`` x ``leapfrog_steps`` leapfrog steps after the encoder."""

    name = "hvi"

    def __init__(self, leapfrog_steps: int = 1, transitions: int = 1, init_step: float = 0.05, aux_hidden: int = 300,
                 **kwargs):
        super().__init__(**kwargs)
        bounds.check_options(transitions=transitions, leapfrog_steps=leapfrog_steps, init_step=init_step,
                             aux_hidden=aux_hidden)
        self.bound_options = dict(transitions=transitions, leapfrog_steps=leapfrog_steps, init_step=init_step,
                                  aux_hidden=aux_hidden)

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        return bounds.HVIBound(model, **self.bound_options)



class RMHVI(HVI):
    """Riemannian HVI (Zhang (2018) alg. 4-5): the generalized leapfrog with a diagonal Monte Carlo Fisher metric."""

    name = "rmhvi"

    def __init__(self, fisher_samples: int = 5, fixed_point_iters: int = 5, **kwargs):
        super().__init__(**kwargs)
        bounds.check_options(fisher_samples=fisher_samples, fixed_point_iters=fixed_point_iters)
        self.riemann_options = dict(fisher_samples=fisher_samples, fixed_point_iters=fixed_point_iters)

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        return bounds.RMHVIBound(model, **self.riemann_options, **self.bound_options)
