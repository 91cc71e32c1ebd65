"""A Poisson regression on a small public data set, as a bayesx custom model written for one point
(bayesx vectorises it):

    bayesx run model=custom model.log_density=examples/poisson_linnerud.py:log_density model.dim=4 \
        'model.param_names=[intercept,weight,waist,pulse]' method=nuts

The Linnerud data (Tenenhaus 1998; bundled with scikit-learn, so it works offline): the number of
chin-ups of 20 middle-aged men against their weight, waist and pulse (standardised):
chins_i ~ Poisson(exp(a + x_i . b)), a, b_k ~ N(0, 2^2).
"""

import torch
from sklearn.datasets import load_linnerud

_data = load_linnerud()
CHINS = torch.as_tensor(_data.data[:, 0], dtype=torch.float64)
_x = torch.as_tensor(_data.target, dtype=torch.float64)
X = (_x - _x.mean(0)) / _x.std(0)
PRIOR_SD = 2.0


def log_density(theta):
    """theta (4,) = (a, b_weight, b_waist, b_pulse) -> log p(theta | chins) up to a constant."""
    rate_log = theta[0] + X.to(theta) @ theta[1:]
    chins = CHINS.to(theta)
    likelihood = (chins * rate_log - torch.exp(rate_log)).sum()
    return likelihood - 0.5 * (theta**2).sum() / PRIOR_SD**2
