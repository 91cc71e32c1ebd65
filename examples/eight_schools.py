"""Eight schools (Rubin 1981; Gelman et al., Bayesian Data Analysis, sec. 5.5), non-centred, as a
bayesx custom model:

    bayesx run model=custom model.log_density=examples/eight_schools.py:log_density model.dim=10 \
        'model.param_names=[mu,log_tau,eta1,eta2,eta3,eta4,eta5,eta6,eta7,eta8]' method=nuts

y_j ~ N(mu + tau eta_j, sigma_j), eta_j ~ N(0, 1), mu ~ N(0, 5), tau ~ HalfCauchy(0, 5), sampled in
theta = (mu, log tau, eta_1..8): the log density below includes log tau, the Jacobian of tau = e^(log tau).
"""

import math

import torch

Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], dtype=torch.float64)


def normal_log_density(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - torch.log(scale * math.sqrt(2 * math.pi))


def log_density(theta):
    """theta (..., 10) -> log p(theta | y) up to a constant."""
    mu, log_tau, eta = theta[..., 0], theta[..., 1], theta[..., 2:]
    tau = torch.exp(log_tau)
    five = torch.tensor(5.0, dtype=theta.dtype)
    prior = normal_log_density(mu, 0.0, five) + torch.log(2 / (math.pi * five * (1 + (tau / five) ** 2))) + log_tau
    prior = prior + normal_log_density(eta, 0.0, torch.tensor(1.0, dtype=theta.dtype)).sum(-1)
    y, sigma = Y.to(theta), SIGMA.to(theta)
    likelihood = normal_log_density(y, mu[..., None] + tau[..., None] * eta, sigma).sum(-1)
    return prior + likelihood
