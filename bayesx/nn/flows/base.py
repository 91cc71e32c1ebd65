"""Normalizing flows: the contract of a layer, the Gaussian base and their composition.

A flow pushes draws of a base density q0 through invertible maps, z_K = f_K o ... o f_1(z_0), and
keeps the density by the change of variables (Rezende and Mohamed 2015, eq. 6):

    log q_K(z_K) = log q0(z_0) - sum_k log |det df_k / dz_{k-1}|.

Every layer returns f(z) and log|det J_f(z)| per row, in the sampling direction (base -> target).
Layers with a closed-form inverse (coupling, autoregressive, rescaling) also give f^-1, so a flow
made of them evaluates log q at any point; planar and radial maps are invertible under their
constraints but have no closed-form inverse, so a flow holding them gives densities only at its own
draws (``sample_and_log_prob``), which is all variational inference needs.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from bayesx.nn.distributions import GaussianQ
from bayesx.errors import BayesxError


class NotInvertible(BayesxError):
    """A flow without a closed-form inverse was asked for the density of a point it did not draw."""


class FlowLayer(nn.Module):
    """One bijection f: R^dim -> R^dim."""

    invertible: ClassVar[bool] = True

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:  # (f(z) (n, dim), log|det J_f(z)| (n,))
        raise NotImplementedError

    def inverse(self, y: Tensor) -> Tensor:
        raise NotInvertible(f"{type(self).__name__} has no closed-form inverse: evaluate the flow at its own draws "
                            f"(sample_and_log_prob), or use a coupling or autoregressive flow")


class FixedAffine(FlowLayer):
    """z -> mean + L z with a fixed lower-triangular L (positive diagonal), log|det| = sum log L_jj: the last
    layer of a flow fitted in the whitened coordinates of a Gaussian q = N(mean, L L^T)."""

    def __init__(self, gaussian: GaussianQ):
        super().__init__()
        scale = gaussian.scale if gaussian.dense else torch.diag(gaussian.scale)
        self.register_buffer("mean", gaussian.mean.detach().clone())
        self.register_buffer("scale", scale.detach().clone())

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        log_det = torch.log(self.scale.diagonal()).sum().expand(z.shape[0])
        return self.mean + z @ self.scale.T, log_det

    def inverse(self, y: Tensor) -> Tensor:
        return torch.linalg.solve_triangular(self.scale, (y - self.mean).T, upper=False).T


class GaussianBase(nn.Module):
    """q0 = N(mean, diag(scale^2)); ``learned``: mean and log scale are parameters (the learned diagonal
    base), else fixed buffers (e.g. the standard normal)."""

    def __init__(self, mean: Tensor, scale: Tensor, learned: bool):
        super().__init__()
        log_scale = torch.log(scale)
        if learned:
            self.mean, self.log_scale = nn.Parameter(mean.clone()), nn.Parameter(log_scale)
        else:
            self.register_buffer("mean", mean.clone())
            self.register_buffer("log_scale", log_scale)

    def gaussian(self) -> GaussianQ:
        return GaussianQ(self.mean, torch.exp(self.log_scale))

    def sample_and_log_prob(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.gaussian().sample_and_log_prob(n, gen)

    def log_prob(self, z: Tensor) -> Tensor:
        return self.gaussian().log_prob(z)


class Flow(nn.Module):
    """q_K: a base and layers applied in order. Satisfies the approximation contract
    (``sample_and_log_prob``), and gives ``log_prob`` where every layer is invertible."""

    def __init__(self, base: GaussianBase, layers: list[FlowLayer]):
        super().__init__()
        self.base, self.layers = base, nn.ModuleList(layers)

    @property
    def invertible(self) -> bool:
        return all(layer.invertible for layer in self.layers)

    def push(self, z: Tensor, log_q: Tensor) -> tuple[Tensor, Tensor]:
        """Base draws and their log density through every layer (the change of variables)."""
        for layer in self.layers:
            z, log_det = layer(z)
            log_q = log_q - log_det
        return z, log_q

    def sample_and_log_prob(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.push(*self.base.sample_and_log_prob(n, gen))

    def sample(self, n: int, gen: torch.Generator) -> Tensor:
        return self.sample_and_log_prob(n, gen)[0]

    def log_prob(self, z: Tensor) -> Tensor:
        """log q_K(z): invert every layer, then the base density less the forward log-determinants."""
        points = [z]
        for layer in reversed(self.layers):
            points.append(layer.inverse(points[-1]))
        z0 = points[-1]
        log_q = self.base.log_prob(z0)
        for layer, point in zip(self.layers, reversed(points[1:])):
            log_q = log_q - layer(point)[1]
        return log_q
