"""The VAE model of the ``model`` config group (``model=vae``): data, encoder, decoder, likelihood.

    p(z) = N(0, I),   p(x | z) = prod_pixels Bernoulli(x; sigmoid(decoder(z)))   (x binary or in [0, 1])
    q(z | x) = N(mu(x), diag exp(log_var(x)))

A method of the ``method`` group (vae, hvi, rmhvi, dppvae; ``bayesx.methods.vae``) trains it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.errors import BayesxError
from bayesx.settings import AtLeast, InvalidSetting, Settings
from bayesx.targets.base import Capabilities, ModelBase
from bayesx.methods.vae import nets

LOG_2PI = math.log(2.0 * math.pi)
PRECISIONS = {"float32": torch.float32, "float64": torch.float64}


def gaussian_log_density(z: Tensor, mean: Tensor, log_var: Tensor) -> Tensor:
    """log N(z; mean, diag exp(log_var)), summed over the last dimension."""
    return -0.5 * (LOG_2PI + log_var + (z - mean) ** 2 * torch.exp(-log_var)).sum(-1)


def standard_normal_log_density(z: Tensor) -> Tensor:
    return -0.5 * (LOG_2PI + z * z).sum(-1)


def bernoulli_log_likelihood(x: Tensor, logits: Tensor) -> Tensor:
    """sum over pixels of x log sigmoid(l) + (1 - x) log sigmoid(-l); x may broadcast over samples."""
    x = x.expand_as(logits)
    return -F.binary_cross_entropy_with_logits(logits, x, reduction="none").flatten(-3).sum(-1)


@dataclass(frozen=True)
class VAEModelSettings(Settings):
    arch: Literal["fc", "conv", "conv_cifar"] = "fc"
    latent_dim: Annotated[int | None, AtLeast(1)] = None  # null: the preset's size
    enc_hidden: Annotated[tuple[int, ...] | None, AtLeast(1)] = None  # fc encoder hidden sizes
    dec_hidden: Annotated[tuple[int, ...] | None, AtLeast(1)] = None  # fc decoder hidden sizes
    channels: Annotated[tuple[int, ...] | None, AtLeast(1)] = None  # conv channels
    fc_units: Annotated[int | None, AtLeast(1)] = None  # conv fully connected width
    precision: Literal["float32", "float64"] | None = "float32"  # null: device.dtype

    def check(self):
        for key in ("enc_hidden", "dec_hidden", "channels"):
            if getattr(self, key) == ():
                raise InvalidSetting(key, "must be a non-empty list of positive integers or null, got []")


class VAEModel(ModelBase, nn.Module):
    """Encoder and decoder of one architecture preset on one image data set (``conf/model/vae.yaml``)."""

    Settings = VAEModelSettings
    capabilities = Capabilities(posterior=False, default_data="mnist")  # trained, not sampled

    def __init__(self, data, settings: VAEModelSettings | None = None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, **options):
        super().__init__()
        cfg = self.configure(settings, options)
        if data is None or not hasattr(data, "x_train") or getattr(data.x_train, "ndim", 0) != 4:
            raise BayesxError("model=vae needs image data (N, C, H, W): use data=mnist, data=fashion_mnist or "
                              "data=cifar10")
        arch = cfg.arch
        latent_dim = nets.DEFAULT_LATENT[arch] if cfg.latent_dim is None else cfg.latent_dim
        self.data, self.arch, self.latent_dim = data, arch, latent_dim
        self.image_shape = tuple(int(s) for s in data.x_train.shape[1:])
        enc_hidden, dec_hidden, channels, fc_units = cfg.enc_hidden, cfg.dec_hidden, cfg.channels, cfg.fc_units
        precision = cfg.precision
        self.encoder, self.decoder = nets.build_encoder_decoder(arch, self.image_shape, latent_dim, enc_hidden,
                                                                dec_hidden, channels, fc_units)
        self.device = torch.device(device)
        self.dtype = PRECISIONS[precision] if precision is not None else dtype
        self.to(device=self.device, dtype=self.dtype)

    # --- densities --------------------------------------------------------------------------------------
    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.encoder(x)

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        """log p(x | z) for z (..., B, d) and x (B, C, H, W)."""
        return bernoulli_log_likelihood(x, self.decoder(z))

    def log_joint(self, x: Tensor, z: Tensor) -> Tensor:
        """log p(x, z) = log p(x | z) + log N(z; 0, I)."""
        return self.log_likelihood(x, z) + standard_normal_log_density(z)

    # --- the target interface the runner shows in tags ------------------------------------------------
    def describe(self) -> dict[str, str]:
        tags = {"arch": self.arch, "latent_dim": str(self.latent_dim), "image_shape": "x".join(map(str, self.image_shape)),
                "parameters": str(sum(p.numel() for p in self.parameters()))}
        if hasattr(self.data, "describe"):
            tags.update({f"data_{k}": str(v) for k, v in self.data.describe().items()})
        return tags

    def tensors(self, split: str) -> tuple[Tensor, Tensor]:
        """(images, labels) of the train or test split on the model's device and dtype."""
        x = getattr(self.data, f"x_{split}")
        y = getattr(self.data, f"y_{split}")
        return (torch.as_tensor(x, dtype=self.dtype, device=self.device),
                torch.as_tensor(y, dtype=torch.long, device=self.device))
