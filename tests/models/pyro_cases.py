"""Pyro models for tests/test_pyro_model.py: a mixture with its assignment marginalised and data passed as keyword
arguments, and models bayesx must refuse (a discrete latent site, a pyro.param, a subsampled plate)."""

import pyro
import pyro.distributions as dist
import torch


def mixture(x):
    """A 3-component normal mixture, weights on the simplex, the assignment marginalised (MixtureSameFamily)."""
    w = pyro.sample("w", dist.Dirichlet(torch.ones(3, dtype=x.dtype)))
    loc = pyro.sample("loc", dist.Normal(torch.zeros(3, dtype=x.dtype), 5.0).to_event(1))
    scale = pyro.sample("scale", dist.LogNormal(torch.zeros(3, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("x", dist.MixtureSameFamily(dist.Categorical(w), dist.Normal(loc, scale)), obs=x)


def with_assignment(x):
    w = pyro.sample("w", dist.Dirichlet(torch.ones(2, dtype=x.dtype)))
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Categorical(w))
        pyro.sample("x", dist.Normal(z.to(x.dtype), 1.0), obs=x)


def with_param():
    loc = pyro.param("loc", torch.tensor(0.0, dtype=torch.float64))
    pyro.sample("y", dist.Normal(loc, 1.0))


def subsampled():
    with pyro.plate("data", 100, subsample_size=10):
        pyro.sample("y", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))
