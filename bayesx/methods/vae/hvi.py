"""Hamiltonian VI and Riemannian HVI trainers (the VAE thesis, alg. 3-5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from bayesx.methods.vae.trainer import VariationalMethod, VariationalSettings
from bayesx.settings import AtLeast, Between
from bayesx.methods.vae import bounds
from bayesx.methods.vae.model import VAEModel


@dataclass(frozen=True)
class HVISettings(VariationalSettings):
    leapfrog_steps: Annotated[int, AtLeast(1)] = 1
    transitions: Annotated[int, AtLeast(1)] = 1
    init_step: Annotated[float, Between(bounds.STEP_MIN, bounds.STEP_MAX, closed=True)] = 0.05
    aux_hidden: Annotated[int, AtLeast(1)] = 300  # hidden units of q_t(v'|x) and r_t(v|x,z)

    def bound_options(self) -> dict:
        return dict(transitions=self.transitions, leapfrog_steps=self.leapfrog_steps, init_step=self.init_step,
                    aux_hidden=self.aux_hidden)


@dataclass(frozen=True)
class RMHVISettings(HVISettings):
    fisher_samples: Annotated[int, AtLeast(1)] = 5  # Monte Carlo draws of the diagonal Fisher metric
    fixed_point_iters: Annotated[int, AtLeast(1)] = 5  # of the implicit generalized-leapfrog updates


class HVI(VariationalMethod):
    """Hamiltonian variational inference: ``transitions`` x ``leapfrog_steps`` leapfrog steps after the encoder."""

    Settings = HVISettings
    name = "hvi"

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        return bounds.HVIBound(model, **self.settings.bound_options())


class RMHVI(HVI):
    """Riemannian HVI (Zhang (2018) alg. 4-5): the generalized leapfrog with a diagonal Monte Carlo Fisher metric."""

    Settings = RMHVISettings
    name = "rmhvi"

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        cfg = self.settings
        return bounds.RMHVIBound(model, fisher_samples=cfg.fisher_samples, fixed_point_iters=cfg.fixed_point_iters,
                                 **cfg.bound_options())
