"""The MCMC methods of the ``method`` config group: HMC, NUTS and random-walk Metropolis."""

from __future__ import annotations

import math

import numpy as np

from bayesx.errors import BayesxError
from bayesx.mcmc import hmc, nuts, rwm
from bayesx.mcmc.driver import MCMCMethod


class HMC(MCMCMethod):
    """Static HMC with ``num_steps`` leapfrog steps per iteration."""

    kernel = hmc
    name = "hmc"

    def __init__(self, num_steps: int = 10, target_accept: float = 0.65, **kwargs):
        if num_steps < 1:
            raise BayesxError(f"method.num_steps must be >= 1, got {num_steps}")
        super().__init__(target_accept=target_accept, **kwargs)
        self.num_steps = num_steps

    def make_params(self, step_size, metric):
        return hmc.HMCParams(step_size, metric, self.num_steps)


class NUTS(MCMCMethod):
    """The No-U-Turn sampler with multinomial sampling, up to 2^max_tree_depth - 1 steps."""

    kernel = nuts
    name = "nuts"

    def __init__(self, max_tree_depth: int = 10, target_accept: float = 0.8, **kwargs):
        if not 1 <= max_tree_depth <= 20:
            raise BayesxError(f"method.max_tree_depth must be between 1 and 20, got {max_tree_depth}")
        super().__init__(target_accept=target_accept, **kwargs)
        self.max_tree_depth = max_tree_depth

    def make_params(self, step_size, metric):
        return nuts.NUTSParams(step_size, metric, self.max_tree_depth)

    def extra_metrics(self, stats):
        if not stats:
            return {}
        depth = stats["tree_depth"]
        return {"tree_depth_mean": float(np.mean(depth)),
                "n_max_tree_depth": float(np.sum(depth >= self.max_tree_depth))}


class RWM(MCMCMethod):
    """Random-walk Metropolis; the scale starts at 2.38 / sqrt(dim) (Roberts et al. 1997)."""

    kernel = rwm
    name = "rwm"
    uses_gradient = False

    def __init__(self, target_accept: float = 0.234, **kwargs):
        super().__init__(target_accept=target_accept, **kwargs)

    def make_params(self, step_size, metric):
        return rwm.RWMParams(step_size, metric)

    def search_step_size(self, state, target, metric, gen, guess):
        # with a proposal covariance close to the posterior's, 2.38 / sqrt(dim) is near optimal
        return 2.38 / math.sqrt(state.position.shape[-1])
