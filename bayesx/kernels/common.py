"""Small helpers shared by the MCMC kernels."""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

DIVERGENCE_THRESHOLD = 1000.0
"""An energy error H(end) - H(start) above this (or not finite) marks a divergent transition, as in Stan."""

T = TypeVar("T", bound=NamedTuple)


def where_rows(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """Per-chain select: row c of the result is new[c] where mask[c], else old[c]."""
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


def select(mask: Tensor, new: T, old: T) -> T:
    """Per-chain select over every field of a NamedTuple of batched tensors."""
    return type(new)(*(where_rows(mask, a, b) for a, b in zip(new, old)))


def energy_error(h_new: Tensor, h_old: Tensor) -> Tensor:
    """H_new - H_old with NaN mapped to +inf, so a failed step is rejected and counted as divergent."""
    return torch.nan_to_num(h_new - h_old, nan=float("inf"))


def uniform(n: int, like: Tensor, gen: torch.Generator) -> Tensor:
    return torch.rand(n, generator=gen, dtype=like.dtype, device=like.device)
