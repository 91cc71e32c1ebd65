"""Float64 densities written with float32 inside, for tests/test_precision.py."""

import torch


def gamma_of_floats(theta):
    """Gamma(2.0, 2.0): its parameters are float32 tensors, so xlogy(2, 2) and lgamma(2) are float32 numbers."""
    return torch.distributions.Gamma(2.0, 2.0).log_prob(theta.exp()).sum(-1) + theta.sum(-1)


def gamma_of_new_tensors(theta):
    """The fix: the parameters made in theta's dtype."""
    two = theta.new_tensor(2.0)
    return torch.distributions.Gamma(two, two).log_prob(theta.exp()).sum(-1) + theta.sum(-1)


def rounded_constant(theta):
    """torch.tensor(0.1) is float32: 0.100000001..., which rounds the float64 product."""
    return -(theta * torch.tensor(0.1)).square().sum(-1) - theta.square().sum(-1)


def exact_float32_constants(theta):
    """Normal(0.0, 1.0): float32 parameters whose numbers and logarithms are exact; nothing is rounded."""
    return torch.distributions.Normal(0.0, 1.0).log_prob(theta).sum(-1)
