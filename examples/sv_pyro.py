"""The stochastic-volatility model of examples/sv_constrained.py as a Pyro model:

    bayesx run model=pyro model.fn=examples/sv_pyro.py:model model.data_file=examples/sv_returns.npz method=nuts
"""

import pyro
import pyro.distributions as dist
import torch


def model(y):
    one = torch.ones((), dtype=y.dtype)
    mu = pyro.sample("mu", dist.Normal(0 * one, 10 * one))
    phi = pyro.sample("phi", dist.Uniform(-one, one))
    sigma = pyro.sample("sigma", dist.HalfNormal(one))
    pyro.factor("phi_prior", dist.Beta(20 * one, 1.5 * one).log_prob((phi + 1) / 2) + torch.log(2 * one))
    z = pyro.sample("z", dist.Normal(0 * one, one).expand([y.shape[0]]).to_event(1))
    h = mu + sigma * z[0] / torch.sqrt(1 - phi**2)
    log_volatility = [h]
    for t in range(1, y.shape[0]):
        h = mu + phi * (h - mu) + sigma * z[t]
        log_volatility.append(h)
    pyro.sample("y", dist.Normal(0 * one, torch.exp(torch.stack(log_volatility) / 2)).to_event(1), obs=y)
