"""The VAE model of the ``model`` config group (``model=vae``): data, encoder, decoder, likelihood.

    p(z) = N(0, I),   p(x | z) = prod_pixels Bernoulli(x; sigmoid(decoder(z)))   (x binary or in [0, 1])
    q(z | x) = N(mu(x), diag exp(log_var(x)))

A method of the ``method`` group (vae, hvi, rmhvi, dppvae; ``bayesx.methods.vae``) trains it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.errors import BayesxError
from bayesx.targets.base import Capabilities, ModelBase
from bayesx.vae import nets

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


class VAEModel(ModelBase, nn.Module):
    """Encoder and decoder of one architecture preset on one image data set (``conf/model/vae.yaml``)."""

    capabilities = Capabilities(posterior=False, default_data="mnist")  # trained, not sampled

    def __init__(self, data, arch: str = "fc", latent_dim: int | None = None, enc_hidden: list[int] | None = None,
                 dec_hidden: list[int] | None = None, channels: list[int] | None = None, fc_units: int | None = None,
                 precision: str | None = "float32", device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        if data is None or not hasattr(data, "x_train") or getattr(data.x_train, "ndim", 0) != 4:
            raise BayesxError("model=vae needs image data (N, C, H, W): use data=mnist, data=fashion_mnist or "
                              "data=cifar10")
        if arch not in nets.ARCHS:
            raise BayesxError(f"model.arch must be one of {', '.join(nets.ARCHS)}, got '{arch}'")
        latent_dim = nets.DEFAULT_LATENT[arch] if latent_dim is None else latent_dim
        if not (isinstance(latent_dim, int) and not isinstance(latent_dim, bool) and latent_dim >= 1):
            raise BayesxError(f"model.latent_dim must be an integer >= 1 or null, got {latent_dim!r}")
        if precision is not None and precision not in PRECISIONS:
            raise BayesxError(f"model.precision must be float32, float64 or null (device.dtype), got {precision!r}")
        self.data, self.arch, self.latent_dim = data, arch, latent_dim
        self.image_shape = tuple(int(s) for s in data.x_train.shape[1:])
        for key, sizes in (("enc_hidden", enc_hidden), ("dec_hidden", dec_hidden), ("channels", channels)):
            if sizes is not None and not (len(sizes) >= 1 and all(isinstance(v, int) and v >= 1 for v in sizes)):
                raise BayesxError(f"model.{key} must be a non-empty list of positive integers or null, got {sizes!r}")
        if fc_units is not None and not (isinstance(fc_units, int) and fc_units >= 1):
            raise BayesxError(f"model.fc_units must be a positive integer or null, got {fc_units!r}")
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
