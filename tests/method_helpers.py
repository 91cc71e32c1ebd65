"""Helpers shared by the method tests: a seeded generator and one method run as the runner makes it."""

from __future__ import annotations

import torch

from bayesx.methods.base import RunInputs


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def infer(method, target, seed: int = 0, n_chains: int = 4):
    """method.infer with the method's own initial points, as bayesx.runner does, without progress bars."""
    g = gen(seed)
    return method.infer(target, RunInputs(method.initial_points(target, n_chains, g), g, progress=False))
