"""Encoder, decoder and auxiliary networks of the VAE presets (Zhang (2018) sec. 5).

    fc          MNIST: encoder 2 x 300 softplus -> (mu, log var), z = 20; decoder 1 x 400 ReLU -> 784
                Bernoulli logits; HVI's q_t(v'|x) and r_t(v|x,z): 1 x 300 softplus
    conv        MNIST: 3 conv 5x5, channels [16, 32, 32], stride 2, padding 2, softplus, FC 300;
                the decoder mirrors it with transposed convolutions
    conv_cifar  CIFAR-10: 4 conv 3x3, channels [16, 32, 32, 16], strides [1, 2, 1, 2], batch norm,
                ReLU, FC 512, z = 40; mirrored decoder; Bernoulli likelihood on [0, 1] pixels

Every Gaussian head returns (mean, log variance).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bayesx.errors import BayesxError

ARCHS = ("fc", "conv", "conv_cifar")
DEFAULT_LATENT = {"fc": 20, "conv": 20, "conv_cifar": 40}
EXPECTED_SHAPE = {"conv": (1, 28, 28), "conv_cifar": (3, 32, 32)}  # fc takes any image shape


def check_shape(arch: str, shape: tuple[int, int, int]) -> None:
    expected = EXPECTED_SHAPE.get(arch)
    if expected is not None and tuple(shape) != expected:
        raise BayesxError(f"model.arch={arch} expects images of shape {expected} (channels, height, width), "
                          f"but the data have {tuple(shape)}; use "
                          f"{'model.arch=conv_cifar' if tuple(shape) == (3, 32, 32) else 'model.arch=fc or conv'} "
                          f"or other data")


class GaussianHead(nn.Module):
    """features -> (mean, log variance) of a diagonal Gaussian."""

    def __init__(self, features: int, dim: int):
        super().__init__()
        self.linear = nn.Linear(features, 2 * dim)

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_var = self.linear(h).chunk(2, dim=-1)
        return mean, log_var


def mlp(sizes: list[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), activation()]
    return nn.Sequential(*layers)


class FCEncoder(nn.Module):
    def __init__(self, image_shape, latent_dim: int, hidden: tuple[int, ...] = (300, 300)):
        super().__init__()
        self.body = mlp([math.prod(image_shape), *hidden], nn.Softplus)
        self.head = GaussianHead(hidden[-1], latent_dim)

    def forward(self, x: Tensor):
        return self.head(self.body(x.flatten(1)))


class FCDecoder(nn.Module):
    def __init__(self, image_shape, latent_dim: int, hidden: tuple[int, ...] = (400,)):
        super().__init__()
        self.image_shape = tuple(image_shape)
        self.body = mlp([latent_dim, *hidden], nn.ReLU)
        self.out = nn.Linear(hidden[-1], math.prod(image_shape))

    def forward(self, z: Tensor) -> Tensor:
        return self.out(self.body(z)).view(*z.shape[:-1], *self.image_shape)


class ConvEncoder(nn.Module):
    """MNIST: 28 -> 14 -> 7 -> 4 with 5x5 kernels, stride 2, padding 2, softplus; FC 300."""

    def __init__(self, latent_dim: int, channels=(16, 32, 32), fc: int = 300):
        super().__init__()
        c = (1, *channels)
        self.convs = nn.Sequential(*[m for i in range(3) for m in (nn.Conv2d(c[i], c[i + 1], 5, 2, 2), nn.Softplus())])
        self.fc = nn.Sequential(nn.Linear(c[-1] * 16, fc), nn.Softplus())
        self.head = GaussianHead(fc, latent_dim)

    def forward(self, x: Tensor):
        return self.head(self.fc(self.convs(x).flatten(1)))


class ConvDecoder(nn.Module):
    def __init__(self, latent_dim: int, channels=(16, 32, 32), fc: int = 300):
        super().__init__()
        self.top = channels[-1]
        self.fc = nn.Sequential(nn.Linear(latent_dim, fc), nn.Softplus(), nn.Linear(fc, self.top * 16), nn.Softplus())
        self.deconvs = nn.Sequential(
            nn.ConvTranspose2d(channels[2], channels[1], 5, 2, 2, output_padding=0), nn.Softplus(),  # 4 -> 7
            nn.ConvTranspose2d(channels[1], channels[0], 5, 2, 2, output_padding=1), nn.Softplus(),  # 7 -> 14
            nn.ConvTranspose2d(channels[0], 1, 5, 2, 2, output_padding=1))  # 14 -> 28

    def forward(self, z: Tensor) -> Tensor:
        lead = z.shape[:-1]
        h = self.fc(z.reshape(-1, z.shape[-1])).view(-1, self.top, 4, 4)
        return self.deconvs(h).view(*lead, 1, 28, 28)


class CifarEncoder(nn.Module):
    """32 -> 32 -> 16 -> 16 -> 8 with 3x3 kernels, strides [1, 2, 1, 2], batch norm, ReLU; FC 512."""

    def __init__(self, latent_dim: int, channels=(16, 32, 32, 16), fc: int = 512):
        super().__init__()
        c, strides, layers = (3, *channels), (1, 2, 1, 2), []
        for i in range(4):
            layers += [nn.Conv2d(c[i], c[i + 1], 3, strides[i], 1), nn.BatchNorm2d(c[i + 1]), nn.ReLU()]
        self.convs = nn.Sequential(*layers)
        self.fc = nn.Sequential(nn.Linear(c[-1] * 64, fc), nn.ReLU())
        self.head = GaussianHead(fc, latent_dim)

    def forward(self, x: Tensor):
        return self.head(self.fc(self.convs(x).flatten(1)))


class CifarDecoder(nn.Module):
    def __init__(self, latent_dim: int, channels=(16, 32, 32, 16), fc: int = 512):
        super().__init__()
        self.top = channels[-1]
        self.fc = nn.Sequential(nn.Linear(latent_dim, fc), nn.ReLU(), nn.Linear(fc, self.top * 64), nn.ReLU())
        c = channels
        self.deconvs = nn.Sequential(
            nn.ConvTranspose2d(c[3], c[2], 3, 2, 1, output_padding=1), nn.BatchNorm2d(c[2]), nn.ReLU(),  # 8 -> 16
            nn.ConvTranspose2d(c[2], c[1], 3, 1, 1), nn.BatchNorm2d(c[1]), nn.ReLU(),  # 16
            nn.ConvTranspose2d(c[1], c[0], 3, 2, 1, output_padding=1), nn.BatchNorm2d(c[0]), nn.ReLU(),  # 16 -> 32
            nn.Conv2d(c[0], 3, 3, 1, 1))

    def forward(self, z: Tensor) -> Tensor:
        lead = z.shape[:-1]
        h = self.fc(z.reshape(-1, z.shape[-1])).view(-1, self.top, 8, 8)
        return self.deconvs(h).view(*lead, 3, 32, 32)


class Auxiliary(nn.Module):
    """HVI's momentum model q_t(v'|x) (``with_latent=False``) or reverse model r_t(v|x, z):
    a diagonal Gaussian from one softplus hidden layer on the flattened image (and z)."""

    def __init__(self, image_shape, latent_dim: int, hidden: int = 300, with_latent: bool = False):
        super().__init__()
        self.with_latent = with_latent
        inputs = math.prod(image_shape) + (latent_dim if with_latent else 0)
        self.body = nn.Sequential(nn.Linear(inputs, hidden), nn.Softplus())
        self.head = GaussianHead(hidden, latent_dim)

    def forward(self, x: Tensor, z: Tensor | None = None):
        h = x.flatten(1)
        if self.with_latent:
            h = torch.cat([h, z], dim=-1)
        return self.head(self.body(h))


def build_encoder_decoder(arch: str, image_shape, latent_dim: int, enc_hidden=None, dec_hidden=None, channels=None,
                          fc_units=None) -> tuple[nn.Module, nn.Module]:
    """The preset's encoder and decoder; sizes left None take the preset's (Zhang (2018)) values."""
    if arch not in ARCHS:
        raise BayesxError(f"model.arch must be one of {', '.join(ARCHS)}, got '{arch}'")
    check_shape(arch, image_shape)
    if arch == "fc":
        return (FCEncoder(image_shape, latent_dim, tuple(enc_hidden or (300, 300))),
                FCDecoder(image_shape, latent_dim, tuple(dec_hidden or (400,))))
    if arch == "conv":
        sizes = {"channels": tuple(channels or (16, 32, 32)), "fc": fc_units or 300}
        if len(sizes["channels"]) != 3:
            raise BayesxError(f"model.channels must list 3 channel counts for arch=conv, got {list(channels)}")
        return ConvEncoder(latent_dim, **sizes), ConvDecoder(latent_dim, **sizes)
    sizes = {"channels": tuple(channels or (16, 32, 32, 16)), "fc": fc_units or 512}
    if len(sizes["channels"]) != 4:
        raise BayesxError(f"model.channels must list 4 channel counts for arch=conv_cifar, got {list(channels)}")
    return CifarEncoder(latent_dim, **sizes), CifarDecoder(latent_dim, **sizes)
