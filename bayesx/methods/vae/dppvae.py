"""The DPP-VAE trainer (k-DPP balancing prior on each minibatch's latents)."""

from __future__ import annotations

import torch

from bayesx.methods.vae.trainer import VariationalMethod
from bayesx.vae import bounds
from bayesx.vae.model import VAEModel


class DPPVAE(VariationalMethod):
    """DPP-VAE (Chen (2019) ch. 4): the k-DPP balancing prior on each minibatch's latents (bayesx.vae.dpp)."""

    name = "dppvae"

    def __init__(self, dpp_alpha: float = 1000.0, dpp_rho: float = 1.0, dpp_sigma: float = 1.0,
                 dpp_truncation: int = 4096, **kwargs):
        from bayesx.vae.dpp import KDPPPrior

        super().__init__(**kwargs)
        self.prior = KDPPPrior(dpp_alpha, dpp_rho, dpp_sigma, truncation=dpp_truncation)

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        return bounds.DPPVAEBound(self.prior)
