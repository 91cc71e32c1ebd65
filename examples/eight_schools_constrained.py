"""Eight schools (Rubin 1981; Gelman et al., Bayesian Data Analysis, sec. 5.5) with named, constrained parameters:
no hand-written Jacobian, the answers on mu, tau and theta as the model names them.

Non-centred (the default here) and centred:

    bayesx run model=custom model.log_density=examples/eight_schools_constrained.py:noncentered \
        'model.params={mu: real, tau: positive, eta: "real[8]"}' method=nuts
    bayesx run model=custom model.log_density=examples/eight_schools_constrained.py:centered \
        'model.params={mu: real, tau: positive, theta: "real[8]"}' method=nuts

y_j ~ N(theta_j, sigma_j), theta_j = mu + tau eta_j with eta_j ~ N(0, 1) (non-centred) or theta_j ~ N(mu, tau)
(centred), mu ~ N(0, 5), tau ~ HalfCauchy(5): bayesx samples log tau and adds its Jacobian itself.
"""

import torch
from torch.distributions import HalfCauchy, Normal

Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], dtype=torch.float64)


def noncentered(p):
    """p.mu (...,), p.tau (...,) > 0, p.eta (..., 8) -> log p(mu, tau, eta | y) up to a constant."""
    zero, one, five = (p.mu.new_tensor(v) for v in (0.0, 1.0, 5.0))  # float64 like p (bayesx warns otherwise)
    prior = Normal(zero, five).log_prob(p.mu) + HalfCauchy(five).log_prob(p.tau)
    prior = prior + Normal(zero, one).log_prob(p.eta).sum(-1)
    theta = p.mu[..., None] + p.tau[..., None] * p.eta
    return prior + Normal(theta, SIGMA.to(theta)).log_prob(Y.to(theta)).sum(-1)


def centered(p):
    """p.mu (...,), p.tau (...,) > 0, p.theta (..., 8) -> log p(mu, tau, theta | y) up to a constant."""
    zero, five = p.mu.new_tensor(0.0), p.mu.new_tensor(5.0)
    prior = Normal(zero, five).log_prob(p.mu) + HalfCauchy(five).log_prob(p.tau)
    prior = prior + Normal(p.mu[..., None], p.tau[..., None]).log_prob(p.theta).sum(-1)
    return prior + Normal(p.theta, SIGMA.to(p.theta)).log_prob(Y.to(p.theta)).sum(-1)
