"""Poisson regression with one intercept per group, as a bayesx custom model with a data file:

    bayesx run model=custom model.log_density=examples/poisson_groups.py:log_density model.dim=4 \
        model.data_file=examples/poisson_groups.npz 'model.param_names=[a1,a2,a3,b]'

y_i ~ Poisson(exp(a[group_i] + b x_i)), a_j ~ N(0, 2^2), b ~ N(0, 1). The data file (written by
examples/make_poisson_groups.py) holds y and group as integer arrays, which reach the function as int64
tensors, and x as floats.
"""

import torch


def log_density(theta, data):
    """theta (..., 4) = (a1, a2, a3, b) -> log p(theta | y) up to a constant."""
    y, group, x = data["y"], data["group"], data["x"]   # y, group: int64 tensors; x: float
    a, b = theta[..., :3], theta[..., 3:]
    log_rate = a[..., group] + b * x                    # each point's own group intercept
    log_likelihood = (y * log_rate - torch.exp(log_rate)).sum(-1)
    log_prior = -0.5 * (a**2).sum(-1) / 2.0**2 - 0.5 * (b**2).sum(-1)
    return log_likelihood + log_prior
