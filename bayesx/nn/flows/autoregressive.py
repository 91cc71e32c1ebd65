"""Affine autoregressive flows with MADE conditioners (Germain et al. 2015): MAF (Papamakarios,
Pavlakou and Murray 2017) and IAF (Kingma et al. 2016).

One map, two directions. With mu_i and s_i functions of the first i - 1 coordinates (in the layer's
order) of their argument,

    IAF  sampling  y_i = z_i exp(s_i(z)) + mu_i(z)      one pass of the network; log|det J| = sum s_i(z)
         inverse   z_i = (y_i - mu_i(z)) exp(-s_i(z))    dim passes (z is found coordinate by coordinate)
    MAF  sampling  y_i = z_i exp(s_i(y)) + mu_i(y)      dim passes; log|det J| = sum s_i(y)
         inverse   z_i = (y_i - mu_i(y)) exp(-s_i(y))    one pass

so IAF draws fast (what variational inference does) and MAF evaluates densities fast (what density
estimation does). MADE makes one network autoregressive by masking its weights: each unit gets a
degree, a hidden unit sees inputs of degree <= its own, an output of degree i sees hidden units of
degree < i. Layers alternate the natural and the reversed order. s is bounded by tanh.

A layer may take a context c (the IAF of Kingma et al. 2016 in a VAE, where c is computed from the
image): c enters the first hidden layer unmasked, so mu_i and s_i depend on (z_{<i}, c) and the
Jacobian in z stays triangular.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.nn.flows.base import FlowLayer


class MaskedLinear(nn.Linear):
    def __init__(self, mask: Tensor, gen: torch.Generator):
        super().__init__(mask.shape[1], mask.shape[0])
        self.register_buffer("mask", mask.to(torch.get_default_dtype()))
        bound = 1.0 / max(1, mask.shape[1]) ** 0.5
        with torch.no_grad():
            self.weight.uniform_(-bound, bound, generator=gen)
            self.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight * self.mask.to(self.weight.dtype), self.bias)


class MADE(nn.Module):
    """x (n, dim) -> (mu, s), each (n, dim), output i depending only on inputs before i in ``order``."""

    def __init__(self, dim: int, hidden: int, gen: torch.Generator, reverse: bool, context_dim: int = 0):
        super().__init__()
        degrees_in = torch.arange(dim, 0, -1) if reverse else torch.arange(1, dim + 1)
        degrees_hidden = torch.arange(hidden) % max(1, dim - 1) + 1 if dim > 1 else torch.zeros(hidden, dtype=torch.long)
        to_hidden = (degrees_hidden[:, None] >= degrees_in[None, :])
        hidden_to_hidden = (degrees_hidden[:, None] >= degrees_hidden[None, :])
        to_out = (degrees_in[:, None] > degrees_hidden[None, :]).repeat(2, 1)
        self.order = torch.argsort(degrees_in)  # the coordinates in the order they are generated
        self.first = MaskedLinear(to_hidden, gen)
        self.context = nn.Linear(context_dim, hidden, bias=False) if context_dim else None
        self.rest = nn.Sequential(nn.Tanh(), MaskedLinear(hidden_to_hidden, gen), nn.Tanh(), MaskedLinear(to_out, gen))
        with torch.no_grad():
            self.rest[-1].weight.zero_()  # the flow starts at the identity

    def forward(self, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h = self.first(x)
        if self.context is not None:
            h = h + self.context(context)
        mu, raw_s = self.rest(h).chunk(2, dim=-1)
        return mu, torch.tanh(raw_s)


class _AutoregressiveAffine(FlowLayer):
    def __init__(self, dim: int, gen: torch.Generator, hidden: int = 64, reverse: bool = False, context_dim: int = 0):
        super().__init__()
        self.made = MADE(dim, hidden, gen, reverse, context_dim)

    def _solve(self, known: Tensor, update) -> Tensor:
        """x with x_i = update(known_i, mu_i(x), s_i(x)), found coordinate by coordinate in MADE's order
        (x_i depends only on the coordinates found before it)."""
        x = torch.zeros_like(known)
        for i in self.made.order.tolist():
            mu, s = self.made(x)
            x = x.clone()
            x[:, i] = update(known[:, i], mu[:, i], s[:, i])
        return x


class IAF(_AutoregressiveAffine):
    """Inverse autoregressive flow: one pass to draw."""

    def forward(self, z: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        mu, s = self.made(z, context)
        return z * torch.exp(s) + mu, s.sum(-1)

    def inverse(self, y: Tensor) -> Tensor:
        return self._solve(y, lambda y_i, mu, s: (y_i - mu) * torch.exp(-s))


class MAF(_AutoregressiveAffine):
    """Masked autoregressive flow: one pass to evaluate a density, dim passes to draw."""

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        y = self._solve(z, lambda z_i, mu, s: z_i * torch.exp(s) + mu)
        return y, self.made(y)[1].sum(-1)

    def inverse(self, y: Tensor) -> Tensor:
        mu, s = self.made(y)
        return (y - mu) * torch.exp(-s)
