"""A local-level model as a user writes it (torch.distributions), proper but with no mode on the unconstrained
coordinates: sigma_eps ~ N+(0, 2), sigma_eta ~ N+(0, 1), x_1 ~ N(0, 10), x_t ~ N(x_(t-1), sigma_eta),
y_t ~ N(x_t, sigma_eps), t = 1..T, sampled on (log sigma_eps, log sigma_eta, x), dim T + 2. With the states equal,
log pi = -(T - 2) log sigma_eta + const rises without bound as sigma_eta -> 0, while integrating the states out
leaves sigma_eta^(T-1) against the sigma_eta^-(T-1): a funnel, not an improper posterior. The data: a random walk
of T steps of sd 0.3 seen with unit noise (seeds 1 and 2)."""

import torch
from torch.distributions import HalfNormal, Normal

T = 500
_WALK = torch.cumsum(0.3 * torch.randn(T, generator=torch.Generator().manual_seed(1), dtype=torch.float64), 0)
Y = _WALK + torch.randn(T, generator=torch.Generator().manual_seed(2), dtype=torch.float64)


def density(theta):
    log_eps, log_eta, x = theta[..., 0], theta[..., 1], theta[..., 2:]
    sigma_eps, sigma_eta = log_eps.exp(), log_eta.exp()
    lp = HalfNormal(theta.new_tensor(2.0)).log_prob(sigma_eps) + log_eps
    lp = lp + HalfNormal(theta.new_tensor(1.0)).log_prob(sigma_eta) + log_eta
    lp = lp + Normal(theta.new_tensor(0.0), theta.new_tensor(10.0)).log_prob(x[..., 0])
    lp = lp + Normal(x[..., :-1], sigma_eta[..., None]).log_prob(x[..., 1:]).sum(-1)
    return lp + Normal(x, sigma_eps[..., None]).log_prob(Y.to(theta)).sum(-1)
