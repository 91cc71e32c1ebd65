"""The flow-VAE trainer: the encoder's Gaussian refined by amortized planar or IAF layers
(Rezende and Mohamed 2015; Kingma et al. 2016); the bound is bayesx.methods.vae.bounds.FlowBound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from bayesx.methods.vae.trainer import VariationalMethod, VariationalSettings
from bayesx.settings import AtLeast
from bayesx.methods.vae import bounds
from bayesx.methods.vae.model import VAEModel


@dataclass(frozen=True)
class FlowVAESettings(VariationalSettings):
    flow: Literal["planar", "iaf"] = "planar"
    n_layers: Annotated[int, AtLeast(1)] = 10  # K flow layers after the encoder
    hidden: Annotated[int, AtLeast(1)] = 100  # MADE width of each IAF layer (two hidden layers)
    context_hidden: Annotated[int, AtLeast(1)] = 300  # units of the context network on the image


class FlowVAE(VariationalMethod):
    """A VAE whose approximate posterior is a normalizing flow on top of the encoder's Gaussian."""

    Settings = FlowVAESettings
    name = "flowvae"

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        cfg = self.settings
        return bounds.FlowBound(model, flow=cfg.flow, n_layers=cfg.n_layers, hidden=cfg.hidden,
                                context_hidden=cfg.context_hidden)
