"""The DPP-VAE trainer (k-DPP balancing prior on each minibatch's latents)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from bayesx.methods.vae.trainer import VariationalMethod, VariationalSettings
from bayesx.settings import AtLeast, Positive
from bayesx.methods.vae import bounds
from bayesx.methods.vae.model import VAEModel


@dataclass(frozen=True)
class DPPVAESettings(VariationalSettings):
    dpp_alpha: Annotated[float, Positive()] = 1000.0  # quality scale (cancels from a k-DPP)
    dpp_rho: Annotated[float | tuple[float, ...], Positive()] = 1.0  # quality variance, one or per latent dimension
    dpp_sigma: Annotated[float | tuple[float, ...], Positive()] = 1.0  # similarity variance, likewise
    dpp_truncation: Annotated[int, AtLeast(1)] = 4096  # eigenvalues kept in the normalizer bound


class DPPVAE(VariationalMethod):
    """DPP-VAE (Chen (2019) ch. 4): the k-DPP balancing prior on each minibatch's latents (bayesx.methods.vae.dpp)."""

    Settings = DPPVAESettings
    name = "dppvae"

    def __init__(self, settings: DPPVAESettings | None = None, **options):
        from bayesx.methods.vae.dpp import KDPPPrior

        super().__init__(settings, **options)
        cfg = self.settings
        self.prior = KDPPPrior(cfg.dpp_alpha, cfg.dpp_rho, cfg.dpp_sigma, truncation=cfg.dpp_truncation)

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        return bounds.DPPVAEBound(self.prior)
