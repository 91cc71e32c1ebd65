"""A density that raises at a finite point (x > 3): a user's function failing, not an overflow."""

import torch


def density(theta):
    if bool((theta[..., 0] > 3).any()):
        raise ValueError("x above 3")
    return -0.5 * (theta**2).sum(-1)
