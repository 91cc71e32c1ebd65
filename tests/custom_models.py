"""Log densities for the model=custom tests, imported by name (custom_models:NAME)."""

import math

import torch

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "eight_schools", Path(__file__).resolve().parents[1] / "examples" / "eight_schools.py")
eight_schools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eight_schools)


def eight_schools_jacobian_twice(theta):
    """The negative control: eight schools with the log tau Jacobian counted twice (dropping it makes
    the posterior improper in log tau, which no sampler can be tested on)."""
    return eight_schools.log_density(theta) + theta[..., 1]


def gaussian_with_data(theta, data):
    """N(theta; mean of data['x'], 1) per coordinate: the data reach the function as tensors."""
    return -0.5 * ((theta - data["x"].mean()) ** 2).sum(-1)


def per_point_with_item(theta):
    """Written for one point with a Python branch on a value, which vmap cannot trace."""
    scale = 2.0 if float(theta[0].detach()) > 100 else 1.0
    return -0.5 * (theta**2).sum() / scale**2


def vector_output(theta):
    return -0.5 * theta**2


def nan_at_origin(theta):
    return torch.log(theta.abs()).sum(-1) * math.nan


def raises(theta):
    raise ValueError("boom")


def via_numpy(theta):
    """Leaves torch: autograd has no gradient for it (fine for a method without gradients)."""
    return torch.as_tensor(-0.5 * (theta.detach().numpy() ** 2).sum())


def detached(theta):
    return -0.5 * (theta.detach() ** 2).sum()


def first_coordinate_shifted(theta):
    """Written for one point, indexing theta[0]: on a batch of dim points it returns dim values (a row), which
    must not be taken for one value per point."""
    return -0.5 * (theta**2).sum() + torch.log1p(theta[0] ** 2)
