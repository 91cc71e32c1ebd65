"""A three-component normal mixture with a simplex of weights, ordered means and the assignments marginalised:

    bayesx run model=custom model.log_density=examples/mixture_constrained.py \
        model.data_file=examples/mixture_data.npz \
        'model.params={w: "simplex[3]", loc: "ordered[3]", scale: "positive[3]"}' method=nuts

x_i ~ sum_k w_k N(loc_k, scale_k); w ~ Dirichlet(1, 1, 1), loc ~ N(0, 5) (ordered: no label switching),
scale ~ LogNormal(0, 1). The same model as a Pyro model: examples/mixture_pyro.py.
"""

import torch
from torch.distributions import Dirichlet, LogNormal, Normal


def log_density(p, data):
    x = data["x"]
    one = p.w.new_tensor(1.0)
    components = Normal(p.loc[..., None, :], p.scale[..., None, :]).log_prob(x[:, None])  # (..., n, 3)
    likelihood = torch.logsumexp(components + torch.log(p.w)[..., None, :], -1).sum(-1)
    prior = (Dirichlet(one.expand(3)).log_prob(p.w) + Normal(0 * one, 5 * one).log_prob(p.loc).sum(-1)
             + LogNormal(0 * one, one).log_prob(p.scale).sum(-1))
    return likelihood + prior
