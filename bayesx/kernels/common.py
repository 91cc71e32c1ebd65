"""Small helpers shared by the MCMC kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

DIVERGENCE_THRESHOLD = 1000.0
"""An energy error H(end) - H(start) above this (or not finite) marks a divergent transition, as in Stan."""

T = TypeVar("T", bound=NamedTuple)


class Kernel(NamedTuple):
    """A transition kernel in BlackJAX's shape, for kernels built around fixed objects (a trained
    auto-encoder's latent space): ``init(position, density) -> state``, ``step(state, density, params,
    gen) -> (state, info)`` and ``log_density(state)``, what the chain tracks of the target; ``density`` is the
    run's bayesx.kernels.density.Density (pCN-type kernels: the model's GaussianPrior view). Kernels
    with nothing to bind are modules with the same three functions (bayesx.kernels.hmc)."""

    init: Callable
    step: Callable
    log_density: Callable


def log_density(state) -> Tensor:
    """The chain's log target density at its state, for kernels whose state carries ``log_prob``
    (checked finite at the start by the driver)."""
    return state.log_prob


def where_rows(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """Per-chain select: row c of the result is new[c] where mask[c], else old[c]."""
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


def select(mask: Tensor, new: T, old: T) -> T:
    """Per-chain select over every field of a NamedTuple of batched tensors."""
    return type(new)(*(where_rows(mask, a, b) for a, b in zip(new, old)))


def energy_error(h_new: Tensor, h_old: Tensor) -> Tensor:
    """H_new - H_old with NaN mapped to +inf, so a failed step is rejected and counted as divergent."""
    return torch.nan_to_num(h_new - h_old, nan=float("inf"))


def metropolis_accept(log_ratio: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """The Metropolis-Hastings decision for each chain's log acceptance ratio: the probability
    min(1, exp(log_ratio)) and a uniform draw below it. A NaN ratio (a failed density) is a rejection."""
    log_ratio = torch.nan_to_num(log_ratio, nan=-float("inf"))
    accept_prob = torch.exp(torch.clamp(log_ratio, max=0.0))
    return accept_prob, uniform(log_ratio.shape[0], log_ratio, gen) < accept_prob


def uniform(n: int, like: Tensor, gen: torch.Generator) -> Tensor:
    return torch.rand(n, generator=gen, dtype=like.dtype, device=like.device)


class DensityFaults(NamedTuple):
    """Where one transition's leapfrog states left the density's domain, per chain: how many had a NaN log
    density or gradient (a point where the density is undefined: a divergence whose cause is the density, not
    the step size), how many a log density of +inf (never so on a proper posterior), and the position of the
    last such state (NaN where there was none)."""

    nan: Tensor  # (chains,) long
    posinf: Tensor  # (chains,) long
    position: Tensor  # (chains, dim)


def no_faults(position: Tensor) -> DensityFaults:
    """No faults yet for chains at ``position`` (chains, dim)."""
    zeros = torch.zeros(position.shape[0], dtype=torch.long, device=position.device)
    return DensityFaults(zeros, zeros, torch.full_like(position, float("nan")))


def add_faults(faults: DensityFaults, position: Tensor, log_prob: Tensor, grad: Tensor,
               counted: Tensor | None = None) -> DensityFaults:
    """``faults`` with the states (position, log_prob, grad) of one leapfrog step added, for the chains in
    ``counted`` (all where None)."""
    nan = torch.isnan(log_prob) | torch.isnan(grad).any(-1)
    posinf = torch.isposinf(log_prob)
    if counted is not None:
        nan, posinf = nan & counted, posinf & counted
    return DensityFaults(faults.nan + nan.long(), faults.posinf + posinf.long(),
                         where_rows(nan | posinf, position, faults.position))
