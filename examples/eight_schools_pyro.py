"""Eight schools (Rubin 1981) as a Pyro model, run by bayesx's samplers:

    bayesx run model=pyro model.fn=examples/eight_schools_pyro.py:model method=nuts
    bayesx run model=pyro model.fn=examples/eight_schools_pyro.py:centered method=nuts

The latent sites (mu, tau, eta or theta) are sampled on the reals (tau through log, its Jacobian added by bayesx)
and reported by name, constrained.
"""

import pyro
import pyro.distributions as dist
import torch

Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], dtype=torch.float64)


def model():
    """Non-centred: theta = mu + tau * eta."""
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0, dtype=torch.float64)))
    with pyro.plate("schools", 8):
        eta = pyro.sample("eta", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))
        theta = pyro.deterministic("theta", mu + tau * eta)
        pyro.sample("y", dist.Normal(theta, SIGMA), obs=Y)


def centered():
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0, dtype=torch.float64)))
    with pyro.plate("schools", 8):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("y", dist.Normal(theta, SIGMA), obs=Y)
