"""Helpers shared by the method tests: a seeded generator, one method run as the runner makes it, and a
2-D logistic posterior with its answers by quadrature."""

from __future__ import annotations

import numpy as np
import torch

from bayesx.methods.base import RunInputs


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def infer(method, target, seed: int = 0, n_chains: int = 4):
    """method.infer with the method's own initial points, as bayesx.runner does, without progress bars."""
    g = gen(seed)
    return method.infer(target, RunInputs(method.initial_points(target, n_chains, g), g, progress=False))


def logistic_2d(prior_scale: float = 3.0):
    """A two-coefficient logistic regression (40 rows) and its log evidence, mean and sd by quadrature
    on [-6, 6]^2 (bayesx.targets.toy.Truth)."""
    from bayesx.data.classification import ClassificationData
    from bayesx.targets.logreg import LogisticRegression
    from bayesx.targets.toy import quadrature_truth

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = (rng.random(40) < 1 / (1 + np.exp(-x @ np.array([1.5, -1.0])))).astype(float)
    target = LogisticRegression(ClassificationData("t", x, y, x[:5], y[:5], "test", "generated"),
                                prior_scale=prior_scale)
    return target, quadrature_truth(target.log_prob, ((-6.0, 6.0), (-6.0, 6.0)))


def prepared(target, points=None, policy: str = "never"):
    """The target's density as a method family prepares it (bayesx.kernels.backend.prepare) for ``points`` (default:
    four of its initial points), compiling nothing unless ``policy`` says so: the hand-written native form where the
    target has one, else PyTorch."""
    from bayesx.kernels import backend

    points = target.initial_point(4, gen(0)) if points is None else points
    return backend.prepare(target, backend.Workload(points, calls=0), policy)
