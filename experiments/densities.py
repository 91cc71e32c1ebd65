"""Log densities of the reproductions that are not bayesx models, for ``model=custom``
(``model.log_density=experiments/densities.py:NAME``); each maps theta (..., dim) to log p up to a constant."""

from __future__ import annotations

import math

import torch

SVGD_MIXTURE = ((1 / 3, -2.0), (2 / 3, 2.0))  # Liu and Wang (2016), sec. 5: weights and means, unit variances


def svgd_mixture(theta: torch.Tensor) -> torch.Tensor:
    """1/3 N(-2, 1) + 2/3 N(2, 1) in one dimension (normalized: its log Z is 0)."""
    x = theta[..., 0]
    terms = [math.log(w) - 0.5 * (x - m) ** 2 - 0.5 * math.log(2 * math.pi) for w, m in SVGD_MIXTURE]
    return torch.logsumexp(torch.stack(terms), 0)
