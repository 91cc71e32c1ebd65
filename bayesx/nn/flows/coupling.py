"""Coupling flows: NICE (Dinh, Krueger and Bengio 2015) and RealNVP (Dinh, Sohl-Dickstein and Bengio
2017). A binary mask m splits the coordinates; the masked ones pass unchanged and condition the map of
the others:

    NICE (additive)    y = m z + (1 - m) (z + t(m z)),                    log|det J| = 0
    RealNVP (affine)   y = m z + (1 - m) (z exp(s(m z)) + t(m z)),        log|det J| = sum (1 - m) s(m z)

with t and s small networks (s bounded by tanh for stability). Both invert in closed form with one
pass. Consecutive layers alternate the mask (even and odd coordinates), so every coordinate is
transformed and any dimension >= 2 works, odd ones included. NICE ends with a diagonal rescaling
y = z exp(s) (their sec. 3.3), which carries all of its volume change. ``Squash`` (y = h tanh(z)) is
the last layer of any flow on a target that lives in a box.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.nn.flows.base import FlowLayer


def conditioner(dim: int, hidden: int, out: int, gen: torch.Generator) -> nn.Sequential:
    """dim -> hidden -> hidden -> out with tanh; the last layer starts at zero, so the flow starts at
    the identity and its first draws are the base's."""
    net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, out))
    for layer in net:
        if isinstance(layer, nn.Linear):
            bound = 1.0 / hidden**0.5 if layer.in_features == hidden else 1.0 / max(dim, 1) ** 0.5
            with torch.no_grad():
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.zero_()
    with torch.no_grad():
        net[-1].weight.zero_()
    return net


def alternating_mask(dim: int, parity: int) -> Tensor:
    return (torch.arange(dim) % 2 == parity).to(torch.get_default_dtype())


class AdditiveCoupling(FlowLayer):
    """NICE's additive coupling layer."""

    def __init__(self, dim: int, gen: torch.Generator, hidden: int = 64, parity: int = 0):
        super().__init__()
        self.register_buffer("mask", alternating_mask(dim, parity))
        self.shift = conditioner(dim, hidden, dim, gen)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        m = self.mask.to(z.dtype)
        return z + (1.0 - m) * self.shift(m * z), torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)

    def inverse(self, y: Tensor) -> Tensor:
        m = self.mask.to(y.dtype)
        return y - (1.0 - m) * self.shift(m * y)


class AffineCoupling(FlowLayer):
    """RealNVP's affine coupling layer."""

    def __init__(self, dim: int, gen: torch.Generator, hidden: int = 64, parity: int = 0):
        super().__init__()
        self.register_buffer("mask", alternating_mask(dim, parity))
        self.net = conditioner(dim, hidden, 2 * dim, gen)

    def _scale_shift(self, masked: Tensor) -> tuple[Tensor, Tensor]:
        raw_s, t = self.net(masked).chunk(2, dim=-1)
        return torch.tanh(raw_s), t

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        m = self.mask.to(z.dtype)
        s, t = self._scale_shift(m * z)
        s, t = (1.0 - m) * s, (1.0 - m) * t
        return z * torch.exp(s) + t, s.sum(-1)

    def inverse(self, y: Tensor) -> Tensor:
        m = self.mask.to(y.dtype)
        s, t = self._scale_shift(m * y)
        s, t = (1.0 - m) * s, (1.0 - m) * t
        return (y - t) * torch.exp(-s)


class Rescale(FlowLayer):
    """y = z exp(s), NICE's final diagonal scaling."""

    def __init__(self, dim: int):
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        return z * torch.exp(self.log_scale), self.log_scale.sum().expand(z.shape[0])

    def inverse(self, y: Tensor) -> Tensor:
        return y * torch.exp(-self.log_scale)


class Squash(FlowLayer):
    """y = h tanh(z): the plane onto the open box (-h, h)^dim, for targets that are zero outside it,
    log|det J| = sum log(h (1 - tanh(z)^2)) = sum [log h + 2 (log 2 - z - softplus(-2 z))]."""

    def __init__(self, half_width: float):
        super().__init__()
        self.half_width = float(half_width)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        log_det = math.log(self.half_width) + 2.0 * (math.log(2.0) - z - F.softplus(-2.0 * z))
        return self.half_width * torch.tanh(z), log_det.sum(-1)

    def inverse(self, y: Tensor) -> Tensor:
        return torch.atanh(y / self.half_width)
