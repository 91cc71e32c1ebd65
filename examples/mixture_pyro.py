"""The mixture of examples/mixture_constrained.py as a Pyro model (ordered means through an ordered site):

    bayesx run model=pyro model.fn=examples/mixture_pyro.py:model model.data_file=examples/mixture_data.npz \
        method=nuts
"""

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints


class OrderedNormal(dist.TorchDistribution):
    """K independent N(0, 5) means restricted to increasing order (unnormalised: the order's constant is dropped)."""

    support = constraints.ordered_vector
    arg_constraints = {}

    def __init__(self, k: int, dtype):
        self.base = dist.Normal(torch.zeros(k, dtype=dtype), 5.0)
        super().__init__(event_shape=(k,), validate_args=False)

    def sample(self, sample_shape=torch.Size()):
        return self.base.sample(sample_shape).sort(-1).values

    def log_prob(self, value):
        return self.base.log_prob(value).sum(-1)


def model(x):
    one = torch.ones((), dtype=x.dtype)
    w = pyro.sample("w", dist.Dirichlet(one.expand(3)))
    loc = pyro.sample("loc", OrderedNormal(3, x.dtype))
    scale = pyro.sample("scale", dist.LogNormal(0 * one, one).expand([3]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("x", dist.MixtureSameFamily(dist.Categorical(w), dist.Normal(loc, scale)), obs=x)
