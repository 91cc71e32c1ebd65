"""The target interface: a log density over a flat parameter vector, batched over chains."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from bayesx.errors import BayesxError


@runtime_checkable
class Target(Protocol):
    dim: int

    def log_prob(self, q: Tensor) -> Tensor:
        """q (..., dim) -> log density (...), differentiable."""

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """Log density and its gradient with respect to q."""

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        """Starting positions (n_chains, dim)."""

    def evaluate(self, draws: Tensor) -> dict[str, float]:
        """Model-specific metrics of posterior draws (chains, draws, dim)."""


class TargetBase:
    """Defaults shared by targets: autograd gradients, uniform initial points, no evaluation.

    Subclasses set ``dim``, ``dtype``, ``device`` and implement ``log_prob``; they override
    ``log_prob_and_grad`` where an analytic gradient is cheaper than autograd.
    """

    dim: int
    dtype: torch.dtype
    device: torch.device
    param_name = "theta"  # name of the parameter vector in saved draws
    init_scale = 2.0  # initial points are uniform on [-init_scale, init_scale]^dim, as in Stan

    def log_prob(self, q: Tensor) -> Tensor:
        raise NotImplementedError

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        with torch.enable_grad():
            q = q.detach().requires_grad_(True)
            lp = self.log_prob(q)
            (grad,) = torch.autograd.grad(lp.sum(), q)
        return lp.detach(), grad

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        u = torch.rand((n_chains, self.dim), generator=gen, dtype=self.dtype, device=self.device)
        return self.init_scale * (2.0 * u - 1.0)

    def evaluate(self, draws: Tensor) -> dict[str, float]:
        return {}

    def restrict(self, offset: Tensor, basis: Tensor):
        """This density on the affine subspace q = offset + B u (see targets.restriction)."""
        from bayesx.targets.restriction import AffineRestriction

        return AffineRestriction(self, offset, basis)

    def describe(self) -> dict[str, str]:
        """Tags describing the target (data set, sizes) for the tracker."""
        return {"dim": str(self.dim)}


def check_positive(name: str, value: float, fix: str) -> float:
    if not (value > 0 and value == value and value != float("inf")):
        raise BayesxError(f"{name} must be a positive number, got {value}; {fix}")
    return float(value)
