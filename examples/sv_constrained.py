"""A stochastic-volatility model (Kim, Shephard and Chib 1998) with its latent log-volatilities, non-centred, written
as a user writes it: a Python loop over time, named and constrained parameters (153 of them for 150 returns).

    bayesx run model=custom model.log_density=examples/sv_constrained.py model.data_file=examples/sv_returns.npz \
        'model.params={mu: real, phi: "interval(-1, 1)", sigma: positive, z: "real[150]"}' method=nuts

h_1 = mu + sigma z_1 / sqrt(1 - phi^2), h_t = mu + phi (h_{t-1} - mu) + sigma z_t, z_t ~ N(0, 1),
y_t ~ N(0, exp(h_t / 2)); mu ~ N(0, 10), (phi + 1) / 2 ~ Beta(20, 1.5), sigma ~ HalfNormal(1).
The same model as a Pyro model: examples/sv_pyro.py.
"""

import torch
from torch.distributions import Beta, HalfNormal, Normal


def log_density(p, data):
    y = data["y"]
    one = p.mu.new_tensor(1.0)
    h = p.mu + p.sigma * p.z[..., 0] / torch.sqrt(1 - p.phi**2)
    log_volatility = [h]
    for t in range(1, y.shape[-1]):
        h = p.mu + p.phi * (h - p.mu) + p.sigma * p.z[..., t]
        log_volatility.append(h)
    h = torch.stack(log_volatility, -1)
    likelihood = Normal(0 * one, torch.exp(h / 2)).log_prob(y).sum(-1)
    prior = (Normal(0 * one, 10 * one).log_prob(p.mu) + Beta(20 * one, 1.5 * one).log_prob((p.phi + 1) / 2)
             + HalfNormal(one).log_prob(p.sigma) + Normal(0 * one, one).log_prob(p.z).sum(-1))
    return likelihood + prior
